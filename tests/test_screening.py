"""The two-stage rule of a library campaign (zlf.ab.screening) and the BH/BY step-up of zlf.stats,
on synthetic values whose truth is known (fixed seeds: deterministic)."""
from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from scipy.stats import false_discovery_control

from zlf import stats
from zlf.ab import screening


def library(rng, points=60, rounds=12, changed=(), effect_pct=5.0, noise_pct=0.5, per_op=4):
    """``{point: (A, B)}``: ``points`` points in ops of ``per_op``, ``rounds`` rounds, normal noise per
    process; the points in ``changed`` (indices) are ``effect_pct`` slower on B."""
    values = {}
    for p in range(points):
        base = 10.0 ** rng.uniform(-2, 1)
        noise = rng.normal(0.0, noise_pct / 100, (2, rounds))
        effect = math.log1p(effect_pct / 100) if p in changed else 0.0
        values[f"op{p // per_op}/{p}/float32"] = (list(base * np.exp(noise[0])), list(base * np.exp(noise[1] + effect)))
    return values


def op_of(point):
    return point.split("/")[0]


def drive(values, plan, settings=stats.Settings()):
    """Run the library rule as the driver does: screen rounds for every op, then a round more only
    for the ops the last look extends, until none."""
    rounds = {op_of(p): plan.screen_rounds for p in values}
    state = screening.State()
    looks = 0
    while True:
        cut = {p: (a[:rounds[op_of(p)]], b[:rounds[op_of(p)]]) for p, (a, b) in values.items()}
        st = screening.step(cut, settings, plan, state, op_of)
        state, looks = st.state, looks + 1
        if st.done:
            return st, looks
        for op in st.extend:
            rounds[op] += 1


def test_bh_step_up_is_scipys_false_discovery_control_at_a_fixed_look():
    rng = np.random.default_rng(5)
    # effects spread from nothing to clear, so that p-values fall on both sides of BH's thresholds
    values = {}
    for p in range(80):
        base = 10.0 ** rng.uniform(-2, 1)
        noise = rng.normal(0.0, 0.01, (2, 6))
        eff = math.log1p(rng.uniform(0.0, 0.05))
        values[f"op/{p}/float32"] = (list(base * np.exp(noise[0])), list(base * np.exp(noise[1] + eff)))
    settings = stats.Settings(method=stats.BH, pairing=stats.UNPAIRED, trim=0.0)
    results = stats.analyse(values, settings)
    # each point's best verdict and its p-value, as the rule computes them; SAME is judged per
    # point, so only the directions enter the step-up (the others count in m with p = 1)
    ps = []
    for a, b in values.values():
        v, p = stats.decision(stats.estimate(a, b, stats.UNPAIRED, 0.0), settings.min_effect_pct)
        ps.append(p if v in (stats.SLOWER, stats.FASTER) else 1.0)
    adjusted = false_discovery_control(ps, method="bh")
    expected = {p for p, q in zip(values, adjusted) if q <= settings.alpha}
    got = {r.point for r in results if r.verdict in (stats.SLOWER, stats.FASTER)}
    assert expected and got == expected
    assert len(expected) < sum(p < 1.0 for p in ps)  # some directions fail: the test can tell


def test_by_is_stricter_than_bh_and_bh_decides_more_than_holm():
    rng = np.random.default_rng(9)
    values = library(rng, points=400, rounds=6, changed=range(0, 400, 20), effect_pct=3.0, noise_pct=0.8)
    slower = {m: sum(r.verdict == stats.SLOWER for r in stats.analyse(values, stats.Settings(method=m)))
              for m in stats.METHODS}
    assert slower[stats.HOLM] < slower[stats.BH]
    assert slower[stats.BY] <= slower[stats.BH]


def test_bh_judges_same_per_point_not_over_the_family():
    # 300 quiet unchanged points: Holm's first step tests at alpha / 300, BH's SAME at alpha
    rng = np.random.default_rng(2)
    values = library(rng, points=300, rounds=4, noise_pct=0.4)
    same = {m: sum(r.verdict == stats.SAME for r in stats.analyse(values, stats.Settings(method=m)))
            for m in (stats.HOLM, stats.BH)}
    assert same[stats.BH] > same[stats.HOLM]


def test_screen_clears_unchanged_points_and_confirms_changed_ones():
    rng = np.random.default_rng(1)
    changed = {0, 13, 27}
    values = library(rng, points=60, changed=changed, effect_pct=8.0, noise_pct=0.3)
    st, _ = drive(values, screening.Plan())
    verdicts = {r.point: r.verdict for r in st.results}
    slower = {p for p, v in verdicts.items() if v == stats.SLOWER}
    assert slower == {p for p in values if int(p.split("/")[1]) in changed}
    assert not any(v == stats.FASTER for v in verdicts.values())
    assert st.state.cleared and not set(st.state.cleared) & slower
    assert all(st.stage[p] == screening.CONFIRM for p in slower)
    # cleared points ran the screen's rounds only (their op held no selected point)
    selected_ops = {op_of(p) for p in st.state.selected}
    for p in st.state.cleared:
        if op_of(p) not in selected_ops:
            assert st.rounds[p] == 3
    assert sum(st.rounds.values()) / len(st.rounds) < 12


