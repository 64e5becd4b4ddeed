"""What a newcomer met on a CPU machine: refusals that name the right cause, commands that do
what their help says (issue: a newcomer's first hour)."""
from __future__ import annotations

import json

import pytest

from zlf import compare
from zlf.records import PointRecord
from zlf.report import environment_section
from zlf.testing import gpu_available


def test_ops_plans_gpu_points_without_a_gpu(zlf_cli):
    """Planning a GPU campaign on a laptop: the cuda backend's shapes, nothing allocated."""
    if gpu_available():
        pytest.skip("this machine has a GPU: the cuda backend is set up for real")
    proc = zlf_cli("ops", "--backend", "cuda", check_rc=0)
    assert "softmax" in proc.stdout and "4096x4096" in proc.stdout  # a GPU shape, not the cpu one
    assert "point(s) on backend cuda; nothing was run" in proc.stdout
    assert "note: planned for backend cuda without its device (backend 'cuda' is not available" in proc.stdout
    rows = json.loads(zlf_cli("ops", "--backend", "cuda", "--format", "json", check_rc=0).stdout)
    assert {r["op"] for r in rows} == {"add", "softmax", "matmul"}
    unknown = zlf_cli("ops", "--backend", "nope")
    assert unknown.returncode == 2 and "unknown backend 'nope'" in unknown.stderr


def test_compare_of_a_campaign_gives_the_reports_hint(zlf_cli, tmp_path):
    campaign = tmp_path / "runs" / "ab_x_20260101-000000"
    campaign.mkdir(parents=True)
    (campaign / "campaign.json").write_text("{}")
    proc = zlf_cli("compare", campaign, campaign)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "is a zlf ab campaign directory, not a run directory" in proc.stderr
    assert f"zlf report {campaign}" in proc.stderr and "not a zlf run directory" not in proc.stderr


def _rec(pid, median, timer, samples=(1.0, 1.1, 0.9, 1.0)):
    return PointRecord(point=pid, op="k", shape=(1,), dtype="float32", status="ok", timer=timer, median_ms=median,
                       samples=samples)


def test_threshold_without_a_comparable_point_says_so_not_too_few_samples():
    rows = compare.pair([_rec("k/1", 1.0, "cuda_event")], [_rec("k/1", 1.0, "cudagraph")])
    assert not any(r.comparable for r in rows)
    how = compare.derive_threshold(rows).how
    assert "no point was comparable" in how and "too few samples" not in how
    few = compare.pair([_rec("k/1", 1.0, "t", samples=())], [_rec("k/1", 1.0, "t", samples=())])
    assert "too few samples" in compare.derive_threshold(few).how


def test_report_names_the_run_own_items_that_differ():
    a = {"device_name": "X", "started": "2026-01-01T00:00:00", "command": ["zlf", "run", "add"]}
    b = {"device_name": "X", "started": "2026-01-01T01:00:00", "command": ["zlf", "run", "add", "--name", "b"]}
    text = environment_section({"A": a, "B": b})
    first = text.splitlines()[0]
    assert "differ only in what is each run's own (started, command)" in first
    assert "but when each run started" not in text


@pytest.mark.extensions("shapes")
def test_ab_refuses_a_missing_shape_file_before_the_campaign(zlf_cli, tmp_path):
    proc = zlf_cli("ab", "--aa", "--rounds", "3", "--shapes", "missing.yaml", "add", "--out", "runs")
    assert proc.returncode == 2 and proc.stderr == "zlf: error: shape file 'missing.yaml' not found\n"
    assert not (tmp_path / "runs").exists()  # no campaign created, no run started


def test_compare_says_a_386x_regression_as_a_factor(tmp_path):
    rows = compare.pair([_rec("k/1", 1.0, "t"), _rec("k/2", 1.0, "t")], [_rec("k/1", 386.0, "t"), _rec("k/2", 1.3, "t")])
    threshold = compare.Threshold(2.0, "test")
    side = compare.Side("A", tmp_path, (), 0, {})
    cmp = compare.Comparison(side, side, tuple(compare.sort_rows(rows)), compare.summarize(rows, threshold), (), False)
    headers, table = compare.table_rows(cmp)
    cells = {row[0]: row[headers.index("change")] for row in table}
    assert cells == {"k/1": "386× slower", "k/2": "+30.0%"}
    assert "(B 22.4× slower)" in cmp.summary.lines()[0]  # geomean of 386 and 1.3
