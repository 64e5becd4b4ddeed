"""The CUPTI kernel timer: per call, the device time of every kernel it launched, on any stream.

Each sample is one call (after an L2 flush when asked, as core's direct timer does): its kernels'
device durations, summed, whatever stream they ran on. Calls run back to back when the source
ties every record to the call that launched it (its launch's correlation id); otherwise each is
followed by a device-wide synchronisation. Host launch cost, any synchronisation and the
tracer's own work are outside every duration, so a 2 µs kernel reads 2 µs. Memcpys and memsets
are summed apart and reported; a call that launches no kernel at all is timed by its memory
operations (said in ``extra``).

The point's value is the median of its samples, interpolated within the device timestamps' step
when the samples come in steps (:func:`grouped_median_ms`).

The device is never left idle between the warm-up and the first sample: the tracer starts while
the warm-up still runs, and the traced calls queue behind it, as the graph timer's replays follow
its warm-up. A device held back by its power cap runs a heavy kernel fast for the first tens of
milliseconds after any pause of a millisecond or more, then slower for as long as the load lasts
(an H200's 4096³ fp16 matmul: about 222 µs, then 258–262 µs); a pause there would time the
first mode in some points and the second in others. ``settle_ms`` stretches the warm-up so that
the samples begin in the state the device keeps under load. A point traced again one by one
(below) is warmed up again first: reading the first trace's records left the device idle.

The host wall-clock per call (launches and synchronisation, tracer off) is kept in
``Timing.wall_ms``: for ops whose host work is real (autograd), that is a metric of its own.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Optional

import attrs

from zlf.records import Timing
from zlf.timing import sample_counts

from .activity import group, overlapping, summary

TIMER_NAME = "cupti"
MAX_SAMPLES = 1000
MIN_SAMPLES = 5
#: host wall-clock samples taken after the trace, tracer off
WALL_SAMPLES = 100
#: least time (ms) the warm-up keeps the device loaded before the first sample
SETTLE_MS = 100.0
#: most warm-up calls the stretch may ask for (a call of a few µs, bound by its launch, is no
#: power load worth settling)
MAX_SETTLE_CALLS = 50_000


class CuptiTimer:
    """A :class:`zlf.timing.KernelTimer` over one activity source."""

    name = TIMER_NAME

    def __init__(self, source, max_samples: int = MAX_SAMPLES, min_samples: int = MIN_SAMPLES,
                 settle_ms: float = SETTLE_MS, pause: bool = False):
        self.source = source
        self.max_samples = max_samples
        self.min_samples = min_samples
        self.settle_ms = settle_ms
        #: synchronise between the warm-up and the trace, as this timer did before (for comparisons)
        self.pause = pause

    def time(self, fn, backend, *, warmup_ms: float, rep_ms: float, flush_l2: bool):
        flush = backend.flush_l2 if flush_l2 else None
        fn()
        backend.synchronize()
        # budgets sized as core's direct timer sizes them
        n_warmup, n = sample_counts(fn, backend, flush or (lambda: None), warmup_ms, rep_ms,
                                    self.min_samples, self.max_samples)
        if warmup_ms > 0 and self.settle_ms > warmup_ms:
            n_warmup = max(n_warmup, min(MAX_SETTLE_CALLS, math.ceil(n_warmup * self.settle_ms / warmup_ms)))

        # A source that anchors every record at its launch lets the calls run back to back, as
        # the graph timer's replay and core's event timer run them; otherwise, and when calls
        # run back to back overlapped on the device, each call is synchronised.
        back_to_back = bool(getattr(self.source, "anchors", False))
        records, windows = self._trace(fn, backend, flush, n, n_warmup, back_to_back)
        why = self._not_back_to_back(records, windows, n, flush) if back_to_back else None
        if why:
            # reading the first trace left the device idle: the second is warmed up again
            back_to_back = False
            records, windows = self._trace(fn, backend, flush, n, n_warmup, back_to_back)
        calls, unassigned = group(records, windows)
        calls = calls[1:]
        if not calls or not any(c.kernels or c.memcpys or c.memsets for c in calls):
            return None  # nothing on the device: the caller's own timer decides
        kernels = any(c.kernels for c in calls)
        samples = [(c.kernel_ns if kernels else c.memcpy_ns + c.memset_ns) / 1e6 for c in calls]
        extra = summary(calls, self.source.name)
        extra.update(warmup_calls=n_warmup, dropped_first=1, unassigned_records=unassigned,
                     calls="back to back" if back_to_back else "synchronised one by one")
        if why:
            extra["calls_why"] = why
        if getattr(self.source, "duplicates", 0):
            extra["duplicate_records"] = self.source.duplicates
            extra["duplicates_why"] = ("another CUPTI client in this process left serialised kernel tracing on: "
                                       "kernels reported twice were counted once")
        if getattr(self.source, "clock_why", ""):
            extra["clock_per_ns"] = round(self.source.clock_per_ns, 6)
            extra["clock_why"] = self.source.clock_why
        if not kernels:
            extra["value"] = "memcpy + memset (the call launched no kernel)"
        value_ms, step_ns = grouped_median_ms(samples)
        if step_ns:
            extra["step_ns"] = step_ns
            extra["median"] = (f"samples come in steps of {step_ns} ns (the device's timestamps): the median is "
                               "interpolated within its step (median of grouped data)")
        timing = Timing.from_samples(samples, timer=self.name, l2="flush" if flush_l2 else "warm",
                                     wall_ms=_wall_ms(fn, backend, flush, min(n, WALL_SAMPLES)),
                                     extra={"cupti": extra})
        return attrs.evolve(timing, value_ms=value_ms)

    @staticmethod
    def _not_back_to_back(records, windows, n: int, flush) -> str:
        """Why calls traced back to back cannot be read as such ('' when they can): a record the
        source could not tie to its launch (a runtime it does not trace, such as one linked
        statically into a candidate) may belong to any window, and work that overlapped the next
        flush or call lengthened both."""
        unanchored = sum(1 for r in records if r.anchor_ns is None)
        if unanchored:
            return (f"back to back, {unanchored} of {len(records)} activity records had no launch to tie them to "
                    "a call: traced again, one by one")
        overlaps = overlapping(records, windows)
        if overlaps:
            return (f"back to back, {overlaps} of {2 * (n + 1) if flush else n + 1} flushes and calls began on the "
                    "device before the one before had ended (work on a stream the call does not wait for): traced "
                    "again, one by one")
        return ""

    def _trace(self, fn, backend, flush, n: int, n_warmup: int, back_to_back: bool) -> tuple:
        """``n_warmup`` calls, then ``n + 1`` calls (each after a flush when given) under the
        tracer: records and windows. The tracer starts while the warm-up is still queued (no
        synchronisation between them unless :attr:`pause`). The first traced call is traced too:
        the tracer's own first-launch work must not be a sample."""
        source = self.source
        for _ in range(n_warmup):
            fn()
        if self.pause:
            backend.synchronize()
        source.start()
        try:
            for _ in range(n + 1):
                if flush is not None:
                    with source.mark("flush"):
                        flush()
                        if not back_to_back:
                            backend.synchronize()
                with source.mark("sample"):
                    fn()
                    if not back_to_back:
                        backend.synchronize()
            backend.synchronize()
        finally:
            records, windows = source.stop()
        return records, windows


