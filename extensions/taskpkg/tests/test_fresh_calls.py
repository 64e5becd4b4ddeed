"""Fresh timed calls: before every timed call the worker rotates the next input set into the
call's input buffers and poisons its outputs, outside what the timer counts -- before core's
start event, inside the CUPTI timer's flush window (whose kernels count for no call)."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

from zlf.backends import CpuBackend
from zlf.timing import time_direct

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf_taskpkg.worker import FreshBackend, Rotation  # noqa: E402

N = 64
SETS = 3


def slots():
    """Three slots (a, b, out, n) as the checker loads them: set j in slot j, outputs computed."""
    made = []
    for j in range(SETS):
        a, b = torch.full((N,), float(10 * j + 1)), torch.full((N,), float(10 * j + 2))
        made.append([a, b, a + b, N])
    return made


class Log:
    """What happened, in order: ``("prepare", slot)``, ``("event",)`` (one recorded),
    ``("call", slot, a0, outputs all poison)``."""

    def __init__(self):
        self.items = []


def recording_calls(log, made):
    def bind(j):
        def call():
            a, b, out, _ = made[j]
            log.items.append(("call", j, float(a[0]), bool(torch.isnan(out).all())))
            torch.add(a, b, out=out)
        return call
    return [bind(j) for j in range(len(made))]


class LoggedEvent:
    def __init__(self, log):
        self.log = log

    def record(self):
        self.log.items.append(("event",))

    def elapsed_time(self, other):
        return 1.0


class EventBackend(CpuBackend):
    """The cpu backend whose events say when they were recorded."""

    def __init__(self, log):
        super().__init__(0)
        self.log = log

    def event(self):
        return LoggedEvent(self.log)


def fresh(log, made, flush=False, backend=None):
    rotation = Rotation(recording_calls(log, made), made, capturing=lambda: False, outputs=(2,))
    rotation.keep_sets()
    real_prepare = rotation.prepare

    def prepare():
        log.items.append(("prepare", rotation.count % len(made)))
        real_prepare()
    rotation.prepare = prepare
    return rotation, FreshBackend(backend or EventBackend(log), rotation, flush)


def test_every_timed_call_gets_the_next_input_set_and_poisoned_outputs():
    log, made = Log(), slots()
    rotation, backend = fresh(log, made)
    time_direct(rotation, backend, warmup_ms=0.0, rep_ms=12.0, flush_l2=True, min_samples=12, max_samples=12)
    items = log.items
    prepared = [i for i, it in enumerate(items) if it[0] == "prepare"]
    assert len(prepared) >= 12
    for i in prepared:  # the prepared call comes next (after the start event, when it is a sample)
        nxt = items[i + 1] if items[i + 1][0] == "call" else items[i + 2]
        assert nxt[0] == "call" and nxt[1] == items[i][1] and nxt[3], items[i:i + 4]
    # every sample: prepared, then its events around the call alone
    samples = [i for i, it in enumerate(items[:-2]) if it[0] == "event" and items[i + 1][0] == "call"
               and items[i + 2][0] == "event"]
    assert len(samples) == 12 and all(items[i - 1][0] == "prepare" and items[i + 1][3] for i in samples)
    # a slot's consecutive prepared calls never see the same input set twice in a row
    by_slot = {}
    for i in prepared:
        call = items[i + 1] if items[i + 1][0] == "call" else items[i + 2]
        by_slot.setdefault(call[1], []).append(call[2])
    for values in by_slot.values():
        assert all(x != y for x, y in zip(values, values[1:]))
    assert len({v for vs in by_slot.values() for v in vs}) == SETS
    assert rotation.prepared == len(prepared)


def test_a_slot_holds_the_set_its_last_call_ran_on():
    log, made = Log(), slots()
    rotation, backend = fresh(log, made)
    for _ in range(7):
        backend.flush_l2()
        rotation()
    for j, slot in enumerate(made):
        k = rotation.holding[j]
        assert float(slot[0][0]) == 10 * k + 1 and torch.equal(slot[2], slot[0] + slot[1])


def test_the_run_asked_for_warm_l2_gets_no_flush():
    flushed = []

    class Flushing(EventBackend):
        def flush_l2(self):
            flushed.append(1)

    log, made = Log(), slots()
    rotation, backend = fresh(log, made, flush=False, backend=Flushing(log))
    backend.flush_l2()
    assert not flushed and rotation.prepared == 1
    rotation, backend = fresh(log, made, flush=True, backend=Flushing(log))
    backend.flush_l2()
    assert flushed == [1] and rotation.prepared == 1


def test_the_fresh_backend_is_the_backend_for_a_kernel_timer_cache():
    real = CpuBackend(0)
    proxy = FreshBackend(real, Rotation([lambda: None], [[]]), False)
    cache = {real: "timer"}
    assert cache[proxy] == "timer" and proxy.name == real.name


# ----------------------------------------------------------------------------- CUPTI
cupti_activity = pytest.importorskip("zlf_timing_cupti.activity")
cupti_timer = pytest.importorskip("zlf_timing_cupti.timer")


class FakeSource:
    """Activity records at a fake device clock, windows as the CUPTI timer marks them."""

    name = "fake_source"

    def __init__(self):
        self.clock, self.tracing = 0.0, False
        self.records, self.windows = [], []

    def launch(self, name, duration_ns):
        self.clock += 100.0
        if self.tracing:
            self.records.append(cupti_activity.ActivityRecord(cupti_activity.KERNEL, name, self.clock,
                                                              self.clock + duration_ns, 7))
        self.clock += duration_ns

    def start(self):
        self.tracing, self.records, self.windows = True, [], []

    @contextlib.contextmanager
    def mark(self, label):
        t0 = self.clock
        self.clock += 10.0
        yield
        self.clock += 10.0
        self.windows.append(cupti_activity.Window(label, t0, self.clock))

    def stop(self):
        self.tracing = False
        return self.records, self.windows


def test_cupti_counts_the_candidates_kernels_not_the_poison_and_copies():
    source, made = FakeSource(), slots()
    log = Log()
    rotation = Rotation(recording_calls(log, made), made, capturing=lambda: False, outputs=(2,))
    rotation.keep_sets()
    real_prepare = rotation.prepare

    def prepare():  # on a GPU: torch's copy and fill kernels, launched by the judge
        source.launch("direct_copy_kernel_cuda", 4_000)
        source.launch("FillFunctor", 3_000)
        real_prepare()
    rotation.prepare = prepare
    calls = rotation.calls
    rotation.calls = [lambda c=c: (source.launch("vecadd_kernel", 2_000), c())[1] for c in calls]
    backend = FreshBackend(CpuBackend(0), rotation, False)
    timing = cupti_timer.CuptiTimer(source, settle_ms=0).time(rotation, backend, warmup_ms=1.0, rep_ms=5.0,
                                                             flush_l2=True)
    assert set(timing.samples_ms) == {0.002}  # the candidate's kernel alone
    assert timing.extra["cupti"]["kernel_names"] == ["vecadd_kernel"]
    assert rotation.prepared >= len(timing.samples_ms)
    assert not any(math.isnan(float(s[2][0])) for s in made)
