"""The ``cupti`` extension: kernel time from activity records, and its place among the timers.

No CUPTI here: a fake activity source stands in for it. Its "kernels" are records a fake op
appends at a fake device clock inside the window the timer marked, so the grouping per call, the
kernel / memcpy / memset split, the names, the dropped first call, the fallback selection and the
marker lines are exercised on CPU. GPU tests (``-m gpu``) run the real thing.
"""
from __future__ import annotations

import argparse
import contextlib
import enum
import json
import time
import types
from pathlib import Path

import attrs
import pytest
import torch

import zlf
from zlf.backends import CpuBackend
from zlf.errors import UsageError
from zlf.plugins import Hooks, Selection, build_plugin_manager
from zlf.records import Point
from zlf_timing_cupti import sources
from zlf_timing_cupti import timer as timer_module
from zlf_timing_cupti.activity import (KERNEL, MEMCPY, MEMSET, SLACK_NS, ActivityRecord, CallActivity, Window, group,
                                       overlapping)
from zlf_timing_cupti.plugin import CuptiPlugin
from zlf_timing_cupti.sources import records_from_trace
from zlf_timing_cupti.timer import CuptiTimer, grouped_median_ms, timestamp_step_ns

from zlf.testing import read_records, run_dir_from

REPO = Path(__file__).resolve().parents[3]


def graph_timer():
    """The cudagraph extension's timer, for the tests of the two timers together (skipped
    where that extension is not installed)."""
    return pytest.importorskip("zlf_timing_cudagraph.plugin").CudaGraphTimer()


# ----------------------------------------------------------------------------- the fake tracer
class FakeSource:
    """Activity records at a fake device clock: ``launch`` appends one where the call is now."""

    name = "fake_source"

    def __init__(self):
        self.clock = 0.0
        self.tracing = False
        self.records, self.windows = [], []
        self.starts = self.stops = 0

    def launch(self, kind, name, duration_ns, stream=7):
        self.clock += 100.0  # launch latency: the device starts a little after the host
        if self.tracing:
            self.records.append(ActivityRecord(kind, name, self.clock, self.clock + duration_ns, stream))
        self.clock += duration_ns

    def start(self):
        self.tracing = True
        self.starts += 1
        self.records, self.windows = [], []

    @contextlib.contextmanager
    def mark(self, label):
        t0 = self.clock
        self.clock += 10.0
        yield
        self.clock += 10.0
        self.windows.append(Window(label, t0, self.clock))

    def stop(self):
        self.tracing = False
        self.stops += 1
        return self.records, self.windows


class TracedBackend(CpuBackend):
    """The cpu backend (host events) whose L2 flush launches a kernel of its own, and which
    speaks CUPTI as far as the extension can tell."""

    activity_api = "cupti"

    def __init__(self, source):
        super().__init__(0)
        self.source = source

    def flush_l2(self):
        self.source.launch(KERNEL, "flush_kernel", 5_000)


def two_kernels_and_a_copy(source, first_ns=2_000, second_ns=3_000):
    def fn():
        source.launch(KERNEL, "softmax_kernel", first_ns, stream=7)
        source.launch(MEMCPY, "memcpy DTOH", 700, stream=7)
        source.launch(KERNEL, "reduce_kernel", second_ns, stream=9)  # another stream: still counted
    return fn


def _time(source, fn, flush_l2=False, rep_ms=5.0):
    return CuptiTimer(source).time(fn, TracedBackend(source), warmup_ms=1.0, rep_ms=rep_ms, flush_l2=flush_l2)


# ----------------------------------------------------------------------------- the timer
def test_a_sample_is_the_sum_of_every_kernel_of_one_call_on_any_stream():
    source = FakeSource()
    timing = _time(source, two_kernels_and_a_copy(source))
    assert timing.timer == "cupti" and timing.l2 == "warm"
    assert set(timing.samples_ms) == {0.005}  # 2 µs + 3 µs of kernels; the memcpy is not in it
    info = timing.extra["cupti"]
    assert info["kernels_per_call"] == 2 and info["kernel_names"] == ["softmax_kernel", "reduce_kernel"]
    assert info["memcpy_per_call"] == 1 and info["memcpy_ms"] == 0.0007
    assert info["memset_per_call"] == 0 and info["streams"] == 2
    assert info["source"] == "fake_source" and info["unassigned_records"] == 0
    assert info["samples"] == len(timing.samples_ms) >= 5
    assert timing.wall_ms is not None and timing.wall_ms >= 0
    assert source.starts == source.stops == 1


def test_flush_kernels_are_not_part_of_any_call():
    source = FakeSource()
    timing = _time(source, two_kernels_and_a_copy(source), flush_l2=True)
    assert timing.l2 == "flush" and set(timing.samples_ms) == {0.005}
    assert "flush_kernel" not in timing.extra["cupti"]["kernel_names"]


