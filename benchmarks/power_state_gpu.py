"""How a power-capped kernel's speed follows the device's load, and what the CUPTI timer does about it.

The 4096³ fp16 matmul (pinned config) runs in two modes on an H200 under its power cap (about
222 µs and 245–258 µs per call). Two parts, ``python3 benchmarks/power_state_gpu.py --out DIR
[--parts load,variants] [--processes 6]`` (cupti-python and nvidia-ml-py installed):

``load`` (one process). Every kernel's duration on CUPTI's clock, and between every 20 matmul
calls a spin kernel of a fixed number of SM cycles (``torch.cuda._sleep``), whose duration gives
the SM clock the calls around it ran at (cycles / duration), so each call's cycles are its time
× that clock; NVML sampled every millisecond besides. After 2 s idle: 1.5 s of plain calls kept
queued; then idle gaps of 1 ms to 1 s each followed by 40 ms of calls (how fast the device
recovers); then, after 2 s idle, 1.5 s of graph replays (8 calls and a spin per graph).

``variants`` (one process per timer and variant, in rotating order, each timing its kernels in
four slices at zlf run's budgets, one kernel after another, as ``zlf run`` times its points): over
the whole suite, the CUPTI timer as shipped and the graph timer. The spread of each variant's process medians is what docs/measurements.md compares.

``placement`` (one process each): the same short kernels with their inputs allocated afresh ten
times in one process, each allocation timed by both timers: whether a process's median follows
where its inputs live in device memory.

``kernels`` (one process each): the short kernels whose process medians spread more under CUPTI
than under the graph timer, by both timers and by CUPTI tracing inside the graph timer's
replays: whether a process's shift is the kernel's own duration.

Writes DIR/power_state.json and DIR/summary.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cupti_gpu import _spread  # noqa: E402 -- (max − min) / median of process medians, percent

KERNEL = "matmul 4096x4096x4096 fp16"
#: cycles of one spin kernel: about 20 µs at an H200's 1980 MHz
SPIN_CYCLES = 40_000
CALLS_PER_SPIN = 20
SLICES = 4
SLICE_MS = (25.0, 100.0)
#: (name, CuptiTimer keywords or None for the graph timer, every kernel of the suite or the matmul alone)
VARIANTS = (("cupti", {}, True), ("graph", None, True))
#: the designs compared before (the timer paused between its warm-up and its trace then):
#: ("cupti_pause", {"pause": True}), ("cupti_pause_wall_first", ...), ("cupti_pause_preload100" / "300",
#: {"pause": True, "settle_ms": 100.0 / 300.0}); their figures are in docs/measurements.md
GAPS_MS = (1, 3, 10, 30, 100, 300, 1000)


def _kernels(every: bool):
    """``(backend, [(spec, fn, op, inputs)])``: the suite's kernels (the empty one left out), or the matmul alone."""
    import cudagraph_vs_cupti as cvc

    backend, ops, empty = cvc._setup()
    built = []
    for spec in cvc.KERNELS:
        if spec[1] == "empty" or (not every and spec[0] != KERNEL):
            continue
        fn, op, inputs = cvc._build(*spec, backend, ops, empty)
        fn()
        backend.synchronize()
        built.append((spec, fn, op, inputs))
    return backend, built


def _cupti_source():
    from zlf_timing_cupti.sources import make_source

    source, why = make_source("cupti-python")
    if source is None:
        raise SystemExit(why)
    return source


def _short_setup():
    """What the parts on the short kernels share: ``(cudagraph_vs_cupti, backend, ops, empty
    kernel, activity source, the CUPTI timer as shipped, graph settings at one slice's budgets)``."""
    import cudagraph_vs_cupti as cvc
    from zlf_timing_cudagraph.graph_timer import GraphSettings
    from zlf_timing_cupti.timer import CuptiTimer

    backend, ops, empty = cvc._setup()
    source = _cupti_source()
    return cvc, backend, ops, empty, source, CuptiTimer(source), GraphSettings(warmup_ms=SLICE_MS[0], rep_ms=SLICE_MS[1])


def _matmul():
    backend, [(spec, fn, op, inputs)] = _kernels(False)
    return backend, spec, fn, op, inputs


