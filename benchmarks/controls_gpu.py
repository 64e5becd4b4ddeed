"""Side by side, for a finished `zlf ab` campaign: each process's factor the controls found
(summary.json ``controls.factors``) and the SM clock NVML recorded while that process's points
sampled (median over its points of ``clock.sm_mhz_median``), plus per-point spread and false
verdicts with and without controls (a second summary.json of the same campaign re-decided with
``zlf ab --resume DIR --controls none``).

    python benchmarks/controls_gpu.py CAMPAIGN_DIR [NONE_SUMMARY_JSON]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from tabulate import tabulate

from zlf.ab import Campaign
from zlf.rundir import RunDir


def process_clocks(campaign) -> dict:
    """``{process id: median SM MHz over its points}`` from the runs' records."""
    per: dict = {}
    for run in campaign.runs:
        if run["status"] != "ok":
            continue
        process = run.get("process") or f"{run['op']}/r{run['round']}_{run['side']}"
        records, _ = RunDir(campaign.run_dir(run)).records()
        per.setdefault(process, []).extend(r.clock["sm_mhz_median"] for r in records
                                           if r.clock and r.clock.get("sm_mhz_median"))
    return {p: statistics.median(v) for p, v in per.items() if v}


def verdict_line(doc: dict, label: str) -> str:
    c = doc["counts"]
    spreads = [p["noise_pct"] for p in doc["points"] if p.get("noise_pct") is not None]
    return (f"{label}: {c['FASTER']} FASTER, {c['SLOWER']} SLOWER, {c['SAME']} SAME, {c['UNSURE']} UNSURE; "
            f"per-point run-to-run spread median {statistics.median(spreads):.2f}%, max {max(spreads):.2f}%"
            if spreads else f"{label}: no points")


def main(argv) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    campaign = Campaign.open(argv[0])
    doc = json.loads((Path(argv[0]) / "summary.json").read_text())
    ctl = doc.get("controls") or {}
    clocks = process_clocks(campaign)
    rows = [[f["process"], f"{f['pct']:+.2f}", f"{f['se_pct']:.2f}", f["controls"], clocks.get(f["process"], "-")]
            for f in sorted(ctl.get("factors") or [], key=lambda f: f["process"])]
    print(f"controls: {ctl.get('mode')}, used {ctl.get('used')}, moved {[m['point'] for m in ctl.get('moved') or []]}, "
          f"variance removed {ctl.get('variance_removed_pct')}")
    print(tabulate(rows, headers=["process", "factor %", "± %", "controls", "SM MHz (median of its points)"]))
    if rows and clocks:
        pairs = [(f["pct"], clocks[f["process"]]) for f in ctl["factors"] if f["process"] in clocks]
        if len(pairs) > 2:
            from scipy.stats import spearmanr

            rho = spearmanr([p[0] for p in pairs], [p[1] for p in pairs])
            print(f"Spearman rank correlation of factor and SM clock: {rho.statistic:+.2f} (p {rho.pvalue:.2g}); "
                  "a clock-mode factor is negative (slower at a lower clock)")
    print(verdict_line(doc, "with controls"))
    if len(argv) > 1:
        print(verdict_line(json.loads(Path(argv[1]).read_text()), "without controls"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
