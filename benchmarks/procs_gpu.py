"""Hangs, kills and complex checks on a GPU (docs/hostile.md): what the CPU tests cannot show.

    python3 benchmarks/procs_gpu.py --out DIR

1. a Triton kernel that spins forever: ``zlf run --time-limit 10`` must end with exit 124 within
   ~20 s (the watchdog: torch's synchronize is a C call SIGALRM cannot interrupt), the point's
   FAILED record and meta.json "hung" written, and no process of the run left on the GPU;
2. a Python hang between device calls: FAILED (time limit), the run goes on (exit 1);
3. ``kill -9`` of ``zlf task`` judging a candidate that spins on the GPU: the worker is gone
   within 5 s and holds no GPU memory;
4. complex64 on the device: a result with the wrong imaginary part FAILS, the right one passes,
   with the cudagraph timer active (its replay check compares complex too).
Prints one table; full logs under DIR.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "tests" / "data" / "taskpkg_vecadd"

OPS = textwrap.dedent('''
    import time, torch, triton, triton.language as tl, zlf

    @triton.jit
    def spin(flag_ptr, out_ptr):
        v = tl.load(flag_ptr)
        i = 0
        while v == 0:
            v = tl.load(flag_ptr, volatile=True)
            i += 1
        tl.store(out_ptr, i)

    def make(shape, dtype, device):
        return (torch.zeros(1, dtype=torch.int32, device=device), torch.zeros(1, dtype=torch.int32, device=device))

    def gpu_spin(flag, out):
        spin[(1,)](flag, out)
        torch.cuda.synchronize()

    def py_hang(flag, out):
        out.add_(1)
        while True:
            time.sleep(0.05)

    def ok(flag, out):
        out.copy_(flag)

    ref = lambda flag, out: flag.clone()
    a_ok = zlf.Op(name="a_ok", fn=ok, make_inputs=make, shapes=[(1,)], dtypes=["int32"], reference=ref, outputs=(1,))
    b_spin = zlf.Op(name="b_spin", fn=gpu_spin, make_inputs=make, shapes=[(1,)], dtypes=["int32"], reference=ref, outputs=(1,))
    c_pyhang = zlf.Op(name="c_pyhang", fn=py_hang, make_inputs=make, shapes=[(1,)], dtypes=["int32"], reference=ref, outputs=(1,))

    def cmake(shape, dtype, device):
        x = torch.randn(shape, dtype=torch.complex64, device=device)
        return (x, torch.empty_like(x))

    def conj(x, out):
        torch.conj_physical(x, out=out)

    def same(x, out):
        out.copy_(x)

    cref = lambda x, out: x.clone()
    d_cwrong = zlf.Op(name="d_cwrong", fn=conj, make_inputs=cmake, shapes=[(1 << 20,)], dtypes=["complex64"], reference=cref, outputs=(1,))
    e_cright = zlf.Op(name="e_cright", fn=same, make_inputs=cmake, shapes=[(1 << 20,)], dtypes=["complex64"], reference=cref, outputs=(1,))
''')

SPIN_CANDIDATE = textwrap.dedent('''
    import os, torch, triton, triton.language as tl

    @triton.jit
    def spin(flag_ptr):
        v = tl.load(flag_ptr)
        while v == 0:
            v = tl.load(flag_ptr, volatile=True)

    def run_kernel(a, b, out, n):
        flag = torch.zeros(1, dtype=torch.int32, device=out.device)
        spin[(1,)](flag)
        open(os.environ["ZLF_TEST_MARKER"], "w").close()
        torch.cuda.synchronize()
''')


def zlf(args, out: Path, name: str, env=None, timeout=120):
    t0 = time.monotonic()
    with open(out / f"{name}.txt", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=out, stdout=log,
                              stderr=subprocess.STDOUT, env=env, timeout=timeout)
    return proc.returncode, time.monotonic() - t0


def gpu_pids() -> set:
    try:
        text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {int(l) for l in text.split() if l.strip().isdigit()}


def records(run_dir: Path) -> list:
    return [json.loads(l) for l in (run_dir / "results.jsonl").read_text().splitlines() if l.strip()]


def newest(parent: Path) -> Path:
    return max((d for d in parent.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = Path(ap.parse_args().out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    (out / "ops.py").write_text(OPS)
    env = {**os.environ, "ZLF_NO_PROGRESS": "1", "NO_COLOR": "1"}
    rows = []

    rc, took = zlf(["run", "ops.py::a_ok", "ops.py::b_spin", "--time-limit", "10", "--out", "runs_spin"], out, "1_spin", env)
    d = newest(out / "runs_spin")
    meta = json.loads((d / "meta.json").read_text())
    recs = records(d)
    time.sleep(2)
    ok = rc == 124 and took < 30 and meta.get("status") == "hung" and [r["status"] for r in recs] == ["ok", "FAILED"]
    rows.append(["GPU spin kernel, --time-limit 10", f"rc {rc}, {took:.1f} s, meta {meta.get('status')}, "
                 f"{[r['status'] for r in recs]}", "PASS" if ok else "FAIL"])

    rc, took = zlf(["run", "ops.py::c_pyhang", "ops.py::a_ok", "--time-limit", "3", "--out", "runs_py"], out, "2_pyhang", env)
    recs = records(newest(out / "runs_py"))
    ok = rc == 1 and [r["status"] for r in recs] == ["FAILED", "ok"] and "time limit" in (recs[0]["error"] or "")
    rows.append(["Python hang between device calls", f"rc {rc}, {took:.1f} s, {[r['status'] for r in recs]}",
                 "PASS" if ok else "FAIL"])

    cand = out / "spin_candidate.py"
    cand.write_text(SPIN_CANDIDATE)
    marker = out / "candidate_runs"
    marker.unlink(missing_ok=True)
    log = open(out / "3_task_kill.txt", "w")
    judge = subprocess.Popen([sys.executable, "-m", "zlf", "task", str(PKG), "--candidate", str(cand), "--ext", "task",
                              "--time-limit", "100", "--out", str(out / "runs_task")], cwd=out, stdout=log,
                             stderr=subprocess.STDOUT, env={**env, "ZLF_TEST_MARKER": str(marker)})
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    before = gpu_pids()
    os.kill(judge.pid, signal.SIGKILL)
    judge.wait()
    time.sleep(5)
    after = gpu_pids()
    ok = marker.exists() and not (after & before)
    rows.append(["kill -9 of zlf task, candidate spinning on the GPU",
                 f"GPU pids before {sorted(before)}, 5 s after {sorted(after)}", "PASS" if ok else "FAIL"])

    rc, _ = zlf(["run", "ops.py::d_cwrong", "ops.py::e_cright", "--ext", "cudagraph", "--out", "runs_cplx"], out,
                "4_complex", env)
    recs = {r["op"]: r for r in records(newest(out / "runs_cplx"))}
    ok = rc == 1 and recs["d_cwrong"]["status"] == "FAILED" and recs["e_cright"]["status"] == "ok"
    rows.append(["complex64: wrong imaginary part / right result (cudagraph)",
                 f"rc {rc}, {recs['d_cwrong']['status']} / {recs['e_cright']['status']} ({recs['e_cright'].get('timer')})",
                 "PASS" if ok else "FAIL"])

    table = tabulate(rows, headers=["check", "seen", "result"])
    (out / "summary.txt").write_text(table + "\n")
    print(table)
    return 0 if all(r[2] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
