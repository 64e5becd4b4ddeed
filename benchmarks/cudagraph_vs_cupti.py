"""How close is zlf's cudagraph timer to the kernel's own time? (GPU benchmark, not a test.)

For Triton add at 1K, 1M and 64M fp32, the built-in softmax and matmul at two shapes each (and an
empty kernel, the floor of any launch), measure in one process:

* CUPTI kernel time (torch.profiler, median of the kernel's durations over back-to-back direct calls);
* zlf's cudagraph timer (this extension), core's direct timer, triton.testing.do_bench and
  do_bench_cudagraph, as ratios to CUPTI;

then the spread of the median over 6 independent processes (``sys.executable`` children, run one
after another) for the cudagraph timer and for do_bench_cudagraph; and finally one real
``zlf run --ext cudagraph benchmarks/cudagraph_ops.py`` where a point with ``.item()`` inside falls
back, marked, between normal points.

Usage: ``python3 benchmarks/cudagraph_vs_cupti.py --out DIR`` (one GPU, about 2-3 minutes).
Writes DIR/cudagraph_vs_cupti.json and DIR/summary.md; prints the markdown at the end.
Targets (issue 4): <=1.10x CUPTI for the ~1 us kernel, <=1.02x for kernels >=20 us, spread of
the median over 6 processes <=0.5% for kernels >=2 us. The matmul's autotuner is pinned to one
config in every process, so the spread measures the timer, not the autotuner's choice.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import triton.language as tl  # the empty kernel's annotations resolve in this module's globals
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEADLINE_S = 220  # children are skipped past this, so the whole script stays under 4 minutes

#: (label, op, shape, dtype); "empty" is a diagnostic row, not a target.
KERNELS = [
    ("add 1K fp32", "add", (1024,), "float32"),
    ("add 1M fp32", "add", (1 << 20,), "float32"),
    ("add 64M fp32", "add", (1 << 26,), "float32"),
    ("softmax 1024x1024 fp32", "softmax", (1024, 1024), "float32"),
    ("softmax 4096x4096 fp32", "softmax", (4096, 4096), "float32"),
    ("matmul 128x4096x4096 fp16", "matmul", (128, 4096, 4096), "float16"),
    ("matmul 4096x4096x4096 fp16", "matmul", (4096, 4096, 4096), "float16"),
    ("empty kernel (floor)", "empty", (1,), "float32"),
]
KERNEL_NAMES = {"add": "add_kernel", "softmax": "softmax_kernel", "matmul": "matmul_kernel", "empty": "empty_kernel"}


def _setup():
    """The cuda backend, the built-in ops (matmul pinned to one config) and an empty kernel."""
    import triton
    import triton.language as tl

    from zlf.backends import CudaBackend

    backend = CudaBackend(0)
    backend.setup()
    from zlf.ops import builtin

    # One config: no autotuning sweep, the same kernel in every process.
    builtin.matmul_kernel.configs = [builtin.MATMUL_CONFIGS[1]]

    @triton.jit
    def empty_kernel(x_ptr, BLOCK: tl.constexpr):
        pass

    return backend, builtin.make_ops(), empty_kernel


def _build(label, op_name, shape, dtype, backend, ops, empty_kernel):
    import torch

    if op_name == "empty":
        x = torch.empty(1, device=backend.device)

        def fn():
            empty_kernel[(1,)](x, BLOCK=1)

        return fn, None, ()
    op = ops[op_name]
    inputs = op.make_inputs(shape, dtype, backend.device)

    def fn():
        return op.fn(*inputs)

    return fn, op, inputs


def _cupti_us(fn, backend, kernel_name: str, calls: int) -> float:
    """Median CUPTI duration (µs) of ``kernel_name`` over ``calls`` back-to-back direct calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(20):
        fn()
    backend.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        backend.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    durations = [float(e["dur"]) for e in events
                 if e.get("cat") == "kernel" and kernel_name in e.get("name", "") and "dur" in e]
    if not durations:
        raise RuntimeError(f"no CUPTI kernel events named {kernel_name!r} (torch {torch.__version__})")
    return statistics.median(durations)