def _kept(source):
    """Records of one trace as ``[start ns since the trace began, duration ns, 'mm'|'spin'|name]``."""
    records, _ = source.stop()
    out = []
    for r in records:
        if r.kind != "kernel":
            continue
        name = "spin" if "spin" in r.name.lower() or "sleep" in r.name.lower() else "mm" if "matmul" in r.name else r.name[:20]
        out.append([int(r.start_ns), int(r.end_ns - r.start_ns), name])
    out.sort()
    return out


def _load(source, body, ms: float):
    """``body()`` (one batch) repeated for ``ms`` of host time, at most two batches queued."""
    import torch

    source.start()
    events = []
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        body()
        ev = torch.cuda.Event()
        ev.record()
        events.append(ev)
        if len(events) > 2:
            events.pop(0).synchronize()
    torch.cuda.synchronize()
    return _kept(source)


def child_load(out: Path) -> int:
    import torch
    from cupti import cupti
    from cupti_power_gpu import Nvml

    backend, spec, fn, op, inputs = _matmul()
    source = _cupti_source()

    def batch():
        for _ in range(CALLS_PER_SPIN):
            fn()
        torch.cuda._sleep(SPIN_CYCLES)

    torch.cuda._sleep(SPIN_CYCLES)
    torch.cuda.synchronize()
    phases = {}
    with Nvml(cupti.get_timestamp) as nvml:
        time.sleep(2.0)
        phases["calls"] = {"t0": int(cupti.get_timestamp()), "records": _load(source, batch, 1500)}
        for gap in GAPS_MS:
            torch.cuda.synchronize()
            time.sleep(gap / 1e3)
            phases[f"gap_{gap}ms"] = {"t0": int(cupti.get_timestamp()), "records": _load(source, batch, 40)}
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(2):
                batch()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(8):
                fn()
            torch.cuda._sleep(SPIN_CYCLES)
        graph.replay()
        torch.cuda.synchronize()
        time.sleep(2.0)
        phases["graph"] = {"t0": int(cupti.get_timestamp()), "records": _load(source, graph.replay, 1500)}
    out.write_text(json.dumps({"kernel": KERNEL, "spin_cycles": SPIN_CYCLES, "phases": phases, "nvml": nvml.samples}))
    return 0


def child_variant(out: Path, variant: str) -> int:
    from zlf_timing_cudagraph.graph_timer import GraphSettings, time_graph
    from zlf_timing_cupti.timer import CuptiTimer

    keywords, every = next((k, e) for n, k, e in VARIANTS if n == variant)
    backend, built = _kernels(every)
    warmup_ms, rep_ms = SLICE_MS
    timer = None
    if keywords is not None:
        timer = CuptiTimer(_cupti_source(), **keywords)
    rows = []
    for spec, fn, op, inputs in built:  # each kernel's slices back to back, as zlf run times a point
        slices, calls = [], []
        for _ in range(SLICES):
            if timer is None:
                t = time_graph(fn, backend, GraphSettings(warmup_ms=warmup_ms, rep_ms=rep_ms), op=op, inputs=inputs,
                               dtype=spec[3])
            else:
                t = timer.time(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=False)
                calls.append([t.extra["cupti"].get("calls"), t.extra["cupti"].get("unassigned_records"),
                              t.extra["cupti"].get("warmup_calls")])
            slices.append(t.value_ms * 1e3)
        rows.append({"variant": variant, "kernel": spec[0], "slices_us": slices, "us": statistics.median(slices),
                     "calls": calls})
    out.write_text(json.dumps(rows))
    return 0


#: part ``kernels``: the short kernels whose process medians differ more under CUPTI than under the graph timer
SHORT = ("add 1M fp32", "softmax 1024x1024 fp32")


