"""ATTACK atk42: the controls' claims (issue 42, docs/ab.md "Controls", docs/measurements.md
"Verdict error rates under clock modes") under noise models the docs do not state.

Own generator (not verdict_sim's): 20 points in 4 ops, half of them compute-bound, plus 4
canaries (2 "matmul" = compute-bound, 2 "add" = memory-bound), one process per round and side.
Verdicts through ``zlf.ab.analysis.decide`` as `zlf ab` calls it. Seeded, small, deterministic.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from zlf import controls as ctl
from zlf import stats
from zlf.ab import OK, Campaign, device_flags
from zlf.ab import report as ab_report
from zlf.ab.analysis import decide, decide_campaign
from zlf.ab.driving import step
from zlf.records import PointRecord
from zlf.rundir import RunDir
from zlf.testing import campaign_data

# named as zlf names its canaries (op first: the kind of kernel is known by the op)
CANARIES = ["canary_matmul/0/f", "canary_matmul/1/f", "canary_add/0/f", "canary_add/1/f"]
COMPUTE_CANARY = np.array([True, True, False, False])


def make(rng, rounds, effect=0.0, npts=20, sd=0.005, slow_p=0.3, slow=0.04, slow_hits="all", side_p=None,
         canary_effect=0.0, slow_size=None):
    names = [f"op{p % 4}/{p}/f" for p in range(npts)]
    compute = np.concatenate([[(p // 4) % 2 == 0 for p in range(npts)], COMPUTE_CANARY])
    n = compute.size
    base = np.log(10.0 ** rng.uniform(-2, 1, n))
    log = base[None, :, None] + sd * rng.normal(size=(2, n, rounds))
    p = np.full((2, rounds), slow_p)
    if side_p is not None:
        p[0], p[1] = side_p
    size = np.full((2, rounds), slow) if slow_size is None else rng.uniform(*slow_size, (2, rounds))
    f = np.log1p(size) * (rng.random((2, rounds)) < p)
    hit = {"all": np.ones(n, bool), "compute": compute, "memory": ~compute}[slow_hits]
    log += f[:, None, :] * hit[None, :, None]
    log[1, :npts] += math.log1p(effect / 100)
    log[1, npts:] += math.log1p(canary_effect / 100) * COMPUTE_CANARY[:, None]
    t = np.exp(log)
    return {nm: (tuple(t[0, i]), tuple(t[1, i])) for i, nm in enumerate(names + CANARIES)}


def kinds(values):
    """The points' kinds as `zlf ab` reads them from their op's flops per byte (make's layout)."""
    return {p: "compute" if (int(p.split("/")[1]) // 4) % 2 == 0 else "memory" for p in values if p not in CANARIES}


def judge(values):
    return decide(values, stats.Settings(), mode=ctl.AUTO, controls=CANARIES, canaries=CANARIES, control_rows=False,
                  kinds=kinds(values))


def tally(results):
    c = {v: 0 for v in stats.VERDICTS}
    for r in results:
        c[r.verdict] += 1
    return c


# ----------------------------------------------------------------------------- A/A false directions
def _aa_false(seed, campaigns, **kw):
    rng = np.random.default_rng(seed)
    false = points = 0
    for _ in range(campaigns):
        c = tally(judge(make(rng, **kw)).results)
        false += c[stats.FASTER] + c[stats.SLOWER]
        points += sum(c.values())
    return false, points


def test_slow_mode_of_documented_shape_gives_no_false_direction_at_3_rounds():
    """Model (d) as documented (all points and canaries +4 %): a regression check of the claim."""
    false, points = _aa_false(11, 15, rounds=3)
    assert false <= 1, f"{false} of {points}"


@pytest.mark.xfail(strict=True, reason="ATTACK: compute-only slow mode, A/A at 3 rounds: 2/1600 = 0.125 % false "
                   "directions after per-kind normalisation (was 0.46 %); the rest are campaigns where the mode hit "
                   "one side's processes only, which 3 rounds cannot tell from a moved kind of canary")
def test_compute_only_slow_mode_keeps_aa_false_directions_at_most_0_1_pct():
    """A clock mode that slows compute-bound kernels only: the factor is a mean over matmul and
    add canaries, so compute points are under-corrected and memory points over-corrected by
    ~2 %, shared by every point of the process. Claim: A/A <= 0.1 % false per point."""
    false, points = _aa_false(12, 80, rounds=3, slow_hits="compute")
    assert false <= max(1, points // 1000), f"{false} of {points} false directions"


def test_slow_mode_of_varying_size_gives_no_false_direction():
    """2-8 % per process (not a fixed 4 %), shared by all points: a common factor, taken out."""
    false, points = _aa_false(14, 15, rounds=3, slow_size=(0.02, 0.08))
    assert false <= 1, f"{false} of {points}"


# ----------------------------------------------------------------------------- side-correlated modes
def test_side_correlated_slow_mode_is_taken_out_and_said():
    """B's processes slow far more often than A's (a real confounder of the comparison): the
    controls take it out and the report says by how much B's processes differ."""
    rng = np.random.default_rng(15)
    values = make(rng, rounds=6, side_p=(0.0, 1.0))
    d = judge(values)
    c = tally(d.results)
    assert c[stats.SLOWER] + c[stats.FASTER] == 0, c
    assert d.normalisation.side_shift_pct == pytest.approx(4.0, abs=0.5)
    lines = "\n".join(ctl.summary_lines(d.normalisation, ctl.AUTO))
    assert "B's processes against A's, by the controls: +4" in lines


def test_a_mode_that_moves_one_kind_of_canary_shows_up():
    """docs/ab.md: "With a mix of compute- and memory-bound canaries, a clock change that moves
    one kind and not the other shows up here too." A +4 % compute-only mode in 30 % of the
    processes: the canaries disagree with each other in every such process."""
    rng = np.random.default_rng(19)
    shown = 0
    for _ in range(10):
        d = judge(make(rng, rounds=6, slow_hits="compute", slow=0.06, slow_p=0.5))
        text = "\n".join(ctl.summary_lines(d.normalisation, ctl.AUTO))
        shown += bool(d.normalisation.moved) or "disagree" in text
    assert shown >= 8, f"shown in {shown} of 10 campaigns"


@pytest.mark.xfail(strict=True, reason="ATTACK: compute-only mode on B's processes far more often (p 0.1 vs 0.7), "
                   "3 rounds: 33/300 = 11 % false directions, all from the 4 of 15 campaigns where every B process "
                   "and no A process was slow: the controls then say 'could not tell which moved' and keep the "
                   "values as measured (indistinguishable from the compiler moving the matmul canaries)")
def test_compute_only_mode_correlated_with_side_gives_no_false_direction():
    """The mode lands on B's processes more often (a real confounder). The controls must take it
    out or say that they could not; an A/A must not get directions."""
    false, points = _aa_false(20, 15, rounds=3, slow_hits="compute", side_p=(0.1, 0.7))
    assert false <= max(1, points // 1000), f"{false} of {points} false directions"


# ----------------------------------------------------------------------------- a canary that moved
def test_matmul_canaries_moved_by_the_compiler_are_reported():
    """The compiler under test changed both matmul canaries (+3 %), the add canaries not: the
    docs promise a moved control is reported (`!!! control P MOVED`)."""
    rng = np.random.default_rng(16)
    d = judge(make(rng, rounds=6, slow_p=0.0, canary_effect=3.0))
    assert d.normalisation.moved, "no control reported as moved"


def test_moved_canaries_do_not_give_unchanged_points_a_direction():
    rng = np.random.default_rng(16)
    false = points = moved = 0
    for _ in range(10):
        d = judge(make(rng, rounds=6, canary_effect=3.0))
        c = tally(d.results)
        false += c[stats.FASTER] + c[stats.SLOWER]
        points += sum(c.values())
        moved += bool(d.normalisation.moved)
    assert false <= max(1, points // 1000), f"{false} of {points} false directions ({moved}/10 reported a move)"


def test_the_canaries_reported_as_moved_are_the_ones_that_moved():
    """Two matmul canaries moved (the compiler reached cuBLAS's path), two add canaries did not:
    a 2-against-2 split the Bonferroni loop cannot settle. Whatever zlf does, it must not name
    the unchanged canaries as moved and keep the moved ones as the factors' basis."""
    rng = np.random.default_rng(16)
    wrong = []
    for i in range(10):
        n = judge(make(rng, rounds=6, canary_effect=3.0)).normalisation
        if any(m.point.startswith("canary_add") for m in n.moved) and n.active:
            wrong.append((i, [m.point for m in n.moved], list(n.used)))
    assert not wrong, wrong


def test_a_uniform_regression_that_reaches_the_unchanged_controls_is_not_silently_removed():
    """Controls are the unchanged points (identical IR) plus points under test; B's launcher got
    slower for every kernel (+3 % everywhere, controls too). Nothing in the controls can tell this
    from a clock mode of B's processes; the campaign must not report SAME for everything
    without an alarm ("!!!") that the sides' processes differ."""
    rng = np.random.default_rng(21)
    values = make(rng, rounds=6, effect=3.0, slow_p=0.0, canary_effect=0.0)
    # the "unchanged" points are controls for free: ops 0 and 1 (10 points), with the regression
    ctrl = [p for p in values if p.startswith(("op0/", "op1/"))]
    d = decide({p: v for p, v in values.items() if not p.startswith("canary")}, stats.Settings(),
               mode=ctl.UNCHANGED, controls=ctrl)
    c = tally(d.results)
    lines = ctl.summary_lines(d.normalisation, ctl.UNCHANGED)
    alarm = any(line.startswith("!!!") for line in lines)
    assert c[stats.SLOWER] > 0 or alarm, (c, lines[:3])


def test_compute_only_slow_mode_keeps_power_at_2pct_10_rounds():
    rng = np.random.default_rng(18)
    slower = points = 0
    for _ in range(8):
        c = tally(judge(make(rng, rounds=10, effect=2.0, slow_hits="compute")).results)
        slower += c[stats.SLOWER]
        points += sum(c.values())
    assert slower >= 0.9 * points, f"{slower} of {points} SLOWER"


# ----------------------------------------------------------------------------- on disk
def _disk_campaign(tmp_path, canary_b_factor=1.0, controls="auto", moved=("canary_matmul/256/float32",
                                                                         "canary_matmul/512/float32"), b_shift=1.0):
    """A 6-round campaign of op `add` (2 points) + canary ops, one shared process per round and
    side, written on disk; B's `moved` canary points are `canary_b_factor` slower."""
    rng = np.random.default_rng(17)
    data = campaign_data(tmp_path, ops=("add", "canary_matmul", "canary_add"), rounds_first=6, max_rounds=6,
                         controls=controls, canary_ops=["canary_matmul", "canary_add"])
    c = Campaign.create(tmp_path / "o", "t", data)
    for k in range(1, 7):
        c.add_round(k)
    points = {"add/1024/float32": 1.0, "add/5000/float32": 8.0, "canary_matmul/256/float32": 0.5,
              "canary_matmul/512/float32": 2.0, "canary_add/1024/float32": 0.3, "canary_add/4096/float32": 0.9}
    slow = {(k, s): 1.04 if rng.random() < 0.3 else 1.0 for k in range(1, 7) for s in "AB"}
    for run in c.runs:
        d = c.run_dir(run)
        d.mkdir(parents=True)
        rd = RunDir(d)
        rd.write_meta({"status": "complete", "warnings": []})
        for point, level in points.items():
            op, shape, dtype = point.split("/")
            if op != run["op"]:
                continue
            t = level * slow[(run["round"], run["side"])] * math.exp(rng.normal(0, 0.003))
            if run["side"] == "B":
                t *= b_shift
            if point in moved and run["side"] == "B":
                t *= canary_b_factor
            per_byte = {"canary_matmul": 50.0, "canary_add": 0.1, "add": 0.1}[op]  # flops per byte
            rd.append(PointRecord(point=point, op=op, shape=(int(shape),), dtype=dtype, status="ok",
                                  timer="host_wall", median_ms=t, gbps=100.0, tflops=100.0 * per_byte / 1000.0))
        run.update(status=OK, rc=0, seconds=0.1, flags=device_flags(d), process=f"_shared/r{run['round']}_{run['side']}")
    c.data["status"] = "complete"
    c.save()
    return c


def test_on_disk_a_moved_control_is_in_the_report_and_summary(tmp_path):
    c = _disk_campaign(tmp_path, canary_b_factor=1.05, moved=("canary_matmul/512/float32",))
    decided, remarks, excluded, alpha = decide_campaign(c)
    text = ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    doc = json.loads((c.path / "summary.json").read_text())
    assert doc["controls"]["active"]
    moved = {m["point"] for m in doc["controls"]["moved"]}
    assert moved == {"canary_matmul/512/float32"}, doc["controls"]["moved"]
    assert "MOVED between the sides" in text


def test_on_disk_two_of_four_moved_controls_are_not_trusted(tmp_path):
    """Both matmul canaries moved, both add canaries not: who moved cannot be told from 2 against
    2, so nothing is normalised and the report and summary.json say so."""
    c = _disk_campaign(tmp_path, canary_b_factor=1.05)
    decided, remarks, excluded, alpha = decide_campaign(c)
    text = ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    doc = json.loads((c.path / "summary.json").read_text())
    assert not doc["controls"]["active"] and doc["controls"]["undecided"]
    assert "could not tell which moved" in text and "values as measured" in text
    assert all(not p.get("normalised") for p in doc["points"])


def test_on_disk_a_shift_of_b_reaching_every_point_rings_and_shows_the_verdicts_as_measured(tmp_path):
    """Every point of B 5 % slower, canaries included (a change that reached the controls): the
    normalisation takes it out, and the report says so loudly and shows both verdicts."""
    c = _disk_campaign(tmp_path, moved=(), b_shift=1.05)
    decided, remarks, excluded, alpha = decide_campaign(c)
    text = ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    doc = json.loads((c.path / "summary.json").read_text())
    assert doc["controls"]["active"] and doc["controls"]["side_shift_alarm"]
    assert "!!! B's processes differ from A's" in text and "as measured" in text
    measured = {e["point"]: e["verdict"] for e in doc["controls"]["as_measured"]}
    assert measured == {"add/1024/float32": stats.SLOWER, "add/5000/float32": stats.SLOWER}
    assert "as measured" in (c.path / "report.md").read_text()


def test_on_disk_points_get_their_kind_from_flops_per_byte(tmp_path):
    """`add` moves bytes like canary_add, not flops like canary_matmul: memory-bound."""
    from zlf.ab.analysis import collect, point_kinds

    c = _disk_campaign(tmp_path, moved=())
    values = collect(c)[0]
    assert point_kinds(c, values) == {"add/1024/float32": "memory", "add/5000/float32": "memory"}


def test_on_disk_a_campaign_without_controls_says_so(tmp_path):
    c = _disk_campaign(tmp_path, controls="none")
    decided, remarks, excluded, alpha = decide_campaign(c)
    text = ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    doc = json.loads((c.path / "summary.json").read_text())
    assert not doc["controls"]["active"]
    assert "controls: off" in text
    assert all(not p.get("normalised") for p in doc["points"])


# ----------------------------------------------------------------------------- adaptive against fixed
def adaptive(values, first=3, most=12):
    """`--until-confident` as drive takes it: looks from round 3, only ops with an undecided
    point get another round; the canaries run in every process (the longest op's rounds)."""
    settings = stats.Settings()
    plan = stats.SpendingPlan(first, most, settings.alpha)
    op = lambda p: p.split("/")[0]  # noqa: E731
    rounds = {op(p): first for p in values if p not in CANARIES}
    frozen: dict = {}
    while True:
        longest = max(rounds.values())
        cut = {p: (a[:rounds.get(op(p), longest)], b[:rounds.get(op(p), longest)]) for p, (a, b) in values.items()}
        results, frozen, extend = step(cut, settings, plan, frozen, op, None, None, ctl.AUTO, CANARIES, CANARIES,
                                       kinds=kinds(values))
        if not extend:
            return results
        for o in extend:
            rounds[o] += 1


def test_adaptive_is_no_worse_than_fixed_under_a_side_correlated_compute_mode():
    """Same simulated data decided adaptively and at a fixed 12 rounds: the adaptive campaign
    must not give more false directions (the confounded mode gives both some)."""
    rng = np.random.default_rng(22)
    fa = ff = 0
    for _ in range(6):
        values = make(rng, rounds=12, slow_hits="compute", side_p=(0.1, 0.7))
        fa += sum(r.verdict in (stats.FASTER, stats.SLOWER) for r in adaptive(values))
        ff += sum(r.verdict in (stats.FASTER, stats.SLOWER) for r in judge(values).results)
    assert fa <= ff, f"adaptive {fa} false directions, fixed 12 rounds {ff} (of 120 points each)"


def test_adaptive_under_the_documented_slow_mode_gives_no_false_direction():
    rng = np.random.default_rng(23)
    false = 0
    for _ in range(4):
        false += sum(r.verdict in (stats.FASTER, stats.SLOWER) for r in adaptive(make(rng, rounds=12)))
    assert false == 0


def test_adaptive_is_no_worse_than_fixed_when_the_matmul_canaries_moved():
    rng = np.random.default_rng(24)
    fa = ff = 0
    for _ in range(3):
        values = make(rng, rounds=12, canary_effect=3.0)
        fa += sum(r.verdict in (stats.FASTER, stats.SLOWER) for r in adaptive(values))
        ff += sum(r.verdict in (stats.FASTER, stats.SLOWER) for r in judge(values).results)
    assert fa <= ff, f"adaptive {fa} false directions, fixed 12 rounds {ff} (of 60 points each)"