def _ours_ms(fn, backend, op, inputs, dtype) -> tuple:
    from zlf_timing_cudagraph.graph_timer import GraphSettings, time_graph

    t = time_graph(fn, backend, GraphSettings(warmup_ms=25.0, rep_ms=100.0), op=op, inputs=inputs, dtype=dtype)
    return t.value_ms, t.extra["cudagraph"]


def _measure(spec, backend, ops, empty_kernel, which) -> dict:
    import triton.testing

    from zlf.timing import time_direct

    label, op_name, shape, dtype = spec
    fn, op, inputs = _build(label, op_name, shape, dtype, backend, ops, empty_kernel)
    fn()
    backend.synchronize()
    row = {"kernel": label}
    if "ours" in which:
        row["cudagraph_ms"], row["cudagraph_info"] = _ours_ms(fn, backend, op, inputs, dtype)
    if "direct" in which:
        row["direct_ms"] = time_direct(fn, backend, warmup_ms=25.0, rep_ms=100.0, flush_l2=True).value_ms
    if "do_bench" in which:
        row["do_bench_ms"] = triton.testing.do_bench(fn, return_mode="median")
    if "do_bench_cudagraph" in which:
        row["do_bench_cudagraph_ms"] = triton.testing.do_bench_cudagraph(fn, return_mode="median")
    if "cupti" in which:
        per_call_ms = row.get("cudagraph_ms") or 0.01
        calls = int(min(500, max(30, 50.0 / max(per_call_ms, 1e-4))))
        row["cupti_us"] = _cupti_us(fn, backend, KERNEL_NAMES[op_name], calls)
    del inputs
    backend.free_memory()
    return row


def child_main(out: Path) -> int:
    """One independent process of the spread measurement: cudagraph timer and do_bench_cudagraph."""
    backend, ops, empty_kernel = _setup()
    rows = [_measure(spec, backend, ops, empty_kernel, ("ours", "do_bench_cudagraph")) for spec in KERNELS]
    out.write_text(json.dumps(rows))
    return 0


def _spread(values) -> float:
    """(max - min) / median of the per-process medians, in percent."""
    return 100.0 * (max(values) - min(values)) / statistics.median(values) if values else float("nan")


def _zlf_run(out: Path) -> dict:
    env = dict(os.environ, ZLF_NO_PROGRESS="1")
    cmd = [sys.executable, "-m", "zlf", "run", "--ext", "cudagraph", str(HERE / "cudagraph_ops.py"),
           "--out", str(out / "zlf_runs"), "--rep-ms", "50"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("run dir: ")]
    result = {"command": " ".join(cmd), "rc": proc.returncode, "stdout": proc.stdout[-4000:], "stderr": proc.stderr[-4000:]}
    if not lines:
        return result
    run_dir = Path(lines[-1][len("run dir: "):])
    result["run_dir"] = str(run_dir)
    result["records"] = [json.loads(l) for l in (run_dir / "results.jsonl").read_text().splitlines() if l.strip()]
    result["marker_lines"] = [l for l in (run_dir / "run.log").read_text().splitlines()
                              if l.startswith("BENCHMARK_DIRECT_NO_CUDAGRAPH")]
    return result


def _fmt_ratio(value_ms, cupti_us):
    return f"{value_ms * 1e3 / cupti_us:.3f}x" if value_ms and cupti_us else "-"


