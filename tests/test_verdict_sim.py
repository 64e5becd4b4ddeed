"""A scaled-down run of benchmarks/verdict_sim.py: the verdict rule on simulated campaigns.

Fixed seeds and loose bounds; each bound fails for the former rule (A/A interval as a floor,
separate direction floor and SAME margin, linear spending that re-decided every point), whose
audit measured 48 % at the second check and 1.6 % contradictions at the third, and the slow-mode
bound for a rule without controls (a process-wide factor reads as an effect or as noise).
Cells are ``(model, effect, rounds, --noise-from, adaptive, controls, points, campaigns, seed)``.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[1] / "benchmarks" / "verdict_sim.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("verdict_sim", SIM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def share(row, key):
    return row[key] / row["points"]


def test_aa_gives_no_direction(sim):
    for model in ("a", "c", "d"):
        row = sim.run_cell((model, 0.0, 6, False, False, True, 20, 10, 101))
        assert row["faster"] + row["slower"] <= 1, row


def test_slow_mode_processes_are_taken_out_by_the_controls(sim):
    """Model (d): a +4 % slow mode in 30 % of processes, shared by their points. Without controls
    +3 % at 6 rounds was called SLOWER for 9.7 % of points; with the canaries' factors taken out,
    for nearly all."""
    with_controls = sim.run_cell(("d", 3.0, 6, False, False, True, 20, 8, 107))
    without = sim.run_cell(("d", 3.0, 6, False, False, False, 20, 8, 107))
    assert share(with_controls, "slower") >= 0.9 > 0.5 > share(without, "slower"), (with_controls, without)
    assert with_controls["faster"] == 0


def test_noise_from_adds_power_instead_of_a_floor(sim):
    without = sim.run_cell(("a", 2.0, 10, False, False, True, 20, 10, 102))
    pooled = sim.run_cell(("a", 2.0, 10, True, False, True, 20, 10, 102))
    assert share(without, "slower") >= 0.85 and share(pooled, "slower") >= 0.85, (without, pooled)
    assert without["faster"] == pooled["faster"] == 0


def test_two_campaigns_never_contradict(sim):
    row = sim.run_agreement(("a", 1.0, 6, True, 20, 10, 103))
    assert row["faster_vs_slower"] == 0
    assert row["same_vs_direction"] / row["points"] <= 0.01, row


def test_adaptive_keeps_the_power_of_fixed_rounds(sim):
    fixed = sim.run_cell(("a", 2.0, 10, False, False, True, 20, 5, 104))
    adaptive = sim.run_cell(("a", 2.0, 12, False, True, True, 20, 5, 104))
    assert share(adaptive, "slower") >= share(fixed, "slower") - 0.03, (fixed, adaptive)
    assert adaptive["unsure"] <= fixed["unsure"] + 6 and adaptive["mean_rounds"] <= 12


def test_the_harness_writes_the_documented_rows(sim, tmp_path):
    rows = [sim.run_cell(("c", 3.0, 6, False, False, True, 20, 2, 105))]
    assert set(rows[0]) >= {"model", "effect_pct", "rounds", "noise_from", "adaptive", "controls", "points", "faster",
                            "slower", "same", "unsure", "trim10"}
    assert sum(rows[0][k] for k in ("faster", "slower", "same", "unsure")) == rows[0]["points"] == 40
    json.dumps(rows, allow_nan=False)
    assert sim.targets(rows + [sim.run_agreement(("a", 1.0, 6, True, 20, 1, 106))])
    lo, hi = sim.wilson(0, 1000)
    assert lo == 0.0 and 0.3 < hi < 0.5  # the 95 % interval of 0 in 1000, percent


def test_a_library_campaign_screens_then_confirms(sim):
    """A small library (60 ops of 4 points, 10 of them changed: +2 %, +5 %, -3 %, +200 %) under
    the clock-mode model: the two-stage rule finds the large changes, gives no unchanged point a
    direction, and spends fewer rounds than the fixed design it is compared with."""
    two = sim.run_library(("d", "two-stage", 3, 12, "bh", 2, 111), ops=60)
    fixed = sim.run_library(("d", "fixed", None, 12, "bh", 2, 111), ops=60)
    for row in (two, fixed):
        eff = row["by_effect"]
        assert eff["200"]["right"] == eff["200"]["points"] and eff["5"]["right"] == eff["5"]["points"], row
        assert eff["0"]["wrong"] == 0 and row["campaigns_with_false_direction"] == 0, row
    assert two["mean_rounds"] < 0.9 * fixed["mean_rounds"] == 0.9 * 12
