"""The CUPTI kernel timer on one NVIDIA GPU (a benchmark, not a test); under 5 minutes on an H200.

First, as every GPU script here (cupti-python and pyelftools travel as wheels in .whl/):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site

This script runs that line itself when ``import cupti`` fails, and installs zlf's extensions
editable when they are missing. Then:

1. the built-in kernels (add, softmax, matmul; matmul pinned to one config) timed in one process
   by the ``cupti`` timer (L2 flushed, and warm) and by the ``cudagraph`` timer (warm), against
   Nsight Compute's ``gpu__time_duration.sum`` (``ncu --clock-control none``, caches flushed):
   ratios per kernel, target cupti(flushed) / ncu <= 1.02 for kernels >= 2 us;
2. the same in 6 independent processes: spread of each kernel's median, cupti against cudagraph,
   the two warm timers interleaved in slices within each process so that the device's state
   (clock, power cap) reaches both alike (``--parts 2`` alone skips ncu); each timer alone in
   processes of its own, as ``zlf run`` times: ``benchmarks/power_state_gpu.py --parts variants``;
3. FlagGems v5.3.4 ``log10`` and ``softmax_backward`` (float32) before (``--ext flaggems --ext
   cudagraph``) and after (``... --ext cupti``), against CUPTI read through torch's profiler in a
   separate process (median over N calls of each call's kernel durations summed); target within 3 %;
4. the paged-KV task package's CUDA C++ candidate with ``--ext cupti`` (and before, with
   ``--ext cudagraph``) against the same kind of reference;
5. the timer before and after torch's profiler ran in the same process (a client that leaves
   serialised kernel tracing on made CUPTI report every kernel twice).

Usage: ``python3 benchmarks/cupti_gpu.py --out DIR`` (``--parts 1,2,3,4,5`` to choose). Writes
DIR/cupti_gpu.json, DIR/summary.md and every log and run directory under DIR; prints the tables.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SITE = "/tmp/site"
WHEELS = "python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site"
FLAGGEMS = ROOT / ".flaggems" / "v5.3.4"
TASK = ROOT / "examples" / "tasks" / "paged_kv_decode"
TASK_CASES = "1,6,12"
#: part 3's budgets (warm-up ms, repetition ms)
FG_BUDGETS = (10, 40)
DEADLINE_S = 480
NCU_WARM, NCU_RUNS = 2, 5
KERNEL_RE = "add_kernel|softmax_kernel|matmul_kernel"
#: warm measurements per timer and kernel in one process, interleaved (part 2's spread)
SLICES = 4
#: each slice's budgets (warm-up ms, repetition ms): zlf run's defaults, so that a slice loads the
#: device as one point of a real run does (a power-capped kernel slows after some ms of it)
SLICE_MS = (25.0, 100.0)


# ----------------------------------------------------------------------------- set-up
def _env() -> dict:
    env = dict(os.environ, ZLF_NO_PROGRESS="1", NO_COLOR="1", PYTHONUNBUFFERED="1", FLAGGEMS_DIR=str(FLAGGEMS))
    if os.path.isdir(SITE):
        env["PYTHONPATH"] = SITE + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def setup(notes: list) -> None:
    """The wheels line (when cupti is not importable), zlf and the extensions this script uses."""
    probe = subprocess.run([sys.executable, "-c", "from cupti import cupti"], env=_env(), capture_output=True)
    if probe.returncode != 0 and glob.glob(str(ROOT / ".whl" / "*.whl")):
        proc = subprocess.run(["bash", "-c", WHEELS.split(" && export")[0]], cwd=ROOT, capture_output=True, text=True)
        notes.append(f"wheels installed to {SITE} (rc={proc.returncode})")
    if SITE not in sys.path and os.path.isdir(SITE):
        sys.path.insert(0, SITE)
        os.environ["PYTHONPATH"] = _env()["PYTHONPATH"]
    missing = [e for e, mod in (("timing_cupti", "zlf_timing_cupti"), ("timing_cudagraph", "zlf_timing_cudagraph"),
                                ("flaggems", "zlf_flaggems"), ("taskpkg", "zlf_taskpkg"), ("seed", "zlf_seed"))
               if subprocess.run([sys.executable, "-c", f"import {mod}"], env=_env(), capture_output=True).returncode]
    core = subprocess.run([sys.executable, "-c", "import zlf"], env=_env(), capture_output=True).returncode != 0
    if missing or core:
        args = (["-e", str(ROOT)] if core else []) + [a for e in missing for a in ("-e", str(ROOT / "extensions" / e))]
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", *args],
                       capture_output=True, text=True)
        notes.append(f"installed: {', '.join((['zlf'] if core else []) + missing)}")


def _zlf(args, log: Path, timeout: int = 240) -> dict:
    """``python -m zlf ARGS``; its output to ``log``; the run directory's records when there is one."""
    cmd = [sys.executable, "-m", "zlf", *map(str, args)]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout, cwd=ROOT)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        def text(v):
            return v.decode(errors="replace") if isinstance(v, bytes) else (v or "")
        rc, out, err = "timeout", text(exc.stdout), text(exc.stderr)
    log.write_text(f"$ {' '.join(cmd)}\n(rc={rc}, {time.monotonic() - t0:.1f} s)\n--- stdout\n{out}\n--- stderr\n{err}\n")
    result = {"command": " ".join(cmd), "rc": rc, "log": str(log)}
    dirs = [l[len("run dir: "):] for l in out.splitlines() if l.startswith("run dir: ")]
    if dirs:
        d = Path(dirs[-1]) if Path(dirs[-1]).is_absolute() else ROOT / dirs[-1]
        result["run_dir"] = str(d)
        path = d / "results.jsonl"
        result["records"] = [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []
    return result


def _child(mode: str, out: Path, extra=(), timeout: int = 150) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--child-out", str(out), *map(str, extra)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"child {mode} timed out after {timeout} s"}
    (out.parent / (out.stem + ".log")).write_text(proc.stdout[-20000:] + "\n--- stderr\n" + proc.stderr[-20000:])
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child {mode} rc={proc.returncode}: {tail[:300]}"}
    return json.loads(out.read_text())


# ----------------------------------------------------------------------------- part 1/2: children
def _suite():
    sys.path.insert(0, str(HERE))
    import cudagraph_vs_cupti as cvc  # noqa: E402 -- its kernels, setup (matmul pinned) and builders

    backend, ops, empty = cvc._setup()
    specs = [s for s in cvc.KERNELS if s[1] != "empty"]
    return cvc, backend, ops, empty, specs


def child_suite(out: Path, index: int = 0, slice_ms=SLICE_MS) -> int:
    """One process: every kernel by cupti (flushed, warm) and cudagraph (warm); the warm ones in
    :data:`SLICES` alternating slices each (budgets ``slice_ms``), whose order starts with cupti
    in even processes (``index``) and with the graph timer in odd ones; the backend's clock sampler per slice."""
    from zlf_timing_cudagraph.graph_timer import GraphSettings, time_graph
    from zlf_timing_cupti.sources import make_source
    from zlf_timing_cupti.timer import CuptiTimer

    cvc, backend, ops, empty, specs = _suite()
    source, why = make_source("auto")
    if source is None:
        raise SystemExit(f"no CUPTI source: {why}")
    timer = CuptiTimer(source)
    sampler = backend.clock_sampler()  # NVML (or nvidia-smi) on a thread, per slice; None without either
    warmup_ms, rep_ms = slice_ms
    rows = []
    for spec in specs:
        label, op_name, shape, dtype = spec
        fn, op, inputs = cvc._build(label, op_name, shape, dtype, backend, ops, empty)
        fn()
        backend.synchronize()
        flushed = timer.time(fn, backend, warmup_ms=10, rep_ms=40, flush_l2=True)
        read_flush = backend.flush_l2
        backend.flush_l2 = lambda: _write_flush(backend)  # the old flush (a write, as triton.testing)
        try:
            flushed_w = timer.time(fn, backend, warmup_ms=10, rep_ms=40, flush_l2=True)
        finally:
            backend.flush_l2 = read_flush
        # The two warm timers in alternating slices (the first one alternates between processes),
        # so that the device's state over the process (clock, power cap) reaches both alike.
        warm_slices, graph_slices, clocks = [], [], {"cupti": [], "graph": []}
        for k in range(SLICES):
            for which in (("cupti", "graph") if (k + index) % 2 == 0 else ("graph", "cupti")):
                window = sampler.window() if sampler is not None else contextlib.nullcontext()
                with window:
                    if which == "cupti":
                        warm = timer.time(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=False)
                        warm_slices.append(warm.value_ms)
                    else:
                        graph = time_graph(fn, backend, GraphSettings(warmup_ms=warmup_ms, rep_ms=rep_ms), op=op,
                                           inputs=inputs, dtype=dtype)
                        graph_slices.append(graph.value_ms)
                clocks[which].append(window.summary() if sampler is not None else None)
        rows.append({"kernel": label, "cupti_flush_ms": flushed.value_ms, "cupti_flush_write_ms": flushed_w.value_ms,
                     "cupti_warm_ms": statistics.median(warm_slices), "cupti_warm_slices_ms": warm_slices,
                     "cudagraph_ms": statistics.median(graph_slices), "cudagraph_slices_ms": graph_slices,
                     "wall_ms": warm.wall_ms, "source": source.name,
                     "kernels_per_call": warm.extra["cupti"]["kernels_per_call"],
                     "calls": warm.extra["cupti"].get("calls"), "step_ns": warm.extra["cupti"].get("step_ns"),
                     "slice_ms": list(slice_ms), "clocks": clocks,
                     "kernel_names": warm.extra["cupti"]["kernel_names"]})
        del inputs
        backend.free_memory()
    out.write_text(json.dumps(rows))
    return 0


def _write_flush(backend) -> None:
    """L2 flush by writing 256 MB (triton.testing's way; zlf's before it switched to a read)."""
    import torch

    buf = getattr(backend, "_write_buf", None)
    if buf is None:
        buf = backend._write_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=backend.device)
    buf.zero_()


