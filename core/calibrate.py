"""Measure this device's bandwidth and matmul TFLOP/s ceilings and store them for compare/report.

GPU backends: a large device-to-device copy (GB/s, bytes read + written) and large matmuls
(bfloat16, float16, float32). The ``cpu`` backend measures a host copy and a float32 matmul
so that the command and its consumers are testable without a GPU; those figures describe the
host, not any GPU. Results go to ``<cache>/ceilings/<device>.json`` (see ``zlf.ceilings``).
"""
from __future__ import annotations

import datetime as _dt
import json
import statistics
import time

from tabulate import tabulate

from . import __version__, ceilings
from .console import warn
from .errors import UsageError

GPU_DTYPES = ("bfloat16", "float16", "float32")
CPU_DTYPES = ("float32",)


def configure_parser(parser) -> None:
    from .options import Number, add_backend_argument, add_device_argument, add_dtype_argument

    add_backend_argument(parser)
    add_device_argument(parser)
    parser.add_argument("--copy-mib", type=Number(int, 1, 1 << 20, unit="MiB"), metavar="MIB",
                        help="size of the copied buffer (default 1024 on a GPU, 64 on cpu)")
    parser.add_argument("--matmul-n", type=Number(int, 1, 1 << 16), metavar="N",
                        help="square matmul size N×N×N (default 8192 on a GPU, 512 on cpu)")
    add_dtype_argument(parser, "matmul dtype(s) (default bfloat16, float16, float32 on a GPU; float32 on cpu)")
    parser.add_argument("--reps", type=Number(int, 1, 10**6), metavar="N", help="timed repetitions of each measurement (default 30 on a GPU, 5 on cpu)")
    parser.add_argument("--no-save", action="store_true", help="print only; do not write the cache file")
    parser.add_argument("--show", action="store_true",
                        help="print the stored ceilings of this device and measure nothing (with --format json: as JSON)")
    from .output import add_format_argument

    add_format_argument(parser)
    parser.epilog = (
        "stored in $ZLF_CACHE_DIR, else $XDG_CACHE_HOME/zlf, else ~/.cache/zlf, under ceilings/<device>.json;\n"
        "zlf compare and zlf report use it for runs whose meta.json names the same device."
    )


def time_median_ms(backend, fn, reps: int, warmup_s: float) -> tuple:
    """``(median ms, samples)`` of ``fn`` between two backend events, after a timed warm-up.

    The warm-up runs for ``warmup_s`` seconds so that GPU clocks have ramped up.
    """
    fn()
    backend.synchronize()
    end_warmup = time.perf_counter() + warmup_s
    while time.perf_counter() < end_warmup:
        fn()
        backend.synchronize()
    samples = []
    for _ in range(reps):
        start, end = backend.event(), backend.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples), samples


def measure_copy(backend, mib: int, reps: int, warmup_s: float) -> dict:
    import torch

    nbytes = mib * 2**20
    src = torch.ones(nbytes, dtype=torch.uint8, device=backend.device)
    dst = torch.empty_like(src)
    ms, samples = time_median_ms(backend, lambda: dst.copy_(src), reps, warmup_s)
    del src, dst
    return {
        "GB_s": 2 * nbytes / (ms * 1e-3) / 1e9,  # read + write, as ops count their bytes
        "median_ms": ms,
        "spread_pct": 100.0 * (max(samples) - min(samples)) / ms,
        "bytes": nbytes,
        "reps": reps,
    }


def measure_matmul(backend, n: int, dtype: str, reps: int, warmup_s: float) -> dict:
    import torch

    torch_dtype = getattr(torch, dtype)
    a = torch.randn(n, n, device=backend.device).to(torch_dtype)
    b = torch.randn(n, n, device=backend.device).to(torch_dtype)
    out = torch.empty(n, n, dtype=torch_dtype, device=backend.device)
    ms, samples = time_median_ms(backend, lambda: torch.matmul(a, b, out=out), reps, warmup_s)
    del a, b, out
    return {
        "TFLOP_s": 2.0 * n**3 / (ms * 1e-3) / 1e12,
        "median_ms": ms,
        "spread_pct": 100.0 * (max(samples) - min(samples)) / ms,
        "n": n,
        "reps": reps,
    }