class LaggingSource(FakeSource):
    """A device that runs each kernel well after its launch (the host is already in the next
    call's window), and a tracer that knows which launch each record came from."""

    anchors = True
    #: the device's own clock: it runs one thing at a time, in launch order
    device = 0.0
    #: a kernel that runs beside the next one (work on a stream nobody waits for)
    beside = False

    def launch(self, kind, name, duration_ns, stream=7):
        self.clock += 100.0
        if self.tracing:
            host = self.clock
            start = max(self.device, host + 50_000)
            self.records.append(ActivityRecord(kind, name, start, start + duration_ns, stream, host))
            self.device = start if self.beside else start + duration_ns


class CountingBackend(TracedBackend):
    """Counts the synchronisations made while the tracer runs."""

    def __init__(self, source):
        super().__init__(source)
        self.syncs_traced = 0

    def synchronize(self):
        self.syncs_traced += self.source.tracing
        # the host waits until the device has run everything launched
        self.source.clock = max(self.source.clock, getattr(self.source, "device", 0.0))


def test_calls_run_back_to_back_when_every_record_is_anchored_at_its_launch():
    """No synchronisation between traced calls (the graph timer's replay and core's event timer
    run calls back to back; a synchronise after each lets the GPU idle between kernels, and a
    power-capped H200 then reads a 4096³ matmul 5-15 % slower), and each call still gets its own
    kernels."""
    source = LaggingSource()
    backend = CountingBackend(source)
    calls = []

    def fn():
        calls.append(source.tracing)
        source.launch(KERNEL, "k", 1_000 + 1_000 * (calls.count(True) % 2))

    # settle_ms=0: fn counts its calls in a list, and a settled warm-up would be 50,000 of them
    timing = CuptiTimer(source, settle_ms=0).time(fn, backend, warmup_ms=1.0, rep_ms=5.0, flush_l2=True)
    synchronised = CountingBackend(FakeSource())  # a source without anchors: one by one, as before
    CuptiTimer(synchronised.source).time(lambda: synchronised.source.launch(KERNEL, "k", 1_000), synchronised,
                                         warmup_ms=1.0, rep_ms=5.0, flush_l2=True)
    assert synchronised.syncs_traced > 10
    assert calls.count(True) >= 6
    assert backend.syncs_traced == 1  # once, before the tracer stops; not after every flush and call
    info = timing.extra["cupti"]
    assert info["calls"] == "back to back" and "calls_why" not in info and info["unassigned_records"] == 0
    assert sorted(set(timing.samples_ms)) == [0.001, 0.002]  # each call its own kernel, never two


class SequenceBackend(TracedBackend):
    """Writes down what the timer does, in order: calls (traced or not) and synchronisations."""

    def __init__(self, source):
        super().__init__(source)
        self.steps = []

    def synchronize(self):
        self.steps.append("sync")


@pytest.fixture
def fixed_budget(monkeypatch):
    """The budget's estimate (fake calls timed on the host, which a loaded machine slows) fixed at
    4 warm-up calls and 5 samples: counts of calls are the timer's, never the machine's."""
    monkeypatch.setattr(timer_module, "sample_counts", lambda *args, **kwargs: (4, 5))


@pytest.mark.usefixtures("fixed_budget")
def test_the_device_is_never_left_idle_between_the_warm_up_and_the_first_sample():
    """A power-capped device runs a heavy kernel faster for tens of ms after any pause of a
    millisecond or more (an H200's 4096³ matmul: 222 µs, then 258–262 µs under load): a
    synchronisation between the warm-up and the trace timed the fast mode in some points and the
    slow one in others (spread over processes 9.1 %, against the graph timer's 1.2 %). The tracer
    starts while the warm-up is queued, and no synchronisation comes between them."""
    source = FakeSource()
    backend = SequenceBackend(source)

    def fn():
        backend.steps.append("traced" if source.tracing else "call")
        source.launch(KERNEL, "k", 1_000)

    CuptiTimer(source, settle_ms=0).time(fn, backend, warmup_ms=1.0, rep_ms=2.0, flush_l2=False)
    first_traced = backend.steps.index("traced")
    assert backend.steps[first_traced - 1] == "call"  # the warm-up's last call, then the trace at once
    assert backend.steps[:first_traced].count("call") > 3

    paused = SequenceBackend(source)  # the former design, kept for comparisons: the pause is there
    fn_paused = lambda: (paused.steps.append("traced" if source.tracing else "call"), source.launch(KERNEL, "k", 1_000))  # noqa: E731
    CuptiTimer(source, settle_ms=0, pause=True).time(fn_paused, paused, warmup_ms=1.0, rep_ms=2.0, flush_l2=False)
    assert paused.steps[paused.steps.index("traced") - 1] == "sync"