def child_ncu(out: Path) -> int:
    """Under ncu: each kernel NCU_WARM + NCU_RUNS times, in KERNELS order (ncu flushes caches)."""
    cvc, backend, ops, empty, specs = _suite()
    for spec in specs:
        label, op_name, shape, dtype = spec
        fn, op, inputs = cvc._build(label, op_name, shape, dtype, backend, ops, empty)
        for _ in range(NCU_WARM + NCU_RUNS):
            fn()
        backend.synchronize()
        del inputs
        backend.free_memory()
    out.write_text(json.dumps([s[0] for s in specs]))
    return 0


_UNITS_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def parse_ncu_csv(text: str) -> list:
    """``[(kernel name, duration µs)]`` in launch order from ``ncu --csv`` output."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    rows = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(str(r["Metric Value"]).replace(",", ""))
        rows.append((r.get("Kernel Name", ""), value * _UNITS_US.get(r.get("Metric Unit", "nsecond"), 1e-3)))
    return rows


def run_ncu(out: Path, labels: list, notes: list, cache: str = "all") -> dict:
    """ncu over the suite; ``cache`` "all" invalidates caches before each kernel, "none" keeps them
    (the kernel runs NCU_WARM + NCU_RUNS times in a row, so the measured launches run warm)."""
    log = out / f"ncu_{cache}.csv"
    cmd = ["ncu", "--clock-control", "none", "--cache-control", cache, "--metrics", "gpu__time_duration.sum",
           "--csv", "-k", f"regex:{KERNEL_RE}", "--log-file", str(log),
           sys.executable, str(Path(__file__).resolve()), "--child", "ncu", "--child-out", str(out / "ncu_child.json")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=180, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"ncu did not run: {exc}")
        return {}
    (out / f"ncu_{cache}.log").write_text(proc.stdout[-20000:] + "\n--- stderr\n" + proc.stderr[-20000:])
    if not log.exists():
        notes.append(f"ncu wrote no CSV (rc={proc.returncode}); see ncu.log")
        return {}
    rows = parse_ncu_csv(log.read_text())
    block = NCU_WARM + NCU_RUNS
    if len(rows) != block * len(labels):
        notes.append(f"ncu: {len(rows)} kernel rows for {len(labels)} kernels x {block} launches; blocks may be off")
    result = {}
    for i, label in enumerate(labels):
        chunk = rows[i * block:(i + 1) * block][NCU_WARM:]
        if chunk:
            result[label] = {"ncu_us": statistics.median(v for _, v in chunk), "names": sorted({n for n, _ in chunk})}
    return result


# ----------------------------------------------------------------------------- references (torch's profiler)
def _profiled(fn, backend, calls: int, flush) -> list:
    """Chrome-trace events of ``calls`` calls of ``fn`` under torch's profiler (CUPTI), each call
    after ``flush`` (when given) and followed by a synchronize, as the timers do."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    for _ in range(10):
        fn()
    backend.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if flush is not None:
                flush()
                backend.synchronize()
            fn()
            backend.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        return json.load(open(path)).get("traceEvents", [])