def child_kernels(out: Path) -> int:
    """One process: each short kernel by the CUPTI timer, the graph timer, and the graph timer with
    CUPTI tracing around it (the median device duration of the kernel inside the replays): is a
    process's shift under CUPTI the kernel's own, seen inside the graph's replays too?"""
    from zlf_timing_cudagraph.graph_timer import time_graph

    cvc, backend, ops, empty, source, timer, settings = _short_setup()
    warmup_ms, rep_ms = SLICE_MS
    rows = []
    for spec in [s for s in cvc.KERNELS if s[0] in SHORT]:
        fn, op, inputs = cvc._build(*spec, backend, ops, empty)
        fn()
        backend.synchronize()
        cupti_us = [timer.time(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=False).value_ms * 1e3
                    for _ in range(SLICES)]
        graph_us, inside_us = [], []
        for _ in range(SLICES):
            graph_us.append(time_graph(fn, backend, settings, op=op, inputs=inputs, dtype=spec[3]).value_ms * 1e3)
            source.start()
            try:
                time_graph(fn, backend, settings, op=op, inputs=inputs, dtype=spec[3])
            finally:
                records, _ = source.stop()
            durations = [r.end_ns - r.start_ns for r in records if r.kind == "kernel" and cvc.KERNEL_NAMES[spec[1]] in r.name]
            inside_us.append(statistics.median(durations) / 1e3 if durations else float("nan"))
        rows.append({"kernel": spec[0], "cupti_us": statistics.median(cupti_us), "graph_us": statistics.median(graph_us),
                     "graph_kernels_us": statistics.median(inside_us), "slices": [cupti_us, graph_us, inside_us]})
    out.write_text(json.dumps(rows))
    return 0


def _spaced(cvc, spec, backend, ops, empty, count: int, kept: list, rng) -> list:
    """``count`` builds of ``spec`` (``(fn, op, inputs)``, each called once), a spacer of 1–64 MB
    allocated before each so that every build's inputs land elsewhere in device memory; the spacers
    and builds are appended to ``kept`` (alive for the process); ``rng`` draws the spacers' sizes."""
    import torch

    allocations = []
    for _ in range(count):
        kept.append(torch.empty(rng.randint(1, 64) << 20, dtype=torch.uint8, device=backend.device))
        fn, op, inputs = cvc._build(*spec, backend, ops, empty)
        fn()
        backend.synchronize()
        allocations.append((fn, op, inputs))
    kept.append(allocations)
    return allocations


#: part ``placement``: fresh input allocations per kernel in one process
ALLOCATIONS = 10


def child_placement(out: Path) -> int:
    """One process: each short kernel's inputs allocated :data:`ALLOCATIONS` times (earlier ones
    kept alive, a spacer of a few MB between, so each lands elsewhere in device memory), each timed
    in one slice by the CUPTI timer and by the graph timer, then the first allocation again. If a
    process's CUPTI median depends on where its inputs live, the medians vary across allocations
    within one process as much as across processes."""
    import random

    from zlf_timing_cudagraph.graph_timer import time_graph

    cvc, backend, ops, empty, source, timer, settings = _short_setup()
    warmup_ms, rep_ms = SLICE_MS
    rng = random.Random(os.getpid())
    kept, rows = [], []
    for spec in [s for s in cvc.KERNELS if s[0] in SHORT]:
        allocations = _spaced(cvc, spec, backend, ops, empty, ALLOCATIONS, kept, rng)
        cupti_us, graph_us, addresses = [], [], []
        for fn, op, inputs in allocations + allocations[:1]:
            cupti_us.append(timer.time(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=False).value_ms * 1e3)
            graph_us.append(time_graph(fn, backend, settings, op=op, inputs=inputs, dtype=spec[3]).value_ms * 1e3)
            addresses.append(hex(inputs[0].data_ptr()))
        rows.append({"kernel": spec[0], "cupti_us": cupti_us, "graph_us": graph_us, "addresses": addresses})
    out.write_text(json.dumps(rows))
    return 0


#: part ``rotate``: input allocations a rotated call cycles through
ROTATE = 8


