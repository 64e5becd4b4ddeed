"""Records that cross process and version boundaries: points, timings, point records, events.

Everything here is a frozen attrs class that serialises to plain JSON; another process (compare,
report, ab) reads these files and never imports the code under test.
"""
from __future__ import annotations

import json
import statistics
from typing import Any, Optional

import attrs

from .redact import redact_text

STATUS_OK = "ok"
STATUS_FAILED = "FAILED"
STATUS_OOM = "OOM"
STATUS_SKIPPED = "skipped"


def is_jsonable(value) -> bool:
    """Whether ``value`` survives ``json.dumps`` (what another process can read back)."""
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


#: parser defaults that wire a command, not options: its handler and what it does
#: (:class:`zlf.options.CommandTraits`). The one list: ``zlf.config.NOT_SETTINGS`` adds ``config``.
COMMAND_WIRING = ("handler", "traits")


def jsonable_options(options) -> dict:
    """The parsed command line without what cannot cross a process boundary (handlers, objects)
    or says how the command was built (:data:`COMMAND_WIRING`)."""
    return {k: v for k, v in sorted(vars(options).items()) if k not in COMMAND_WIRING and is_jsonable(v)}


def shape_str(shape) -> str:
    """``(1024, 512)`` → ``"1024x512"``; the form used in point ids and directory names."""
    return "x".join(str(int(d)) for d in shape) if shape else "scalar"


@attrs.frozen
class Point:
    """One row of every table: (op, shape, dtype[, variant]) with a stable id used to pair A and B."""

    op: str
    shape: tuple = attrs.field(converter=lambda s: tuple(int(d) for d in s))
    dtype: str
    variant: str = ""

    @property
    def id(self) -> str:
        parts = [self.op, shape_str(self.shape), self.dtype]
        if self.variant:
            parts.append(self.variant)
        return "/".join(parts)


@attrs.frozen
class Timing:
    """What a timer measured for one point.

    ``value_ms`` is the median of ``samples_ms`` (a timer whose samples come in whole steps of its
    clock may interpolate it within its step: ``cupti``); ``timer`` names the method (``cuda_event``,
    ``cudagraph``, ``host_wall`` ...) so tables never mix methods silently.
    ``fallback_reason`` is set when the preferred timer could not be used for this point and
    ``markers`` holds the grep-able marker lines that say so.
    """

    value_ms: float
    timer: str
    samples_ms: tuple = attrs.field(converter=tuple, factory=tuple)
    fallback_reason: Optional[str] = None
    markers: tuple = attrs.field(converter=tuple, factory=tuple)
    l2: str = ""
    calls_per_sample: int = 1
    extra: dict = attrs.field(factory=dict)
    #: host wall-clock per call (median, ms), kept by timers whose ``value_ms`` is device time only
    #: (a kernel-activity timer): the host work of a call stays a metric of its own.
    wall_ms: Optional[float] = None

    @classmethod
    def from_samples(cls, samples_ms, timer: str, **kw) -> "Timing":
        samples = [float(s) for s in samples_ms]
        return cls(value_ms=statistics.median(samples), timer=timer, samples_ms=samples, **kw)


def _text(value):
    """A record's text as every reader sees it (the console table, results.jsonl, a received
    record): credentials masked where the record is made, not only where it is written."""
    return redact_text(value) if isinstance(value, str) else value


@attrs.frozen
class PointRecord:
    """One line of results.jsonl. Its texts (an error, a fallback reason, an op's printed
    markers) hold no credential: :func:`zlf.redact.redact_text` is applied as it is made."""

    point: str
    op: str
    shape: tuple = attrs.field(converter=tuple)
    dtype: str
    status: str
    variant: str = ""
    error: Optional[str] = attrs.field(default=None, converter=_text)
    timer: Optional[str] = None
    median_ms: Optional[float] = None
    samples: tuple = attrs.field(converter=tuple, factory=tuple)
    gbps: Optional[float] = None
    tflops: Optional[float] = None
    markers: tuple = attrs.field(converter=lambda lines: tuple(_text(line) for line in lines), factory=tuple)
    l2: Optional[str] = None
    fallback_reason: Optional[str] = attrs.field(default=None, converter=_text)
    max_rel_err: Optional[float] = None
    extra: dict = attrs.field(factory=dict)
    #: host wall-clock per call (ms) when the timer measured device time only (see ``Timing.wall_ms``).
    wall_ms: Optional[float] = None
    #: the device's clock state while the point sampled (backend-defined keys; the cuda backend
    #: writes ``sm_mhz_min``, ``sm_mhz_median``, ``sm_mhz_max``, ``throttle_reasons``, ``source``).
    clock: Optional[dict] = None
    #: ``--check warn``: the reference check's error of a point that was timed anyway (status ok);
    #: tables and ``zlf compare`` mark the point ``UNCHECKED``.
    unchecked: Optional[str] = attrs.field(default=None, converter=_text)

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["shape"] = list(self.shape)
        # 1 ns resolution: device events tick at ~0.5 us, and 10k samples stay a small file.
        d["samples"] = [round(s, 6) for s in self.samples]
        d["markers"] = list(self.markers)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "PointRecord":
        names = {a.name for a in attrs.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        rest = {k: v for k, v in d.items() if k not in names}
        rec = cls(**known)
        if rest:
            rec = attrs.evolve(rec, extra={**rec.extra, **rest})
        return rec


@attrs.frozen
class CompileEvent:
    """A kernel compiled (or loaded from the compiler's disk cache) in this process.

    ``constants`` holds the constexpr values, ``specialization`` the per-argument attributes
    (e.g. ``{"EM": "D"}`` for divisible by 16), ``asm_paths`` maps IR kinds (``ttgir``, ``ptx`` ...)
    to files, ``cache_hit`` whether the disk cache served it.
    """

    name: str
    hash: str = ""
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None
    num_ctas: Optional[int] = None
    maxnreg: Optional[int] = None
    constants: dict = attrs.field(factory=dict)
    signature: dict = attrs.field(factory=dict)
    specialization: dict = attrs.field(factory=dict)
    asm_paths: dict = attrs.field(factory=dict)
    target: str = ""
    cache_hit: bool = False
    source_fn: Any = None
    raw: Any = None


@attrs.frozen
class LaunchEvent:
    """A kernel launch seen by the platform's launch hook during a point's checked call.

    ``hash`` is the compiled variant's cache hash when the platform maps launches to kernels
    (``kernel_load_end_hook``), else empty; ``in_autotune`` is True for launches made by Triton's
    autotuner while it benchmarks configs (a sweep, not the point's own launch).
    """

    name: str
    hash: str = ""
    function: Optional[int] = None
    point: Optional[str] = None
    raw: Any = None
    in_autotune: bool = False


def duplicate_points(records) -> dict:
    """``{point id: count}`` of the ids that more than one record carries: which of them holds
    the time is unknown, so readers pair none of them."""
    counts: dict = {}
    for r in records:
        counts[r.point] = counts.get(r.point, 0) + 1
    return {p: n for p, n in counts.items() if n > 1}
