"""Core's direct timer: how many calls the sample-count estimate costs. The backend's events read
a fake clock that only the timed call moves: what is timed is what the test says, however loaded
the machine is."""
from __future__ import annotations

import math

import pytest

from zlf.testing import FakeClock, fake_backend_class
from zlf.errors import UsageError
from zlf.timing import NOISE_MIN_SAMPLES, NOISE_MIN_TIME_SHARE, Rotation, sample_counts, time_direct

# budgets a little over a whole number of calls: the clock counts float seconds, so an estimate
# of 0.5 ms may read a hair over it


def clocked():
    """A fake backend whose events read a clock that only the test moves."""
    clock = FakeClock()
    return fake_backend_class("clocked", clock=clock)(), clock


def test_a_call_slower_than_the_budget_allows_is_not_repeated_to_learn_that():
    """A 12 ms call with rep_ms 20: five samples whatever the estimate; one call estimates it
    (the cpu backend interprets kernels: each call there costs tens of ms)."""
    backend, clock = clocked()
    fn = clock.taking(12)
    n_warmup, n_rep = sample_counts(fn, backend, lambda: None, warmup_ms=5, rep_ms=20)
    assert fn.calls == 1 and (n_warmup, n_rep) == (1, 5)


def test_a_fast_call_is_estimated_from_five_calls_as_before():
    backend, clock = clocked()
    fn = clock.taking(0.5)
    n_warmup, n_rep = sample_counts(fn, backend, lambda: None, warmup_ms=5.1, rep_ms=40.1)
    assert fn.calls == 6  # the lone call, then the five the estimate is taken from
    assert (n_warmup, n_rep) == (10, 80)


def test_the_estimate_pays_each_calls_flush():
    """Each call of the estimate is preceded by its flush, as in the timed loop: a 0.5 ms call
    behind a 1.5 ms flush is estimated at 2 ms."""
    backend, clock = clocked()
    fn, flush = clock.taking(0.5), clock.taking(1.5)
    n_warmup, n_rep = sample_counts(fn, backend, flush, warmup_ms=8.1, rep_ms=40.1)
    assert (fn.calls, flush.calls) == (6, 6) and (n_warmup, n_rep) == (4, 20)


def test_the_timer_still_takes_the_minimum_samples_of_a_slow_call():
    backend, clock = clocked()
    fn = clock.taking(12)
    timing = time_direct(fn, backend, warmup_ms=5, rep_ms=20, flush_l2=False)
    assert list(timing.samples_ms) == pytest.approx([12.0] * 5)
    assert fn.calls == 1 + 1 + 1 + 5  # first call, the estimate, one warm-up, the samples


# ----------------------------------------------------------------------------- --max-noise
# nvbench's relative-noise stopping rule on the median: samples in doubling batches from the
# minimum (a share of the budget: nvbench's --min-time) to the rep_ms budget, stopped once the
# median's 95 % interval is within PCT of it and the two halves' medians agree as closely.


def minimum(budget: int) -> int:
    return max(NOISE_MIN_SAMPLES, math.ceil(NOISE_MIN_TIME_SHARE * budget))


def jittered(clock, ms: float, spread_pct: float, seed: int = 0):
    """A call taking ``ms`` with a normal spread of ``spread_pct`` % of the fake clock (seeded:
    the same times every run)."""
    import numpy as np

    times = ms * (1.0 + spread_pct / 100 * np.random.default_rng(seed).standard_normal(20_000))

    def fn():
        clock.advance(float(times[fn.calls % times.size]))
        fn.calls += 1

    fn.calls = 0
    return fn


def test_without_max_noise_a_point_samples_its_whole_budget():
    backend, clock = clocked()
    timing = time_direct(jittered(clock, 0.1, 0.5), backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False)
    assert len(timing.samples_ms) >= 390 and "sampling" not in timing.extra  # 40 ms of 0.1 ms calls


def test_a_quiet_point_stops_at_the_minimum_once_its_median_is_tight():
    backend, clock = clocked()
    timing = time_direct(jittered(clock, 0.1, 0.5), backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False,
                         max_noise=1.0)
    assert len(timing.samples_ms) == minimum(timing.extra["sampling"]["budget_samples"]) > NOISE_MIN_SAMPLES
    assert timing.extra["sampling"]["stopped"] == "noise"
    assert timing.extra["sampling"]["budget_samples"] >= 390
    assert timing.extra["sampling"]["noise_pct"] <= 1.0


def test_a_noisy_point_doubles_its_samples_up_to_the_budget():
    backend, clock = clocked()
    fn = jittered(clock, 0.1, 20.0)
    timing = time_direct(fn, backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False, max_noise=0.01)
    assert len(timing.samples_ms) == timing.extra["sampling"]["budget_samples"] > 320  # capped, not doubled to 640
    assert timing.extra["sampling"]["stopped"] == "budget"
    assert timing.extra["sampling"]["noise_pct"] > 0.01


