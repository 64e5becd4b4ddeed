"""Monte-Carlo check of `zlf ab`'s verdict rule: simulated campaigns through zlf's own code.

A campaign is 20 points in 4 ops (``--points 40``: 4 x 10), run as `zlf ab` runs them by default:
one process per round and side for every op, odd rounds A then B, even rounds B then A. Each
process also times the 4 canary points (`--controls`, docs/ab.md "Controls"), which carry no effect.
A point's value in a process is its level x the process's factor x its own noise; the models:

  a      N(0, 0.5 %) per point and process
  b      N(0, 3 %)
  c      0.5 % x t(3) (heavy tails)
  h      a + heating: a process's factor 1-2 % x (1 - exp(-t / 2 rounds)), t when it ran
  d      slow mode: a process is +4 % with probability 0.3, shared by all its points, + a
  drift  a + a trend of +0.5 % per round shared by every process (t when it ran)

(the in-process noise, 0.2 % over 31 samples, enters as the spread of their median.)
B carries the true effect on every point but the canaries. Verdicts come from
``zlf.ab.analysis.decide`` (the controls' normalisation, then ``zlf.stats.analyse``: what
``zlf ab`` reports) and ``zlf.ab.driving.step`` (one look of ``--until-confident``, first look 3,
at most 12, as ``zlf.ab.driving.drive`` takes it). ``--noise-from`` cells first run a 6-round
A/A of the same points through the same code and pool its summary.json entries
(``stats.aa_entries``). Cells with ``controls: false`` run without canaries (``--controls none``).

    python benchmarks/verdict_sim.py --json OUT.json                 # the targets' cells
    python benchmarks/verdict_sim.py --quick --json OUT.json         # a small grid (a minute)
    python benchmarks/verdict_sim.py --campaigns 300 --workers 2     # campaigns per cell, processes

OUT.json is a list of cells ``{model, effect_pct, rounds, noise_from, adaptive, controls, points,
campaigns, faster, slower, same, unsure, trim10}`` (counts; adaptive cells add ``mean_rounds``),
``kind: "agreement"`` rows (two independent campaigns of the same points) and ``kind: "mde"`` rows
(power at the median MDE campaigns carrying that effect report). A table of targets with 95 %
Wilson intervals is printed at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time

import numpy as np

from zlf import controls as ctl
from zlf import stats
from zlf.ab.analysis import decide
from zlf.ab.driving import step

MODELS = ("a", "b", "c", "h", "d", "drift")
OPS, SAMPLES, IN_PROCESS = 4, 31, 0.002
CANARIES = 4  # canary_matmul and canary_add at two sizes each, as zlf ab adds them
FIRST_LOOK, MAX_ROUNDS = 3, 12
AA_ROUNDS = 6
#: the spread of the median of SAMPLES in-process samples (normal: sqrt(pi / 2) / sqrt(n) of one)
MEDIAN_SD = IN_PROCESS * math.sqrt(math.pi / 2.0 / SAMPLES)


# ----------------------------------------------------------------------------- simulated campaigns
def process_times(rounds: int) -> np.ndarray:
    """``t[side, round]``: when each process ran, in rounds (odd rounds A first, even B first)."""
    k = np.arange(rounds)
    first = (k % 2 == 0)
    return np.stack([k + np.where(first, 0.25, 0.75), k + np.where(first, 0.75, 0.25)])


def campaign(rng, model: str, effect_pct: float, rounds: int, bases, canaries: int = CANARIES) -> dict:
    """``{point: (A per round, B per round)}`` of one simulated campaign; canary points last."""
    n = bases.size
    shape = (2, n, rounds)
    if model == "b":
        noise = rng.normal(0.0, 0.03, shape)
    elif model == "c":
        noise = 0.005 * rng.standard_t(3, shape)
    else:
        noise = rng.normal(0.0, 0.005, shape)
    log = bases[None, :, None] + noise + rng.normal(0.0, MEDIAN_SD, shape)
    t = process_times(rounds)
    if model == "h":
        log += (rng.uniform(0.01, 0.02) * (1.0 - np.exp(-t / 2.0)))[:, None, :]
    elif model == "d":
        log += (math.log(1.04) * (rng.random((2, rounds)) < 0.3))[:, None, :]
    elif model == "drift":
        log += (math.log1p(0.005) * t)[:, None, :]
    log[1, : n - canaries] += math.log1p(effect_pct / 100.0)
    times = np.exp(log)
    per_op = (n - canaries) // OPS
    names = [f"op{p // per_op}/{p}/float32" for p in range(n - canaries)] + [f"canary/{c}/float32" for c in range(canaries)]
    return {name: (times[0, p], times[1, p]) for p, name in enumerate(names)}


def op_of(point: str) -> str:
    return point.split("/")[0]


def canary_points(values) -> list:
    return [p for p in values if op_of(p) == "canary"]


def judge(values, settings, noise, controls: bool):
    """``zlf.ab.analysis.decide`` as `zlf ab` calls it: canaries as controls, or none."""
    can = canary_points(values)
    if controls:
        return decide(values, settings, noise, mode=ctl.AUTO, controls=can, canaries=can, control_rows=False)
    return decide({p: v for p, v in values.items() if p not in can}, settings, noise, mode=ctl.NONE, why="--controls none")


def aa_noise(rng, model, bases, settings, controls) -> dict:
    """A 6-round A/A of the same points, through the same code, read as --noise-from reads its
    summary.json's point entries."""
    decided = judge(campaign(rng, model, 0.0, AA_ROUNDS, bases, CANARIES if controls else 0), settings, None, controls)
    return stats.aa_entries([r.to_json() for r in decided.results])


