"""Core's direct timer: how many calls the sample-count estimate costs (cpu backend, host clock)."""
from __future__ import annotations

import time

from zlf.backends.cpu import CpuBackend
from zlf.timing import sample_counts, time_direct


def counted(seconds: float):
    calls = []

    def fn():
        calls.append(1)
        time.sleep(seconds)

    return fn, calls


def test_a_call_slower_than_the_budget_allows_is_not_repeated_to_learn_that():
    """A 12 ms call with rep_ms 20: five samples whatever the estimate; one call estimates it
    (the cpu backend interprets kernels: each call there costs tens of ms)."""
    fn, calls = counted(0.012)
    n_warmup, n_rep = sample_counts(fn, CpuBackend(), lambda: None, warmup_ms=5, rep_ms=20)
    assert len(calls) == 1 and (n_warmup, n_rep) == (1, 5)


def test_a_fast_call_is_estimated_from_five_calls_as_before():
    fn, calls = counted(0.0005)
    n_warmup, n_rep = sample_counts(fn, CpuBackend(), lambda: None, warmup_ms=5, rep_ms=40)
    assert len(calls) == 6  # the lone call, then the five the estimate is taken from
    assert 5 <= n_rep <= 80 and n_warmup >= 1


def test_the_timer_still_takes_the_minimum_samples_of_a_slow_call():
    fn, calls = counted(0.012)
    timing = time_direct(fn, CpuBackend(), warmup_ms=5, rep_ms=20, flush_l2=False)
    assert len(timing.samples_ms) == 5 and min(timing.samples_ms) >= 11.5
    assert len(calls) == 1 + 1 + 1 + 5  # first call, the estimate, one warm-up, the samples