def test_a_point_between_stops_where_its_interval_first_fits():
    # ±6 % spread: the median's interval narrows as batches double from the minimum
    backend, clock = clocked()
    timing = time_direct(jittered(clock, 0.1, 6.0), backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False,
                         max_noise=1.5)
    n, budget = len(timing.samples_ms), timing.extra["sampling"]["budget_samples"]
    assert timing.extra["sampling"]["stopped"] == "noise" and n == 2 * minimum(budget) < budget


def test_the_minimum_covers_one_cycle_of_the_input_copies():
    backend, clock = clocked()
    fn = Rotation([jittered(clock, 0.1, 0.5)] * 128)
    timing = time_direct(fn, backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False, max_noise=5.0)
    assert 128 > minimum(timing.extra["sampling"]["budget_samples"])
    assert len(timing.samples_ms) == 128 and timing.extra["sampling"]["stopped"] == "noise"


def moded(clock, fast: int, ms=(0.100, 0.104), spread_pct: float = 0.2, seed: int = 0):
    """Calls in a fast clock mode for the first ``fast`` calls, slow (+4 %) after (seeded)."""
    import numpy as np

    times = np.r_[np.full(fast, ms[0]), np.full(20_000, ms[1])]
    times = times * (1.0 + spread_pct / 100 * np.random.default_rng(seed).standard_normal(times.size))

    def fn():
        clock.advance(float(times[min(fn.calls, times.size - 1)]))
        fn.calls += 1

    fn.calls = 0
    return fn


def test_sampling_runs_for_a_share_of_the_budget_before_a_clock_mode_sets_in():
    # the slow mode sets in after 60 calls: 20 samples would all be fast, a quarter of the budget is not
    backend, clock = clocked()
    full = time_direct(moded(clock, 60), backend, warmup_ms=1.05, rep_ms=100.05, flush_l2=False)
    timing = time_direct(moded(clock, 60), backend, warmup_ms=1.05, rep_ms=100.05, flush_l2=False, max_noise=0.5)
    assert len(timing.samples_ms) >= minimum(timing.extra["sampling"]["budget_samples"])
    assert abs(timing.value_ms / full.value_ms - 1) <= 0.005


def test_a_series_whose_halves_disagree_samples_on():
    # 17 calls before sampling (first, estimates, warm-up), then 60 fast samples: the minimum's
    # 100 samples have a fast median and a tight interval, but their halves' medians differ by 4 %
    backend, clock = clocked()
    full = time_direct(moded(clock, 77), backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False)
    timing = time_direct(moded(clock, 77), backend, warmup_ms=1.05, rep_ms=40.05, flush_l2=False, max_noise=0.5)
    sampling = timing.extra["sampling"]
    assert sampling["samples"] > minimum(sampling["budget_samples"])
    assert sampling["halves_moved_pct"] <= 0.5 or sampling["stopped"] == "budget"
    assert abs(timing.value_ms / full.value_ms - 1) <= 0.005


def test_max_noise_is_a_run_option_checked_once():
    from zlf.config import RunConfig

    assert RunConfig.from_json({"timing": {"max_noise": 0.5}}).timing.max_noise == 0.5
    with pytest.raises(UsageError, match="--max-noise 0: expected a positive number of percent up to 100"):
        RunConfig.from_json({"timing": {"max_noise": 0}}).check()
    with pytest.raises(UsageError, match="--max-noise stops sampling on noise and --iters fixes the calls"):
        RunConfig.from_json({"timing": {"max_noise": 1.0, "iters": 10}}).check()


# ----------------------------------------------------------------------------- input copies
# On an H200, a flushed softmax 1024² read 6.2 % apart between six processes on one allocation of
# its inputs, 1.5 % with the calls cycling through eight (docs/measurements.md): where the inputs
# land in device memory is one draw per process unless a point samples several.

import torch  # noqa: E402

from zlf import defaults  # noqa: E402
from zlf.config import TimingBudget  # noqa: E402
from zlf.errors import UsageError  # noqa: E402
from zlf.backends.cpu import CpuBackend  # noqa: E402
from zlf.timing import Rotation, input_copies  # noqa: E402


def test_a_copy_keeps_layout_values_aliasing_and_grad_and_shares_what_is_no_tensor():
    base = torch.randn(6, 8)
    view = base[1:5, 2:6]  # offset and strides of its own, same storage as base
    leaf = torch.randn(3, requires_grad=True)
    expanded = torch.randn(4).expand(5, 4)  # stride 0
    meta = {"scale": 2.0}
    sets, why = input_copies((base, view, 7, [leaf, expanded], meta), 3)
    assert why == "" and len(sets) == 3
    for copy in sets[1:]:
        b, v, n, (lf, ex), m = copy
        assert b.data_ptr() != base.data_ptr() and torch.equal(b, base)
        assert v.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # still a view of b
        assert (v.storage_offset(), v.stride(), v.shape) == (view.storage_offset(), view.stride(), view.shape)
        assert torch.equal(v, view) and n == 7 and m == meta and m["scale"] is meta["scale"]
        assert lf.requires_grad and lf.is_leaf and torch.equal(lf, leaf)
        assert ex.stride() == (0, 1) and torch.equal(ex, expanded)
        b.add_(1)
        assert torch.equal(v, view + 1)  # writing the copy's base shows through its view, as in the inputs
    assert sets[1][0].data_ptr() != sets[2][0].data_ptr()