def child_rotate(out: Path) -> int:
    """One process: each short kernel's inputs allocated :data:`ROTATE` times (spacers between, as
    in part ``placement``); the CUPTI timer on the first allocation alone and on a call that cycles
    through all of them (one allocation per call), warm and flushed, and the graph timer on the
    first allocation: does averaging over placements inside a process shrink the spread of process
    medians?"""
    import random

    from zlf_timing_cudagraph.graph_timer import time_graph

    cvc, backend, ops, empty, source, timer, settings = _short_setup()
    warmup_ms, rep_ms = SLICE_MS
    rng = random.Random(os.getpid())
    kept, rows = [], []
    for spec in [s for s in cvc.KERNELS if s[0] in SHORT + ("softmax 4096x4096 fp32",)]:
        allocations = _spaced(cvc, spec, backend, ops, empty, ROTATE, kept, rng)
        fns = [a[0] for a in allocations]
        state = [0]

        def rotated():
            k = state[0]
            state[0] = (k + 1) % len(fns)
            return fns[k]()

        fn0, op0, inputs0 = allocations[0]
        row = {"kernel": spec[0]}
        for name, f, flush in (("cupti_single_warm", fn0, False), ("cupti_rot_warm", rotated, False),
                               ("cupti_single_flush", fn0, True), ("cupti_rot_flush", rotated, True)):
            row[name] = [timer.time(f, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush).value_ms * 1e3
                         for _ in range(SLICES)]
        row["graph_single_warm"] = [time_graph(fn0, backend, settings, op=op0, inputs=inputs0, dtype=spec[3]).value_ms * 1e3
                                    for _ in range(SLICES)]
        rows.append(row)
    out.write_text(json.dumps(rows))
    return 0


def rotate_summary(children: list) -> list:
    lines = ["## rotate: spread of process medians, one allocation against calls cycling through "
             f"{ROTATE}", "", "| kernel | variant | µs (median of processes) | spread % | sd % |", "|---|---|---|---|---|"]
    if not children:
        return lines + ["", "no process ran", ""]
    for i, r0 in enumerate(children[0]):
        for name in [k for k in r0 if k != "kernel"]:
            meds = [statistics.median(c[i][name]) for c in children]
            m = statistics.median(meds)
            sd = statistics.stdev(meds) / m * 100 if len(meds) > 1 else float("nan")
            lines.append(f"| {r0['kernel']} | {name} | {m:.3f} | {_spread(meds):.2f} | {sd:.2f} |")
    return lines + [""]


def child_fastmode(out: Path) -> int:
    """One process, the matmul: the CUPTI timer right after a second idle, with a short warm-up and
    a pause before its trace (the device state Nsight Compute measures, each kernel replayed after
    an idle gap), against the timer as shipped (at least 100 ms of load first), three times each."""
    from zlf_timing_cupti.timer import CuptiTimer

    backend, spec, fn, op, inputs = _matmul()
    source = _cupti_source()
    rows = {"after_idle": [], "shipped": []}
    for _ in range(3):
        backend.synchronize()
        time.sleep(1.0)
        t = CuptiTimer(source, settle_ms=0, pause=True).time(fn, backend, warmup_ms=1.0, rep_ms=10.0, flush_l2=False)
        rows["after_idle"].append(t.value_ms * 1e3)
    for _ in range(3):
        rows["shipped"].append(CuptiTimer(source).time(fn, backend, warmup_ms=SLICE_MS[0], rep_ms=SLICE_MS[1],
                                                       flush_l2=False).value_ms * 1e3)
    out.write_text(json.dumps(rows))
    return 0


def placement_summary(children: list) -> list:
    lines = ["## placement: one slice per fresh input allocation within a process (the last: the first allocation again)", "",
             "| kernel | process | timer | spread over allocations | sd | µs per allocation |", "|---|---|---|---|---|---|"]
    for k, rows in enumerate(children):
        for r in rows:
            for timer in ("cupti", "graph"):
                v = r[f"{timer}_us"]
                sd = 100.0 * statistics.stdev(v[:-1]) / statistics.mean(v[:-1])
                lines.append(f"| {r['kernel']} | {k} | {timer} | {_spread(v[:-1]):.2f} % | {sd:.2f} % | "
                             f"{', '.join(f'{x:.3f}' for x in v)} |")
    return lines + [""]


