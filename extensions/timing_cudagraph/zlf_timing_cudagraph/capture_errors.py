"""Why a graph capture failed, in one short word, and the marker line that says so.

The word goes into ``reason=`` of ``BENCHMARK_DIRECT_NO_CUDAGRAPH``, so a user can
grep a run for every point timed directly and see at a glance what to fix in the callable.
CUDA reports most capture failures as one generic error ("operation failed due to a previous
error during capture"), so the cause is read from the exception chain *and* from the Python line
that raised it (``.item()``, ``synchronize()``, ``nonzero`` ...).
"""
from __future__ import annotations

import linecache
import os
import re
from typing import Optional

from zlf.errors import one_line as _one_line

MARKER = "BENCHMARK_DIRECT_NO_CUDAGRAPH"

#: every reason this extension writes, with what it means (docs/timing.md repeats this table).
REASONS = {
    "host_sync": "the callable waits for the device (.item(), synchronize(), nonzero and other data-dependent shapes)",
    "device_to_host_copy": "the callable copies device memory to the host (.cpu(), .tolist(), .numpy())",
    "illegal_stream_use": "the callable uses the legacy default stream or mixes a capturing stream with uncaptured work",
    "unjoined_stream_work": "work on another stream is not joined back into the capture (missing from the graph)",
    "no_device_work": "the call launches no device work (a view or metadata-only op; seen by the kernel-activity timer): host time is all it has",
    "capture_invalidated": "the capture was invalidated by an earlier error whose cause could not be read",
    "context_poisoned": "an earlier failed capture left this process unable to capture",
    "probe_error": "the child-process capture probe could not run (see the record's detail)",
    "unsupported": "the backend cannot capture graphs for this point",
    "other": "any other error raised during capture",
}

# Messages torch / CUDA give for one cause, checked on every exception of the chain.
_MESSAGE_RULES = (
    ("device_to_host_copy", re.compile(r"Cannot copy between CPU and \w+ tensors during \w+ graph capture", re.I)),
    ("unjoined_stream_work", re.compile(r"StreamCaptureUnjoined|capture sequence contains a fork that was not joined", re.I)),
    ("illegal_stream_use", re.compile(
        r"StreamCaptureImplicit|StreamCaptureIsolation|StreamCaptureMerge|StreamCaptureWrongThread"
        r"|legacy stream depend on a capturing blocking stream|dependency created on uncaptured work"
        r"|must be captured on a non-default stream|Capture must end on the same stream"
        r"|merge of two independent capture sequences|capture sequence from another thread", re.I)),
    ("context_poisoned", re.compile(r"captures_underway", re.I)),
)

# What the raising Python line (or function) shows, checked on the innermost frames outside zlf.
_SOURCE_RULES = (
    ("host_sync", re.compile(r"\.item\(\)|\bsynchronize\(|\bnonzero\b|\bmasked_select\b|\bunique\b"
                             r"|\brepeat_interleave\b|\bargwhere\b|\.any\(\)\s*:|\.all\(\)\s*:|\bis_nonzero\b")),
    ("device_to_host_copy", re.compile(r"\.cpu\(\)|\.tolist\(\)|\.numpy\(\)|\.to\(\s*['\"]cpu['\"]|device\s*=\s*['\"]cpu['\"]")),
)
_SYNC_FUNCTIONS = {"synchronize", "item", "_local_scalar_dense", "nonzero", "wait"}
_COPY_FUNCTIONS = {"cpu", "tolist", "numpy"}

# Generic CUDA errors, last resort.
_GENERIC_RULES = (
    ("host_sync", re.compile(r"StreamCaptureUnsupported|operation not permitted when stream is capturing", re.I)),
    ("capture_invalidated", re.compile(r"StreamCaptureInvalidated|previous error during capture|capture.*invalidated", re.I)),
)

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


class CaptureFailure(Exception):
    """A capture attempt failed: ``reason`` is one key of :data:`REASONS`, ``detail`` one line."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def marker_line(op: str, point_id: str, reason: str, timer: str = "") -> str:
    """The grep-able line ``BENCHMARK_DIRECT_NO_CUDAGRAPH op=.. point=.. reason=..``, then
    ``timer=..`` naming the timer that measured the point instead (``cupti``, ``cuda_event`` ...)."""
    line = f"{MARKER} op={op} point={point_id} reason={reason}"
    return f"{line} timer={timer}" if timer else line


def _chain(exc: BaseException) -> list:
    """The exception and everything it was raised from / during, root cause first."""
    seen, out = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out[::-1]


def _frames(exc: BaseException) -> list:
    """(filename, lineno, function, source line) of the traceback, innermost first, outside this package."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((code.co_filename, tb.tb_lineno, code.co_name,
                       linecache.getline(code.co_filename, tb.tb_lineno).strip()))
        tb = tb.tb_next
    return [f for f in reversed(frames) if not os.path.abspath(f[0]).startswith(_OWN_DIR)]


def _from_source(exc: BaseException) -> Optional[tuple]:
    for filename, lineno, function, line in _frames(exc)[:3]:
        where = f"{os.path.basename(filename)}:{lineno}"
        if function in _SYNC_FUNCTIONS:
            return "host_sync", f"{function}() at {where}"
        if function in _COPY_FUNCTIONS:
            return "device_to_host_copy", f"{function}() at {where}"
        for reason, pattern in _SOURCE_RULES:
            if pattern.search(line):
                return reason, f"`{line[:80]}` at {where}"
    return None


def classify(exc: BaseException) -> CaptureFailure:
    """Turn an exception raised while capturing into a :class:`CaptureFailure`."""
    if isinstance(exc, CaptureFailure):
        return exc
    chain = _chain(exc)
    detail = _one_line(chain[0])
    for reason, pattern in _MESSAGE_RULES:
        for e in chain:
            if pattern.search(str(e)):
                return CaptureFailure(reason, _one_line(e))
    for e in chain:
        found = _from_source(e)
        if found:
            reason, where = found
            return CaptureFailure(reason, f"{where}: {detail}")
    for reason, pattern in _GENERIC_RULES:
        for e in chain:
            if pattern.search(str(e)):
                return CaptureFailure(reason, _one_line(e))
    return CaptureFailure("other", detail)