def adaptive(values, settings, noise, controls) -> tuple:
    """``--until-confident``: looks after rounds 3..12, only ops with an undecided point go on;
    the canaries run in every process, i.e. as many rounds as the longest op."""
    plan = stats.SpendingPlan(FIRST_LOOK, MAX_ROUNDS, settings.alpha)
    can = canary_points(values) if controls else []
    values = values if controls else {p: v for p, v in values.items() if p not in canary_points(values)}
    rounds = {op_of(p): FIRST_LOOK for p in values if p not in can}
    frozen: dict = {}
    while True:
        longest = max(rounds.values())
        cut = {p: (a[:rounds.get(op_of(p), longest)], b[:rounds.get(op_of(p), longest)]) for p, (a, b) in values.items()}
        mode = ctl.AUTO if controls else ctl.NONE
        results, frozen, extend = step(cut, settings, plan, frozen, op_of, noise, None, mode, can, can)
        if not extend:
            return results, float(np.mean([len(cut[r.point][0]) for r in results]))
        for op in extend:
            rounds[op] += 1


# ----------------------------------------------------------------------------- cells
def run_cell(job) -> dict:
    model, effect, rounds, noise_from, is_adaptive, controls, points, campaigns, seed = job
    rng = np.random.default_rng(seed)
    settings = stats.Settings()
    c = {v: 0 for v in stats.VERDICTS}
    used, mde, trim10, campaigns_wrong = [], [], 0, 0
    for _ in range(campaigns):
        bases = np.log(10.0 ** rng.uniform(-2, 1, points + CANARIES))
        noise = aa_noise(rng, model, bases, settings, controls) if noise_from else None
        values = campaign(rng, model, effect, MAX_ROUNDS if is_adaptive else rounds, bases)
        if is_adaptive:
            results, mean_rounds = adaptive(values, settings, noise, controls)
            used.append(mean_rounds)
        else:
            results = judge(values, settings, noise, controls).results
        for k, n in stats.counts(results).items():
            c[k] += n
        campaigns_wrong += any(r.verdict in wrong_verdicts(effect, settings) for r in results)
        trim10 += bool(results) and results[0].trim > 0
        mde += [r.mde_pct for r in results if r.mde_pct is not None]
    row = {"model": model, "effect_pct": effect, "rounds": rounds, "noise_from": noise_from, "adaptive": is_adaptive,
           "controls": controls, "campaigns": campaigns, "points": campaigns * points, "faster": c[stats.FASTER],
           "slower": c[stats.SLOWER], "same": c[stats.SAME], "unsure": c[stats.UNSURE], "trim10": trim10,
           "campaigns_wrong": campaigns_wrong}
    if is_adaptive:
        row["mean_rounds"] = float(np.mean(used))
    if mde:
        row["median_mde_pct"] = float(np.median(mde))
    return row


