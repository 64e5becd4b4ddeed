"""Per-kernel CUPTI durations of the paged-KV CUDA C++ candidate (split, merge) in six launch
regimes: back to back, after a writing L2 flush (zero, fill), after a host sleep of 1 or 20 ms, and
flush + sleep. For comparing with ncu kernel by kernel (docs/measurements.md). H200, under a minute:

    PYTHONPATH=/tmp/site python3 benchmarks/task_kernels_gpu.py   (cupti-python importable)
"""
import statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent

import torch
from cupti import cupti
from zlf.backends import CudaBackend
from zlf.seeding import seed_everything
from zlf_taskpkg.candidate import Candidate, compile_cuda, default_arch, default_cache_dir, load_kernel
from zlf_taskpkg.package import TaskPackage
from zlf_taskpkg.checker import clone_args
from zlf_timing_cupti.sources import CuptiPythonSource
TASK = ROOT / "examples/tasks/paged_kv_decode"
backend = CudaBackend(0); backend.setup()
package = TaskPackage.open(TASK); problem = package.load()
cand = compile_cuda(Candidate.open(TASK / "candidates/paged_decode.cu"), default_cache_dir(), default_arch(backend))
kernel = load_kernel(cand.kind, str(cand.path), cand.library)
src = CuptiPythonSource(cupti)
flush_buf = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
for case in (1, 2, 4, 8, 12):
    _, arg_shapes, _, _ = package.case_sizes(case)
    seed_everything(package.base_seed() + case)
    args = clone_args(list(problem.genTestCase(arg_shapes, device=backend.device)))
    call = kernel.bind(args)
    for _ in range(20): call()
    torch.cuda.synchronize()
    for regime in ("back_to_back", "flush_zero", "flush_write", "sync_sleep_1ms", "sync_sleep_20ms", "flush+sleep_1ms"):
        src.start()
        n = 60 if "20ms" in regime else 200
        for i in range(n):
            if regime.startswith("flush"):
                flush_buf.zero_() if regime != "flush_write" else flush_buf.fill_(i & 255)
            if "sleep" in regime:
                torch.cuda.synchronize(); time.sleep(0.001 if "1ms" in regime else 0.02)
            call()
        torch.cuda.synchronize()
        recs, _ = src.stop()
        per = {}
        for r in recs:
            if r.kind == "kernel" and "decode_" in r.name:
                per.setdefault("split" if "split" in r.name else "merge", []).append(r.duration_ns / 1e3)
        gaps = []
        ks = sorted([r for r in recs if r.kind == "kernel" and "decode_" in r.name], key=lambda r: r.start_ns)
        for a, b in zip(ks, ks[1:]):
            if "split" in a.name and "merge" in b.name: gaps.append((b.start_ns - a.end_ns) / 1e3)
        med = {k: round(statistics.median(v[5:]), 2) for k, v in per.items()}
        print(f"case {case:2d} {regime:16s} " + " ".join(f"{k} {v:7.2f}" for k, v in med.items()) +
              f"  sum {sum(med.values()):7.2f}  split->merge gap {statistics.median(gaps):.2f} us", flush=True)
    del args, call; backend.free_memory()
