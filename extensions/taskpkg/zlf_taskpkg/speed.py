"""Suspiciously fast cases: faster than the bytes they must move allow, or 100× the baseline.

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


def summary_line(records) -> Optional[str]:
    """``N case(s) suspiciously fast: case 3 (...), ...``, or None when no case is."""
    flagged = [r for r in records if r.extra.get("suspicious")]
    if not flagged:
        return None
    parts = [f"case {r.extra.get('case')} ({'; '.join(r.extra['suspicious'])})" for r in flagged]
    return f"{len(flagged)} case(s) suspiciously fast: " + ", ".join(parts)