def kernels_summary(children: list) -> list:
    lines = ["## kernels: per process, CUPTI's value, the graph timer's, and the kernel's own duration inside the replays", "",
             "| kernel | process | cupti µs | graph µs | kernel inside the replays µs |", "|---|---|---|---|---|"]
    rows = [r for c in children for r in c]
    for kernel in SHORT:
        mine = [r for r in rows if r["kernel"] == kernel]
        for k, r in enumerate(mine):
            lines.append(f"| {kernel} | {k} | {r['cupti_us']:.4f} | {r['graph_us']:.4f} | {r['graph_kernels_us']:.4f} |")
        if len(mine) >= 3:
            c = [r["cupti_us"] for r in mine]
            g = [r["graph_us"] for r in mine]
            i = [r["graph_kernels_us"] for r in mine]
            lines.append(f"| {kernel} | spread | {_spread(c):.2f} % | {_spread(g):.2f} % | {_spread(i):.2f} % |")
            def corr(x, y):
                try:
                    return f"{statistics.correlation(x, y):.2f}"
                except statistics.StatisticsError:  # a constant column
                    return "-"
            lines.append(f"| {kernel} | correlation with cupti | | {corr(c, g)} | {corr(c, i)} |")
    return lines + [""]


# ----------------------------------------------------------------------------- parent: summaries
def _mhz(dur_ns: int) -> float:
    return SPIN_CYCLES / dur_ns * 1e3


def load_summary(data: dict) -> list:
    """Per phase: matmul µs and cycles (µs × the nearest spin's clock) over time windows."""
    lines = ["## load: the matmul's time and cycles as load goes on", "",
             "| phase | window (ms since start) | calls | median µs | spin MHz | median kcycles |", "|---|---|---|---|---|---|"]
    summary = {}
    for name, phase in data["phases"].items():
        recs = phase["records"]
        if not recs:
            continue
        start = recs[0][0]
        spins = [(s, _mhz(d)) for s, d, k in recs if k == "spin"]
        mm = [(s, d) for s, d, k in recs if k == "mm"]
        if not mm or not spins:
            continue
        j, cyc = 0, []
        for s, d in mm:  # the spin nearest in time
            while j + 1 < len(spins) and abs(spins[j + 1][0] - s) <= abs(spins[j][0] - s):
                j += 1
            cyc.append((s, d, d * spins[j][1] / 1e6))
        end = mm[-1][0] - start
        edges = [0, 5, 10, 20, 50, 100, 200, 400, 800, 1200, 2000]
        rows = []
        for lo, hi in zip(edges, edges[1:]):
            if lo * 1e6 > end:
                break
            w = [(d, c) for s, d, c in cyc if lo * 1e6 <= s - start < hi * 1e6]
            sw = [m for s, m in spins if lo * 1e6 <= s - start < hi * 1e6]
            if not w:
                continue
            row = [name, f"{lo}–{hi}", len(w), round(statistics.median(d for d, _ in w) / 1e3, 2),
                   round(statistics.median(sw), 0) if sw else "-", round(statistics.median(c for _, c in w), 1)]
            rows.append(row)
            lines.append("| " + " | ".join(str(x) for x in row) + " |")
        summary[name] = rows
    return lines + [""], summary


def variants_summary(children: list) -> list:
    """Per kernel and variant: the spread (max − min over the median) and sd of the process medians."""
    lines = ["## variants: process medians per kernel and timer variant (each variant alone in its processes)", "",
             "| kernel | variant | processes | spread | sd | process medians µs | slices µs (first process) |",
             "|---|---|---|---|---|---|---|"]
    rows = [r for c in children for r in c]
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        for name, _, _ in VARIANTS:
            mine = [r for r in rows if r["kernel"] == kernel and r["variant"] == name]
            if len(mine) < 2:
                continue
            meds = [r["us"] for r in mine]
            sd = 100.0 * statistics.stdev(meds) / statistics.mean(meds)
            lines.append(f"| {kernel} | {name} | {len(mine)} | {_spread(meds):.2f} % | {sd:.2f} % | "
                         f"{', '.join(f'{m:.2f}' for m in meds)} | {', '.join(f'{s:.2f}' for s in mine[0]['slices_us'])} |")
    return lines + [""]


def _child(args: list, out: Path, timeout: int = 120) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args, "--child-out", str(out)], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0 or not out.is_file():
        return {"error": f"{' '.join(args)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}"}
    return json.loads(out.read_text())