@pytest.mark.usefixtures("fixed_budget")
def test_a_point_traced_again_one_by_one_is_warmed_up_again_first():
    """Reading the back-to-back trace's records leaves the device idle; a second trace (one by
    one, because a record had no launch to tie it to) that began at once would start in the
    power-capped device's fast mode. It gets the same warm-up as the first, with no pause."""
    source = LaggingSource()
    backend = SequenceBackend(source)

    def synchronize():  # written down, and the host waits for the device (as CountingBackend)
        backend.steps.append("sync")
        source.clock = max(source.clock, source.device)
    backend.synchronize = synchronize

    def fn():
        backend.steps.append("traced" if source.tracing else "call")
        source.launch(KERNEL, "k", 2_000)
        if source.tracing:  # a runtime the tracer does not see: no anchor, so traced again
            source.records[-1] = attrs.evolve(source.records[-1], anchor_ns=None)

    timing = CuptiTimer(source, settle_ms=0).time(fn, backend, warmup_ms=1.0, rep_ms=2.0, flush_l2=False)
    assert timing.extra["cupti"]["calls"] == "synchronised one by one"
    steps = backend.steps
    first = steps.index("traced")
    warm_up = steps[:first].count("call")
    end_of_first = first
    while steps[end_of_first] == "traced":  # back to back: no synchronisation inside the trace
        end_of_first += 1
    second = steps.index("traced", end_of_first)
    between = steps[end_of_first:second]
    n_warmup = timing.extra["cupti"]["warmup_calls"]
    assert n_warmup > 3 and warm_up >= n_warmup and between.count("call") == n_warmup
    assert between[-1] == "call"  # the tracer starts on the queued warm-up, no synchronisation


@pytest.mark.usefixtures("fixed_budget")
def test_the_warm_up_is_stretched_to_settle_ms_of_load_within_a_bound():
    """4 warm-up calls for 1 ms (fixed_budget): the stretch is the timer's arithmetic, not two
    estimates a loaded machine makes differently."""

    def warmup_calls(settle_ms, warmup_ms=1.0):
        source = FakeSource()
        timing = CuptiTimer(source, settle_ms=settle_ms).time(lambda: source.launch(KERNEL, "k", 1_000),
                                                              TracedBackend(source), warmup_ms=warmup_ms,
                                                              rep_ms=2.0, flush_l2=False)
        return timing.extra["cupti"]["warmup_calls"]

    assert warmup_calls(0) == 4  # no settling asked: the budget's own
    assert warmup_calls(20.0) == 4 * 20  # 20 ms of load against 1 ms of warm-up
    assert warmup_calls(0.5) == 4  # less than the warm-up already is: never shortened
    assert warmup_calls(1e9) == timer_module.MAX_SETTLE_CALLS  # bounded: tiny calls are no power load


def test_calls_that_overlap_on_the_device_back_to_back_are_traced_again_one_by_one():
    """A call whose work runs beside the next flush or call (a side stream nobody waits for)
    must not be timed back to back: the overlap lengthens both. Seen, it is traced again with a
    synchronisation after each flush and call, and the record says why."""
    source = LaggingSource()
    source.beside = True
    backend = CountingBackend(source)
    timing = CuptiTimer(source).time(lambda: source.launch(KERNEL, "k", 3_000), backend, warmup_ms=1.0, rep_ms=5.0,
                                     flush_l2=True)
    info = timing.extra["cupti"]
    assert info["calls"] == "synchronised one by one" and "began on the device before" in info["calls_why"]
    assert backend.syncs_traced > 10 and set(timing.samples_ms) == {0.003}


def test_records_without_a_launch_send_the_calls_back_to_one_by_one():
    """A runtime the tracer does not see (linked statically into a CUDA C++ candidate) leaves its
    kernels without a launch to tie them to: back to back they could land in the next call's
    window, so the point is traced again one by one."""
    source = LaggingSource()
    backend = CountingBackend(source)

    def fn():
        source.launch(KERNEL, "k", 2_000)
        if source.tracing:  # no launch record for this kernel: no anchor
            source.records[-1] = attrs.evolve(source.records[-1], anchor_ns=None)

    timing = CuptiTimer(source).time(fn, backend, warmup_ms=1.0, rep_ms=5.0, flush_l2=False)
    info = timing.extra["cupti"]
    assert info["calls"] == "synchronised one by one" and "no launch to tie them" in info["calls_why"]
    assert backend.syncs_traced > 5


def test_overlapping_counts_windows_whose_work_starts_before_the_earlier_work_ends():
    w = [Window("sample", 0, 10), Window("flush", 20, 30), Window("sample", 40, 50)]
    serial = [ActivityRecord(KERNEL, "a", 100, 200, 7, 5), ActivityRecord(KERNEL, "f", 200, 300, 7, 25),
              ActivityRecord(KERNEL, "b", 300, 350, 7, 45)]
    assert overlapping(serial, w) == 0
    beside = serial[:2] + [ActivityRecord(KERNEL, "b", 250, 350, 9, 45)]
    assert overlapping(beside, w) == 1


def test_the_first_traced_call_is_dropped():
    source = FakeSource()
    calls = []

    def fn():  # the first traced call is slow (the tracer's own set-up), later ones are not
        calls.append(source.tracing)
        slow = source.tracing and calls.count(True) == 1
        source.launch(KERNEL, "k", 50_000 if slow else 1_000)

    timing = _time(source, fn)
    assert max(timing.samples_ms) == 0.001
    assert timing.extra["cupti"]["dropped_first"] == 1
    assert timing.extra["cupti"]["samples"] == calls.count(True) - 1


