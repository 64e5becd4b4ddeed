"""How often `zlf history changes` reports a change that is not there, and how soon it finds one
that is: simulated series through the extension's own detector (zlf_history.changes.detect).

Model: ``--points`` points with ``--runs`` runs each; every point has its own noise, a log-normal
per-run error with sigma drawn from ``--noise`` levels (default 0.5, 1, 2, 3 %); a fraction
``--changed`` of the points carry one step of ``--step`` percent at a run drawn uniformly from the
middle half of the series. ``--tails t3`` draws Student-t(3) errors (scaled to the same sigma)
instead of normal ones.

Reported per noise level:
- false changes per 1000 point-runs: confirmed changes farther than 2 runs from a true step,
  over every run of every series (unchanged points and the rest of changed ones);
- detection within 5 runs: of the changed points, the share whose series cut 5 runs after the
  step already yields a confirmed change within 2 runs of it;
- the median lag: the fewest runs after the step at which the cut series first shows it.

    python benchmarks/changepoint_sim.py                      # the documented figures (about a minute)
    python benchmarks/changepoint_sim.py --points 50 --seed 1 # a quick look
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from zlf_history import changes


def errors(rng, sigma, size, tails):
    if tails == "t3":
        return rng.standard_t(3, size) * sigma / np.sqrt(3.0)  # t(3) has variance 3
    return rng.normal(0.0, sigma, size)


def simulate(points: int, runs: int, noise_levels, changed: float, step_pct: float, seed: int, tails: str,
             penalty: float = changes.PENALTY) -> dict:
    rng = np.random.default_rng(seed)
    per_level = {s: {"point_runs": 0, "false": 0, "changed": 0, "found5": 0, "lags": []} for s in noise_levels}
    for i in range(points):
        sigma_pct = noise_levels[i % len(noise_levels)]
        sigma = sigma_pct / 100.0
        x = np.log(1.0) + errors(rng, sigma, runs, tails)
        step_at = None
        if rng.random() < changed:
            step_at = int(rng.integers(runs // 4, 3 * runs // 4))
            x[step_at:] += np.log1p(step_pct / 100.0)
        times = np.exp(x)
        got = changes.detect(times, penalty=penalty)
        row = per_level[sigma_pct]
        row["point_runs"] += runs
        row["false"] += sum(1 for c in got if step_at is None or abs(c.index - step_at) > 2)
        if step_at is not None:
            row["changed"] += 1
            lag = None
            for k in range(1, runs - step_at + 1):
                cut = changes.detect(times[:step_at + k], penalty=penalty)
                if any(abs(c.index - step_at) <= 2 for c in cut):
                    lag = k
                    break
            if lag is not None:
                row["lags"].append(lag)
                row["found5"] += lag <= 5
    out = {}
    for s, row in per_level.items():
        out[f"{s}%"] = {
            "point_runs": row["point_runs"],
            "false_changes": row["false"],
            "false_per_1000_point_runs": 1000.0 * row["false"] / max(row["point_runs"], 1),
            "changed_points": row["changed"],
            "detected_within_5_runs": row["found5"],
            "detection_rate_5": row["found5"] / row["changed"] if row["changed"] else None,
            "median_lag": float(np.median(row["lags"])) if row["lags"] else None,
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--noise", default="0.5,1,2,3", help="noise levels in percent, comma-separated")
    ap.add_argument("--changed", type=float, default=0.10, help="fraction of points with a step")
    ap.add_argument("--step", type=float, default=3.0, help="step size in percent")
    ap.add_argument("--tails", choices=("normal", "t3"), default="normal")
    ap.add_argument("--repeat", type=int, default=5, help="independent libraries simulated (seeds seed..seed+R-1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--penalty", type=float, default=changes.PENALTY)
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    a = ap.parse_args(argv)
    levels = [float(v) for v in a.noise.split(",")]
    total: dict = {}
    for r in range(a.repeat):
        got = simulate(a.points, a.runs, levels, a.changed, a.step, a.seed + r, a.tails, a.penalty)
        for level, row in got.items():
            t = total.setdefault(level, {"point_runs": 0, "false_changes": 0, "changed_points": 0,
                                         "detected_within_5_runs": 0})
            for k in t:
                t[k] += row[k]
    for t in total.values():
        t["false_per_1000_point_runs"] = round(1000.0 * t["false_changes"] / t["point_runs"], 3)
        t["detection_rate_5"] = round(t["detected_within_5_runs"] / t["changed_points"], 3) if t["changed_points"] else None
    if a.json:
        json.dump({"model": vars(a), "by_noise": total}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{a.repeat} x {a.points} points x {a.runs} runs, {a.changed:.0%} with a {a.step}% step, {a.tails} errors, "
          f"penalty {a.penalty} log(n)")
    print(f"{'noise':>6}  {'point-runs':>10}  {'false':>5}  {'per 1000':>8}  {'changed':>7}  {'found <=5':>9}  {'rate':>5}")
    for level, t in total.items():
        print(f"{level:>6}  {t['point_runs']:>10}  {t['false_changes']:>5}  {t['false_per_1000_point_runs']:>8}  "
              f"{t['changed_points']:>7}  {t['detected_within_5_runs']:>9}  {t['detection_rate_5']!s:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
