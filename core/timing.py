"""Core's direct timer: device events around every sample, as triton.testing.do_bench does.

Used by default and as the fallback of other timers (e.g. when graph capture fails). The budget
is in milliseconds of device time (warm-up, then repetitions), so a 1 µs kernel gets thousands
of samples and a 10 ms kernel about ten.
"""
from __future__ import annotations

from .records import Timing

MAX_SAMPLES = 10_000
MIN_SAMPLES = 5


def flush_policy(options, backend) -> bool:
    """Whether to flush L2 before each sample: ``--flush-l2`` / ``--no-flush-l2`` or the backend's default."""
    value = getattr(options, "flush_l2", None)
    return backend.flush_l2_default if value is None else bool(value)


def budgets(options, backend) -> tuple:
    warmup = getattr(options, "warmup_ms", None)
    rep = getattr(options, "rep_ms", None)
    return (backend.warmup_ms if warmup is None else warmup, backend.rep_ms if rep is None else rep)


def time_direct(fn, backend, *, warmup_ms: float, rep_ms: float, flush_l2: bool,
                max_samples: int = MAX_SAMPLES, min_samples: int = MIN_SAMPLES) -> Timing:
    """Time ``fn`` with one event pair per call; L2 flushed before each sample when asked.

    Host launch cost is inside each sample (that is what "direct" means); use a graph timer for
    kernels of a few microseconds.
    """
    flush = backend.flush_l2 if flush_l2 else (lambda: None)
    fn()
    backend.synchronize()
    # Estimate one call (with its flush, as the real loop pays it) to size the budgets.
    start, end = backend.event(), backend.event()
    start.record()
    for _ in range(5):
        flush()
        fn()
    end.record()
    backend.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-6)
    n_warmup = max(1, int(warmup_ms / estimate_ms))
    n_rep = min(max_samples, max(min_samples, int(rep_ms / estimate_ms)))
    for _ in range(n_warmup):
        fn()
    starts = [backend.event() for _ in range(n_rep)]
    ends = [backend.event() for _ in range(n_rep)]
    for i in range(n_rep):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    backend.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return Timing.from_samples(samples, timer=backend.timer_name, l2="flush" if flush_l2 else "warm")