def test_named_tuples_of_tensors_are_copied_as_named_tuples():
    import collections

    Pair = collections.namedtuple("Pair", "x y")
    pair = Pair(torch.randn(4), torch.randn(4))
    sets, why = input_copies((pair,), 2)
    (copy,), = sets[1:]
    assert why == "" and type(copy) is Pair and copy.x.data_ptr() != pair.x.data_ptr() and torch.equal(copy.y, pair.y)


@pytest.mark.parametrize("inputs, why", [
    ((torch.randn(3, requires_grad=True) * 2,), "part of an autograd graph"),
    ((torch.randn(4, 4).to_sparse(),), "not a plain strided tensor"),
    ((3, "x"), "no tensor"),
])
def test_inputs_that_cannot_be_copied_run_alone_and_say_why(inputs, why):
    sets, said = input_copies(inputs, 8)
    assert len(sets) == 1 and sets[0] is inputs and why in said


def test_copies_stop_at_their_byte_budget_and_at_device_memory():
    x = torch.randn(256)  # 1 KiB
    sets, why = input_copies((x,), 8, max_bytes=3 * 1024)
    assert len(sets) == 4 and "7 copies of" in why
    made = []

    def oom_on_third(value, storages):
        if len(made) == 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 MiB")
        made.append(1)
        return (value[0].clone(),)

    import zlf.timing as timing_module

    original = timing_module._copy
    timing_module._copy = oom_on_third
    try:
        sets, why = input_copies((x,), 8, is_oom=CpuBackend().is_oom)
        assert len(sets) == 3 and "device memory held 3 of 8" in why
        made.clear()
        with pytest.raises(RuntimeError, match="out of memory"):  # no backend to say it is one: raised
            input_copies((x,), 8)
    finally:
        timing_module._copy = original


def test_a_rotation_runs_each_call_in_turn():
    seen = []
    rotation = Rotation([lambda k=k: seen.append(k) for k in range(3)])
    for _ in range(7):
        rotation()
    assert seen == [0, 1, 2, 0, 1, 2, 0]


class FlushingCpu(CpuBackend):
    flush_l2_default = True

    def flush_l2(self):
        pass


def _timed(budget, call_on=True, flush=True):
    x = torch.randn(64)
    seen = []

    def op_fn(t):
        seen.append(t.data_ptr())
        return t * 2

    backend = FlushingCpu() if flush else CpuBackend()
    timing = defaults.time_fn(lambda: op_fn(x), None, backend, budget, None, None, (x,),
                              (lambda args: lambda: op_fn(*args)) if call_on else None)
    return timing, seen, x.data_ptr()


def test_core_cycles_a_flushed_points_calls_through_copies_and_says_so():
    timing, seen, original = _timed(TimingBudget(warmup_ms=1, rep_ms=2, input_copies=3))
    assert timing.extra["input_copies"] == {"sets": 3}
    assert len(set(seen)) == 3 and original in seen
    assert all(seen[i] != seen[i + 1] for i in range(len(seen) - 1))  # never the same set twice in a row


@pytest.mark.parametrize("budget, call_on, flush", [
    (TimingBudget(warmup_ms=1, rep_ms=2, input_copies=3), True, False),  # warm L2: the cache state is the point
    (TimingBudget(warmup_ms=1, rep_ms=2, input_copies=3), False, True),  # fn is not the op's call on inputs
    (TimingBudget(warmup_ms=1, rep_ms=2, input_copies=1), True, True),   # asked for none
])
def test_no_copies_with_warm_l2_an_unknown_call_or_one_set(budget, call_on, flush):
    timing, seen, original = _timed(budget, call_on, flush)
    assert set(seen) == {original}
    assert timing.extra.get("input_copies") in (None, {"sets": 1})


def test_input_copies_below_one_is_a_usage_error():
    with pytest.raises(UsageError, match="--input-copies 0: expected a whole number from 1"):
        TimingBudget(input_copies=0).check()


def test_the_help_states_the_default_number_of_copies():
    from zlf.config import INPUT_COPIES, TimingBudget
    from zlf.options import TIMING_HELP

    assert f"(default {INPUT_COPIES})" in TIMING_HELP["input_copies"] and TimingBudget().copies() == INPUT_COPIES