def _stepped(source, long_every):
    """A kernel of 4 timestamp steps of 256 ns, one call in ``long_every`` lasting a step more:
    what a kernel whose true duration lies between two steps reads on an H200."""
    calls = []

    def fn():
        calls.append(1)
        source.launch(KERNEL, "k", 1_280 if len(calls) % long_every == 0 else 1_024)
    return fn


def test_a_median_between_two_timestamp_steps_follows_the_share_of_samples():
    """Durations come in whole 256 ns steps: a plain median reads 1.024 µs until half the calls
    are a step longer, then jumps 25 %. The median of grouped data moves with the share."""
    source = FakeSource()
    fewer = _time(source, _stepped(source, 4), rep_ms=20.0)  # a quarter of the calls a step longer
    more = _time(source, _stepped(source, 3), rep_ms=20.0)  # a third
    assert set(fewer.samples_ms) == set(more.samples_ms) == {0.001024, 0.00128}
    assert fewer.extra["cupti"]["step_ns"] == 256 and "steps of 256 ns" in fewer.extra["cupti"]["median"]
    assert 0.001024 < fewer.value_ms < more.value_ms < 0.00128


def test_grouped_median_only_where_samples_come_in_steps():
    assert grouped_median_ms([0.001024] * 7) == (0.001024, None)  # one value: itself
    assert grouped_median_ms([0.001000, 0.001001, 0.001003, 0.001006]) == (pytest.approx(0.001002), None)  # 1 ns steps
    assert grouped_median_ms([0.0010005, 0.0010115, 0.0010225]) == (0.0010115, None)  # no step
    value, step = grouped_median_ms([0.000768, 0.001024, 0.001024, 0.00128])
    assert step == 256 and value == pytest.approx(0.001024, abs=1e-9)


def test_the_h200s_32_ns_steps_are_found_through_the_clock_conversions_nanosecond():
    """A 64x64 softmax_backward as CUPTI read it on the H200: multiples of 32 ns give or take
    1 ns. The plain median is 1408 ns whatever the share of 1440 ns calls; grouped, it is
    1414.6 ns, between the two."""
    counts = {1408: 142, 1440: 72, 1407: 18, 1409: 9, 1376: 1, 1375: 1}
    samples = [ns / 1e6 for ns, k in counts.items() for _ in range(k)]
    assert timestamp_step_ns([s * 1e6 for s in samples]) == 32
    value, step = grouped_median_ms(samples)
    assert step == 32 and value == pytest.approx(0.0014146, abs=1e-7)
    fewer = [s for s in samples if s != 0.00144] + [0.00144] * 40  # fewer calls a step longer
    assert 0.001408 < grouped_median_ms(fewer)[0] < value


def test_a_call_without_kernels_is_timed_by_its_memory_operations_and_says_so():
    source = FakeSource()

    def fn():
        source.launch(MEMCPY, "memcpy HTOD", 4_000)
        source.launch(MEMSET, "memset", 1_000)

    timing = _time(source, fn)
    assert set(timing.samples_ms) == {0.005}
    assert "no kernel" in timing.extra["cupti"]["value"]


def test_a_call_that_launches_nothing_is_left_to_the_callers_timer():
    source = FakeSource()
    assert _time(source, lambda: None) is None
    assert source.stops == 1  # the tracer is stopped all the same


def test_the_tracer_is_stopped_when_the_call_raises():
    source = FakeSource()
    count = []

    def fn():
        count.append(1)
        if source.tracing:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        _time(source, fn)
    assert source.stops == 1 and not source.tracing


# ----------------------------------------------------------------------------- grouping
def test_records_go_to_the_window_holding_them_or_the_nearest_one():
    windows = [Window("flush", 0, 100), Window("sample", 110, 200), Window("flush", 210, 300), Window("sample", 310, 400)]
    records = [
        ActivityRecord(KERNEL, "a", 120, 150),
        ActivityRecord(KERNEL, "b", 201, 205),   # just after the first sample: clock skew, still its own
        ActivityRecord(KERNEL, "flush", 220, 290),
        ActivityRecord(MEMSET, "memset", 320, 330),
        ActivityRecord(KERNEL, "c", 330, 390),
        ActivityRecord(KERNEL, "stray", 400 + SLACK_NS + 10, 400 + SLACK_NS + 20),  # no call's
    ]
    calls, unassigned = group(records, windows)
    assert [c.names for c in calls] == [("a", "b"), ("c",)]
    assert calls[0].kernel_ns == 34 and calls[1].memset_ns == 10 and calls[1].memsets == 1
    assert unassigned == 1


def test_an_anchor_wins_over_the_device_interval():
    """torch's trace: a kernel is placed by the host time of the call that launched it."""
    windows = [Window("sample", 0, 100), Window("sample", 200, 300)]
    late = ActivityRecord(KERNEL, "k", 250, 260, anchor_ns=50)  # launched in call 1, ran during call 2's window
    calls, _ = group([late], windows)
    assert calls[0].kernels == 1 and calls[1].kernels == 0