def wrong_verdicts(effect: float, settings) -> set:
    """The verdicts that are wrong for a true effect (at exactly δ both SLOWER and SAME are)."""
    if effect == 0.0:
        return {stats.FASTER, stats.SLOWER}
    if abs(effect - settings.min_effect_pct) < 1e-9:
        return {stats.FASTER, stats.SLOWER, stats.SAME}
    return {stats.FASTER, stats.SAME} if effect > settings.min_effect_pct else {stats.FASTER}


def run_agreement(job) -> dict:
    """Two independent campaigns on the same points: how often do their verdicts contradict?"""
    model, effect, rounds, controls, points, campaigns, seed = job
    rng = np.random.default_rng(seed)
    settings = stats.Settings()
    same_vs_dir = opposite = 0
    for _ in range(campaigns):
        bases = np.log(10.0 ** rng.uniform(-2, 1, points + CANARIES))
        one, two = (judge(campaign(rng, model, effect, rounds, bases), settings, None, controls).results for _ in range(2))
        for r1, r2 in zip(one, two):
            pair = {r1.verdict, r2.verdict}
            same_vs_dir += stats.SAME in pair and bool(pair & {stats.FASTER, stats.SLOWER})
            opposite += pair == {stats.FASTER, stats.SLOWER}
    return {"kind": "agreement", "model": model, "effect_pct": effect, "rounds": rounds, "controls": controls,
            "points": campaigns * points, "same_vs_direction": same_vs_dir, "faster_vs_slower": opposite}


def grid(size: str, campaigns: int, points: int, seed: int) -> list:
    """The cells: ``quick`` (models a and d, few cells) or ``targets`` (every target's cells)."""
    cells = set()
    models = ("a", "d") if size == "quick" else MODELS
    for model in models:
        for rounds in ((3, 6) if size == "quick" else (3, 6, 10, 12)):
            for nf in (False, True):
                cells.add((model, 0.0, rounds, nf, False, True))  # A/A false verdicts
        for nf in ((False,) if size == "quick" else (False, True)):
            cells.add((model, 0.0, MAX_ROUNDS, nf, True, True))  # adaptive A/A against fixed 12
    cells |= {("a", 2.0, 10, False, False, True), ("d", 2.0, 10, False, False, True), ("d", 3.0, 6, False, False, True)}
    if size != "quick":
        cells |= {("a", 2.0, 10, True, False, True), ("d", 2.0, 10, False, False, False),
                  ("d", 3.0, 6, False, False, False), ("d", 0.0, 3, False, False, False),
                  ("d", 0.0, 6, False, False, False), ("c", 2.0, 10, False, False, True), ("c", 2.0, 10, True, False, True),
                  ("a", 1.0, MAX_ROUNDS, False, False, True), ("a", 1.0, MAX_ROUNDS, False, True, True)}
    jobs = sorted(cells, key=lambda c: (c[0], c[4], c[2], c[1], c[3], c[5]))
    return [j + (points, campaigns, seed + i) for i, j in enumerate(jobs)]


def pct_of(row, key) -> float:
    return 100.0 * row[key] / row["points"]