def _run_children(jobs: list, per_round: int, deadline_s: float, t0: float, notes: list) -> list:
    """``(child, output path)`` jobs in order, in rounds of ``per_round``; no new round once
    ``deadline_s`` have passed since ``t0``. The results that came back; failures go to ``notes``."""
    done = []
    for k, (name, path) in enumerate(jobs):
        if k and k % per_round == 0 and time.monotonic() - t0 > deadline_s:
            notes.append(f"{k // per_round} of {len(jobs) // per_round} rounds of {name} processes ran "
                         f"(--deadline-s {deadline_s:g})")
            break
        res = _child(["--child", name], path)
        if isinstance(res, dict):
            notes.append(res["error"])
            continue
        done.append(res)
        print(f"[{time.monotonic() - t0:.0f}s] process {k + 1}/{len(jobs)} ({name})", file=sys.stderr, flush=True)
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for power_state.json, summary.md and each child's JSON")
    parser.add_argument("--parts", default="load,variants",
                        help="comma-separated: load (one process, ~20 s), variants (~25 s per round of processes), "
                             "kernels (~45 s per process: every record of the traced replays is read), placement "
                             "(fresh input allocations within one process), rotate (calls cycling through 8 allocations against one, ~20 s per process), fastmode (the matmul after an idle "
                             "second against the timer as shipped); default %(default)s")
    parser.add_argument("--processes", type=int, default=6, help="processes per variant, or of part kernels (default 6)")
    parser.add_argument("--deadline-s", type=float, default=360.0,
                        help="no new round of variant processes after this many seconds (default %(default)s)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "load":
        return child_load(args.child_out)
    if args.child == "kernels":
        return child_kernels(args.child_out)
    if args.child == "placement":
        return child_placement(args.child_out)
    if args.child == "fastmode":
        return child_fastmode(args.child_out)
    if args.child == "rotate":
        return child_rotate(args.child_out)
    if args.child:
        return child_variant(args.child_out, args.child)
    if args.out is None:
        parser.error("--out DIR is required")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    parts = set(args.parts.split(","))
    report, text, notes = {}, [], []
    if "load" in parts:
        data = _child(["--child", "load"], out / "load.json", timeout=150)
        if "error" in data:
            notes.append(data["error"])
        else:
            lines, report["load"] = load_summary(data)
            text += lines
        print(f"[{time.monotonic() - t0:.0f}s] load done", file=sys.stderr, flush=True)
    if "variants" in parts:
        names = [n for n, _, _ in VARIANTS]
        jobs = [(name, out / f"variant_{name}_{k}.json") for k in range(args.processes)
                for name in names[k % len(names):] + names[:k % len(names)]]  # rotating order
        children = _run_children(jobs, len(names), args.deadline_s, t0, notes)
        report["variants"] = children
        text += variants_summary(children)
    if "kernels" in parts:
        jobs = [("kernels", out / f"kernels_{k}.json") for k in range(args.processes)]
        children = _run_children(jobs, 1, args.deadline_s, t0, notes)
        report["kernels"] = children
        text += kernels_summary(children)
    if "fastmode" in parts:
        data = _child(["--child", "fastmode"], out / "fastmode.json", timeout=120)
        if "error" in data:
            notes.append(data["error"])
        else:
            report["fastmode"] = data
            text += ["## fastmode: the matmul by the CUPTI timer after 1 s idle (10 ms, paused) and as shipped, µs", "",
                     f"- after idle: {', '.join(f'{v:.1f}' for v in data['after_idle'])}",
                     f"- as shipped: {', '.join(f'{v:.1f}' for v in data['shipped'])}", ""]
    if "placement" in parts:
        jobs = [("placement", out / f"placement_{k}.json") for k in range(args.processes)]
        children = _run_children(jobs, 1, args.deadline_s, t0, notes)
        report["placement"] = children
        text += placement_summary(children)
    if "rotate" in parts:
        jobs = [("rotate", out / f"rotate_{k}.json") for k in range(args.processes)]
        children = _run_children(jobs, 1, args.deadline_s, t0, notes)
        report["rotate"] = children
        text += rotate_summary(children)
    report["notes"], report["elapsed_s"] = notes, round(time.monotonic() - t0, 1)
    (out / "power_state.json").write_text(json.dumps(report, indent=1))
    summary = "\n".join(text + [f"- {n}" for n in notes] + [f"\nelapsed {report['elapsed_s']} s"]) + "\n"
    (out / "summary.md").write_text(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