def test_call_activity_span_and_order():
    call = CallActivity.of([ActivityRecord(KERNEL, "second", 50, 80, 1), ActivityRecord(KERNEL, "first", 10, 40, 2)])
    assert call.names == ("first", "second") and call.span_ns == 70 and call.kernel_ns == 60 and call.streams == 2


class FakeCuptiModule:
    """What ``CuptiPythonSource`` uses of cupti-python's ``cupti`` module, with timestamps in ns
    since the epoch as CUPTI gives them (about 2**60: a float64 there steps by 256 ns)."""

    class ActivityKind(enum.IntEnum):
        KERNEL = 1
        CONCURRENT_KERNEL = 2
        MEMCPY = 3
        MEMSET = 4
        RUNTIME = 5
        DRIVER = 6

    class ActivityMemcpyKind(enum.IntEnum):
        DTOH = 2

    def __init__(self, now=1_780_000_000_123_456_789, per_ns=1.0):
        self.now = now
        self.activities = []
        #: timestamps per host nanosecond (not 1: another client's clock left on CUPTI)
        self.per_ns = per_ns
        self._since = (now, time.perf_counter_ns())

    def activity_register_callbacks(self, requested, completed):
        self.completed = completed

    def activity_enable(self, kind):
        pass

    def activity_disable(self, kind):
        pass

    def get_timestamp(self):
        epoch, host = self._since  # host time at per_ns timestamps per ns, never the same twice
        self.now = max(self.now + 1, epoch + int((time.perf_counter_ns() - host) * self.per_ns))
        return self.now

    def set_clock(self, per_ns):
        self._since, self.per_ns = (self.get_timestamp(), time.perf_counter_ns()), per_ns

    def activity_flush_all(self, forced):
        self.completed(self.activities)

    def activity(self, kind, start, duration, **kw):
        self.activities.append(types.SimpleNamespace(kind=kind, start=start, end=start + duration, stream_id=7,
                                                     name="k", **kw))

    def enabled(self):
        return self


def test_cupti_python_durations_keep_every_nanosecond():
    """A 1000 ns kernel read 1024 ns: its epoch timestamps were made floats before subtracting."""
    cupti = FakeCuptiModule()
    source = sources.CuptiPythonSource(cupti)
    source.start()
    with source.mark("sample"):
        t = cupti.get_timestamp()
        cupti.activity(cupti.ActivityKind.CONCURRENT_KERNEL, t + 100, 1_000)
        cupti.activity(cupti.ActivityKind.MEMCPY, t + 1_200, 2_080, copy_kind=2)
        cupti.activity(cupti.ActivityKind.MEMSET, t + 3_400, 96)
    records, windows = source.stop()
    assert [r.duration_ns for r in records] == [1_000.0, 2_080.0, 96.0]
    assert [r.kind for r in records] == [KERNEL, MEMCPY, MEMSET] and records[1].name == "memcpy DTOH"
    calls, unassigned = group(records, windows)
    assert unassigned == 0 and calls[0].kernel_ns == 1_000.0 and calls[0].memcpy_ns == 2_080.0


def _two_launches(cupti, source, kernel_ticks=None) -> list:
    """Two calls, each marked and launching through the runtime (correlation ids 1 and 2); with
    ``kernel_ticks``, call k's kernel runs inside its window for k × that many ticks. The launch times."""
    launched = []
    for corr in (1, 2):
        with source.mark("sample"):
            t = cupti.get_timestamp()
            launched.append(t)
            cupti.activity(cupti.ActivityKind.RUNTIME, t, 300, correlation_id=corr)
            if kernel_ticks:
                cupti.activity(cupti.ActivityKind.CONCURRENT_KERNEL, t + kernel_ticks, kernel_ticks * corr,
                               correlation_id=corr)
    return launched


def test_cupti_python_anchors_each_record_at_the_call_that_launched_it():
    """Calls run back to back: the device runs call 1's kernel while the host is already in call
    2's window. The launch's correlation id still puts it in call 1."""
    cupti = FakeCuptiModule()
    source = sources.CuptiPythonSource(cupti)
    assert source.anchors
    source.start()
    launched = _two_launches(cupti, source)
    for corr, t in zip((1, 2), launched):  # each kernel starts 5 ms after its launch, past its window
        cupti.activity(cupti.ActivityKind.CONCURRENT_KERNEL, t + 5_000_000, 1_000 * corr, correlation_id=corr)
    records, windows = source.stop()
    assert [r.anchor_ns - records[0].anchor_ns for r in records] == [0.0, float(launched[1] - launched[0])]
    assert all(w.start_ns <= r.anchor_ns <= w.end_ns < r.start_ns for r, w in zip(records, windows))
    calls, unassigned = group(records, windows)
    assert unassigned == 0 and [c.kernel_ns for c in calls] == [1_000.0, 2_000.0]