#: steps a device's timestamps may come in, largest first (an H200's: 32 ns)
STEPS_NS = (1024, 512, 256, 128, 64, 32, 16, 8)
#: how far (ns) a duration may sit from a whole number of steps: converting the device's clock to
#: the host's moves a timestamp by a nanosecond or so (an H200 read 1407 and 1409 for 1408)
STEP_SLACK_NS = 2
#: share of the samples that must sit on whole steps for the step to be taken as the clock's
STEP_SHARE = 0.9


def timestamp_step_ns(samples_ns) -> Optional[int]:
    """The largest of :data:`STEPS_NS` that at least :data:`STEP_SHARE` of the durations are a
    whole number of (within :data:`STEP_SLACK_NS`), with at least two different numbers of steps
    among them; None when there is none (durations with 1 ns resolution, or all equal)."""
    if len(samples_ns) < 3:
        return None
    for step in STEPS_NS:
        on = [v for v in samples_ns if abs(v - step * round(v / step)) <= STEP_SLACK_NS]
        if len(on) >= STEP_SHARE * len(samples_ns) and len({round(v / step) for v in on}) >= 2:
            return step
    return None


def grouped_median_ms(samples_ms) -> tuple:
    """``(median ms, step ns or None)``: the median of samples that come in whole steps.

    Activity timestamps tick in steps (32 ns on an H200), so every duration is a whole number of
    steps (give or take the nanosecond of the clock conversion), and the plain median of a
    point's samples can only move a whole step at a time: 3 % of a 1 µs kernel. Where the samples
    come in steps (:func:`timestamp_step_ns`), each is taken to the nearest whole step and stands
    for the interval of one step around it, and the median is interpolated within its interval
    (``statistics.median_grouped``): it follows the share of samples on either side of a step,
    so a change smaller than a step still moves it. Otherwise the plain median.
    """
    ns = [s * 1e6 for s in samples_ms]
    step = timestamp_step_ns(ns)
    if step is None:
        return statistics.median(samples_ms), None
    snapped = [step * round(v / step) for v in ns]
    return statistics.median_grouped(snapped, interval=step) / 1e6, step


def _wall_ms(fn, backend, flush, n: int) -> float:
    """Median host wall-clock of one call until its work is done (launches + synchronize)."""
    walls = []
    for _ in range(n):
        if flush is not None:
            flush()
        backend.synchronize()
        t0 = time.perf_counter()
        fn()
        backend.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(walls)
