"""The statistics of ``zlf ab`` on synthetic campaigns whose truth is known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from zlf import stats

ALPHA = 0.05


def simulate(rng, points=20, rounds=6, effect_pct=0.0, noise_pct=2.0, round_pct=3.0, tails="normal"):
    """One campaign: per round a shared machine state (cancels in the pair), per run its own
    noise; B's true time is A's times (1 + effect)."""
    values = {}
    for p in range(points):
        base = 10.0 ** rng.uniform(-3, 1)
        shared = rng.normal(0.0, round_pct / 100, rounds)
        if tails == "t3":  # heavy tails: one odd process now and then
            noise = rng.standard_t(3, (2, rounds)) * noise_pct / 100 / math.sqrt(3)
        else:
            noise = rng.normal(0.0, noise_pct / 100, (2, rounds))
        a = base * np.exp(shared + noise[0])
        b = base * (1 + effect_pct / 100) * np.exp(shared + noise[1])
        values[f"op/{p}/float32"] = (list(a), list(b))
    return values


@pytest.mark.parametrize("tails", ["normal", "t3"])
def test_aa_false_direction_rate_is_below_alpha(tails):
    rng = np.random.default_rng(7)
    campaigns = 300
    wrong = 0
    for _ in range(campaigns):
        results = stats.analyse(simulate(rng, tails=tails), stats.Settings(alpha=ALPHA))
        wrong += any(r.verdict in (stats.FASTER, stats.SLOWER) for r in results)
    # The rule bounds P(any wrong verdict in a campaign) by alpha; allow 2 standard errors of the estimate.
    assert wrong / campaigns <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / campaigns)


def test_aa_without_floor_or_flip_rule_is_still_controlled_by_the_interval():
    # The interval alone (Bonferroni over points) must control the family-wise rate.
    rng = np.random.default_rng(11)
    campaigns, m, wrong = 300, 20, 0
    for _ in range(campaigns):
        values = simulate(rng, points=m)
        conf = 1 - ALPHA / m
        any_excludes_zero = False
        for a, b in values.values():
            lo, hi = stats.t_interval(stats.log_deltas(a, b), conf)
            any_excludes_zero |= lo > 0 or hi < 0
        wrong += any_excludes_zero
    assert wrong / campaigns <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / campaigns)


@pytest.mark.parametrize("effect, expected", [(15.0, stats.SLOWER), (-15.0, stats.FASTER)])
def test_a_real_effect_is_detected(effect, expected):
    rng = np.random.default_rng(3)
    hits = total = 0
    for _ in range(50):
        results = stats.analyse(simulate(rng, effect_pct=effect, noise_pct=1.0), stats.Settings(alpha=ALPHA))
        hits += sum(r.verdict == expected for r in results)
        total += len(results)
        assert not any(r.verdict == (stats.FASTER if expected == stats.SLOWER else stats.SLOWER) for r in results)
    assert hits / total >= 0.95


def test_no_effect_with_low_noise_is_same():
    rng = np.random.default_rng(5)
    results = stats.analyse(simulate(rng, noise_pct=0.2), stats.Settings(alpha=ALPHA, margin_pct=2.0))
    assert all(r.verdict == stats.SAME for r in results)


def test_false_same_rate_below_alpha_when_the_effect_is_beyond_the_margin():
    rng = np.random.default_rng(13)
    campaigns, wrong = 200, 0
    for _ in range(campaigns):
        results = stats.analyse(simulate(rng, effect_pct=2.5, noise_pct=0.8), stats.Settings(alpha=ALPHA, margin_pct=2.0))
        wrong += any(r.verdict == stats.SAME for r in results)
    assert wrong / campaigns <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / campaigns)


def test_a_flipping_point_never_gets_a_direction():
    a = [1.0] * 6
    b = [1.10, 1.12, 1.11, 0.99, 1.10, 1.09]
    (r,) = stats.analyse({"p": (a, b)})
    assert r.flips == 1
    assert r.verdict not in (stats.FASTER, stats.SLOWER)
    assert stats.sign_flips([0.1, -0.1, 0.2, -0.3]) == 2
    assert stats.sign_flips([0.1, 0.2]) == 0


def test_effect_below_the_noise_floor_gets_no_direction():
    a = [1.0] * 6
    b = [1.010, 1.011, 1.009, 1.010, 1.012, 1.010]  # a clean +1% ...
    (r,) = stats.analyse({"p": (a, b)}, stats.Settings(min_effect_pct=0.5))
    assert r.verdict == stats.SLOWER
    (r,) = stats.analyse({"p": (a, b)}, floors={"p": 3.0})  # ... under an A/A floor of 3%
    assert r.verdict == stats.SAME  # inside the 2% margin
    (r,) = stats.analyse({"p": (a, [x * 1.02 for x in b])}, floors={"p": 5.0})  # +3%, floor 5%
    assert r.verdict == stats.UNSURE  # no direction below the floor, and beyond the margin


def test_blocked_points_get_no_direction():
    a, b = [1.0] * 4, [2.0, 2.01, 1.99, 2.0]
    (r,) = stats.analyse({"p": (a, b)}, notes={"p": "mixed timers"})
    assert r.verdict == stats.UNSURE and r.note == "mixed timers"


def test_one_round_has_no_interval():
    (r,) = stats.analyse({"p": ([1.0], [2.0])})
    assert r.verdict == stats.UNSURE and r.delta_lo_pct is None and r.mde_pct is None


def test_numbers_of_one_point():
    a = [1.00, 1.02, 0.98, 1.01]
    b = [1.20, 1.22, 1.19, 1.21]
    (r,) = stats.analyse({"p": (a, b)})
    assert r.a_median_ms == pytest.approx(1.005)
    assert r.delta_lo_pct < r.delta_median_pct < r.delta_hi_pct
    assert 18 < r.delta_median_pct < 22
    assert r.noise_a_pct == pytest.approx(100 * 1.4826 * np.median(np.abs(np.log(a) - np.median(np.log(a)))))
    assert r.aa_floor_pct == pytest.approx(max(abs(r.delta_lo_pct), abs(r.delta_hi_pct)))
    assert r.confidence == pytest.approx(1 - ALPHA)


def test_smallest_detectable_effect_shrinks_with_rounds():
    d = np.array([0.02, -0.01, 0.01, -0.02] * 6)
    mde = [stats.min_detectable_pct(d[:n], 0.05, 0.8) for n in (3, 6, 12, 24)]
    assert mde == sorted(mde, reverse=True)
    assert stats.min_detectable_pct(d[:1], 0.05, 0.8) is None


def test_look_alphas_sum_to_alpha():
    first, top = 3, 12
    spent = [stats.look_alpha(first, 0, top, ALPHA)] + [stats.look_alpha(n, n - 1, top, ALPHA) for n in range(first + 1, top + 1)]
    assert sum(spent) == pytest.approx(ALPHA)
    assert all(x > 0 for x in spent)


def test_adaptive_aa_false_direction_rate_is_below_alpha():
    """Repeated looks (stop as soon as no point is UNSURE) keep the campaign-wide error <= alpha."""
    rng = np.random.default_rng(17)
    campaigns, first, top, m, wrong = 150, 3, 10, 10, 0
    settings = stats.Settings(alpha=ALPHA)
    for _ in range(campaigns):
        full = simulate(rng, points=m, rounds=top)
        for n in range(first, top + 1):
            alpha = stats.look_alpha(n, 0 if n == first else n - 1, top, ALPHA)
            values = {p: (a[:n], b[:n]) for p, (a, b) in full.items()}
            results = stats.analyse(values, settings, alpha=alpha)
            if any(r.verdict in (stats.FASTER, stats.SLOWER) for r in results):
                wrong += 1
                break
            if all(r.verdict != stats.UNSURE for r in results):
                break
    assert wrong / campaigns <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / campaigns)


def test_p_value_matches_scipy_t_test():
    from scipy.stats import ttest_1samp

    d = [0.01, 0.03, -0.005, 0.02, 0.012]
    assert stats.p_value(d) == pytest.approx(ttest_1samp(d, 0.0).pvalue)


def test_counts_and_floors_from_summary():
    results = stats.analyse({"p": ([1.0] * 3, [1.0, 1.001, 0.999]), "q": ([1.0] * 3, [2.0, 2.1, 1.9])})
    assert sum(stats.counts(results).values()) == 2
    floors = stats.aa_floors([r.to_json() for r in results])
    assert set(floors) == {"p", "q"}
