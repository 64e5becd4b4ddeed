"""Core's direct timer: device events around every sample, as triton.testing.do_bench does.

Used by default and as the fallback of other timers (e.g. when graph capture fails). The budget
is in milliseconds of device time (warm-up, then repetitions), so a 1 µs kernel gets thousands
of samples and a 10 ms kernel about ten.
"""
from __future__ import annotations

import math
from typing import Optional, Protocol

from .config import MAX_SAMPLES, MIN_SAMPLES, as_budget
from .records import Timing


def flush_policy(options, backend) -> bool:
    """Whether to flush L2 before each sample (:meth:`zlf.config.TimingBudget.flush`)."""
    return as_budget(options).flush(backend)


def budgets(options, backend) -> tuple:
    """``(warmup_ms, rep_ms)`` (:meth:`zlf.config.TimingBudget.budgets`)."""
    return as_budget(options).budgets(backend)


class KernelTimer(Protocol):
    """A kernel-activity timer, offered through the ``kernel_timer`` hook (an extension such as
    ``cupti``) or by a backend itself (:meth:`zlf.backends.Backend.kernel_timer`).

    Each sample is the device time of every kernel one call launched, on any stream, read from
    the platform's activity records: host launch cost and unjoined streams cannot distort it.
    """

    #: what every sample is called in records (``Timing.timer``), e.g. ``cupti``.
    name: str

    def time(self, fn, backend, *, warmup_ms: float, rep_ms: float, flush_l2: bool) -> Optional[Timing]:
        """Time ``fn`` (no arguments, one call = one execution of the point).

        Budgets and L2 policy as :func:`time_direct`; the host wall-clock per call goes into
        ``Timing.wall_ms``. Returns None when the calls launched nothing the tracer saw (the
        caller then uses its own timer).
        """


def time_kernels(kernel_timer, fn, backend, *, warmup_ms: float, rep_ms: float, flush_l2: bool) -> Optional[Timing]:
    """``kernel_timer.time(...)``: the one place core and timer extensions call a kernel timer."""
    return kernel_timer.time(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2)


def sample_counts(fn, backend, flush, warmup_ms: float, rep_ms: float,
                  min_samples: int = MIN_SAMPLES, max_samples: int = MAX_SAMPLES) -> tuple:
    """``(warm-up calls, samples)`` for the budgets, from five calls each with its flush (as the
    real loop pays it; host cost included, so an over-estimate: never more than the budget allows).

    One call is timed alone first: when it already takes ``rep_ms / min_samples`` or more, the
    point gets ``min_samples`` whatever the estimate, and that call is the estimate (a slow call,
    e.g. an interpreted kernel on the cpu backend, is not repeated five times just to learn that).
    Faster calls are estimated from the five as before, the lone call left out.
    """
    start, end = backend.event(), backend.event()
    start.record()
    flush()
    fn()
    end.record()
    backend.synchronize()
    single_ms = start.elapsed_time(end)
    if single_ms * max(1, min_samples) >= rep_ms:
        estimate_ms = max(single_ms, 1e-6)
    else:
        start.record()
        for _ in range(5):
            flush()
            fn()
        end.record()
        backend.synchronize()
        estimate_ms = max(start.elapsed_time(end) / 5, 1e-6)
    return max(1, int(warmup_ms / estimate_ms)), min(max_samples, max(min_samples, int(rep_ms / estimate_ms)))


#: the fewest samples whose median's interval ``--max-noise`` trusts (the 95 % order-statistic
#: interval of a median needs 6 samples to exist at all, and a few dozen to be steady)
NOISE_MIN_SAMPLES = 20
#: share of the ``--rep-ms`` budget ``--max-noise`` always samples before it may stop (nvbench's
#: ``--min-time``): a clock mode that sets in or alternates over the first calls (a power cap
#: under sustained load) is in the median before the noise is trusted
NOISE_MIN_TIME_SHARE = 0.25
#: confidence of the median's interval ``--max-noise`` compares with
NOISE_CONFIDENCE = 0.95
#: what stopped a point's sampling (``Timing.extra["sampling"]["stopped"]``)
STOPPED_NOISE, STOPPED_BUDGET = "noise", "budget"


