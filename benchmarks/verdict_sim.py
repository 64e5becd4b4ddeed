"""Monte-Carlo check of `zlf ab`'s verdict rule: simulated campaigns through the real code.

Every campaign is 40 points in 4 ops; each point's per-round value is the median of 31 samples
(in-process noise 0.2 %) of one process, whose between-process noise follows a model:

  a  N(0, 0.5 %)            b  N(0, 3 %) (power-cap drift)        c  0.5 % x t(3) (heavy tails)
  d  a + a heating drift of 1-2 % (time constant 2 rounds) shared by the runs of an op, under
     the campaign's alternating order (odd rounds A then B, even rounds B then A)

B carries the true effect on every point. Verdicts come from ``zlf.stats.analyse`` (fixed rounds)
and ``zlf.stats.adaptive_step`` (``--until-confident``, first look 3, at most 12: the same step
``zlf ab`` drives its runs with). ``--noise-from`` cells first run a 6-round A/A of the same
points and pool it through ``stats.aa_entries`` on its summary.json-like entries.

    python benchmarks/verdict_sim.py --json OUT.json               # the cells the targets need (minutes)
    python benchmarks/verdict_sim.py --grid full --json OUT.json   # every cell (an hour on 2 cores)
    python benchmarks/verdict_sim.py --quick --json OUT.json       # a small grid (seconds)

OUT.json is a list of ``{model, effect_pct, rounds, noise_from, adaptive, points, faster, slower,
same, unsure}`` (counts; adaptive cells add ``mean_rounds``), then ``kind: "agreement"`` rows (two
independent campaigns on the same points) and ``kind: "mde"`` rows (power at the median MDE that
campaigns carrying that effect report). A table of the targets is printed at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time

import numpy as np

from zlf import stats

MODELS = ("a", "b", "c", "d")
POINTS, OPS, SAMPLES, IN_PROCESS = 40, 4, 31, 0.002
FIRST_LOOK, MAX_ROUNDS = 3, 12
AA_ROUNDS = 6


# ----------------------------------------------------------------------------- simulated campaigns
def campaign(rng, model: str, effect_pct: float, rounds: int, bases) -> dict:
    """``{point: (A ms per round, B ms per round)}`` of one simulated campaign."""
    per_op = POINTS // OPS
    shape = (POINTS, rounds)
    if model == "b":
        proc = rng.normal(0.0, 0.03, (2,) + shape)
    elif model == "c":
        proc = 0.005 * rng.standard_t(3, (2,) + shape)
    else:
        proc = rng.normal(0.0, 0.005, (2,) + shape)
    inproc = np.median(rng.normal(0.0, IN_PROCESS, (2,) + shape + (SAMPLES,)), axis=-1)
    log = bases[None, :, None] + proc + inproc
    if model == "d":  # heating: h(t) = H (1 - exp(-t / 2 rounds)), t = when the run happened
        heat = rng.uniform(0.01, 0.02)
        for k in range(rounds):
            order = (0, 1) if k % 2 == 0 else (1, 0)
            for o in range(OPS):
                for slot, side in enumerate(order):
                    t = k + (2 * o + slot + 0.5) / (2 * OPS)
                    log[side, o * per_op:(o + 1) * per_op, k] += heat * (1.0 - math.exp(-t / 2.0))
    log[1] += math.log1p(effect_pct / 100.0)
    times = np.exp(log)
    return {f"op{p // per_op}/{p}/float32": (times[0, p], times[1, p]) for p in range(POINTS)}


def op_of(point: str) -> str:
    return point.split("/")[0]


def aa_noise(rng, model, bases, settings) -> dict:
    """A 6-round A/A of the same points, read as --noise-from reads its summary.json entries."""
    values = campaign(rng, model, 0.0, AA_ROUNDS, bases)
    points = [{"point": p, "a_ms": list(a), "b_ms": list(b)} for p, (a, b) in values.items()]
    return stats.aa_entries(points)


def fixed(values, settings, noise) -> list:
    return stats.analyse(values, settings, noise=noise)


def adaptive(values, settings, noise) -> tuple:
    """``--until-confident``: looks after rounds 3..12, only ops with an undecided point go on."""
    plan = stats.SpendingPlan(FIRST_LOOK, MAX_ROUNDS, settings.alpha)
    rounds = {op_of(p): FIRST_LOOK for p in values}
    frozen: dict = {}
    while True:
        cut = {p: (a[:rounds[op_of(p)]], b[:rounds[op_of(p)]]) for p, (a, b) in values.items()}
        results, frozen, extend = stats.adaptive_step(cut, settings, plan, frozen, op_of, noise)
        if not extend:
            return results, float(np.mean([len(a) for a, _ in cut.values()]))
        for op in extend:
            rounds[op] += 1


# ----------------------------------------------------------------------------- cells
def run_cell(job) -> dict:
    model, effect, rounds, noise_from, is_adaptive, campaigns, seed = job
    rng = np.random.default_rng(seed)
    settings = stats.Settings()
    c = {v: 0 for v in stats.VERDICTS}
    used, mde = [], []
    for _ in range(campaigns):
        bases = np.log(10.0 ** rng.uniform(-2, 1, POINTS))
        noise = aa_noise(rng, model, bases, settings) if noise_from else None
        values = campaign(rng, model, effect, MAX_ROUNDS if is_adaptive else rounds, bases)
        if is_adaptive:
            results, mean_rounds = adaptive(values, settings, noise)
            used.append(mean_rounds)
        else:
            results = fixed(values, settings, noise)
        for k, n in stats.counts(results).items():
            c[k] += n
        mde += [r.mde_pct for r in results if r.mde_pct is not None]
    row = {"model": model, "effect_pct": effect, "rounds": rounds, "noise_from": noise_from, "adaptive": is_adaptive,
           "points": campaigns * POINTS, "faster": c[stats.FASTER], "slower": c[stats.SLOWER],
           "same": c[stats.SAME], "unsure": c[stats.UNSURE]}
    if is_adaptive:
        row["mean_rounds"] = float(np.mean(used))
    if mde:
        row["median_mde_pct"] = float(np.median(mde))
    return row


def run_agreement(job) -> dict:
    """Two independent campaigns on the same points: how often do their verdicts contradict?"""
    model, effect, rounds, campaigns, seed = job
    rng = np.random.default_rng(seed)
    settings = stats.Settings()
    same_vs_dir = opposite = 0
    for _ in range(campaigns):
        bases = np.log(10.0 ** rng.uniform(-2, 1, POINTS))
        one, two = (stats.analyse(campaign(rng, model, effect, rounds, bases), settings) for _ in range(2))
        for r1, r2 in zip(one, two):
            pair = {r1.verdict, r2.verdict}
            same_vs_dir += stats.SAME in pair and bool(pair & {stats.FASTER, stats.SLOWER})
            opposite += pair == {stats.FASTER, stats.SLOWER}
    return {"kind": "agreement", "model": model, "effect_pct": effect, "rounds": rounds, "points": campaigns * POINTS,
            "same_vs_direction": same_vs_dir, "faster_vs_slower": opposite}


def grid(size: str, campaigns: int, seed: int):
    """Cells: ``quick`` (models a and c, seconds), ``targets`` (the cells the targets read, the
    default) or ``full`` (every model x effect x rounds x --noise-from x adaptive)."""
    jobs = []
    if size == "full":
        for model in MODELS:
            for effect in (0.0, 1.0, 2.0, 3.0, 5.0, 10.0):
                for rounds in (6, 10, 20):
                    for nf in (False, True):
                        jobs.append((model, effect, rounds, nf, False, campaigns))
                for nf in (False, True):
                    jobs.append((model, effect, MAX_ROUNDS, nf, True, campaigns))
    elif size == "quick":
        for model in ("a", "c"):
            for effect in (0.0, 2.0, 3.0):
                for rounds in (6, 10):
                    for nf in (False, True):
                        jobs.append((model, effect, rounds, nf, False, campaigns))
    else:
        cells = set()
        for model in MODELS:
            for nf in (False, True):
                cells.add((model, 0.0, 6, nf, False))  # A/A false verdicts
            cells.add((model, 0.0, 10, False, False))  # MDE at 10 rounds, adaptive's A/A reference
            for effect in (0.0, 2.0, 3.0):
                cells.add((model, effect, MAX_ROUNDS, False, True))  # adaptive against fixed 10
                cells.add((model, effect, 10, False, False))
        for nf in (False, True):
            cells.add(("a", 2.0, 10, nf, False))
        for effect in (2.0, 3.0):
            cells.add(("c", effect, 10, False, False))
        for effect in (5.0, 10.0):
            for rounds in (10, 20):
                cells.add(("b", effect, rounds, False, False))
        jobs = [c + (campaigns,) for c in sorted(cells, key=lambda c: (c[0], c[4], c[2], c[1], c[3]))]
    return [j + (seed + i,) for i, j in enumerate(jobs)]


def pct_of(row, key) -> float:
    return 100.0 * row[key] / row["points"]


def simulate(size="targets", campaigns=100, seed=1, workers=1, progress=None) -> list:
    jobs = grid(size, campaigns, seed)
    models = ("a", "c") if size == "quick" else MODELS
    agree = [(m, 1.0, 6, campaigns, seed + 10_000 + i) for i, m in enumerate(models)]
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
                and not r["noise_from"] and r.get("median_mde_pct")]
        first = [(r["model"], round(r["median_mde_pct"], 2), r["rounds"], False, False, campaigns, seed + 20_000 + i)
                 for i, r in enumerate(base)]
        second = [(j[0], round(r["median_mde_pct"], 2), j[2], False, False, campaigns, seed + 30_000 + i)
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


# ----------------------------------------------------------------------------- the table of targets
def find(rows, **want):
    """The first row with every ``want`` key equal."""
    return next((r for r in rows if all(r.get(k) == v for k, v in want.items())), None)


def targets(rows) -> list:
    """``[what, target, achieved, met]`` for the issue's targets that the grid covers."""
    out = []
    cells = [r for r in rows if not r.get("kind")]
    for r in cells:
        if r["effect_pct"] == 0.0 and r["rounds"] == 6 and not r["adaptive"]:
            false = pct_of(r, "faster") + pct_of(r, "slower")
            out.append([f"A/A ({r['model']}) 6 rounds{' +A/A' if r['noise_from'] else ''}: FASTER+SLOWER",
                        "<= 0.1 %", f"{false:.3f} %", false <= 0.1])
    for nf in (False, True):
        r = find(cells, model="a", effect_pct=2.0, rounds=10, noise_from=nf, adaptive=False)
        if r:
            out.append([f"(a) +2 % 10 rounds{' +A/A' if nf else ''}: SLOWER", ">= 95 %", f"{pct_of(r, 'slower'):.1f} %",
                        pct_of(r, "slower") >= 95])
    for eff, goal in ((3.0, 95), (2.0, 50)):
        r = find(cells, model="c", effect_pct=eff, rounds=10, noise_from=False, adaptive=False)
        if r:
            out.append([f"(c) +{eff:g} % 10 rounds: SLOWER", f">= {goal} %", f"{pct_of(r, 'slower'):.1f} %",
                        pct_of(r, "slower") >= goal])
    for eff in (5.0, 10.0):
        for n in (10, 20):
            r = find(cells, model="b", effect_pct=eff, rounds=n, noise_from=False, adaptive=False)
            if r:
                out.append([f"(b) +{eff:g} % {n} rounds: SLOWER", "report", f"{pct_of(r, 'slower'):.1f} %", True])
    for r in rows:
        if r.get("kind") == "agreement":
            a, b = 100.0 * r["same_vs_direction"] / r["points"], r["faster_vs_slower"]
            out.append([f"({r['model']}) two 6-round campaigns at +1 %: SAME vs direction", "<= 0.5 %", f"{a:.2f} %", a <= 0.5])
            out.append([f"({r['model']}) two 6-round campaigns at +1 %: FASTER vs SLOWER", "0", str(b), b == 0])
        if r.get("kind") == "mde":
            out.append([f"({r['model']}) {r['rounds']} rounds: power at the reported MDE {r['mde_pct']:.2f} %",
                        "70-90 %", f"{r['power_pct']:.1f} %", 70 <= r["power_pct"] <= 90])
    for model in MODELS:
        for nf in (False, True):
            ad0 = find(cells, model=model, effect_pct=0.0, adaptive=True, noise_from=nf)
            fx0 = find(cells, model=model, effect_pct=0.0, rounds=10, adaptive=False, noise_from=nf)
            if ad0 and fx0:
                fa, ff = (pct_of(x, "faster") + pct_of(x, "slower") for x in (ad0, fx0))
                out.append([f"({model}) adaptive max 12{' +A/A' if nf else ''}: A/A false vs fixed 10", f"<= {ff:.3f} %",
                            f"{fa:.3f} %", fa <= max(ff, 0.1)])
            for eff in (2.0, 3.0, 5.0):
                ad, fx = (find(cells, model=model, effect_pct=eff, adaptive=a, noise_from=nf, **({} if a else {"rounds": 10}))
                          for a in (True, False))
                if ad and fx:
                    out.append([f"({model}) adaptive max 12{' +A/A' if nf else ''} +{eff:g} %: power vs fixed 10 "
                                f"(mean {ad['mean_rounds']:.1f} rounds)", f">= {pct_of(fx, 'slower'):.1f} %",
                                f"{pct_of(ad, 'slower'):.1f} %", pct_of(ad, "slower") >= pct_of(fx, "slower") - 0.5])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT", help="write the rows here")
    parser.add_argument("--grid", choices=("quick", "targets", "full"), default="targets",
                        help="quick: models a and c, seconds; targets (default): the cells the targets need; "
                             "full: every model x effect x rounds x --noise-from x adaptive (an hour on 2 cores)")
    parser.add_argument("--quick", dest="grid", action="store_const", const="quick", help="--grid quick")
    parser.add_argument("--campaigns", type=int, default=None, metavar="N", help="campaigns per cell (default 100; quick 10)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=max(1, multiprocessing.cpu_count()), metavar="N")
    args = parser.parse_args(argv)
    campaigns = args.campaigns or (10 if args.grid == "quick" else 100)
    t0 = time.time()

    def progress(row, done):
        print(f"[{done}] {time.time() - t0:.0f}s {json.dumps(row)}", file=sys.stderr, flush=True)

    rows = simulate(args.grid, campaigns, args.seed, args.workers, progress)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    from tabulate import tabulate

    cells = [r for r in rows if not r.get("kind")]
    table = [[r["model"], f"{r['effect_pct']:+g}%", r["rounds"], "yes" if r["noise_from"] else "", "yes" if r["adaptive"] else "",
              r["points"], *(f"{pct_of(r, k):.1f}" for k in ("faster", "slower", "same", "unsure")),
              f"{r.get('mean_rounds', r['rounds']):.1f}"] for r in cells]
    print(tabulate(table, headers=["model", "effect", "rounds", "A/A", "adaptive", "points", "FASTER %", "SLOWER %",
                                   "SAME %", "UNSURE %", "mean rounds"]))
    print()
    print(tabulate(targets(rows), headers=["target", "wanted", "achieved", "met"]))
    print(f"\n{len(rows)} rows in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
