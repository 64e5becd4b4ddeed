"""Suspiciously fast cases, and times the judge does not trust.

A time is **not trusted** (the case keeps its verdict, loses its time: no speedup, a FAILED
record, exit code 1) when the judge's own clock contradicts it (:func:`clock_bound`), when it is
below the case's memory floor, or when it is suspiciously fast on a case whose input sets repeat
(a cache cannot be excluded there). Otherwise a suspicious time is a note.

A case's *floor* is the time a plain copy takes to move its bytes -- every tensor argument read
once plus every output written once, from the tensors' sizes -- at the copy bandwidth
``zlf calibrate`` measured on this device (:mod:`zlf.ceilings`; no floor when the device was
never calibrated). A candidate below its floor, or more than :data:`BASELINE_FACTOR` times faster
than the baseline, did not necessarily cheat -- data served from L2, a baseline doing far more
work than needed -- but its time deserves a look. The flag is a note, never a verdict.
"""
from __future__ import annotations

from typing import Optional

import attrs

#: more than this many times faster than the baseline is flagged
BASELINE_FACTOR = 100.0


def io_bytes(args) -> int:
    """Bytes a call must move at least: every input read once, every output written once (an
    output is not counted as read: a kernel that only writes it need not)."""
    return sum(int(a.numel()) * int(a.element_size()) for a in args
               if hasattr(a, "element_size") and hasattr(a, "numel"))


def floor_ms(nbytes: Optional[int], bandwidth_GB_s: Optional[float]) -> Optional[float]:
    """Milliseconds to move ``nbytes`` at ``bandwidth_GB_s`` (bytes read + written), or None."""
    if not nbytes or not bandwidth_GB_s or bandwidth_GB_s <= 0:
        return None
    return nbytes / (bandwidth_GB_s * 1e6)


def reasons(candidate_ms, baseline_ms, floor: Optional[float], bandwidth_GB_s=None, nbytes=None, l2=None) -> list:
    """Why a time is suspicious (empty: it is not)."""
    if not candidate_ms or candidate_ms <= 0:
        return []
    out = []
    if floor is not None and candidate_ms < floor:
        warm = "; timed with L2 warm, the data may have come from L2" if l2 == "warm" else ""
        out.append(f"below its memory floor: {candidate_ms:.4g} ms < {floor:.4g} ms to move {nbytes / 1e6:.4g} MB "
                   f"at the {bandwidth_GB_s:.4g} GB/s zlf calibrate measured{warm}")
    if baseline_ms and baseline_ms / candidate_ms > BASELINE_FACTOR:
        out.append(f"{baseline_ms / candidate_ms:.0f}x faster than the baseline")
    return out


def flag(record, nbytes: Optional[int], bandwidth_GB_s: Optional[float]):
    """``record`` with ``extra.io_bytes``, ``extra.floor_ms`` and ``extra.suspicious`` (the reasons;
    empty when the time looks physical, and for a case that was not Accepted)."""
    floor = floor_ms(nbytes, bandwidth_GB_s)
    found = []
    if record.status == "ok":
        found = reasons(record.median_ms, record.extra.get("baseline_ms"), floor, bandwidth_GB_s, nbytes, record.l2)
    extra = {**record.extra, "io_bytes": nbytes, "floor_ms": floor, "suspicious": found}
    return attrs.evolve(record, extra=extra)


def clock_bound(batch_ms, noop_ms, calls: int, slack_ms: float, factor: float) -> dict:
    """What the judge's clock says of a call: the least clocked batch (``calls`` calls on input
    sets never seen before, every output checked) less the least batch of no-op calls, per call.
    A reported time is below what the candidate can honestly take when ``factor`` × it plus
    ``slack_ms`` is still less than that (:func:`trust`)."""
    per_call = max(0.0, (min(batch_ms) - min(noop_ms)) / max(calls, 1))
    return {"batch_ms": [round(t, 6) for t in batch_ms], "noop_ms": [round(t, 6) for t in noop_ms],
            "calls": calls, "per_call_ms": per_call, "slack_ms": slack_ms, "factor": factor,
            "bound_ms": max(0.0, (per_call - slack_ms) / factor)}


#: the finest step of a timer's clock (ms): a time below it is a clock that did not move. Host
#: timers read ``time.perf_counter`` (1 ns); CUDA events resolve about half a microsecond.
TIMER_RESOLUTION_MS = {"cuda_event": 5e-4, "cudagraph": 5e-4}
HOST_RESOLUTION_MS = 1e-6


def resolution_ms(timer) -> float:
    """The finest time ``timer`` can report, in ms."""
    return TIMER_RESOLUTION_MS.get(timer, HOST_RESOLUTION_MS)


def untrusted_reasons(record) -> list:
    """Why an Accepted case's reported time is not trusted (empty: it is)."""
    x = record.extra
    ms = record.median_ms
    if record.status != "ok":
        return []
    if ms is None:  # a timing the judge could not take (negative or non-finite samples) is no time
        rejected = x.get("timing_rejected")
        return [f"the candidate's timing was rejected: {rejected}"] if rejected else []
    if ms < resolution_ms(record.timer):
        return [f"a time of {ms:.4g} ms, below what timer {record.timer or '?'} resolves "
                f"({resolution_ms(record.timer):g} ms): its clock did not move"]
    out = []
    clock = x.get("clock_check")
    if clock and ms < clock["bound_ms"]:
        out.append(f"the judge's clock measured {clock['per_call_ms']:.4g} ms per call on fresh inputs "
                   f"(no-op overhead taken off), more than {clock['factor']:g}x the reported {ms:.4g} ms "
                   f"+ {clock['slack_ms']:g} ms")
    floor = x.get("floor_ms")
    if floor is not None and ms < floor:
        out.append(f"below its memory floor ({ms:.4g} ms < {floor:.4g} ms)")
    total, distinct = x.get("generated_input_sets"), x.get("distinct_input_sets")
    if total and distinct is not None and distinct < total:
        baseline = x.get("baseline_ms")
        if x.get("suspicious") and not out:
            out.append("inputs repeat: caching not excluded, and " + "; ".join(x["suspicious"]))
        elif baseline and ms and baseline / ms > REPEAT_FACTOR and not out:
            out.append(f"inputs repeat: caching not excluded, and {baseline / ms:.0f}x faster than the baseline")
    return out


#: on a case whose inputs repeat, more than this many times faster than the baseline is not trusted
REPEAT_FACTOR = 10.0


def trust(record):
    """``record`` with ``extra.time_trusted`` and ``extra.time_not_trusted`` (the reasons); an
    untrusted time costs the case its speedup and makes the record FAILED (``time not trusted:
    ...``), its verdict stays."""
    why = untrusted_reasons(record)
    extra = {**record.extra, "time_trusted": not why if record.status == "ok" else None, "time_not_trusted": why}
    if not why:
        return attrs.evolve(record, extra=extra)
    extra["speedup"] = None
    return attrs.evolve(record, status="FAILED", error="time not trusted: " + "; ".join(why), extra=extra)


def summary_line(records) -> Optional[str]:
    """``N case(s) suspiciously fast: case 3 (...), ...``, or None when no case is."""
    flagged = [r for r in records if r.extra.get("suspicious")]
    if not flagged:
        return None
    parts = [f"case {r.extra.get('case')} ({'; '.join(r.extra['suspicious'])})" for r in flagged]
    return f"{len(flagged)} case(s) suspiciously fast: " + ", ".join(parts)
