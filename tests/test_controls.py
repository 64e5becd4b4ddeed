"""The process factors of `zlf ab --controls` (zlf.controls) on constructed campaigns whose
factors are known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from zlf import controls, stats
from zlf.ab.analysis import decide


def constructed(rng, rounds=6, points=8, canaries=4, noise=0.005, effect_pct=0.0, moved=None, factors=None):
    """A campaign with a known factor per process (one process per round and side) shared by all its
    points; canaries carry no effect, ``moved`` canaries move by that many percent on B."""
    if factors is None:
        factors = {"A": rng.choice([0.0, math.log(1.04)], rounds, p=[0.7, 0.3]),
                   "B": rng.choice([0.0, math.log(1.04)], rounds, p=[0.7, 0.3])}
    values = {}
    for p in range(points + canaries):
        canary = p >= points
        base = rng.uniform(-2, 2)
        shift = math.log1p((moved or {}).get(p - points, 0.0) / 100) if canary else math.log1p(effect_pct / 100)
        a = np.exp(base + factors["A"] + rng.normal(0, noise, rounds))
        b = np.exp(base + shift + factors["B"] + rng.normal(0, noise, rounds))
        values[f"{'canary' if canary else 'op'}/{p}/float32"] = (list(a), list(b))
    return values, factors


def names(values, prefix):
    return [p for p in values if p.startswith(prefix)]


def test_a_known_factor_per_process_is_recovered():
    rng = np.random.default_rng(1)
    values, f = constructed(rng, canaries=6, noise=0.002)
    norm = controls.normalise(values, names(values, "canary"))
    truth = np.concatenate([f["A"], f["B"]])
    truth -= truth.mean()  # a factor is relative to the campaign's processes
    got = np.array([norm.factors[f"r{k}_{s}"].log for s in "AB" for k in range(1, 7)])
    assert np.abs(got - truth).max() < 0.003  # 0.3 %: the controls' noise / sqrt(6) is 0.08 %
    assert all(0 < fac.se < 0.002 for fac in norm.factors.values())  # the factor's own uncertainty
    assert norm.removed_pct > 80 and not norm.moved
    # every point of a process is divided by its factor: the points' rounds agree again
    for p in names(values, "op"):
        spread = np.std(np.log(norm.values[p][0])), np.std(np.log(values[p][0]))
        assert spread[0] < spread[1] / 3 or spread[1] < 0.004


def test_a_moved_control_is_reported_and_left_out_of_the_factors():
    rng = np.random.default_rng(2)
    values, f = constructed(rng, canaries=4, moved={1: 5.0})
    norm = controls.normalise(values, names(values, "canary"))
    assert [m.point for m in norm.moved] == ["canary/9/float32"]
    assert norm.moved[0].lo_pct > 2.0 and norm.moved[0].delta_pct == pytest.approx(5.0, abs=1.5)
    assert "canary/9/float32" not in norm.used
    line = "\n".join(controls.summary_lines(norm, controls.CANARY))
    assert "control canary/9/float32 MOVED" in line
    # left out, it does not pull B's factors: the points under test keep a zero delta
    results = stats.analyse({p: norm.values[p] for p in names(values, "op")})
    assert all(abs(r.delta_pct) < 1.0 for r in results)


def test_without_processes_that_differ_the_controls_add_no_noise():
    """No process effect: the BLUP shrinks the factors to about 0 (a plain subtraction of the
    controls' means would add their noise to every point)."""
    rng = np.random.default_rng(3)
    zero = {"A": np.zeros(10), "B": np.zeros(10)}
    values, _ = constructed(rng, rounds=10, canaries=2, factors=zero)
    norm = controls.normalise(values, names(values, "canary"))
    assert norm.removed_pct > -15  # at most a little noise added
    assert max(abs(fac.pct) for fac in norm.factors.values()) < 0.3


def test_no_controls_behaves_as_today_and_says_so():
    rng = np.random.default_rng(4)
    values, _ = constructed(rng, canaries=0)
    plain = stats.analyse(values)
    decided = decide(values, stats.Settings(), mode=controls.AUTO, controls=[], why="no canary")
    assert [r.to_json() for r in decided.results] == [r.to_json() for r in plain]
    assert not decided.normalisation.active
    assert "none usable" in controls.summary_lines(decided.normalisation, controls.AUTO)[0]
    off = decide(values, stats.Settings(), mode=controls.NONE, controls=names(values, "op"))
    assert not off.normalisation.active  # --controls none: nothing normalised even with candidates
    assert "off" in controls.summary_lines(off.normalisation, controls.NONE)[0]


def test_slow_mode_processes_no_longer_give_directions():
    """Model (d) of the issue: 30 % of processes in a +4 % mode, shared by all their points. At 3
    rounds the measured values gave every point of a campaign a direction now and then; the
    normalised ones give none and keep the canaries out of the verdicts."""
    rng = np.random.default_rng(5)
    factors = {"A": np.log([1.04, 1.04, 1.04]), "B": np.zeros(3)}  # A's processes all slow
    values, _ = constructed(rng, rounds=3, points=20, canaries=4, factors=factors)
    before = stats.analyse({p: values[p] for p in names(values, "op")})
    assert sum(r.verdict == stats.FASTER for r in before) > 10
    decided = decide(values, stats.Settings(), mode=controls.CANARY, controls=names(values, "canary"),
                     canaries=names(values, "canary"))
    assert all(r.verdict in (stats.SAME, stats.UNSURE) for r in decided.results)
    assert len(decided.results) == 20 and len(decided.controls) == 4
    assert all(r.normalised and r.raw_a_ms == tuple(values[r.point][0]) for r in decided.results)


# ----------------------------------------------------------------------------- in a campaign
def test_canaries_need_shared_processes_and_one_interpreter(tmp_path, monkeypatch, capsys):
    from zlf import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["ab", "--switch", "X", "--controls", "canary", "--process-per-op", "--dry-run", "add"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["zlf: error: --controls canary: canaries need one process per round and side for all ops "
                   "(drop --process-per-op / --unit op)"]
    assert not (tmp_path / "runs").exists()  # refused before anything is written
    assert cli.main(["ab", "--switch", "X", "--dry-run", "add"]) == 0  # auto: the canaries join the shared process
    assert "zlf run add canary_matmul canary_add" in capsys.readouterr().out


@pytest.mark.slow
def test_an_aa_campaign_on_the_cpu_times_the_canaries_and_reports_the_factors(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import _env

    proc = subprocess.run([sys.executable, "-m", "zlf", "ab", "add", "--aa", "--rounds", "3", "--rep-ms", "2",
                           "--warmup-ms", "1", "--backend", "cpu", "--out", "o"], cwd=tmp_path, env=_env(None),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (camp,) = (tmp_path / "o").glob("ab_*")
    doc = json.loads((camp / "summary.json").read_text())
    ctl = doc["controls"]
    # 4 canary points: each used, or dropped as moved -- on a loaded CPU a canary's A/A can differ
    # by more than its noise (the scheduler's doing, not the code's), and is then set aside
    moved = [m["point"] for m in ctl["moved"]]
    assert ctl["mode"] == "auto" and ctl["active"] and ctl["used"]
    assert sorted(ctl["used"] + moved) == sorted(p["point"] for p in ctl["points"]) and len(ctl["points"]) == 4
    assert {p["point"].split("/")[0] for p in ctl["points"]} == {"canary_matmul", "canary_add"}
    # one factor per process, or one per process and kind when the canary kinds disagree (on a
    # loaded CPU the interaction test can fire: which one is the machine's doing, not the code's)
    assert len(ctl["factors"]) in (6, 12) and all(f["process"].startswith("_shared/r") for f in ctl["factors"])
    assert [p["point"].split("/")[0] for p in doc["points"]] == ["add", "add"]  # canaries are no verdicts
    assert all(p["normalised"] for p in doc["points"])
    assert f"controls (auto): {len(ctl['used'])} point(s)" in proc.stdout and "factors: _shared/r1_A" in proc.stdout


def test_a_point_whose_process_ran_no_control_is_left_as_measured():
    """An op re-run alone after it failed in a shared process has processes without canaries."""
    rng = np.random.default_rng(6)
    values, _ = constructed(rng, points=4, canaries=3)
    processes = controls.default_processes(values)
    alone = "op/0/float32"
    processes[alone] = ([f"op/r{k}_A" for k in range(1, 7)], [f"op/r{k}_B" for k in range(1, 7)])
    norm = controls.normalise(values, names(values, "canary"), processes)
    assert norm.active and norm.values[alone] == values[alone]
    assert "ran no control" in norm.unnormalised[alone]
    assert norm.values["op/1/float32"] != values["op/1/float32"]