def halves_moved_pct(samples) -> float:
    """How far apart the medians of the first and the second half of the samples (in call order)
    lie, in percent of the samples' median: the interval of :func:`median_noise_pct` assumes
    independent draws of one distribution, which a series that drifts or changes clock mode is not."""
    import statistics

    n = len(samples)
    mid = statistics.median(samples) if n else 0.0
    if n < 2 or mid <= 0:
        return float("inf")
    return float(100.0 * abs(statistics.median(samples[n // 2:]) - statistics.median(samples[:n // 2])) / mid)


def median_noise_pct(samples) -> float:
    """Half the width of the distribution-free 95 % confidence interval of the samples' median
    (order statistics at binomial ranks, ``scipy.stats.quantile_test``), in percent of the median:
    how far the point's recorded value could move with more samples. Infinite below 6 samples
    (no such interval exists)."""
    from scipy.stats import quantile_test  # only a run with --max-noise pays for scipy.stats

    xs = sorted(float(x) for x in samples)
    n = len(xs)
    mid = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    if n < 6 or mid <= 0:
        return math.inf
    ci = quantile_test(xs, q=mid, p=0.5).confidence_interval(NOISE_CONFIDENCE)
    if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
        return math.inf
    return float(100.0 * (ci.high - ci.low) / (2.0 * mid))


def time_direct(fn, backend, *, warmup_ms: float, rep_ms: float, flush_l2: bool,
                max_samples: int = MAX_SAMPLES, min_samples: int = MIN_SAMPLES,
                max_noise: Optional[float] = None) -> Timing:
    """Time ``fn`` with one event pair per call; L2 flushed before each sample when asked.

    Host launch cost is inside each sample (that is what "direct" means); use a graph timer for
    kernels of a few microseconds.

    ``max_noise`` (``--max-noise``, percent): nvbench's relative-noise stopping rule on the value
    zlf records, the median. Samples come in batches, each doubling the count, from the minimum
    (``min_samples``, :data:`NOISE_MIN_SAMPLES`, one whole cycle of a :class:`Rotation`'s input
    sets, and :data:`NOISE_MIN_TIME_SHARE` of the budget's count: nvbench's ``--min-time``) to the
    ``rep_ms`` budget's count (the maximum, as without it); after each batch, sampling stops once
    :func:`median_noise_pct` is at most ``max_noise`` and the series looks stationary: the
    medians of its first and second halves (:func:`halves_moved_pct`) within ``max_noise`` too
    (the median's interval assumes independent draws; a clock mode that sets in or alternates
    breaks that). The timing's
    ``extra["sampling"]`` says what stopped it (``noise`` or ``budget``), the noise reached and
    the budget's count. Without ``max_noise`` every point samples its whole budget.
    """
    flush = backend.flush_l2 if flush_l2 else (lambda: None)
    fn()
    backend.synchronize()
    n_warmup, n_rep = sample_counts(fn, backend, flush, warmup_ms, rep_ms, min_samples, max_samples)
    for _ in range(n_warmup):
        fn()
    if max_noise is None:
        samples = _sample(fn, backend, flush, n_rep)
        return Timing.from_samples(samples, timer=backend.timer_name, l2="flush" if flush_l2 else "warm")
    cycle = len(fn.calls) if isinstance(fn, Rotation) else 1
    min_time = math.ceil(NOISE_MIN_TIME_SHARE * n_rep)
    target = min(n_rep, max(min_samples, NOISE_MIN_SAMPLES, cycle, min_time))
    samples: list = []
    while True:
        samples += _sample(fn, backend, flush, target - len(samples))
        noise = median_noise_pct(samples)
        if noise <= max_noise and halves_moved_pct(samples) <= max_noise:
            stopped = STOPPED_NOISE
            break
        if len(samples) >= n_rep:
            stopped = STOPPED_BUDGET
            break
        target = min(n_rep, 2 * len(samples))
    moved = halves_moved_pct(samples)
    sampling = {"stopped": stopped, "max_noise_pct": max_noise, "noise_pct": noise if noise != float("inf") else None,
                "halves_moved_pct": moved if moved != float("inf") else None,
                "samples": len(samples), "budget_samples": n_rep}
    return Timing.from_samples(samples, timer=backend.timer_name, l2="flush" if flush_l2 else "warm",
                               extra={"sampling": sampling})


def _sample(fn, backend, flush, n: int) -> list:
    """``n`` samples of ``fn``, one event pair each, read after one synchronisation."""
    starts = [backend.event() for _ in range(n)]
    ends = [backend.event() for _ in range(n)]
    for i in range(n):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    backend.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


# ----------------------------------------------------------------------------- input copies
#: bytes the extra copies of one point's inputs may take together
INPUT_COPIES_BYTES = 1 << 30


def input_copies(inputs, copies: int, max_bytes: int = INPUT_COPIES_BYTES, is_oom=None) -> tuple:
    """``(sets, why)``: ``[inputs, copy, ...]``, at most ``copies`` argument sets, and why fewer
    ('' when none are missing).

    Where a short kernel's inputs land in device memory sets its time by up to a few percent, and
    one allocation is one draw for the whole process (docs/timing.md, "Input copies"): a point whose
    calls cycle through several allocations is timed over several draws. Each copy keeps every
    tensor's storage, offset, size and strides (tensors that share memory share it in the copy
    too), its values and ``requires_grad``; anything that is no tensor is shared. Inputs that are
    part of an autograd graph, or tensors that are not plain strided ones, are not copied.
    """
    import torch

    from .ops import tensors_in

    if copies <= 1:
        return [inputs], ""
    tensors = tensors_in(inputs)
    if not tensors:
        return [inputs], "no tensor among the inputs"
    if any(t.grad_fn is not None for t in tensors):
        return [inputs], "an input is part of an autograd graph"
    if any(t.layout != torch.strided or t.is_nested or t.is_quantized or t.device.type == "meta" for t in tensors):
        return [inputs], "an input is not a plain strided tensor"
    nbytes = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())
    extra = min(copies - 1, max_bytes // max(nbytes, 1))
    if extra < 1:
        return [inputs], f"the inputs take {_mib(nbytes)}, over the copies' {_mib(max_bytes)}"
    sets = [inputs]
    for _ in range(extra):
        try:
            sets.append(_copy(inputs, {}))
        except Exception as exc:  # device memory ran out: time over the sets made so far
            if is_oom is None or not is_oom(exc):
                raise
            return sets, f"device memory held {len(sets)} of {copies} sets"
    why = "" if len(sets) == copies else f"{copies - 1} copies of {_mib(nbytes)} are over the copies' {_mib(max_bytes)}"
    return sets, why


def _mib(nbytes: int) -> str:
    """A byte count in the largest binary unit it fills (``1 GiB``, ``128 MiB``, ``12 KiB``)."""
    from .console import number

    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{number(nbytes / scale, 3)} {unit}"
    return f"{nbytes} B"


def _copy(value, storages: dict):
    import torch

    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        new = storages.get(storage.data_ptr())
        if new is None:
            new = storages[storage.data_ptr()] = storage.clone()
        copy = torch.empty(0, dtype=value.dtype, device=value.device).set_(new, value.storage_offset(), value.size(),
                                                                            value.stride())
        return copy.requires_grad_() if value.requires_grad else copy
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_copy(v, storages) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v, storages) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _copy(v, storages)) for k, v in value.items())
    return value


class Rotation:
    """A no-argument call that runs each of ``calls`` in turn, one per call."""

    def __init__(self, calls: list):
        self.calls = list(calls)
        self._next = 0

    def __call__(self):
        call = self.calls[self._next]
        self._next = (self._next + 1) % len(self.calls)
        return call()
