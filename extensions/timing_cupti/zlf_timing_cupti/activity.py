"""Activity records to per-call samples: which records belong to which call, and what they add up to.

Pure functions over plain records, so the grouping is tested without a GPU. A *window* is the host
interval the timer marked around one call (``sample``) or one L2 flush (``flush``), in the records'
own clock; a record belongs to the window holding its anchor (the host time of its launch when
the source knows it, else the middle of its device interval) or, when clock conversion puts it
just outside every window, to the nearest one.
"""
from __future__ import annotations

import bisect
import statistics
from typing import Optional

import attrs

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"
KINDS = (KERNEL, MEMCPY, MEMSET)
#: names kept per point in ``extra`` (a call launching hundreds of kernels keeps the first ones)
MAX_NAMES = 20
NAME_CHARS = 200
#: how far outside the first and last window a record may lie and still count (clock conversion
#: between the device and the host is good to about a microsecond; this is generous)
SLACK_NS = 50_000.0


@attrs.frozen
class ActivityRecord:
    """One device activity: a kernel, a memcpy or a memset, with device timestamps in ns."""

    kind: str
    name: str
    start_ns: float
    end_ns: float
    stream: Optional[int] = None
    #: host time of the launch in the same clock, when the source correlates it (torch's trace)
    anchor_ns: Optional[float] = None

    @property
    def duration_ns(self) -> float:
        return max(0.0, self.end_ns - self.start_ns)

    @property
    def at_ns(self) -> float:
        return self.anchor_ns if self.anchor_ns is not None else (self.start_ns + self.end_ns) / 2


@attrs.frozen
class Window:
    """A host interval the timer marked: ``label`` is ``sample`` or ``flush``."""

    label: str
    start_ns: float
    end_ns: float


@attrs.frozen
class CallActivity:
    """What one call launched: totals per kind, the names in launch order, the device span."""

    kernel_ns: float = 0.0
    kernels: int = 0
    memcpy_ns: float = 0.0
    memcpys: int = 0
    memset_ns: float = 0.0
    memsets: int = 0
    span_ns: float = 0.0
    names: tuple = ()
    streams: int = 0

    @classmethod
    def of(cls, records) -> "CallActivity":
        records = sorted(records, key=lambda r: r.start_ns)
        total = {k: 0.0 for k in KINDS}
        count = {k: 0 for k in KINDS}
        for r in records:
            total[r.kind] += r.duration_ns
            count[r.kind] += 1
        span = (max(r.end_ns for r in records) - min(r.start_ns for r in records)) if records else 0.0
        return cls(kernel_ns=total[KERNEL], kernels=count[KERNEL], memcpy_ns=total[MEMCPY], memcpys=count[MEMCPY],
                   memset_ns=total[MEMSET], memsets=count[MEMSET], span_ns=span,
                   names=tuple(r.name for r in records if r.kind == KERNEL),
                   streams=len({r.stream for r in records if r.stream is not None}))


def _distance(at: float, w: Window) -> float:
    return 0.0 if w.start_ns <= at <= w.end_ns else min(abs(at - w.start_ns), abs(at - w.end_ns))


def _buckets(records, windows) -> tuple:
    """``(windows in start order, the records of each, how many fell outside every window)``."""
    windows = sorted(windows, key=lambda w: w.start_ns)
    if not windows:
        return [], [], len(list(records))
    starts = [w.start_ns for w in windows]
    first, last = windows[0].start_ns - SLACK_NS, max(w.end_ns for w in windows) + SLACK_NS
    buckets = [[] for _ in windows]
    unassigned = 0
    for r in records:
        at = r.at_ns
        if not first <= at <= last:
            unassigned += 1
            continue
        i = bisect.bisect_right(starts, at) - 1
        candidates = [j for j in (i - 1, i, i + 1) if 0 <= j < len(windows)]
        best = min(candidates, key=lambda j: _distance(at, windows[j]))
        buckets[best].append(r)
    return windows, buckets, unassigned


def group(records, windows) -> tuple:
    """Records per ``sample`` window, in window order.

    :return: ``(calls, unassigned)``: a :class:`CallActivity` per sample window, and how many
        records fell before the first or after the last window (activity of no marked call).
    """
    windows, buckets, unassigned = _buckets(records, windows)
    calls = [CallActivity.of(b) for w, b in zip(windows, buckets) if w.label == "sample"]
    return calls, unassigned


def overlapping(records, windows) -> int:
    """How many windows' device work began before an earlier window's work had ended: calls run
    back to back must not share the device (a call's side-stream work nobody waits for would run
    beside the next flush or call and lengthen both)."""
    windows, buckets, _ = _buckets(records, windows)
    count, end = 0, None
    for bucket in buckets:
        if not bucket:
            continue
        if end is not None and min(r.start_ns for r in bucket) < end:
            count += 1
        last = max(r.end_ns for r in bucket)
        end = last if end is None else max(end, last)
    return count


def _median(values) -> float:
    return statistics.median(values) if values else 0.0


def summary(calls, source: str) -> dict:
    """Per-point description for the record's ``extra`` (medians per call; names of one call)."""
    kernels = [c.kernels for c in calls]
    typical = int(_median(kernels))
    names = next((c.names for c in calls if c.kernels == typical), calls[0].names if calls else ())
    return {
        "source": source,
        "sample": "sum of the device durations of every kernel one call launched, on any stream",
        "samples": len(calls),
        "kernels_per_call": typical,
        "kernels_per_call_range": [min(kernels), max(kernels)] if kernels else [0, 0],
        "kernel_names": [n[:NAME_CHARS] for n in names[:MAX_NAMES]],
        "memcpy_ms": round(_median([c.memcpy_ns for c in calls]) / 1e6, 6),
        "memcpy_per_call": int(_median([c.memcpys for c in calls])),
        "memset_ms": round(_median([c.memset_ns for c in calls]) / 1e6, 6),
        "memset_per_call": int(_median([c.memsets for c in calls])),
        "span_ms": round(_median([c.span_ns for c in calls]) / 1e6, 6),
        "streams": int(_median([c.streams for c in calls])),
    }
