"""A scaled-down run of benchmarks/verdict_sim.py: the verdict rule on simulated campaigns.

Fixed seeds and loose bounds; each bound fails for the former rule (A/A interval as a floor,
separate direction floor and SAME margin, linear spending that re-decided every point), whose
audit measured 48 % at the second check and 1.6 % contradictions at the third.
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
    for model in ("a", "c"):
        row = sim.run_cell((model, 0.0, 6, False, False, 10, 101))
        assert row["faster"] + row["slower"] <= 1, row


def test_noise_from_adds_power_instead_of_a_floor(sim):
    without = sim.run_cell(("a", 2.0, 10, False, False, 10, 102))
    pooled = sim.run_cell(("a", 2.0, 10, True, False, 10, 102))
    assert share(without, "slower") >= 0.85 and share(pooled, "slower") >= 0.85, (without, pooled)
    assert without["faster"] == pooled["faster"] == 0


def test_two_campaigns_never_contradict(sim):
    row = sim.run_agreement(("a", 1.0, 6, 10, 103))
    assert row["faster_vs_slower"] == 0
    assert row["same_vs_direction"] / row["points"] <= 0.005, row


def test_adaptive_keeps_the_power_of_fixed_rounds(sim):
    fixed = sim.run_cell(("a", 2.0, 10, False, False, 5, 104))
    adaptive = sim.run_cell(("a", 2.0, 12, False, True, 5, 104))
    assert share(adaptive, "slower") >= share(fixed, "slower") - 0.03, (fixed, adaptive)
    assert adaptive["unsure"] <= fixed["unsure"] + 6 and adaptive["mean_rounds"] <= 12


def test_the_harness_writes_the_documented_rows(sim, tmp_path):
    rows = [sim.run_cell(("c", 3.0, 6, False, False, 2, 105))]
    assert set(rows[0]) >= {"model", "effect_pct", "rounds", "noise_from", "adaptive", "points", "faster", "slower",
                            "same", "unsure"}
    assert sum(rows[0][k] for k in ("faster", "slower", "same", "unsure")) == rows[0]["points"] == 80
    json.dumps(rows, allow_nan=False)
    assert sim.targets(rows + [sim.run_agreement(("a", 1.0, 6, 1, 106))])
