"""``zlf report``: a markdown page and a PNG next to it, from one real run or a pair of real runs."""
from __future__ import annotations

import json
import re
import sys

import pytest

from zlf import compare, report
from zlf.ceilings import Ceilings

from conftest import run_dir_from, zlf_core as zlf

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """Two real runs of ``add`` on the cpu backend, made once per module, started in different
    seconds (a run's start is recorded to the second, and a short run takes less)."""
    import time

    work = tmp_path_factory.mktemp("report_runs")
    runs = {}
    for label in ("a", "b"):
        if runs:
            time.sleep(1.0 - time.time() % 1.0 + 0.05)
        proc = zlf("run", "add", "--warmup-ms", "1", "--rep-ms", "3", "--name", label, cwd=work)
        assert proc.returncode == 0, proc.stderr
        runs[label] = run_dir_from(proc.stdout, cwd=work)
    return runs


def test_single_run_report_next_to_the_run(real_runs, tmp_path):
    proc = zlf("report", real_runs["a"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    md = real_runs["a"] / "report.md"
    png = real_runs["a"] / "report.png"
    assert f"report: {md}" in proc.stdout and "2 points: 2 ok" in proc.stdout
    page = md.read_text()
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert "![median time per point](report.png)" in page
    assert "add/1024/float32" in page and "add/5000/float32" in page and "host_wall" in page
    assert "## Environment" in page and "(Triton interpreter)" in page
    # core alone: the extensions row says so (the seed extension's tests check it names them)
    assert re.search(r"extensions\W+\(none\)", page), page
    assert "not GPU kernel times" in page


def test_pair_report_with_out(real_runs, tmp_path):
    out = tmp_path / "review" / "patch.md"
    proc = zlf("report", real_runs["a"], real_runs["b"], "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "points compared" in proc.stdout
    page = out.read_text()
    assert (tmp_path / "review" / "patch.png").read_bytes().startswith(PNG_MAGIC)
    head = page.split("## Points")[0]
    assert "points compared" in head and "threshold ±" in head and "![Δ per point](patch.png)" in head
    assert "| point" in page and "add/5000/float32" in page
    env = page.split("## Environment")[1]
    assert "| A " in env and "| B " in env
    started = next(l for l in env.splitlines() if "| started" in l)
    assert "≠" in started  # the two runs started at different times
    torch_line = next(l for l in env.splitlines() if "| torch " in l)
    assert "≠" not in torch_line


def test_pair_report_default_location_and_ceilings_named(real_runs, tmp_path):
    device = json.loads((real_runs["a"] / "meta.json").read_text())["device_name"]
    env = {"ZLF_CACHE_DIR": str(tmp_path / "cache")}
    from zlf.ceilings import device_key

    path = tmp_path / "cache" / "ceilings" / f"{device_key(device)}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(Ceilings(device, "cpu", 10.0, {"float32": 0.1}, "2026-01-01").to_json()))
    proc = zlf("report", real_runs["a"], real_runs["b"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    md = real_runs["b"] / f"report_vs_{real_runs['a'].name}.md"
    assert md.is_file() and md.with_suffix(".png").is_file()
    page = md.read_text()
    assert "measured ceilings of" in page and "pct_ceiling_B" in page


def test_report_bad_input_is_exit_2(real_runs, tmp_path):
    proc = zlf("report", real_runs["a"], real_runs["b"], real_runs["a"], cwd=tmp_path)
    assert proc.returncode == 2 and "one run directory or two" in proc.stderr
    (tmp_path / "nope").mkdir()
    proc = zlf("report", tmp_path / "nope", cwd=tmp_path)
    assert proc.returncode == 2 and "not a zlf run directory" in proc.stderr


def test_plot_deltas_draws_only_compared_points(tmp_path):
    from zlf.records import PointRecord

    def rec(pid, median, timer="t"):
        return PointRecord(point=pid, op="k", shape=(1,), dtype="float32", status="ok", timer=timer, median_ms=median)

    rows = compare.pair([rec("k/1", 1.0), rec("k/2", 1.0), rec("k/3", 1.0)],
                        [rec("k/1", 1.2), rec("k/2", 0.9), rec("k/3", 1.0, "other")])
    threshold = compare.Threshold(2.0, "test")
    side = compare.Side("A", tmp_path, (), 0, {})
    cmp = compare.Comparison(side, side, tuple(compare.sort_rows(rows)), compare.summarize(rows, threshold), (), False)
    png = tmp_path / "d.png"
    assert report.plot_deltas(cmp, png) == 2
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_environment_table_marks_differences_and_escapes_pipes():
    a = {"device_name": "X", "command": ["zlf", "run", "a|b"], "environment": {"DISABLE_MMA_V3": "1"}}
    b = {"device_name": "X", "command": ["zlf", "run", "a|b"], "environment": {}}
    table = report.environment_table({"A": a, "B": b})
    lines = {l.split("|")[2].strip(): l for l in table.splitlines()[2:]}
    assert "≠" in lines["$DISABLE_MMA_V3"] and "≠" not in lines["device_name"]
    assert "a\\|b" in lines["command"]


def test_without_matplotlib_the_page_is_still_written(real_runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    md, png, summary = report.write_report([real_runs["a"], real_runs["b"]], out=tmp_path / "r.md")
    assert png is None and not (tmp_path / "r.png").exists()
    page = md.read_text()
    assert "no plot: matplotlib is not installed" in page and "points compared" in page