def test_a_kernel_reported_twice_by_a_client_that_left_serialised_tracing_on_counts_once():
    """A client that left kind KERNEL on makes CUPTI report each kernel under both kinds. The kind
    is switched off at start and a kernel reported twice is counted once; two kernels that merely
    look alike are both kept."""
    cupti = FakeCuptiModule()
    switched = []
    cupti.activity_disable = lambda kind: switched.append(kind)
    source = sources.CuptiPythonSource(cupti)
    source.start()
    assert cupti.ActivityKind.KERNEL in switched  # switched off before the trace
    with source.mark("sample"):
        t = cupti.get_timestamp()
        for kind in (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.KERNEL):  # one kernel, twice
            cupti.activity(kind, t + 100, 1_000, correlation_id=1)
        cupti.activity(cupti.ActivityKind.CONCURRENT_KERNEL, t + 1_100, 1_000, correlation_id=1)  # a second one
    records, windows = source.stop()
    assert [r.start_ns - records[0].start_ns for r in records] == [0.0, 1_000.0] and source.duplicates == 1
    calls, _ = group(records, windows)
    assert calls[0].kernel_ns == 2_000.0

    source.start()  # the serialised copy with timestamps of its own: still the same launch's kernel
    with source.mark("sample"):
        t = cupti.get_timestamp()
        cupti.activities = []
        cupti.activity(cupti.ActivityKind.CONCURRENT_KERNEL, t + 100, 1_000, correlation_id=2)
        cupti.activity(cupti.ActivityKind.KERNEL, t + 2_000, 1_050, correlation_id=2)
        cupti.activity(cupti.ActivityKind.KERNEL, t + 4_000, 500, correlation_id=3)  # a launch seen only so: kept
    records, windows = source.stop()
    assert [r.duration_ns for r in records] == [1_000.0, 500.0] and source.duplicates == 1


def test_timestamps_another_client_left_in_its_own_unit_are_read_as_nanoseconds():
    """On an H200, after torch's profiler had run in the process, every kernel read 2.1× its
    duration, no record twice: CUPTI's clock and records ran at 2.11 per host nanosecond. A trace
    reads CUPTI's rate against the host's clock and divides every timestamp by it."""
    cupti = FakeCuptiModule(per_ns=2.1)
    source = sources.CuptiPythonSource(cupti)
    source.start()
    _two_launches(cupti, source, kernel_ticks=2_100)  # 1000 and 2000 ns at 2.1 ticks per ns
    records, windows = source.stop()
    assert source.clock_per_ns == pytest.approx(2.1, rel=0.01) and "torch's profiler" in source.clock_why
    assert [r.duration_ns for r in records] == [pytest.approx(1_000, rel=0.01), pytest.approx(2_000, rel=0.01)]
    calls, unassigned = group(records, windows)  # windows and records in one unit still
    assert unassigned == 0 and [c.kernel_ns for c in calls] == [pytest.approx(1_000, rel=0.01),
                                                                pytest.approx(2_000, rel=0.01)]
    cupti.set_clock(1.0)  # the other client's clock gone: nanoseconds again
    cupti.activities = []
    source.start()
    with source.mark("sample"):
        cupti.activity(cupti.ActivityKind.CONCURRENT_KERNEL, cupti.get_timestamp() + 100, 1_000)
    records, _ = source.stop()
    assert source.clock_per_ns == 1.0 and source.clock_why == "" and [r.duration_ns for r in records] == [1_000.0]


def test_a_clock_in_nanoseconds_is_left_alone_even_for_a_trace_shorter_than_the_check():
    cupti = FakeCuptiModule()
    source = sources.CuptiPythonSource(cupti)
    t0 = time.perf_counter_ns()
    source.start()
    source.stop()
    assert time.perf_counter_ns() - t0 >= sources.CLOCK_CHECK_NS and source.clock_per_ns == 1.0


def test_the_timer_says_when_cupti_ran_on_another_clock():
    source = FakeSource()
    source.clock_per_ns, source.clock_why = 2.1, "CUPTI's timestamps ran at 2.1 per host nanosecond"
    timing = CuptiTimer(source, settle_ms=0).time(lambda: source.launch(KERNEL, "k", 1_000), TracedBackend(source),
                                                  warmup_ms=1.0, rep_ms=2.0, flush_l2=False)
    info = timing.extra["cupti"]
    assert info["clock_per_ns"] == 2.1 and "2.1 per host" in info["clock_why"]


def test_the_timer_says_when_kernels_came_twice():
    source = FakeSource()
    source.duplicates = 3
    timing = CuptiTimer(source, settle_ms=0).time(lambda: source.launch(KERNEL, "k", 1_000), TracedBackend(source),
                                                  warmup_ms=1.0, rep_ms=2.0, flush_l2=False)
    info = timing.extra["cupti"]
    assert info["duplicate_records"] == 3 and "serialised kernel tracing" in info["duplicates_why"]


def test_records_from_a_kineto_trace():
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "zlf_sample", "ts": 1000.0, "dur": 20.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1002.0, "dur": 3.0, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "log10_func_kernel_rank_1", "ts": 1010.5, "dur": 32.7,
         "args": {"correlation": 5, "stream": 7}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 1050.0, "dur": 1.0, "args": {"stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::log10", "ts": 1001.0, "dur": 5.0},
    ]
    records, windows = records_from_trace(events)
    assert windows == [Window("sample", 1_000_000.0, 1_020_000.0)]
    kernel = next(r for r in records if r.kind == KERNEL)
    assert kernel.name == "log10_func_kernel_rank_1" and kernel.anchor_ns == 1_002_000.0 and kernel.stream == 7
    assert kernel.duration_ns == pytest.approx(32_700.0)
    assert [r.kind for r in records] == [KERNEL, MEMSET]