def profile_kernels_ms(fn, backend, calls: int = 50) -> dict:
    """Every kernel's device time per call, read through torch's profiler: the median over
    ``calls`` calls of each call's kernels summed (the mean in ``*_mean``), with L2 flushed before each call as zlf's timers do on a GPU (``kernel_ms``;
    the flush's own kernels, learnt by profiling the flush alone, are left out) and warm
    (``warm_kernel_ms``)."""
    flush_names = {e["name"] for e in _profiled(backend.flush_l2, backend, 3, None) if e.get("cat") == "kernel"}
    result = {"flush_kernels": sorted(flush_names), "flush_torch_kernel": getattr(backend, "_read_kernel", None) is not None}
    for key, flush in (("kernel_ms", backend.flush_l2), ("warm_kernel_ms", None)):
        events = _profiled(fn, backend, calls, flush)
        kern = [e for e in events if e.get("cat") == "kernel" and "dur" in e and e["name"] not in flush_names]
        mem = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset") and "dur" in e]
        result[key + "_mean"] = sum(float(e["dur"]) for e in kern) / calls / 1e3
        result[key] = _median_per_call(kern, calls) or result[key + "_mean"]
        if flush is None:
            result.update(memory_ms=sum(float(e["dur"]) for e in mem) / calls / 1e3,
                          kernels_per_call=len(kern) / calls, names=sorted({e["name"] for e in kern})[:5])
    return result


