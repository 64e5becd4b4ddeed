"""Verdicts and the one record a judged case leaves in results.jsonl.

Built in one place for every outcome (the worker's, or the judge's own when the worker died or
ran out of time), so a crashed case reads like any other failed point to compare and report.
"""
from __future__ import annotations

import json
import re
import traceback
from typing import Callable, Optional

import attrs

from zlf.records import STATUS_FAILED, STATUS_OK, PointRecord, Timing

ACCEPTED = "Accepted"
WRONG_ANSWER = "Wrong Answer"
RUNTIME_ERROR = "Runtime Error"
COMPILE_ERROR = "Compile Error"
TIME_LIMIT_EXCEEDED = "Time Limit Exceeded"
#: the package itself failed (genTestCase, baseline ...): never the candidate's fault.
JUDGE_ERROR = "Judge Error"
VERDICTS = (ACCEPTED, WRONG_ANSWER, RUNTIME_ERROR, COMPILE_ERROR, TIME_LIMIT_EXCEEDED, JUDGE_ERROR)
SHORT = {ACCEPTED: "AC", WRONG_ANSWER: "WA", RUNTIME_ERROR: "RE", COMPILE_ERROR: "CE",
         TIME_LIMIT_EXCEEDED: "TLE", JUDGE_ERROR: "JE"}


def timing_to_json(timing: Optional[Timing]) -> Optional[dict]:
    if timing is None:
        return None
    d = attrs.asdict(timing, recurse=False)
    d["samples_ms"] = list(timing.samples_ms)
    d["markers"] = list(timing.markers)
    return d


def timing_from_json(d: Optional[dict]) -> Optional[Timing]:
    return Timing(**d) if d else None


def speedup(baseline: Optional[Timing], candidate: Optional[Timing]) -> Optional[float]:
    if baseline is None or candidate is None or not candidate.value_ms or candidate.value_ms <= 0:
        return None
    return baseline.value_ms / candidate.value_ms


def summary_line(text: str) -> str:
    """The line that says what went wrong: a traceback's last line, a compiler's first error."""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Traceback") or lines[0].endswith(":\n") or "Traceback (most recent call last):" in lines[:3]:
        return lines[-1]
    errors = [l for l in lines if re.search(r"\berror\b", l, re.I) and not l.startswith("$ ")]
    return errors[0] if errors else lines[0]


def case_record(point: dict, verdict: str, text: str = "", timing: Optional[Timing] = None,
                baseline: Optional[Timing] = None, max_rel_err=None, extra=None, markers=()) -> PointRecord:
    """The candidate's point for one case; the baseline's time rides along in ``extra``."""
    accepted = verdict == ACCEPTED
    first_line = summary_line(text)
    judge_fields = {
        "verdict": verdict,
        "case": point.get("case"),
        "arg_shapes": point.get("arg_shapes"),
        "case_seed": point.get("case_seed"),
        "baseline_ms": baseline.value_ms if baseline else None,
        "baseline_timer": baseline.timer if baseline else None,
        "baseline_samples": list(baseline.samples_ms) if baseline else [],
        "speedup": speedup(baseline, timing) if accepted else None,
        "judge_output": text or "",
    }
    # the judge's own fields last: nothing from the candidate's process (the timer's diagnostics,
    # the worker's annotations) can replace them
    fields = {**(timing.extra if timing else {}), **(extra or {}), **judge_fields}
    return PointRecord(
        point=point["id"], op=point["op"], shape=point["shape"], dtype=point["dtype"], variant=point["variant"],
        status=STATUS_OK if accepted else STATUS_FAILED,
        error=None if accepted else (f"{verdict}: {first_line}" if first_line else verdict),
        timer=timing.timer if timing else None, median_ms=timing.value_ms if timing else None,
        samples=timing.samples_ms if timing else (), markers=tuple(markers),
        l2=timing.l2 if timing else None, fallback_reason=timing.fallback_reason if timing else None,
        max_rel_err=max_rel_err, extra=fields,
    )


def serve(ctrl, events, make: Callable, handle: Callable, role: str) -> int:
    """The request loop of a judge child (the worker or the checker): read the first request on
    the control pipe, build the child (``make()``; a failure is a fatal Judge Error event naming
    ``role``), then ``handle(child, request)`` each request until it returns False or the pipe
    closes; ``child.finish()`` always runs. Exit code 3 when the child could not start."""
    first = ctrl.readline()
    if not first:
        return 0
    request = json.loads(first)
    try:
        child = make()
    except Exception:
        events.write(json.dumps({"event": "result", "verdict": JUDGE_ERROR, "fatal": True, "nonce": request.get("nonce"),
                                 "text": f"the judge's {role} failed to start:\n" + traceback.format_exc()}) + "\n")
        return 3
    try:
        while request:
            if not handle(child, request):
                break
            line = ctrl.readline()
            request = json.loads(line) if line else None
    finally:
        child.finish()
    return 0
