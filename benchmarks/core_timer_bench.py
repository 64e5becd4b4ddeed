"""Core's direct timer against triton.testing.do_bench and CUPTI kernel time; zlf run's wall time
against a bare do_bench loop over the same points with the same budget.

Run on a CUDA machine:  python3 benchmarks/core_timer_bench.py --out DIR
Writes DIR/core_timer_bench.json and prints two markdown tables.
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
from pathlib import Path

BARE_LOOP = r'''
import sys, torch, triton
from zlf.ops.builtin import make_ops
ops = make_ops()
torch.manual_seed(0)
for name in ("add", "softmax", "matmul"):
    op = ops[name]
    for dtype in op.dtypes:
        for shape in op.shapes:
            inputs = op.make_inputs(shape, dtype, "cuda")
            fn = lambda: op.fn(*inputs)
            fn(); torch.cuda.synchronize()
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            print(f"{name}/{'x'.join(map(str, shape))}/{dtype} {ms:.5f}")
'''


def cupti_kernel_ms(fn, backend, kernel_prefix, calls=50, flush=True):
    """Median CUPTI duration (ms) of kernels whose name starts with ``kernel_prefix``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    backend.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if flush:
                backend.flush_l2()
            fn()
        backend.synchronize()
    durations = [
        e.device_time if hasattr(e, "device_time") else e.cuda_time
        for e in prof.events()
        if e.name.startswith(kernel_prefix) and getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
    ]
    if not durations:
        return None
    return statistics.median(durations) / 1e3  # µs -> ms


def timer_table():
    import torch
    import triton

    from zlf.backends import CudaBackend
    from zlf.ops.builtin import make_ops
    from zlf.timing import time_direct

    backend = CudaBackend(0)
    backend.setup()
    rows = []
    prefixes = {"add": "add_kernel", "softmax": "softmax_kernel", "matmul": "matmul_kernel"}
    for name, op in make_ops().items():
        for dtype in op.dtypes:
            for shape in op.shapes:
                torch.manual_seed(0)
                inputs = op.make_inputs(shape, dtype, backend.device)
                fn = lambda: op.fn(*inputs)  # noqa: E731
                fn()
                backend.synchronize()
                core = time_direct(fn, backend, warmup_ms=25, rep_ms=100, flush_l2=True).value_ms
                bench = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                cupti = cupti_kernel_ms(fn, backend, prefixes[name])
                rows.append({
                    "point": f"{name}/{'x'.join(map(str, shape))}/{dtype}",
                    "cupti_ms": cupti, "core_ms": core, "do_bench_ms": bench,
                    "core_over_cupti": core / cupti if cupti else None,
                    "do_bench_over_cupti": bench / cupti if cupti else None,
                    "core_over_do_bench": core / bench,
                })
                del inputs
    return rows


def wall_times(workdir: Path, repeats: int = 2):
    env = dict(os.environ, ZLF_NO_PROGRESS="1", TRITON_CACHE_DIR=str(workdir / "triton-cache"))
    bare = workdir / "bare_loop.py"
    bare.write_text(BARE_LOOP)
    zlf_cmd = [sys.executable, "-m", "zlf", "run", "--ext", "seed", "--ext", "shapes", "--out", str(workdir / "runs")]
    bare_cmd = [sys.executable, str(bare)]
    # One throwaway pass of each fills Triton's disk cache, so neither side pays compilation.
    subprocess.run(bare_cmd, env=env, capture_output=True, check=True)
    out = {"zlf_run_s": [], "bare_do_bench_s": []}
    for _ in range(repeats):
        for key, cmd in (("bare_do_bench_s", bare_cmd), ("zlf_run_s", zlf_cmd)):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            out[key].append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise SystemExit(f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}")
            if key == "zlf_run_s":
                out["zlf_table"] = proc.stdout
    out["ratio"] = statistics.median(out["zlf_run_s"]) / statistics.median(out["bare_do_bench_s"])
    return out


def fmt(v, nd=4):
    return "" if v is None else f"{v:.{nd}g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = timer_table()
    with tempfile.TemporaryDirectory() as tmp:
        walls = wall_times(Path(tmp))
    (out / "core_timer_bench.json").write_text(json.dumps({"timers": rows, "wall": walls}, indent=2))
    print(walls["zlf_table"])
    print("| point | CUPTI µs | core/CUPTI | do_bench/CUPTI | core/do_bench |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['point']} | {fmt(r['cupti_ms'] * 1e3 if r['cupti_ms'] else None)} | {fmt(r['core_over_cupti'], 3)} "
              f"| {fmt(r['do_bench_over_cupti'], 3)} | {fmt(r['core_over_do_bench'], 3)} |")
    print()
    print(f"wall time: zlf run {[round(x, 1) for x in walls['zlf_run_s']]} s, bare do_bench loop "
          f"{[round(x, 1) for x in walls['bare_do_bench_s']]} s, ratio {walls['ratio']:.3f} (target <= 1.2)")


if __name__ == "__main__":
    main()