def _median_per_call(kernels: list, calls: int):
    """Median over calls of each call's summed kernel time (ms), as the timers report a median;
    None when the kernels do not split evenly into calls (calls are synchronised one by one, so
    in start order the first ``len / calls`` kernels are the first call's)."""
    if not kernels or len(kernels) % calls:
        return None
    per = len(kernels) // calls
    ordered = sorted(kernels, key=lambda e: float(e["ts"]))
    sums = [sum(float(e["dur"]) for e in ordered[i * per:(i + 1) * per]) for i in range(calls)]
    return statistics.median(sums) / 1e3


def child_fgref(out: Path, run_dir: Path) -> int:
    """Rebuild the FlagGems points of a run (flaggems extension only) and profile each."""
    from zlf.ops import point_inputs
    from zlf.records import Point
    from zlf.session import Session

    meta = json.loads((run_dir / "meta.json").read_text())
    options = argparse.Namespace(**meta["options"])
    options.ext = ["flaggems"]
    options.no_ext = []
    options.timer = None
    session = Session.create(options)
    session.options = options
    session.hooks.configure(session)
    backend = session.choose_backend(getattr(options, "backend", None), getattr(options, "device", 0) or 0)
    ops = {op.name: op for op in session.resolve_ops(getattr(options, "ops", None) or None)}
    try:
        from zlf_timing_cupti.sources import make_source
        from zlf_timing_cupti.timer import CuptiTimer

        source, _ = make_source("cupti-python")
        timer = CuptiTimer(source) if source is not None else None
    except ImportError:
        timer = None
    rows = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("status") != "ok" or r["op"] not in ops:
            continue
        op = ops[r["op"]]
        point = Point(r["op"], tuple(r["shape"]), r["dtype"], r.get("variant", ""))
        inputs = point_inputs(op, point, backend)
        fn = lambda: op.fn(*inputs)  # noqa: E731 -- the callable zlf times
        rows[r["point"]] = profile_kernels_ms(fn, backend)
        if timer is not None:  # the timer on the same inputs in the same process, at the run's budgets
            rows[r["point"]]["cupti_timer_warm_ms"] = [
                timer.time(fn, backend, warmup_ms=FG_BUDGETS[0], rep_ms=FG_BUDGETS[1], flush_l2=False).value_ms
                for _ in range(3)]
        del inputs
        backend.free_memory()
    out.write_text(json.dumps(rows))
    return 0


#: part 5's kernels: short and long
AFTER_PROFILER = ("add 1M fp32", "softmax 4096x4096 fp32", "matmul 128x4096x4096 fp16")