def simulate(size="targets", campaigns=300, points=20, seed=1, workers=1, progress=None, mde_campaigns=None) -> list:
    jobs = grid(size, campaigns, points, seed)
    models = ("a", "d") if size == "quick" else MODELS
    agree = [(m, 1.0, 6, True, points, campaigns, seed + 10_000 + i) for i, m in enumerate(("a", "d"))]
    mde_n = mde_campaigns or campaigns
    rows: list = []

    def collect(fn, batch):
        out = []
        for row in pool.imap(fn, batch):
            out.append(row)
            if progress:
                progress(row, len(rows) + len(out))
        return out

    with multiprocessing.Pool(workers) if workers > 1 else _Serial() as pool:
        rows += collect(run_cell, jobs)
        rows += collect(run_agreement, agree)
        # power at the reported MDE: a campaign whose points all carry the MDE its A/A-cell
        # counterpart reported states its own (median) MDE; the power is measured at that one
        base = [r for r in rows if not r.get("kind") and r["effect_pct"] == 0.0 and not r["adaptive"]
                and not r["noise_from"] and r["controls"] and r["rounds"] in (3, 6, 10) and r.get("median_mde_pct")
                and r["model"] in models]
        first = [(r["model"], round(r["median_mde_pct"], 2), r["rounds"], False, False, True, points, mde_n, seed + 20_000 + i)
                 for i, r in enumerate(base)]
        second = [(j[0], round(r["median_mde_pct"], 2)) + j[2:8] + (seed + 30_000 + i,)
                  for i, (j, r) in enumerate(zip(first, collect(run_cell, first)))]
        for r, job in zip(collect(run_cell, second), second):
            rows.append({"kind": "mde", "model": job[0], "rounds": job[2], "mde_pct": job[1], "points": r["points"],
                         "slower": r["slower"], "power_pct": pct_of(r, "slower")})
    return rows


class _Serial:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def imap(fn, jobs):
        return (fn(j) for j in jobs)


# ----------------------------------------------------------------------------- a library campaign
#: a library-shaped campaign: 2,000 points in 500 ops of 4 (an op's shapes and dtypes), 40 of them
#: (2 %, 10 ops) changed on B: {effect percent: ops}. A compiler change moves an op's kernels
#: together, so whole ops change.
LIB_OPS, LIB_PER_OP = 500, 4
LIB_EFFECTS = {2.0: 3, 5.0: 3, -3.0: 2, 200.0: 2}
LIB_MODELS = ("a", "d")


def library_values(rng, model: str, rounds: int, ops: int = LIB_OPS, per_op: int = LIB_PER_OP,
                   effects: dict = LIB_EFFECTS, shift_pct: float = 0.0) -> tuple:
    """``(values, truth)``: ``{point: (A per round, B per round)}`` of every point (canaries last)
    for ``rounds`` rounds, and ``{point: true effect percent}``. Noise as :func:`campaign`'s
    models: every point of a process (one round of one side) shares its process's factor, which
    for (d) is the slow clock mode (+4 % with probability 0.3) of all its ops and the canaries.
    ``shift_pct`` moves every other point (not the canaries) by that much on B: a change inside
    ``±δ``, where a direction is wrong and BH's bound is nearly reached."""
    n = ops * per_op
    bases = np.log(10.0 ** rng.uniform(-2, 1, n + CANARIES))
    values = campaign(rng, model, 0.0, rounds, bases)
    names = list(values)
    truth, op = {}, 0
    for effect, count in effects.items():
        for _ in range(count):
            for k in range(per_op):
                truth[names[op * per_op + k]] = effect
            op += 1
    order = rng.permutation(ops)  # changed ops anywhere in the library
    renamed, true = {}, {}
    for p, name in enumerate(names[:n]):
        new = f"op{order[p // per_op]}/{p}/float32"
        a, b = values[name]
        b = b * (1.0 + truth.get(name, shift_pct) / 100.0)
        renamed[new] = (a, b)
        true[new] = truth.get(name, shift_pct)
    renamed.update({name: values[name] for name in names[n:]})
    return renamed, true


