"""What a comparison can decide on, read from one point record.

* ``time`` (default): the timer's median per call, ms.
* ``cycles``: that median times the SM clock measured while the point sampled (median of the
  readings), in thousands of cycles (ms × MHz = kcycles). A device that holds its work but moves
  its clock (power cap, heat) changes time, not cycles; memory-bound work does not scale with the
  SM clock, so cycles suits compute-bound points.
* ``wall``: host wall-clock per call (``PointRecord.wall_ms``), kept by timers whose time is
  device activity only.

A record without the metric's inputs has no value: the point is left out with the reason
:func:`missing` gives, never filled in from another metric.
"""
from __future__ import annotations

import math

from typing import NamedTuple, Optional

from .backends.base import is_throttled
from .errors import UsageError


class Metric(NamedTuple):
    name: str
    unit: str
    summary: str


METRICS = {
    "time": Metric("time", "ms", "median time per call"),
    "cycles": Metric("cycles", "kcycles", "median time × median SM clock while sampling"),
    "wall": Metric("wall", "ms wall", "host wall-clock per call"),
}
DEFAULT = "time"
NAMES = tuple(METRICS)
#: A and B ran at different clock states when their median SM clocks differ by more than this.
CLOCK_DIFF_PCT = 2.0


def check(name: Optional[str]) -> str:
    name = name or DEFAULT
    if name not in METRICS:
        raise UsageError(f"unknown metric {name!r}; choose one of {', '.join(NAMES)}")
    return name


def unit(name: str) -> str:
    return METRICS[check(name)].unit


def _positive(v) -> Optional[float]:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None  # NaN and infinity are no value


def value(record, metric: str = DEFAULT) -> Optional[float]:
    """The record's value of ``metric``, or None (not measured, not ok, or not positive)."""
    if record is None or record.status != "ok":
        return None
    ms = _positive(record.median_ms)
    if metric == "time":
        return ms
    if metric == "cycles":
        mhz = _positive((record.clock or {}).get("sm_mhz_median"))
        return ms * mhz if ms is not None and mhz is not None else None
    if metric == "wall":
        return _positive(record.wall_ms)
    raise UsageError(f"unknown metric {metric!r}; choose one of {', '.join(NAMES)}")


def missing(record, metric: str = DEFAULT) -> str:
    """Why ``value(record, metric)`` is None, in a few words."""
    if record is None:
        return "no record"
    if record.status != "ok":
        return record.status
    if metric == "cycles" and _positive(record.median_ms) is not None:
        return "no SM clock recorded"
    if metric == "wall":
        return "no wall time recorded (its timer keeps none)"
    return f"no {metric}"


def clock_differs(a, b, pct: float = CLOCK_DIFF_PCT) -> Optional[str]:
    """Why A and B of a point ran at different clock states (median SM clocks more than ``pct``
    apart, or one side throttled and the other not), or None (the same, or unknown)."""
    ca, cb = (getattr(r, "clock", None) if r is not None else None for r in (a, b))
    if not ca or not cb:
        return None
    ta, tb = is_throttled(ca), is_throttled(cb)
    if ta != tb:
        side = "A" if ta else "B"
        reasons = ",".join(r for r in (ca if ta else cb).get("throttle_reasons") or ())
        return f"only {side} throttled ({reasons})"
    ma, mb = _positive(ca.get("sm_mhz_median")), _positive(cb.get("sm_mhz_median"))
    if ma and mb and abs(mb - ma) / ma * 100 > pct:
        return f"SM clock A {ma:.0f} / B {mb:.0f} MHz"
    return None
