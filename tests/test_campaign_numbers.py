"""The numbers printed beside a verdict are the ones it is computed from, on every surface.

An A/A whose one odd process dominated showed A 8.245 ms, B 8.438 ms (medians) beside a delta of
-24.94 % (a trimmed mean of log deltas), `zlf triage` -3.2 % (the median delta) for a point the
table showed at -22.42 %, and noise_pct_A/B 0.83 / 1.49 % (MADs) beside a run-to-run noise of
35.53 % (the pooled standard deviation). Here a campaign's runs are written on disk with known
times, and the table, `zlf report`, `--format json`/csv, summary.json and triage's numbers must agree.
"""
from __future__ import annotations

import csv
import io
import json
import math

import pytest

from zlf import cli, output
from zlf.ab import OK, Campaign, device_flags
from zlf.ab import report as ab_report
from zlf.ab.analysis import decide_campaign
from zlf.records import PointRecord
from zlf.rundir import RunDir
from zlf.testing import campaign_data

# one odd process: round 2's A run of point add/5000 took 4x as long
TIMES = {
    "add/1024/float32": {"A": [1.00, 1.01, 0.99, 1.00, 1.02, 0.98], "B": [1.10, 1.11, 1.09, 1.12, 1.10, 1.08]},
    "add/5000/float32": {"A": [8.20, 32.9, 8.25, 8.30, 8.21, 8.26], "B": [8.40, 8.45, 8.41, 8.50, 8.43, 8.44]},
}


def _campaign(tmp_path):
    c = Campaign.create(tmp_path / "o", "t", campaign_data(tmp_path, rounds_first=6, max_rounds=6))
    for k in range(1, 7):
        c.add_round(k)
    for run in c.runs:
        d = c.run_dir(run)
        d.mkdir(parents=True)
        rd = RunDir(d)
        rd.write_meta({"status": "complete", "warnings": []})
        for point, sides in TIMES.items():
            op, shape, dtype = point.split("/")
            rd.append(PointRecord(point=point, op=op, shape=(int(shape),), dtype=dtype, status="ok", timer="host_wall",
                                  median_ms=sides[run["side"]][run["round"] - 1]))
        run.update(status=OK, rc=0, seconds=0.1, flags=device_flags(d))
    c.data["status"] = "complete"
    c.save()
    return c


def _row(text: str, point: str) -> list:
    line = next(line for line in text.splitlines() if line.startswith(point))
    return line.split()


def test_every_surface_shows_the_numbers_the_verdict_is_computed_from(tmp_path, capsys):
    c = _campaign(tmp_path)
    decided, remarks, excluded, alpha = decide_campaign(c)
    text = ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    doc = json.loads((c.path / "summary.json").read_text())
    by_point = {p["point"]: p for p in doc["points"]}
    header = next(line for line in text.splitlines() if line.startswith("point"))
    assert "gmean_ms_A" in header and "sd_pct_A/B" in header and "median_ms_A" not in header
    for r in decided.results:
        # the estimate is the ratio of the two geometric means the table shows
        assert 100 * (r.b_mean_ms / r.a_mean_ms - 1) == pytest.approx(r.delta_pct, abs=1e-9)
        # the interval's spreads: run-to-run noise pools the two sides' (no A/A here)
        pooled = math.sqrt((r.sd_a_pct ** 2 + r.sd_b_pct ** 2) / 2)
        assert r.noise_pct == pytest.approx(pooled, rel=1e-9)
        cells = _row(text, r.point)
        assert cells[1] == f"{r.a_mean_ms:.4g}" and cells[2] == f"{r.b_mean_ms:.4g}"
        assert cells[3] == f"{r.delta_pct:+.2f}%"
        assert cells[6] == f"{r.sd_a_pct:.2f}%" and cells[8] == f"{r.sd_b_pct:.2f}%"  # cells 4-5: the interval
        # summary.json, which `zlf triage` and `--noise-from` read
        js = by_point[r.point]
        assert (js["a_mean_ms"], js["b_mean_ms"], js["delta_pct"]) == (r.a_mean_ms, r.b_mean_ms, r.delta_pct)
    # the odd process moves both the geometric mean and the spread of side A alike
    odd = next(r for r in decided.results if r.point == "add/5000/float32")
    assert odd.a_mean_ms > 9.0 and odd.sd_a_pct > 20 and odd.delta_pct < -5
    # --format json and csv: the same fields under the same names
    as_json = json.loads(output.campaign_summary(c, decided.results, text, "json"))
    as_csv = list(csv.DictReader(io.StringIO(output.campaign_summary(c, decided.results, text, "csv"))))
    for row, crow in zip(as_json["points"], as_csv):
        r = next(x for x in decided.results if x.point == row["point"])
        assert (row["gmean_ms_A"], row["gmean_ms_B"], row["delta_pct"]) == (r.a_mean_ms, r.b_mean_ms, r.delta_pct)
        assert (row["sd_pct_A"], row["sd_pct_B"]) == (r.sd_a_pct, r.sd_b_pct)
        assert float(crow["delta_pct"]) == pytest.approx(r.delta_pct)
    # zlf report prints the same table
    assert cli.main(["report", str(c.path)]) == 0
    shown = capsys.readouterr().out
    for r in decided.results:
        assert _row(shown, r.point) == _row(text, r.point)


def test_triage_shows_the_campaigns_delta_and_means(tmp_path):
    pytest.importorskip("zlf_profile")
    from zlf_profile.triage import campaign_numbers

    c = _campaign(tmp_path)
    decided, remarks, excluded, alpha = decide_campaign(c)
    ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    for stat in json.loads((c.path / "summary.json").read_text())["points"]:
        numbers = campaign_numbers(stat)
        assert numbers == {"delta_pct": stat["delta_pct"], "a_ms": stat["a_mean_ms"], "b_ms": stat["b_mean_ms"]}
        if stat["point"] == "add/5000/float32":  # the odd process: the median delta is another number
            assert numbers["delta_pct"] != pytest.approx(stat["delta_median_pct"], abs=0.5)