def library_campaign(values: dict, settings, plan) -> tuple:
    """The two-stage rule as a library campaign runs it (``zlf.ab.screening.step``): every op its
    screen rounds, then a round more only for the ops the last look extends; the canaries run
    in every process. ``(verdict per point, rounds per point, points the screen cleared)``."""
    from zlf.ab import screening

    can = canary_points(values)
    rounds = {op_of(p): plan.screen_rounds for p in values if p not in can}
    state = screening.State()
    while True:
        longest = max(rounds.values())
        cut = {p: (a[:rounds.get(op_of(p), longest)], b[:rounds.get(op_of(p), longest)]) for p, (a, b) in values.items()}
        st = screening.step(cut, settings, plan, state, op_of, mode=ctl.AUTO, controls=can, canaries=can,
                            screen_rows=False)
        state = st.state
        if st.done:
            break
        for op in st.extend:
            rounds[op] += 1
    verdicts = {p: stats.SAME for p in state.cleared}
    verdicts.update({r.point: r.verdict for r in st.results})  # the last look's rows of the selected points
    return verdicts, dict(st.rounds), state.cleared


def fixed_campaign(values: dict, settings, rounds: int) -> dict:
    """One stage, every point ``rounds`` rounds: ``zlf ab``'s fixed rule (``settings.method``)."""
    can = canary_points(values)
    cut = {p: (a[:rounds], b[:rounds]) for p, (a, b) in values.items()}
    decided = decide(cut, settings, None, mode=ctl.AUTO, controls=can, canaries=can, control_rows=False)
    return {r.point: r.verdict for r in decided.results}


def wrong_direction(verdict: str, effect: float, delta: float) -> bool:
    """A direction the truth does not have: any direction on a change within ±δ, the opposite one
    beyond it (a change of exactly δ may be called either way or SAME, as in :func:`wrong_verdicts`)."""
    if verdict not in (stats.SLOWER, stats.FASTER):
        return False
    if abs(effect) < delta:
        return True
    return verdict != (stats.SLOWER if effect > 0 else stats.FASTER)


def run_library(job, ops: int = LIB_OPS) -> dict:
    """One cell of library campaigns: ``(model, design, screen rounds, max rounds, method,
    campaigns, seed)`` with design ``two-stage`` or ``fixed`` (every point ``max rounds``);
    ``ops`` of :data:`LIB_PER_OP` points each (a test runs a smaller library)."""
    from zlf.ab import screening

    model, design, screen_rounds, max_rounds, method, campaigns, seed, *rest = job
    shift = rest[0] if rest else 0.0
    rng = np.random.default_rng(seed)
    settings = attrs_evolve(stats.Settings(), method=method)
    delta = settings.min_effect_pct
    plan = screening.Plan(screen_rounds, max_rounds, method)
    fdp, any_false, rounds_used, points, cleared = [], 0, [], 0, 0
    per_effect: dict = {}
    for _ in range(campaigns):
        values, truth = library_values(rng, model, max_rounds, ops, shift_pct=shift)
        if design == "two-stage":
            verdicts, used, screened = library_campaign(values, settings, plan)
            cleared += sum(truth[p] == shift for p in screened)
        else:
            verdicts, used = fixed_campaign(values, settings, max_rounds), {p: max_rounds for p in truth}
        false = sum(wrong_direction(verdicts[p], truth[p], delta) for p in truth)
        directions = sum(verdicts[p] in (stats.SLOWER, stats.FASTER) for p in truth)
        fdp.append(false / max(1, directions))
        any_false += false > 0
        rounds_used.append(sum(used.values()) / len(used))
        points += len(truth)
        for p, effect in truth.items():
            cell = per_effect.setdefault(f"{effect:g}", {"points": 0, "right": 0, "same": 0, "unsure": 0, "wrong": 0})
            cell["points"] += 1
            v = verdicts[p]
            right = (stats.SAME if abs(effect) < delta else stats.SLOWER if effect > 0 else stats.FASTER)
            cell["right" if v == right else "same" if v == stats.SAME else "unsure" if v == stats.UNSURE else "wrong"] += 1
    return {"kind": "library", "model": model, "design": design, "screen_rounds": screen_rounds if design == "two-stage" else None,
            "max_rounds": max_rounds, "method": method, "campaigns": campaigns, "points": points,
            "fdr": float(np.mean(fdp)), "fdp_max": float(np.max(fdp)), "campaigns_with_false_direction": any_false,
            "mean_rounds": float(np.mean(rounds_used)), "by_effect": per_effect,
            "unchanged_cleared_at_screen": cleared if design == "two-stage" else None, "shift_pct": shift}