def test_later_looks_keep_the_whole_library_as_the_family():
    # the looks after the screen analyse only the open points, but BH's m is the library's size:
    # the same open points against a larger family decide no more directions than alone
    rng = np.random.default_rng(4)
    values = library(rng, points=40, rounds=6, changed=range(0, 40, 2), effect_pct=2.5, noise_pct=1.0)
    alone = stats.analyse(values, stats.Settings(method=stats.BH))
    within = stats.analyse(values, stats.Settings(method=stats.BH, family=4000))
    count = [sum(r.verdict in (stats.SLOWER, stats.FASTER) for r in rs) for rs in (alone, within)]
    assert count[0] > count[1]
    # Holm's steps start at alpha / m over the whole library too: the points outside the values
    # were cleared at their own level, not at a Holm step, so they take no step down
    values = library(np.random.default_rng(4), points=40, rounds=6, changed=range(0, 40, 2), effect_pct=5.0,
                     noise_pct=1.0)
    holm = stats.analyse(values, stats.Settings(method=stats.HOLM, family=4000))
    holm_alone = stats.analyse(values, stats.Settings(method=stats.HOLM))
    count = [sum(r.verdict in (stats.SLOWER, stats.FASTER) for r in rs) for rs in (holm_alone, holm)]
    assert count[0] > count[1] > 0
    assert all(r.confidence >= 1 - 2 * 0.05 / (4000 - i) for i, r in enumerate(
        sorted((r for r in holm if r.verdict in (stats.SLOWER, stats.FASTER)), key=lambda r: r.p_value)))


def test_a_selected_point_is_judged_on_all_its_rounds():
    # a point that is slower in every round but too noisy to be cleared at the screen: its row
    # at the end holds the screen's rounds and the later ones
    rng = np.random.default_rng(12)
    values = library(rng, points=8, rounds=12, changed={0}, effect_pct=6.0, noise_pct=1.0)
    st, _ = drive(values, screening.Plan())
    p0 = next(iter(values))
    row = next(r for r in st.results if r.point == p0)
    assert p0 in st.state.selected and row.verdict == stats.SLOWER
    assert row.a_ms == tuple(values[p0][0][:row.rounds]) and row.rounds > 3


def test_confirmation_stops_at_the_budget_with_unsure():
    # every point noisy against delta: nothing is decided, and the campaign stops at max_rounds
    rng = np.random.default_rng(6)
    values = library(rng, points=8, rounds=20, noise_pct=6.0)
    plan = screening.Plan(screen_rounds=3, max_rounds=8)
    st, looks = drive(values, plan)
    assert st.done and looks == 1 + (8 - 3)  # the screen, then a look after each later round
    assert max(st.rounds.values()) == 8
    assert any(r.verdict == stats.UNSURE for r in st.results)


def test_step_before_the_screen_is_complete_asks_for_the_missing_rounds():
    rng = np.random.default_rng(8)
    values = library(rng, points=8, rounds=3)
    cut = {p: (a[:2], b[:2]) if op_of(p) == "op1" else (a, b) for p, (a, b) in values.items()}
    st = screening.step(cut, stats.Settings(), screening.Plan(), screening.State(), op_of)
    assert st.extend == ["op1"] and not st.state.screened
    assert all(r.verdict == stats.UNSURE for r in st.results)


def test_a_failed_selected_op_does_not_hold_the_campaign_open():
    rng = np.random.default_rng(10)
    values = library(rng, points=8, rounds=3, noise_pct=5.0)
    st = screening.step(values, stats.Settings(), screening.Plan(), screening.State(), op_of)
    assert st.state.selected
    gone = {p: v for p, v in values.items() if op_of(p) != "op0"}  # op0 failed in its confirmation round
    later = screening.step(gone, stats.Settings(), screening.Plan(), st.state, op_of)
    assert "op0" not in later.extend


def test_state_and_plan_round_trip_through_json():
    state = screening.State(True, ("a",), ("b", "c"), {"b": (stats.SLOWER, 4)})
    assert screening.State.from_json(state.to_json()) == state
    plan = screening.Plan(4, 10, stats.BY)
    assert screening.Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("plan, message", [
    (screening.Plan(screen_rounds=2), "the screen needs at least 3 rounds"),
    (screening.Plan(screen_rounds=3, max_rounds=3), "must leave confirmation rounds after the 3 of the screen"),
    (screening.Plan(method="fdr"), "unknown error control 'fdr'"),
])
def test_plan_check_says_what_is_wrong(plan, message):
    with pytest.raises(ValueError, match=message):
        plan.check()
    screening.Plan().check()


def test_statement_names_the_rate_and_the_procedure():
    settings = stats.Settings(alpha=0.1)
    assert "false discovery rate" in screening.statement(screening.Plan(), settings)
    assert "Benjamini-Yekutieli" in screening.statement(attrs.evolve(screening.Plan(), method=stats.BY), settings)
    assert "family-wise" in screening.statement(screening.Plan(method=stats.HOLM), settings)
    assert "<= 0.1" in screening.statement(screening.Plan(), settings)