def calibrate(backend, copy_mib=None, matmul_n=None, dtypes=None, reps=None) -> ceilings.Ceilings:
    """Measure ``backend``'s ceilings (does not save them)."""
    import torch

    on_host = backend.host_timing
    copy_mib = (64 if on_host else 1024) if copy_mib is None else copy_mib
    matmul_n = (512 if on_host else 8192) if matmul_n is None else matmul_n
    dtypes = list(dtypes or (CPU_DTYPES if on_host else GPU_DTYPES))
    reps = (5 if on_host else 30) if reps is None else reps
    warmup_s = 0.05 if on_host else 0.5
    if copy_mib <= 0 or matmul_n <= 0 or reps <= 0:
        raise UsageError("--copy-mib, --matmul-n and --reps must be positive")
    from .ops import torch_dtype

    for d in dtypes:
        torch_dtype(d)  # one-line error for an unknown dtype name
    try:
        copy = measure_copy(backend, copy_mib, reps, warmup_s)
        backend.free_memory()
        matmuls = {}
        for d in dtypes:
            matmuls[d] = measure_matmul(backend, matmul_n, d, reps, warmup_s)
            backend.free_memory()
    except RuntimeError as exc:
        if backend.is_oom(exc):
            raise UsageError("out of device memory during calibration; pass smaller --copy-mib / --matmul-n") from exc
        raise
    where = "host" if on_host else "device-to-device"
    method = {
        "copy": f"{where} copy of {copy_mib} MiB, bytes read + written, median of {copy['reps']} "
                f"(spread {copy['spread_pct']:.1f}%)",
        "matmul": {d: f"torch.matmul {matmul_n}x{matmul_n}x{matmul_n}, median of {m['reps']} "
                      f"(spread {m['spread_pct']:.1f}%)" for d, m in matmuls.items()},
        "copy_raw": copy,
        "matmul_raw": matmuls,
    }
    environment = {"torch": torch.__version__, "zlf": __version__, "device": backend.device}
    if not on_host:
        # float32 matmul figures mean TF32 or true fp32 depending on these switches.
        environment["allow_tf32"] = bool(getattr(torch.backends.cuda.matmul, "allow_tf32", False))
        environment["fp32_precision"] = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    try:
        environment.update({k: v for k, v in backend.fingerprint().items() if k not in ("device_name", "backend", "timing")})
    except Exception as exc:  # a fingerprint is context, not the measurement
        environment["fingerprint_error"] = str(exc)
    return ceilings.Ceilings(
        device_name=backend.device_name(),
        backend=backend.name,
        bandwidth_GB_s=copy["GB_s"],
        tflops={d: m["TFLOP_s"] for d, m in matmuls.items()},
        measured=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        method=method,
        environment=environment,
    )


def main(args, session) -> int:
    backend = session.choose_backend(args.backend, args.device)
    if args.show:  # the stored ceilings, never a new measurement over them
        stored = ceilings.load(backend.device_name())
        if stored is None:
            raise UsageError(f"no stored ceilings for {backend.device_name()!r} "
                             f"(looked in {ceilings.ceilings_path(backend.device_name())}): run `zlf calibrate` first")
        if args.format == "json":
            print(json.dumps({**stored.to_json(), "path": stored.path}, indent=2, sort_keys=True))
        else:
            print(f"{stored.describe()}\nstored: {stored.path}")
        return 0
    for line in backend.busy_warnings():
        warn(f"{line}; ceilings measured now will be low")
    previous = ceilings.load(backend.device_name())
    result = calibrate(backend, args.copy_mib, args.matmul_n, args.dtype, args.reps)
    path = None if args.no_save else ceilings.save(result)
    if args.format == "json":
        print(json.dumps({**result.to_json(), "path": str(path) if path else None}, indent=2, sort_keys=True))
        return 0
    rows = [["bandwidth", f"{result.bandwidth_GB_s:.4g} GB/s", result.method["copy"]]]
    for d, tf in result.tflops.items():
        rows.append([f"matmul {d}", f"{tf:.4g} TFLOP/s", result.method["matmul"][d]])
    if args.format != "table":
        from .output import render

        print(render(("ceiling", "measured", "how"), rows, args.format))
        return 0
    print(f"device: {result.device_name} (backend {result.backend})")
    print(tabulate(rows, headers=["ceiling", "measured", "how"]))
    if backend.host_timing:
        print("note: cpu backend: host memory copy and torch matmul; these are host figures, for tests and "
              "relative use only")
    if previous is not None:
        print(f"previous: {previous.describe()}")
    print(f"saved: {path}" if path else "not saved (--no-save)")
    return 0