def attrs_evolve(obj, **changes):
    import attrs

    return attrs.evolve(obj, **changes)


def library_grid(campaigns: int, seed: int, screens=(3, 5), max_rounds: int = MAX_ROUNDS, shift: float = 0.0,
                 models=LIB_MODELS) -> list:
    """The library cells: the two-stage rule (BH) at each screen length in each model, and the
    one-stage baselines at ``max_rounds`` (BH and Holm, ``zlf ab``'s rule) in each model; with
    ``shift`` (every unchanged point moved by that much, inside δ), the two-stage rule at the
    first screen length and one-stage BH, model (a)."""
    jobs = []
    if shift:
        jobs = [("a", "two-stage", screens[0], max_rounds, stats.BH), ("a", "fixed", None, max_rounds, stats.BH)]
        return [j + (campaigns, seed + 50_000 + i, shift) for i, j in enumerate(jobs)]
    for model in models:
        for screen in screens:
            jobs.append((model, "two-stage", screen, max_rounds, stats.BH))
        for method in (stats.BH, stats.HOLM):
            jobs.append((model, "fixed", None, max_rounds, method))
    return [j + (campaigns, seed + 40_000 + LIB_MODELS.index(j[0]) * 4 + i % 4) for i, j in enumerate(jobs)]


def library_table(rows) -> list:
    """Rows of the library table: per cell the FDR, campaigns with a false direction, power per
    effect, changed points lost as SAME, and the mean rounds per point."""
    out = []
    for r in rows:
        if r.get("kind") != "library":
            continue
        eff = dict(r["by_effect"])
        null = f"{r.get('shift_pct', 0.0):g}"
        eff["0"] = eff.pop(null)
        changed = {k: v for k, v in eff.items() if k != "0"}
        power = sum(v["right"] for v in changed.values())
        total = sum(v["points"] for v in changed.values())
        lost = sum(v["same"] for v in changed.values())
        design = f"screen {r['screen_rounds']} + confirm to {r['max_rounds']}" if r["design"] == "two-stage" else f"fixed {r['max_rounds']}"
        model = r["model"] + (f", others {r['shift_pct']:+g} %" if r.get("shift_pct") else "")
        out.append([model, design, r["method"], r["campaigns"], f"{100 * r['fdr']:.2f} %",
                    _share(r["campaigns_with_false_direction"], r["campaigns"]),
                    _share(power, total), "; ".join(f"{k:>4}: {100 * v['right'] / v['points']:.0f} %"
                                                     for k, v in sorted(changed.items(), key=lambda kv: float(kv[0]))),
                    f"{lost}/{total}", _share(eff["0"]["right"], eff["0"]["points"]),
                    _share(r["unchanged_cleared_at_screen"], eff["0"]["points"]) if r.get("unchanged_cleared_at_screen") is not None else "",
                    f"{r['mean_rounds']:.2f}"])
    return out


LIBRARY_HEADERS = ["model", "design", "method", "campaigns", "FDR (mean FDP)", "campaigns with a false direction",
                   "power on changed points", "power by effect %", "changed lost as SAME", "unchanged SAME",
                   "unchanged cleared at the screen", "mean rounds per point"]


