"""Where activity records come from: CUPTI's own Python bindings, or torch's profiler (kineto).

Both read the same CUPTI activity records (kernels, memcpys and memsets with device timestamps).
A source is started once per point, marks host windows around each call, and returns every record
and window when stopped; buffers are flushed only then, outside every timed call, so their
handling never sits between a call's launches (and the durations are device timestamps anyway).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

import attrs

from zlf.errors import one_line as _one_line

from .activity import KERNEL, MEMCPY, MEMSET, ActivityRecord, Window

SOURCES = ("auto", "cupti-python", "torch")
#: bytes of one CUPTI activity buffer; a point's few thousand records fit in one
BUFFER_BYTES = 8 * 1024 * 1024
#: CUPTI timestamps per host nanosecond beyond which they are taken for another unit (1 ± this)
CLOCK_TOLERANCE = 0.005
#: a trace lasts at least this many host ns, and long enough for the host intervals around the two
#: readings of CUPTI's clock to move its rate by at most a tenth of :data:`CLOCK_TOLERANCE`
CLOCK_CHECK_NS = 2_000_000
#: ... and at most this long for it (a host too busy to read both clocks together takes what it got)
CLOCK_CHECK_MAX_NS = 50_000_000


class CuptiPythonSource:
    """``cupti-python`` (module ``cupti``): the Activity API, kernels traced concurrently.

    The runtime and driver API calls are traced too: each device record's anchor is the host
    time of the call that launched it (same correlation id), so a record lands in the window of
    the call that launched it even when the device runs it later, and the timer need not
    synchronise between calls (:attr:`anchors`).

    CUPTI takes one pair of buffer callbacks per process, and another client (torch's profiler)
    may have replaced ours since the last point: they are registered again at every start, while
    no activity kind is enabled.

    Another client may also have left serialised kernel tracing (kind ``KERNEL``) on: CUPTI then
    reports every kernel twice, once per kind. The kind is switched off at every start, and a
    kernel reported twice (under kind ``KERNEL`` for a launch whose kernels also came as
    ``CONCURRENT_KERNEL``, or with the same name, stream and timestamps) is kept once
    (:attr:`duplicates` counts the copies dropped).

    And another client may have left its own timestamp clock on CUPTI. On an H200, after torch's
    profiler had run in the process, every kernel read 2.1× its duration with no record twice:
    CUPTI's timestamps, its own clock and its records alike, then ran at 2.11 per host nanosecond
    (torch's profiler registers a clock of its own with CUPTI, one that counts the host's
    time-stamp counter). So every trace reads CUPTI's clock against the host's at its start and
    its end (at least :data:`CLOCK_CHECK_NS` apart); where they differ by more than
    :data:`CLOCK_TOLERANCE` every timestamp of the trace is divided by CUPTI's rate
    (:attr:`clock_per_ns`, and :attr:`clock_why` says so). The other client's set-up is left as it
    is: it may run again in the same process.
    """

    name = "cupti_python"

    def __init__(self, cupti):
        self._cupti = cupti
        self._records = []  # (ActivityRecord, correlation id, CUPTI activity kind)
        self._launches = {}  # correlation id -> host time of the API call
        self._windows = []
        #: every timestamp is kept relative to this one, in integers until then: CUPTI's are ns
        #: since the epoch (about 2**60), where a float64 steps by 256 ns
        self._base = 0
        kinds = cupti.ActivityKind
        self._kinds = (kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET)
        self._api_kinds = tuple(getattr(kinds, k) for k in ("RUNTIME", "DRIVER") if hasattr(kinds, k))
        self._api_ints = {int(k) for k in self._api_kinds}
        self._concurrent, self._serial = int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL)
        self._kernel_kinds = {self._concurrent, self._serial}
        #: records dropped at the last stop as copies of another (a kernel reported under both kinds)
        self.duplicates = 0
        #: every device record is anchored at its launch: calls need no synchronisation between them
        self.anchors = len(self._api_kinds) == 2
        #: CUPTI timestamps per host nanosecond in the last trace where they were not nanoseconds
        #: (its timestamps were divided by it), else 1.0; and why
        self.clock_per_ns, self.clock_why = 1.0, ""
        self._clock0 = (0, 0, 0)

    def _requested(self):
        return BUFFER_BYTES, 0  # 0: no limit on records per buffer

    def _completed(self, activities) -> None:
        # Copied into plain records here: CUPTI reuses the buffer once this returns.
        cupti = self._cupti
        for a in activities:
            kind = int(a.kind)
            if kind in self._api_ints:
                corr, at = int(a.correlation_id), self._ns(a.start)
                self._launches[corr] = min(at, self._launches.get(corr, at))
                continue
            start, end = self._ns(a.start), self._ns(a.end)
            if kind in self._kernel_kinds:
                record = ActivityRecord(KERNEL, str(a.name), start, end, int(a.stream_id))
            elif kind == int(cupti.ActivityKind.MEMCPY):
                try:
                    what = cupti.ActivityMemcpyKind(a.copy_kind).name
                except Exception:  # an unknown copy kind still counts as a memcpy
                    what = str(a.copy_kind)
                record = ActivityRecord(MEMCPY, f"memcpy {what}", start, end, int(a.stream_id))
            elif kind == int(cupti.ActivityKind.MEMSET):
                record = ActivityRecord(MEMSET, "memset", start, end, int(a.stream_id))
            else:
                continue
            self._records.append((record, getattr(a, "correlation_id", None), kind))

    def _ns(self, timestamp) -> float:
        """A CUPTI timestamp relative to the tracing's start: subtracted as integers, so the
        device's 32 ns steps survive the conversion to float."""
        return float(int(timestamp) - self._base)

    def _clock(self) -> tuple:
        """``(CUPTI timestamp, host ns, host interval around the reading)``: the tightest of five
        readings (a thread held up between the two clocks widens its interval)."""
        get = self._cupti.get_timestamp
        best = None
        for _ in range(5):
            before = time.perf_counter_ns()
            stamp = int(get())
            after = time.perf_counter_ns()
            if best is None or after - before < best[2]:
                best = (stamp, (before + after) // 2, after - before)
        return best

    def start(self) -> None:
        self._cupti.activity_register_callbacks(self._requested, self._completed)
        self._records, self._launches, self._windows = [], {}, []
        self._clock0 = self._clock()
        self._base = self._clock0[0]
        try:  # serialised kernel tracing another client left on (see the class's docstring)
            self._cupti.activity_disable(self._cupti.ActivityKind.KERNEL)
        except Exception:  # not enabled, or a CUPTI that refuses: the records are deduplicated anyway
            pass
        for kind in self._kinds + self._api_kinds:
            self._cupti.activity_enable(kind)

    @contextlib.contextmanager
    def mark(self, label: str):
        t0 = self._ns(self._cupti.get_timestamp())  # the clock of every activity record
        yield
        self._windows.append(Window(label, t0, self._ns(self._cupti.get_timestamp())))

    def stop(self) -> tuple:
        try:
            self._cupti.activity_flush_all(1)  # 1: forced, incomplete buffers too
        finally:
            for kind in self._kinds + self._api_kinds:
                self._cupti.activity_disable(kind)
        launches = self._launches
        # a launch whose kernels came as kind CONCURRENT_KERNEL (the kind enabled here) may have
        # them again as kind KERNEL (another client's): those copies go, whatever their timestamps
        concurrent = {c for _, c, kind in self._records if kind == self._concurrent and c is not None}
        seen, kept = set(), []
        for r, c, kind in self._records:
            key = (r.kind, r.name, r.start_ns, r.end_ns, r.stream)
            if key in seen or (kind == self._serial and c in concurrent):  # one kernel, reported twice
                continue
            seen.add(key)
            kept.append(attrs.evolve(r, anchor_ns=launches[c]) if c is not None and c in launches else r)
        self.duplicates = len(self._records) - len(kept)
        records = kept
        windows = self._windows
        self._records, self._launches, self._windows = [], {}, []
        return self._in_ns(records, windows)

    def _in_ns(self, records, windows) -> tuple:
        """The trace's timestamps in nanoseconds: divided by CUPTI's rate where it is not 1."""
        stamp0, host0, width0 = self._clock0
        while True:  # a trace too short to read the rate to a tenth of the tolerance is stretched
            while time.perf_counter_ns() - host0 < CLOCK_CHECK_NS:
                pass
            stamp1, host1, width1 = self._clock()
            if (width0 + width1) / 2 <= (host1 - host0) * CLOCK_TOLERANCE / 10 or host1 - host0 > CLOCK_CHECK_MAX_NS:
                break
        rate = (stamp1 - stamp0) / (host1 - host0)
        if abs(rate - 1.0) <= CLOCK_TOLERANCE:
            self.clock_per_ns, self.clock_why = 1.0, ""
            return records, windows
        self.clock_per_ns = rate
        self.clock_why = (f"CUPTI's timestamps ran at {rate:.4g} per host nanosecond (another CUPTI client in this "
                          "process, such as torch's profiler, left a clock of its own on CUPTI): every timestamp "
                          "was divided by that rate")

        def ns(value):
            return None if value is None else value / rate

        records = [attrs.evolve(r, start_ns=ns(r.start_ns), end_ns=ns(r.end_ns), anchor_ns=ns(r.anchor_ns))
                   for r in records]
        windows = [attrs.evolve(w, start_ns=ns(w.start_ns), end_ns=ns(w.end_ns)) for w in windows]
        return records, windows


_TRACE_KINDS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET}
_HOST_API = ("cuda_runtime", "cuda_driver")


def records_from_trace(events) -> tuple:
    """Records and windows from a kineto chrome trace's ``traceEvents`` (timestamps in µs).

    A device record's anchor is the host time of the runtime call with the same correlation id,
    so it lands in the window of the call that launched it whatever the clock conversion.
    """
    launches = {}
    for e in events:
        if e.get("cat") in _HOST_API and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = float(e["ts"]) * 1e3
    records, windows = [], []
    for e in events:
        cat = e.get("cat")
        if cat in _TRACE_KINDS and "dur" in e:
            start = float(e["ts"]) * 1e3
            args = e.get("args", {})
            records.append(ActivityRecord(_TRACE_KINDS[cat], str(e.get("name", "")), start, start + float(e["dur"]) * 1e3,
                                          args.get("stream"), launches.get(args.get("correlation"))))
        elif cat == "user_annotation" and str(e.get("name", "")).startswith("zlf_") and "dur" in e:
            start = float(e["ts"]) * 1e3
            windows.append(Window(e["name"][len("zlf_"):], start, start + float(e["dur"]) * 1e3))
    return records, windows


class TorchProfilerSource:
    """torch's profiler (kineto over CUPTI); host windows are ``record_function`` ranges."""

    name = "torch_profiler"
    #: device records are anchored at the runtime or driver call that launched them (the trace's
    #: correlation ids): calls need no synchronisation between them
    anchors = True

    def __init__(self):
        self._prof = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        # CPU activity records the annotations and the runtime calls that anchor each kernel
        self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        self._prof.__enter__()

    def mark(self, label: str):
        from torch.profiler import record_function

        return record_function(f"zlf_{label}")

    def stop(self) -> tuple:
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
        return records_from_trace(events)


def make_source(choice: str = "auto") -> tuple:
    """``(source, None)``, or ``(None, one line saying why there is none)``; never raises."""
    reasons = []
    if choice in ("auto", "cupti-python"):
        try:
            from cupti import cupti

            cupti.get_timestamp()  # loads libcupti: a missing library fails here, not mid-run
            return CuptiPythonSource(cupti), None
        except Exception as exc:  # absent module, absent libcupti, driver too old: all mean "not here"
            reasons.append(f"cupti-python unusable ({_one_line(exc)})")
    if choice in ("auto", "torch"):
        try:
            import torch
            from torch.profiler import ProfilerActivity, supported_activities

            if torch.cuda.is_available() and ProfilerActivity.CUDA in supported_activities():
                return TorchProfilerSource(), None
            reasons.append("torch's profiler has no CUDA activity here")
        except Exception as exc:  # a torch without a profiler is "not here" as well
            reasons.append(f"torch's profiler unusable ({_one_line(exc)})")
    return None, "; ".join(reasons)