def _markdown(report: dict) -> str:
    rows = report["rows"]
    out = ["## Timers against CUPTI kernel time (medians; ratio = timer / CUPTI)", "",
           "| kernel | CUPTI us | zlf cudagraph us | cudagraph / CUPTI | core direct / CUPTI (L2 flushed) | "
           "do_bench / CUPTI | do_bench_cudagraph / CUPTI | cudagraph spread, 6 procs | do_bench_cudagraph spread | target |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cupti = r.get("cupti_us")
        ratio = r["cudagraph_ms"] * 1e3 / cupti if cupti else None
        spread = r.get("cudagraph_spread_pct")
        dbcg_spread = r.get("dbcg_spread_pct")
        checks = []
        if r["kernel"].startswith("empty"):
            checks.append("diagnostic")
        elif cupti:
            if cupti < 1.5:
                checks.append(f"ratio<=1.10 {'OK' if ratio <= 1.10 else 'MISSED'}")
            if cupti >= 20:
                checks.append(f"ratio<=1.02 {'OK' if ratio <= 1.02 else 'MISSED'}")
            if cupti >= 2 and spread is not None:
                checks.append(f"spread<=0.5% {'OK' if spread <= 0.5 else 'MISSED'}")
        out.append(
            f"| {r['kernel']} | {cupti:.3f} | {r['cudagraph_ms'] * 1e3:.3f} | {_fmt_ratio(r['cudagraph_ms'], cupti)} | "
            f"{_fmt_ratio(r.get('direct_ms'), cupti)} | {_fmt_ratio(r.get('do_bench_ms'), cupti)} | "
            f"{_fmt_ratio(r.get('do_bench_cudagraph_ms'), cupti)} | "
            f"{'-' if spread is None else f'{spread:.2f}%'} | "
            f"{'-' if dbcg_spread is None else f'{dbcg_spread:.2f}%'} | "
            f"{'; '.join(checks)} |"
        )
    out += ["", f"Spread = (max - min) / median of the per-process medians over {report['processes']} "
            "independent processes. zlf cudagraph: L2 warm, calls per graph sized to ~2 ms replays; "
            "CUPTI: back-to-back direct calls (L2 warm).", ""]
    z = report.get("zlf_run", {})
    out += [f"## One `zlf run --ext cudagraph` (rc={z.get('rc')}; {z.get('run_dir', 'no run dir')})", "",
            "| point | timer | median us | fallback | marker |", "|---|---|---|---|---|"]
    for rec in z.get("records", []):
        median = rec.get("median_ms")
        out.append(f"| {rec['point']} | {rec.get('timer')} | {'-' if median is None else f'{median * 1e3:.3f}'} | "
                   f"{rec.get('fallback_reason') or ''} | {'; '.join(rec.get('markers') or []) or ''} |")
    if report.get("notes"):
        out += [""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the JSON and the markdown")
    parser.add_argument("--processes", type=int, default=6, help="independent processes for the spread (default 6)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    notes = []
    backend, ops, empty_kernel = _setup()
    import torch
    import triton

    report = {"device": backend.device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "processes": args.processes, "rows": []}
    for spec in KERNELS:
        row = _measure(spec, backend, ops, empty_kernel, ("ours", "direct", "do_bench", "do_bench_cudagraph", "cupti"))
        report["rows"].append(row)
        print(f"[{time.monotonic() - t0:5.1f}s] {row['kernel']}: CUPTI {row['cupti_us']:.3f} us, "
              f"cudagraph {row['cudagraph_ms'] * 1e3:.3f} us", file=sys.stderr, flush=True)

    children = []
    for k in range(args.processes):
        if time.monotonic() - t0 > DEADLINE_S - 60:
            notes.append(f"spread: only {len(children)} of {args.processes} processes ran (time budget)")
            break
        path = args.out / f"child_{k}.json"
        proc = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--child", str(path)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or not path.exists():
            notes.append(f"child {k} failed (rc={proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
            continue
        children.append(json.loads(path.read_text()))
        print(f"[{time.monotonic() - t0:5.1f}s] process {k + 1}/{args.processes} done", file=sys.stderr, flush=True)
    for i, row in enumerate(report["rows"]):
        ours = [c[i]["cudagraph_ms"] for c in children]
        dbcg = [c[i]["do_bench_cudagraph_ms"] for c in children]
        row["cudagraph_process_medians_ms"] = ours
        row["do_bench_cudagraph_process_medians_ms"] = dbcg
        row["cudagraph_spread_pct"] = _spread(ours) if len(ours) >= 2 else None
        row["dbcg_spread_pct"] = _spread(dbcg) if len(dbcg) >= 2 else None

    report["zlf_run"] = _zlf_run(args.out)
    if report["zlf_run"].get("rc") not in (0, 1):
        notes.append(f"zlf run exited {report['zlf_run'].get('rc')}: {report['zlf_run']['stderr'][-300:]}")
    report["notes"] = notes
    report["elapsed_s"] = round(time.monotonic() - t0, 1)
    (args.out / "cudagraph_vs_cupti.json").write_text(json.dumps(report, indent=2, default=str))
    text = _markdown(report) + f"\nelapsed {report['elapsed_s']} s on {report['device']} (torch {report['torch']}, triton {report['triton']})\n"
    (args.out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