# ----------------------------------------------------------------------------- the table of targets
def wilson(k: int, n: int, z: float = 1.96) -> tuple:
    """95 % Wilson score interval of a binomial share, percent."""
    if n <= 0:
        return (0.0, 100.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)


def _share(k, n) -> str:
    lo, hi = wilson(k, n)
    return f"{100.0 * k / n:.3g} % [{lo:.3g}, {hi:.3g}] ({k}/{n})"


def find(rows, **want):
    """The first row with every ``want`` key equal."""
    return next((r for r in rows if not r.get("kind") and all(r.get(k) == v for k, v in want.items())), None)


def _label(r) -> str:
    what = "adaptive max 12" if r["adaptive"] else f"{r['rounds']} rounds"
    extra = ("" if r["controls"] else " no controls") + (" +A/A" if r["noise_from"] else "")
    return f"({r['model']}) {r['effect_pct']:+g} % {what}{extra}"


def targets(rows) -> list:
    """``[what, target, achieved (95 % interval, count), met]`` for the targets the grid covers."""
    out = []
    cells = [r for r in rows if not r.get("kind")]
    for r in cells:
        if r["effect_pct"] == 0.0:
            false = r["faster"] + r["slower"]
            met = 100.0 * false / r["points"] <= 0.1
            out.append([_label(r) + ": A/A FASTER+SLOWER per point", "<= 0.1 %" if r["controls"] else "report",
                        _share(false, r["points"]), met if r["controls"] else True])
    for model, eff, n, goal in (("a", 2.0, 10, 95), ("d", 2.0, 10, 90), ("d", 3.0, 6, 95), ("c", 2.0, 10, None)):
        for nf in (False, True):
            for controls in (True, False):
                r = find(cells, model=model, effect_pct=eff, rounds=n, noise_from=nf, adaptive=False, controls=controls)
                if r:
                    wanted = f">= {goal} %" if goal and controls else "report"
                    out.append([_label(r) + ": SLOWER", wanted, _share(r["slower"], r["points"]),
                                (pct_of(r, "slower") >= goal) if goal and controls else True])
    for r in cells:
        if r["effect_pct"] == 2.0 and r["model"] == "c":
            out.append([_label(r) + ": trim 10 % chosen (campaigns)", "report", _share(r["trim10"], r["campaigns"]), True])
    for nf in (False, True):
        for model in MODELS:
            ad0 = find(cells, model=model, effect_pct=0.0, adaptive=True, noise_from=nf, controls=True)
            fx0 = find(cells, model=model, effect_pct=0.0, rounds=MAX_ROUNDS, adaptive=False, noise_from=nf, controls=True)
            if ad0 and fx0:
                fa, ff = (x["faster"] + x["slower"] for x in (ad0, fx0))
                out.append([f"({model}) adaptive{' +A/A' if nf else ''}: A/A false vs fixed 12 ({ff}/{fx0['points']})",
                            "<= fixed (or <= 0.1 %)", _share(fa, ad0["points"]),
                            fa / ad0["points"] <= max(ff / fx0["points"], 0.001) + 1e-12])
    at_d = [find(cells, model="a", effect_pct=1.0, adaptive=a, controls=True) for a in (True, False)]
    if all(at_d):
        ad, fx = at_d
        out.append(["(a) every point at +1 % = delta: campaigns with a wrong verdict, adaptive",
                    f"<= fixed 12 ({_share(fx['campaigns_wrong'], fx['campaigns'])})",
                    _share(ad["campaigns_wrong"], ad["campaigns"]), ad["campaigns_wrong"] <= fx["campaigns_wrong"] * 1.15 + 3])
    for r in rows:
        if r.get("kind") == "agreement":
            out.append([f"({r['model']}) two 6-round campaigns at +1 %: SAME vs a direction", "rare (report)",
                        _share(r["same_vs_direction"], r["points"]), True])
            out.append([f"({r['model']}) two 6-round campaigns at +1 %: FASTER vs SLOWER", "0", str(r["faster_vs_slower"]),
                        r["faster_vs_slower"] == 0])
        if r.get("kind") == "mde":
            out.append([f"({r['model']}) {r['rounds']} rounds: power at the reported MDE {r['mde_pct']:.2f} %", "70-90 %",
                        _share(r["slower"], r["points"]), 70 <= r["power_pct"] <= 90])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT", help="write the rows here")
    parser.add_argument("--grid", choices=("quick", "targets"), default="targets",
                        help="quick: models a and d, a few cells; targets (default): every target's cells")
    parser.add_argument("--quick", dest="grid", action="store_const", const="quick", help="--grid quick")
    parser.add_argument("--campaigns", type=int, default=None, metavar="N", help="campaigns per cell (default 300; quick 20)")
    parser.add_argument("--mde-campaigns", type=int, default=None, metavar="N",
                        help="campaigns per cell of the MDE power check (default: --campaigns)")
    parser.add_argument("--points", type=int, choices=(20, 40), default=20, help="points per campaign, in 4 ops (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--library", action="store_true",
                        help="the library-shaped campaigns instead (2,000 points, 2 %% changed; two-stage rule and "
                             "one-stage baselines; --campaigns per cell, default 10)")
    parser.add_argument("--screens", default="3,5", metavar="N,N", help="--library: screen lengths (default 3,5)")
    parser.add_argument("--models", default=",".join(LIB_MODELS), metavar="M,M",
                        help=f"--library: noise models (default {','.join(LIB_MODELS)})")
    parser.add_argument("--shift", type=float, default=0.0, metavar="PCT",
                        help="--library: move every unchanged point by PCT on B (inside delta: a direction there is "
                             "wrong), the cells that test BH's bound where it is nearly reached")
    parser.add_argument("--workers", type=int, default=max(1, multiprocessing.cpu_count()), metavar="N")
    args = parser.parse_args(argv)
    t0 = time.time()
    if args.library:
        return main_library(args, t0)
    campaigns = args.campaigns or (20 if args.grid == "quick" else 300)

    def progress(row, done):
        print(f"[{done}] {time.time() - t0:.0f}s {json.dumps(row)}", file=sys.stderr, flush=True)

    rows = simulate(args.grid, campaigns, args.points, args.seed, args.workers, progress, args.mde_campaigns)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    from tabulate import tabulate

    cells = [r for r in rows if not r.get("kind")]
    table = [[r["model"], f"{r['effect_pct']:+g}%", r["rounds"], "yes" if r["noise_from"] else "", "yes" if r["adaptive"] else "",
              "yes" if r["controls"] else "", r["points"], *(f"{pct_of(r, k):.2f}" for k in ("faster", "slower", "same", "unsure")),
              f"{r.get('mean_rounds', r['rounds']):.1f}"] for r in cells]
    print(tabulate(table, headers=["model", "effect", "rounds", "A/A", "adaptive", "controls", "points", "FASTER %",
                                   "SLOWER %", "SAME %", "UNSURE %", "mean rounds"]))
    print()
    print(tabulate(targets(rows), headers=["target", "wanted", "achieved [95 % Wilson] (count)", "met"]))
    print(f"\n{len(rows)} rows in {time.time() - t0:.0f}s")
    return 0


def main_library(args, t0) -> int:
    from tabulate import tabulate

    jobs = library_grid(args.campaigns or 10, args.seed, tuple(int(x) for x in args.screens.split(",")), shift=args.shift,
                        models=tuple(args.models.split(",")))
    rows = []
    with multiprocessing.Pool(args.workers) if args.workers > 1 else _Serial() as pool:
        for row in pool.imap(run_library, jobs):
            rows.append(row)
            print(f"[{len(rows)}] {time.time() - t0:.0f}s {json.dumps(row)}", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(tabulate(library_table(rows), headers=LIBRARY_HEADERS))
    print(f"\n{len(rows)} cells in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