def child_afterprof(out: Path) -> int:
    """One process: each of :data:`AFTER_PROFILER` by the CUPTI timer (warm), then under torch's
    profiler for a few calls, then by the timer again. After torch's profiler every kernel once
    read 2.1× its duration (CUPTI left on another clock): the timer now reads CUPTI's clock against
    the host's over each trace, divides by its rate, and says so in the record."""
    from torch.profiler import ProfilerActivity, profile
    from zlf_timing_cupti.sources import make_source
    from zlf_timing_cupti.timer import CuptiTimer

    cvc, backend, ops, empty, specs = _suite()
    source, why = make_source("cupti-python")
    if source is None:
        raise SystemExit(f"no CUPTI source: {why}")
    timer = CuptiTimer(source)
    budget = dict(warmup_ms=SLICE_MS[0], rep_ms=SLICE_MS[1], flush_l2=False)
    rows = []
    for spec in [s for s in specs if s[0] in AFTER_PROFILER]:
        fn, _, _ = cvc._build(*spec, backend, ops, empty)
        before = timer.time(fn, backend, **budget)
        with profile(activities=[ProfilerActivity.CUDA]):
            for _ in range(20):
                fn()
            backend.synchronize()
        after = timer.time(fn, backend, **budget)
        info = after.extra["cupti"]
        rows.append({"kernel": spec[0], "before_us": before.value_ms * 1e3, "after_us": after.value_ms * 1e3,
                     "clock_per_ns": info.get("clock_per_ns", 1.0), "kernels_per_call": info.get("kernels_per_call"),
                     "duplicate_records": info.get("duplicate_records", 0), "clock_why": info.get("clock_why", "")})
    out.write_text(json.dumps(rows))
    return 0


def child_taskref(out: Path, cases: str) -> int:
    """The CUDA C++ candidate of the paged-KV package on each case, profiled."""
    from zlf.backends import CudaBackend
    from zlf.seeding import seed_everything
    from zlf_taskpkg.candidate import Candidate, compile_cuda, default_arch, default_cache_dir, load_kernel
    from zlf_taskpkg.package import TaskPackage
    from zlf_taskpkg.checker import clone_args

    backend = CudaBackend(0)
    backend.setup()
    package = TaskPackage.open(TASK)
    problem = package.load()
    cand = compile_cuda(Candidate.open(TASK / "candidates" / "paged_decode.cu"), default_cache_dir(), default_arch(backend))
    kernel = load_kernel(cand.kind, str(cand.path), cand.library)
    rows = {}
    for case in [int(c) for c in cases.split(",")]:
        _, arg_shapes, _, _ = package.case_sizes(case)
        seed_everything(package.base_seed() + case)
        args = clone_args(list(problem.genTestCase(arg_shapes, device=backend.device)))
        rows[str(case)] = profile_kernels_ms(kernel.bind(args), backend)
        del args
        backend.free_memory()
    out.write_text(json.dumps(rows))
    return 0


# ----------------------------------------------------------------------------- report
def _slice_ms(text: str) -> tuple:
    warmup, rep = (float(v) for v in text.split(","))
    return warmup, rep


def _pct(a, b):
    return f"{100.0 * (a / b - 1):+.1f}%" if a and b else "-"


def _spread(values) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values) if len(values) >= 2 else float("nan")


def _sd(values) -> float:
    """Standard deviation of the log values, percent: one process's run-to-run noise."""
    logs = [math.log(v) for v in values if v and v > 0]
    return 100.0 * statistics.stdev(logs) if len(logs) >= 2 else float("nan")