# ----------------------------------------------------------------------------- selection
def _opts(**kw):
    base = dict(warmup_ms=1.0, rep_ms=5.0, flush_l2=None, cupti_source="auto", cudagraph_probe="inline",
                cudagraph_replay_ms=0.5, cudagraph_max_calls=50, cudagraph_no_verify=False)
    base.update(kw)
    return argparse.Namespace(**base)


def test_no_cupti_on_the_backend_is_one_line_and_no_timer(capsys):
    plugin = CuptiPlugin()
    assert plugin.kernel_timer(backend=CpuBackend(), options=_opts()) is None
    assert plugin.kernel_timer(backend=CpuBackend(), options=_opts()) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend 'cpu' has no CUPTI" in err[0] and "core's timer decides" in err[0]


def test_no_cupti_python_and_no_cuda_profiler_is_one_line_and_no_timer(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupti", None)  # "import cupti" raises ImportError
    plugin = CuptiPlugin()
    assert plugin.kernel_timer(backend=TracedBackend(FakeSource()), options=_opts()) is None
    err = capsys.readouterr().err
    assert "cupti-python unusable" in err and "torch's profiler" in err


def test_a_usable_source_gives_the_cupti_timer(monkeypatch):
    fake = FakeSource()
    monkeypatch.setattr("zlf_timing_cupti.plugin.make_source", lambda choice: (fake, None))
    timer = CuptiPlugin().kernel_timer(backend=TracedBackend(fake), options=_opts())
    assert isinstance(timer, CuptiTimer) and timer.source is fake


def test_make_source_never_raises_and_respects_the_choice(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupti", None)
    source, why = sources.make_source("cupti-python")
    assert source is None and "cupti-python" in why and "torch" not in why


class OfferingPlugin:
    """A kernel-timer extension over a fake source, for selection tests (cupti's own hook shape)."""

    def __init__(self, source):
        self.timer = CuptiTimer(source)

    @zlf.hookimpl
    def kernel_timer(self, backend, options):
        return self.timer


def _hooks(plugins, timer=None):
    pm, infos = build_plugin_manager(Selection(only=tuple(n for n, _ in plugins)), extra_plugins=plugins)
    return Hooks(pm, infos, {"time_fn": timer, "kernel_timer": timer} if timer else None)


def test_graph_timer_and_kernel_timer_are_not_a_conflict():
    source = FakeSource()
    hooks = _hooks([("graphtimer", graph_timer()), ("ktimer", OfferingPlugin(source))])
    hooks.check_exclusive()  # no "two active extensions implement time_fn"


def test_timer_cupti_times_every_point_with_the_kernel_timer_even_next_to_the_graph_timer():
    source = FakeSource()
    backend = TracedBackend(source)
    hooks = _hooks([("graphtimer", graph_timer()), ("ktimer", OfferingPlugin(source))], timer="ktimer")
    timing = hooks.time_fn(two_kernels_and_a_copy(source), Point("x", (1,), "float32"), backend, _opts())
    assert timing.timer == "cupti" and set(timing.samples_ms) == {0.005}


def test_timer_core_ignores_the_kernel_timer():
    source = FakeSource()
    hooks = _hooks([("ktimer", OfferingPlugin(source))], timer="core")
    timing = hooks.time_fn(two_kernels_and_a_copy(source), Point("x", (1,), "float32"), TracedBackend(source),
                           _opts(flush_l2=False))
    assert timing.timer == "host_wall" and source.starts == 0


def test_unknown_timer_is_a_usage_error_naming_both_kinds():
    hooks = _hooks([("ktimer", OfferingPlugin(FakeSource()))], timer="nobody")
    with pytest.raises(UsageError, match="kernel_timer: ktimer"):
        hooks.check_exclusive()


def test_two_kernel_timers_are_an_error_unless_one_is_chosen():
    from zlf.errors import ExtensionError

    plugins = [("one", OfferingPlugin(FakeSource())), ("two", OfferingPlugin(FakeSource()))]
    with pytest.raises(ExtensionError, match="--timer"):
        _hooks(plugins).check_exclusive()
    _hooks(plugins, timer="two").check_exclusive()


# ----------------------------------------------------------------------------- end to end on cpu
def test_zlf_run_with_cupti_on_cpu_says_so_in_one_line_and_core_times(zlf_cli, tmp_path):
    proc = zlf_cli("run", "--ext", "cupti", "add", "--rep-ms", "5", "--warmup-ms", "1", check_rc=0)
    lines = [l for l in proc.stderr.splitlines() if "extension cupti" in l]
    assert len(lines) == 1 and "no kernel-activity timer" in lines[0], proc.stderr
    run_dir = run_dir_from(proc.stdout, tmp_path)
    assert {r["timer"] for r in read_records(run_dir)} == {"host_wall"}
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["cupti"]["active"] is False and "no CUPTI" in meta["cupti"]["unavailable_reason"]
    assert "extension cupti" in (run_dir / "run.log").read_text()


def test_zlf_run_timer_cupti_on_cpu_runs(zlf_cli, tmp_path):
    pytest.importorskip("zlf_timing_cudagraph", reason="needs the cudagraph extension (zlf-timing-cudagraph) installed")
    proc = zlf_cli("run", "--ext", "cupti,cudagraph", "--timer", "cupti", "add", "--rep-ms", "5", "--warmup-ms", "1",
                   check_rc=0)
    assert {r["timer"] for r in read_records(run_dir_from(proc.stdout, tmp_path))} == {"host_wall"}


# ----------------------------------------------------------------------------- GPU
def _cuda():
    from zlf.backends import CudaBackend

    backend = CudaBackend(0)
    backend.setup()
    return backend


_ADD_CHILD = """
import json, sys, torch
from zlf.backends import CudaBackend
from zlf.ops.builtin import add
from zlf_timing_cupti.sources import make_source
from zlf_timing_cupti.timer import CuptiTimer
source, why = make_source(sys.argv[1])
if source is None:
    print(json.dumps({"skip": why})); sys.exit(0)
backend = CudaBackend(0); backend.setup()
x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
out = torch.empty_like(x)
side = torch.cuda.Stream()
def fn():
    add(x, y, out)
    if sys.argv[2] == "side":  # a second kernel on a stream nobody joins
        with torch.cuda.stream(side):
            add(x, y, out)
t = CuptiTimer(source).time(fn, backend, warmup_ms=5, rep_ms=20, flush_l2=True)
print(json.dumps({"timer": t.timer, "value_ms": t.value_ms, "wall_ms": t.wall_ms, "info": t.extra["cupti"]}))
"""


def _gpu_child(choice, side=False) -> dict:
    """The timer in a process of its own: cupti-python and torch's profiler each load a libcupti,
    and another test of the session may have used the profiler."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _ADD_CHILD, choice, "side" if side else "one"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


@pytest.mark.gpu
@pytest.mark.parametrize("choice", ["cupti-python", "torch"])
def test_gpu_cupti_times_one_add_kernel(choice):
    result = _gpu_child(choice)
    info = result["info"]
    assert result["timer"] == "cupti" and info["kernels_per_call"] == 1 and info["source"] != ""
    assert "add_kernel" in info["kernel_names"][0]
    assert 0.0005 < result["value_ms"] < 0.1 and result["wall_ms"] > result["value_ms"]


@pytest.mark.gpu
def test_gpu_side_stream_kernel_is_counted():
    result = _gpu_child("auto", side=True)
    assert result["info"]["kernels_per_call"] == 2 and result["info"]["streams"] == 2


@pytest.mark.gpu
def test_gpu_log10_of_negative_inputs_is_graph_timed():
    """NaN in the output is log10's answer, not unjoined work (FlagGems' log10 fell back on it)."""
    backend = _cuda()

    def make(shape, dtype, device):
        return (torch.randn(shape, device=device),)

    op = zlf.Op(name="log10", fn=torch.log10, make_inputs=make, shapes=[(1 << 20,)], reference=torch.log10)
    point = Point("log10", (1 << 20,), "float32")
    inputs = op.make_inputs(point.shape, point.dtype, backend.device)
    timing = graph_timer().time_fn(fn=lambda: op.fn(*inputs), point=point, backend=backend,
                                      options=_opts(warmup_ms=5.0, rep_ms=20.0, cudagraph_max_calls=10_000),
                                      op=op, inputs=inputs, kernel_timer=None)
    assert timing.timer == "cudagraph" and timing.fallback_reason is None, timing.extra


@pytest.mark.gpu
def test_gpu_zlf_run_graph_timer_falls_back_to_cupti_marked(zlf_cli, tmp_path):
    pytest.importorskip("zlf_timing_cudagraph")
    ops_file = REPO / "benchmarks" / "cudagraph_ops.py"
    proc = zlf_cli("run", "--ext", "cudagraph,cupti", str(ops_file), "--rep-ms", "30")
    if "no kernel-activity timer" in proc.stderr:
        pytest.skip("no CUPTI source on this machine: " + proc.stderr.strip().splitlines()[-1])
    run_dir = run_dir_from(proc.stdout, tmp_path)
    records = {r["op"]: r for r in read_records(run_dir)}
    assert records["add_before"]["timer"] == "cudagraph"
    for name, reason in (("add_then_item", "host_sync"), ("add_on_side_stream", "unjoined_stream_work")):
        r = records[name]
        assert r["timer"] == "cupti" and r["fallback_reason"] == reason, r
        assert r["markers"] == [f"BENCHMARK_DIRECT_NO_CUDAGRAPH op={name} point={r['point']} reason={reason} timer=cupti"]
        assert r["wall_ms"] and r["extra"]["cupti"]["kernels_per_call"] >= 1
