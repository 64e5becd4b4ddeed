"""A power-capped kernel under the CUPTI, graph and event timers: every kernel's duration against NVML.

Why does the CUPTI timer's 4096³ fp16 matmul spread more between processes than the graph timer's?
One process (``python3 benchmarks/cupti_power_gpu.py OUT.json INDEX [REP_MS]``; cupti-python and
nvidia-ml-py installed) samples NVML every 1 ms for its whole life (CUPTI's clock, SM clock, power,
clock-event reasons), then runs 8 rounds of four methods in an order that rotates with the round
and with INDEX, each with a warm-up of 5 ms and REP_MS (default 10) of samples:

- ``cupti``: the CUPTI timer as shipped, its kernel records kept;
- ``graph``: the graph timer as shipped;
- ``graph_tr``: the graph timer with CUPTI tracing around it (each kernel's duration inside replays);
- ``direct``: core's event timer.

OUT.json holds every round's value, its span on CUPTI's clock, every matmul kernel record
``(start ns, duration ns, name)`` and every NVML sample, so a kernel's duration can be read against
the device's state at that moment. docs/measurements.md shows what it found.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cudagraph_vs_cupti as cvc  # noqa: E402 -- the suite's kernels and builders (matmul pinned)

KERNEL = "matmul 4096x4096x4096 fp16"
METHODS = ("cupti", "graph", "graph_tr", "direct")
ROUNDS = 8


class Nvml:
    """NVML read every millisecond on a thread: (CUPTI timestamp, SM MHz, mW, clock-event reasons)."""

    def __init__(self, timestamp):
        import pynvml

        pynvml.nvmlInit()
        self._nvml, self._handle, self._timestamp = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), timestamp
        self.samples, self._stop = [], False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        n, h = self._nvml, self._handle
        while not self._stop:
            self.samples.append((int(self._timestamp()), n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                                 n.nvmlDeviceGetPowerUsage(h), int(n.nvmlDeviceGetCurrentClocksThrottleReasons(h))))
            time.sleep(0.001)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join()


def main(argv) -> int:
    from cupti import cupti
    from zlf.timing import time_direct
    from zlf_timing_cudagraph.graph_timer import GraphSettings, time_graph
    from zlf_timing_cupti.sources import make_source
    from zlf_timing_cupti.timer import CuptiTimer

    out, index = Path(argv[0]), int(argv[1])
    rep_ms = float(argv[2]) if len(argv) > 2 else 10.0
    backend, ops, empty = cvc._setup()
    source, why = make_source("cupti-python")
    if source is None:
        raise SystemExit(why)
    timer = CuptiTimer(source)
    kept = []
    stop = source.stop

    def stop_and_keep():  # every trace's kernel records, on CUPTI's own clock
        base = source._base
        records, windows = stop()
        kept.extend((int(base + r.start_ns), int(r.end_ns - r.start_ns), r.name[:30]) for r in records if r.kind == "kernel")
        return records, windows

    source.stop = stop_and_keep
    spec = next(s for s in cvc.KERNELS if s[0] == KERNEL)
    fn, op, inputs = cvc._build(*spec, backend, ops, empty)
    fn()
    backend.synchronize()
    graph_settings = GraphSettings(warmup_ms=5, rep_ms=rep_ms)
    rows = []
    with Nvml(cupti.get_timestamp) as nvml:
        for rnd in range(ROUNDS):
            k = (rnd + index) % len(METHODS)
            for method in METHODS[k:] + METHODS[:k]:
                kept.clear()
                t0 = int(cupti.get_timestamp())
                if method == "cupti":
                    value = timer.time(fn, backend, warmup_ms=5, rep_ms=rep_ms, flush_l2=False).value_ms
                elif method == "graph":
                    value = time_graph(fn, backend, graph_settings, op=op, inputs=inputs, dtype=spec[3]).value_ms
                elif method == "graph_tr":
                    source.start()
                    try:
                        value = time_graph(fn, backend, graph_settings, op=op, inputs=inputs, dtype=spec[3]).value_ms
                    finally:
                        source.stop()
                else:
                    value = time_direct(fn, backend, warmup_ms=5, rep_ms=rep_ms, flush_l2=False).value_ms
                rows.append({"round": rnd, "method": method, "us": value * 1e3, "t0": t0, "t1": int(cupti.get_timestamp()),
                             "kernels": list(kept)})
                print(method, rnd, round(value * 1e3, 2), flush=True)
    out.write_text(json.dumps({"kernel": KERNEL, "rep_ms": rep_ms, "rows": rows, "nvml": nvml.samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