def suite_table(children, ncu, ncu_warm=None) -> list:
    base = children[0]
    ncu_warm = ncu_warm or {}
    out = ["## 1. Built-in kernels: cupti against ncu and the graph timer; 2. spread over processes", "",
           "Flushed: zlf reads a 256 MB buffer before each sample (\"write flush\": zeroes it, the old way); "
           "ncu `--cache-control all`. Warm: no flush; ncu `--cache-control none`, kernel repeated.", "",
           "| kernel | ncu us (flushed) | cupti us (flushed) | cupti/ncu | write flush: cupti us, /ncu | ncu us (warm) | "
           "cupti us (warm) | cupti/ncu (warm) | cudagraph us (warm) | "
           "cudagraph/cupti (warm) | wall us | kernels/call | cupti spread | cudagraph spread | cupti sd / cudagraph sd | targets |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(base):
        n = ncu.get(row["kernel"], {}).get("ncu_us")
        nw = ncu_warm.get(row["kernel"], {}).get("ncu_us")
        cf, cw, cg = row["cupti_flush_ms"] * 1e3, row["cupti_warm_ms"] * 1e3, row["cudagraph_ms"] * 1e3
        cfw = row.get("cupti_flush_write_ms", float("nan")) * 1e3
        s_cupti = _spread([c[i]["cupti_warm_ms"] for c in children])
        s_graph = _spread([c[i]["cudagraph_ms"] for c in children])
        sd_cupti = _sd([c[i]["cupti_warm_ms"] for c in children])
        sd_graph = _sd([c[i]["cudagraph_ms"] for c in children])
        checks = []
        if n and n >= 2:
            checks.append(f"<=1.02x ncu {'OK' if cf / n <= 1.02 else 'MISSED'}")
        if len(children) >= 2:
            checks.append(f"spread<=graph's {'OK' if s_cupti <= max(s_graph, 0.1) else 'MISSED'}")
        if nw and nw >= 2:
            checks.append(f"warm <=1.02x ncu {'OK' if cw / nw <= 1.02 else 'MISSED'}")
        n_s, ratio_s = (f"{n:.3f}", f"{cf / n:.3f}x") if n else ("-", "-")
        w_s = f"{cfw:.3f}, {cfw / n:.3f}x" if n else f"{cfw:.3f}"
        nw_s, ratio_w = (f"{nw:.3f}", f"{cw / nw:.3f}x") if nw else ("-", "-")
        out.append(f"| {row['kernel']} | {n_s} | {cf:.3f} | {ratio_s} | {w_s} | {nw_s} | {cw:.3f} | {ratio_w} | {cg:.3f} | {cg / cw:.3f}x | "
                   f"{row['wall_ms'] * 1e3:.1f} | {row['kernels_per_call']} | {s_cupti:.2f}% | {s_graph:.2f}% | "
                   f"{sd_cupti:.2f}% / {sd_graph:.2f}% | "
                   f"{'; '.join(checks)} |")
    out += ["", f"Spread = (max - min) / median of the per-process medians over {len(children)} processes "
            f"(cupti warm vs cudagraph warm, each the median of {SLICES} slices interleaved with the other "
            "timer's, the first timer alternating between processes); sd = standard deviation of their logs. "
            f"Source: {base[0]['source']}; calls: {base[0].get('calls')}; slice budgets (warm-up, repetition ms): "
            f"{base[0].get('slice_ms', 'not recorded')}.", ""]
    return out + slice_table(children)


def slice_table(children) -> list:
    """Every slice of every process, per kernel and timer: range, NVML's SM clock, and the share of
    the slice's clock readings that were throttled (a power-capped kernel runs in two modes)."""
    base = children[0]
    if not base or "clocks" not in base[0]:
        return []
    out = ["| kernel | cupti slices us (min-max) | cudagraph slices us (min-max) | SM MHz cupti / graph (median of slices) "
           "| throttled share of readings cupti / graph | step ns |", "|---|---|---|---|---|---|"]
    for i, row in enumerate(base):
        cells = []
        for key in ("cupti_warm_slices_ms", "cudagraph_slices_ms"):
            vals = [v * 1e3 for c in children for v in c[i][key]]
            cells.append(f"{min(vals):.3f}-{max(vals):.3f}")
        mhz, capped = [], []
        for which in ("cupti", "graph"):
            sums = [s for c in children for s in c[i]["clocks"][which] if s]
            mhz.append(f"{statistics.median(s['sm_mhz_median'] for s in sums):.0f}" if sums else "-")
            capped.append(f"{statistics.mean(s['throttled_readings'] / s['readings'] for s in sums):.2f}" if sums else "-")
        steps = sorted({c[i].get("step_ns") for c in children}, key=str)
        out.append(f"| {row['kernel']} | {cells[0]} | {cells[1]} | {' / '.join(mhz)} | {' / '.join(capped)} | "
                   f"{', '.join(map(str, steps))} |")
    return out + [""]


def compare_table(title, runs: dict, ref: dict, key) -> list:
    """One row per point: each run's timer and median against the reference kernel time taken
    with the same L2 state as the record says it was timed (``l2``: flushed or warm)."""
    names = list(runs)
    out = [title, "", "Reference: torch's profiler (CUPTI), L2 flushed before each call (warm L2 in brackets); "
           "each timer is compared with the reference of its own L2 state (its record's `l2`).", "",
           "| point | torch-profiler CUPTI us | " + " | ".join(f"{n} (timer, L2, us, vs ref)" for n in names)
           + " | within 3% (last) |", "|---|---|" + "---|" * len(names) + "---|"]
    points = []
    for r in runs[names[-1]].get("records", []):
        if r["point"] not in points:
            points.append(r["point"])
    by = {n: {r["point"]: r for r in runs[n].get("records", [])} for n in names}
    for p in points:
        refs = ref.get(key(by[names[-1]][p])) or {}
        ref_ms, warm_ms = refs.get("kernel_ms"), refs.get("warm_kernel_ms")
        cells, last = [], None
        for n in names:
            r = by[n].get(p)
            if not r or r.get("median_ms") is None:
                cells.append(r.get("status", "-") if r else "-")
                continue
            mine = warm_ms if r.get("l2") == "warm" else ref_ms
            last = (r["median_ms"], mine)
            cells.append(f"{r.get('timer')} {r.get('l2', '?')} {r['median_ms'] * 1e3:.2f} {_pct(r['median_ms'], mine)}"
                         + (f" ({r['fallback_reason']})" if r.get("fallback_reason") else ""))
        ok = "-" if not (last and last[1]) else ("OK" if abs(last[0] / last[1] - 1) <= 0.03 else "MISSED")
        out.append(f"| {p} | {ref_ms * 1e3:.2f} ({warm_ms * 1e3:.2f}) | " if ref_ms and warm_ms
                   else f"| {p} | {ref_ms * 1e3:.2f} | " if ref_ms else f"| {p} | - | ")
        out[-1] += " | ".join(cells) + f" | {ok} |"
    return out + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for logs, runs and the summary")
    parser.add_argument("--parts", default="1,2,3,4,5")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cases", default=TASK_CASES, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--slice-ms", default=",".join(f"{v:g}" for v in SLICE_MS),
                        help="part 2: warm-up and repetition budgets (ms) of each slice, WARMUP,REP "
                             "(default: zlf run's %(default)s)")
    args = parser.parse_args(argv)
    if args.child == "suite":
        return child_suite(args.child_out, args.index, _slice_ms(args.slice_ms))
    if args.child == "ncu":
        return child_ncu(args.child_out)
    if args.child == "fgref":
        return child_fgref(args.child_out, args.run_dir)
    if args.child == "taskref":
        return child_taskref(args.child_out, args.cases)
    if args.child == "afterprof":
        return child_afterprof(args.child_out)
    if args.out is None:
        parser.error("--out DIR is required")
    t0 = time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    notes, report, text = [], {"parts": sorted(parts)}, []
    setup(notes)
    os.environ.setdefault("TRITON_CACHE_DIR", str(out / "triton_cache"))

    def left() -> float:
        return DEADLINE_S - (time.monotonic() - t0)

    def say(msg):
        print(f"[{time.monotonic() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    if parts & {"1", "2"}:
        children = []
        wanted = args.processes if "2" in parts else 1
        for k in range(wanted):
            if k and left() < 150:
                notes.append(f"spread: {len(children)} of {wanted} processes ran (time budget)")
                break
            res = _child("suite", out / f"suite_{k}.json", ["--index", k, "--slice-ms", args.slice_ms])
            if isinstance(res, dict) and "error" in res:
                notes.append(res["error"])
                if k == 0:
                    break
                continue
            children.append(res)
            say(f"suite process {k + 1}/{wanted}")
        labels = [r["kernel"] for r in children[0]] if children else []
        ncu = run_ncu(out, labels, notes) if children and "1" in parts else {}
        ncu_warm = run_ncu(out, labels, notes, cache="none") if children and "1" in parts else {}
        say("ncu done")
        report["suite"], report["ncu"], report["ncu_warm"] = children, ncu, ncu_warm
        if children:
            text += suite_table(children, ncu, ncu_warm)

    if "3" in parts:
        if not (FLAGGEMS / "benchmark").is_dir():
            notes.append(f"part 3 skipped: no FlagGems checkout in {FLAGGEMS}")
        else:
            common = ["--flaggems-dir", FLAGGEMS, "log10", "softmax_backward:softmax", "--flaggems-level", "core",
                      "--dtype", "float32", "--warmup-ms", str(FG_BUDGETS[0]), "--rep-ms", str(FG_BUDGETS[1]),
                      "--out", out / "fg_runs"]
            fg = {"before": _zlf(["run", "--ext", "flaggems,cudagraph,seed", *common, "--name", "before"], out / "fg_before.txt"),
                  "after": _zlf(["run", "--ext", "flaggems,cudagraph,cupti,seed", *common, "--name", "after"], out / "fg_after.txt")}
            say("flaggems runs done")
            ref = _child("fgref", out / "fg_ref.json", ["--run-dir", fg["after"].get("run_dir", "")], timeout=200) \
                if fg["after"].get("run_dir") else {"error": "no run dir for the after run"}
            if "error" in ref:
                notes.append(f"flaggems reference: {ref['error']}")
            report["flaggems"], report["flaggems_ref"] = fg, ref
            text += compare_table("## 3. FlagGems v5.3.4 log10 / softmax_backward (float32): before / after vs torch-profiler CUPTI",
                                  fg, ref if "error" not in ref else {}, key=lambda r: r["point"])
            same = [(k, v["warm_kernel_ms"], v["cupti_timer_warm_ms"]) for k, v in (ref if "error" not in ref else {}).items()
                    if isinstance(v, dict) and v.get("cupti_timer_warm_ms")]
            if same:
                text += ["Same process, same inputs: the CUPTI timer (3 times, warm, the run's budgets) against the "
                         "warm reference", "", "| point | reference µs | cupti timer µs | vs ref |", "|---|---|---|---|"]
                text += [f"| {k} | {w * 1e3:.3f} | {', '.join(f'{t * 1e3:.3f}' for t in ts)} | "
                         f"{_pct(statistics.median(ts), w)} |" for k, w, ts in same] + [""]
            text += [f"markers (after): {sorted({m.split(' timer=')[-1] for r in fg['after'].get('records', []) for m in r.get('markers', [])})}", ""]
            say("flaggems reference done")

    if "5" in parts:
        rows = _child("afterprof", out / "afterprof.json", timeout=120)
        report["after_profiler"] = rows
        if isinstance(rows, dict) and "error" in rows:
            notes.append(f"part 5: {rows['error']}")
        else:
            text += ["## 5. The CUPTI timer before and after torch's profiler ran in the same process (warm)", "",
                     "| kernel | before µs | after µs | after / before | CUPTI timestamps per ns after the profiler | "
                     "kernels per call | duplicate records |", "|---|---|---|---|---|---|---|"]
            text += [f"| {r['kernel']} | {r['before_us']:.3f} | {r['after_us']:.3f} | {r['after_us'] / r['before_us']:.3f} | "
                     f"{r['clock_per_ns']:.4f} | {r['kernels_per_call']} | "
                     f"{r['duplicate_records']} |" for r in rows] + [""]
            text += [f"- {r['kernel']}: {r['clock_why']}" for r in rows if r["clock_why"]][:1] + [""]
        say("part 5 done")

    if "4" in parts:
        cand = TASK / "candidates" / "paged_decode.cu"
        common = ["task", TASK, "--candidate", cand, "--backend", "cuda", "--cases", args.cases, "--reuse-worker",
                  "--out", out / "task_runs"]
        task = {"before": _zlf([*common, "--name", "before", "--ext", "task,cudagraph"], out / "task_before.txt", timeout=200),
                "after": _zlf([*common, "--name", "after", "--ext", "task,cupti"], out / "task_after.txt", timeout=200)}
        say("task runs done")
        ref = _child("taskref", out / "task_ref.json", ["--cases", args.cases], timeout=150)
        if "error" in ref:
            notes.append(f"task reference: {ref['error']}")
        report["task"], report["task_ref"] = task, ref
        text += compare_table("## 4. paged-KV task, CUDA C++ candidate: before (cudagraph) / after (cupti) vs torch-profiler CUPTI",
                              task, ref if "error" not in ref else {}, key=lambda r: str(r.get("extra", {}).get("case")))
        say("task reference done")

    report["notes"] = notes
    report["elapsed_s"] = round(time.monotonic() - t0, 1)
    (out / "cupti_gpu.json").write_text(json.dumps(report, indent=2, default=str))
    summary = "\n".join(text + [f"- {n}" for n in notes] + [f"\nelapsed {report['elapsed_s']} s"]) + "\n"
    (out / "summary.md").write_text(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
