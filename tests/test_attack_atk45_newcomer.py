"""ATTACK atk45: a newcomer's first hour (issue 45), tried again on a CPU after the fixes.

Every case runs the command line (``python -m zlf ...``) on run or campaign directories written
on disk with known times, or on a tiny CPU run of the ops.md example, so nothing depends on the
machine's speed.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zlf.ab import OK, Campaign, device_flags
from zlf.records import PointRecord
from zlf.rundir import RunDir
from zlf.testing import campaign_data

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def zlf(*args, cwd=None, timeout=300):
    env = dict(os.environ, COLUMNS="200")
    p = subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def _run_dir(path: Path, times: dict, spread=0.002):
    path.mkdir(parents=True)
    rd = RunDir(path)
    rd.write_meta({"status": "complete", "warnings": [], "backend": "cpu", "device_name": "X"})
    for point, ms in times.items():
        op, shape, dtype = point.split("/")
        samples = tuple(ms * (1 + spread * ((i % 7) - 3) / 3) for i in range(21))
        rd.append(PointRecord(point=point, op=op, shape=(int(shape),), dtype=dtype, status="ok", timer="host_wall",
                              median_ms=ms, samples=samples))
    return path


def _campaign(tmp_path, times: dict, aa=False, rounds=6):
    """A finished campaign whose runs hold ``times[point][side]`` (one value per round)."""
    c = Campaign.create(tmp_path / "o", "t", campaign_data(tmp_path, rounds_first=rounds, max_rounds=rounds, aa=aa))
    for k in range(1, rounds + 1):
        c.add_round(k)
    for run in c.runs:
        d = c.run_dir(run)
        d.mkdir(parents=True)
        rd = RunDir(d)
        rd.write_meta({"status": "complete", "warnings": []})
        for point, sides in times.items():
            op, shape, dtype = point.split("/")
            rd.append(PointRecord(point=point, op=op, shape=(int(shape),), dtype=dtype, status="ok",
                                  timer="host_wall", median_ms=sides[run["side"]][run["round"] - 1]))
        run.update(status=OK, rc=0, seconds=0.1, flags=device_flags(d))
    c.data["status"] = "complete"
    c.save()
    # what zlf ab does when its last round is in: decide, write report.md and summary.json
    from zlf.ab import report as ab_report
    from zlf.ab.analysis import decide_campaign
    decided, remarks, excluded, alpha = decide_campaign(c)
    ab_report.write(c, decided.results, remarks, excluded, alpha, [], decided)
    return c


def _header(text: str) -> list:
    return next(line for line in text.splitlines() if line.startswith("point ")).split()


# --- 1. the walkthrough (generated, "each output as the tool prints it") shows another table ---------

def test_walkthrough_ab_table_has_the_columns_zlf_ab_prints(tmp_path):
    c = _campaign(tmp_path, {"add/1024/float32": {"A": [1.0, 1.01, 0.99], "B": [1.1, 1.11, 1.09]}}, aa=True,
                  rounds=3)
    rc, out, err = zlf("report", c.path)
    assert rc == 0, err
    printed = _header(out)
    walk = (DOCS / "walkthrough.md").read_text()
    shown = [line.split() for line in walk.splitlines() if line.startswith("point ") and "verdict" in line
             and "gmean_ms_A" in line]
    assert shown, "walkthrough shows no zlf ab table"
    for cols in shown:
        # the columns up to the interval are the ones the verdict is computed from
        assert cols[:6] == printed[:6]


def test_cli_md_field_names_are_the_ones_ab_prints(tmp_path):
    c = _campaign(tmp_path, {"add/1024/float32": {"A": [1.0, 1.01, 0.99], "B": [1.1, 1.11, 1.09]}}, rounds=3)
    rc, out, err = zlf("report", c.path)
    assert rc == 0, err
    rc, js, err = zlf("ab", "--resume", c.path, "--format", "json")
    cli_md = (DOCS / "cli.md").read_text()
    claim = " ".join(re.search(r"Fields carry the names of results\.jsonl in every format:(.*?)\n\n", cli_md,
                               re.S).group(1).split())
    # what the page promises for ab is what a reader of ab's table, and of its json, finds
    assert "`zlf ab` and `zlf report` of a campaign name a side's geometric mean over the rounds " \
           "`gmean_ms_A` / `gmean_ms_B`" in claim
    assert "gmean_ms_A" in _header(out) and "median_ms_A" not in _header(out)
    point = json.loads(js)["points"][0] if js.strip().startswith("{") else json.loads(js)[0]
    assert "gmean_ms_A" in point and "median_ms_A" not in point


# --- 2. numbers beside a verdict --------------------------------------------------------------------

def test_aa_noise_median_of_two_points_is_their_middle(tmp_path):
    times = {"add/1024/float32": {"A": [1.0, 1.02, 0.98, 1.0], "B": [1.0, 0.99, 1.01, 1.0]},
             "add/5000/float32": {"A": [1.0, 1.3, 0.7, 1.0], "B": [1.0, 0.8, 1.2, 1.0]}}
    c = _campaign(tmp_path, times, aa=True, rounds=4)
    rc, out, err = zlf("report", c.path)
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("A/A run-to-run noise"))
    med, mx = map(float, re.search(r"median ([\d.]+)%, max ([\d.]+)%", line).groups())
    noises = sorted(float(x.split()[-2].rstrip("%")) for x in out.splitlines() if x.startswith("add/"))
    assert len(noises) == 2 and mx == pytest.approx(noises[1], abs=0.01)
    assert med == pytest.approx((noises[0] + noises[1]) / 2, abs=0.01)


def test_ab_table_prints_big_changes_for_people(tmp_path):
    times = {"add/1024/float32": {"A": [1.0, 1.01, 0.99, 1.0], "B": [300.0, 310.0, 290.0, 305.0]}}
    c = _campaign(tmp_path, times, rounds=4)
    rc, out, err = zlf("report", c.path)
    assert rc == 0, err
    row = next(x for x in out.splitlines() if x.startswith("add/1024"))
    assert "e+" not in row, row
    assert "×" in row, row


def test_compare_summary_and_table_spell_a_300x_change_alike(tmp_path):
    a = _run_dir(tmp_path / "a", {"k/1/float32": 1.0, "k/2/float32": 1.0, "k/3/float32": 1.0})
    b = _run_dir(tmp_path / "b", {"k/1/float32": 1.01, "k/2/float32": 1.30, "k/3/float32": 300.0})
    rc, out, err = zlf("compare", a, b)
    assert rc == 0, err
    assert "300× slower" in next(x for x in out.splitlines() if x.startswith("k/3/"))
    summary = next(x for x in out.splitlines() if x.startswith("largest regressions"))
    assert "29900" not in summary and "300×" in summary, summary


def test_compare_formats_agree_on_delta_and_medians(tmp_path):
    a = _run_dir(tmp_path / "a", {"k/1/float32": 1.0, "k/2/float32": 2.0})
    b = _run_dir(tmp_path / "b", {"k/1/float32": 1.3, "k/2/float32": 1.0})
    _, js, _ = zlf("compare", a, b, "--format", "json")
    rows = {r["point"]: r for r in json.loads(js)["rows"]}
    _, csv_text, _ = zlf("compare", a, b, "--format", "csv")
    import csv
    import io
    for crow in csv.DictReader(io.StringIO(csv_text)):
        r = rows[crow["point"]]
        assert float(crow["delta_pct"]) == pytest.approx(r["delta_pct"], rel=1e-4)
        assert float(crow["median_ms_B"]) / float(crow["median_ms_A"]) - 1 == pytest.approx(r["delta_pct"] / 100,
                                                                                            rel=1e-4)
    assert rows["k/1/float32"]["delta_pct"] == pytest.approx(30.0, rel=1e-6)
    assert rows["k/2/float32"]["delta_pct"] == pytest.approx(-50.0, rel=1e-6)


# --- 3. and 6. flags: no prefixes, one meaning ------------------------------------------------------

@pytest.mark.extensions("profile", "history", "seed")
@pytest.mark.parametrize("argv", [["run", "add", "--warmup", "10"], ["ab", "--round", "3", "add"],
                                  ["compare", "a", "b", "--form", "json"], ["plugins", "--form", "json"],
                                  ["calibrate", "--no-sav"], ["ops", "add", "--back", "cuda"],
                                  ["history", "ls", "--las", "3"], ["triage", "x", "--no-prof"]])
def test_flag_prefixes_are_refused_in_one_line_exit_2(tmp_path, argv):
    rc, out, err = zlf(*argv, cwd=tmp_path, timeout=120)
    assert rc == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("zlf: error:"), err
    assert not (tmp_path / "runs").exists()


def test_unknown_flag_points_to_the_commands_own_help(tmp_path):
    rc, _, err = zlf("run", "add", "--warmup", "10", cwd=tmp_path)
    assert rc == 2
    assert "zlf run --help" in err, err


@pytest.mark.extensions("flaggems")
def test_sweep_help_names_only_current_spellings():
    rc, out, _ = zlf("sweep", "--help")
    assert rc == 0
    assert re.search(r"(?<!flaggems-)--compile-time-limit", out) is None


@pytest.mark.extensions("profile")
def test_cli_md_out_default_for_profile_matches_its_help():
    rc, out, _ = zlf("profile", "--help")
    assert rc == 0
    helptext = " ".join(out.split())
    cli_md = (DOCS / "cli.md").read_text()
    row = next(x for x in cli_md.splitlines() if x.startswith("| where output goes"))
    # the table's claim for profile is its help's
    assert "`profile/` under it, default the run directory (`.` for an op): `profile`" in row
    assert "parent of profile/ (default: the run directory, or . for an op)" in helptext, helptext


# --- 7. and 8. refusals ------------------------------------------------------------------------------

@pytest.mark.extensions("shapes")
def test_ab_missing_shape_file_refused_up_front(tmp_path):
    rc, out, err = zlf("ab", "--aa", "--rounds", "3", "--shapes", "missing.yaml", "add", "--out", tmp_path / "o",
                       cwd=tmp_path)
    assert rc == 2 and "missing.yaml" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_compare_of_campaigns_points_to_report(tmp_path):
    c = _campaign(tmp_path, {"add/1024/float32": {"A": [1.0, 1.01, 0.99], "B": [1.1, 1.11, 1.09]}}, rounds=3)
    rc, out, err = zlf("compare", c.path, c.path)
    assert rc == 2 and "zlf report" in err and len(err.strip().splitlines()) == 1


def test_ops_plans_cuda_points_without_a_gpu(tmp_path):
    rc, out, err = zlf("ops", "add", "--backend", "cuda", cwd=tmp_path)
    assert rc == 0, err
    assert "on backend cuda" in out and "add" in out


# --- 9. the first op, and the units of one number ----------------------------------------------------

def _ops_md_example(tmp_path) -> Path:
    text = (DOCS / "ops.md").read_text()
    code = re.search(r"```python\n(# my_ops\.py.*?)```", text, re.S).group(1)
    code = code.replace("cpu_shapes=[(4096,)]", "cpu_shapes=[(64,)]").replace(
        'dtypes=("float32", "bfloat16")', 'dtypes=("float32",)')
    (tmp_path / "my_ops.py").write_text(code)
    return tmp_path / "my_ops.py"


def test_progress_line_and_table_print_the_time_alike(tmp_path):
    _ops_md_example(tmp_path)
    rc, out, err = zlf("run", "my_ops.py::relu", "--warmup-ms", "1", "--rep-ms", "5", cwd=tmp_path)
    assert rc == 0, err
    text = out + err
    progress = re.search(r"\[1/1\] relu/64/float32 ok (\S+ \S+)", text).group(1)
    row = next(x for x in out.splitlines() if x.startswith("relu/64/float32 "))
    assert progress in row, (progress, row)


def test_compare_table_column_says_what_it_holds(tmp_path):
    a = _run_dir(tmp_path / "a", {"k/1/float32": 1.0, "k/2/float32": 1.0})
    b = _run_dir(tmp_path / "b", {"k/1/float32": 0.4, "k/2/float32": 1.3})
    rc, out, err = zlf("compare", a, b)
    assert rc == 0, err
    header = _header(out)
    assert "delta_pct" not in header  # a percentage's name over a factor; csv/json keep delta_pct
    col = header.index("change")
    cells = {x.split()[0]: re.split(r"\s{2,}", x.strip()) for x in out.splitlines() if x.startswith("k/")}
    # cells split on 2+ spaces (a factor cell is '2.5× faster')
    assert cells["k/1/float32"][col] == "2.5× faster" and cells["k/2/float32"][col] == "+30.0%", cells


def test_ab_announces_the_ops_named_and_the_processes_it_runs(tmp_path):
    import signal
    _ops_md_example(tmp_path)
    env = dict(os.environ, COLUMNS="200")
    p = subprocess.Popen([sys.executable, "-m", "zlf", "ab", "--aa", "--rounds", "3", "--name", "t",
                          "my_ops.py::relu"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    seen = []
    try:
        for line in p.stdout:
            seen.append(line)
            if line.startswith("[1/"):
                break
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
    plan = next(x for x in seen if "to go" in x)
    # one op named (the two canaries apart); one process per round and side runs all ops: 6 processes
    assert plan.strip() == "1 op (+2 control ops) x 3 rounds x 2 sides; 6 processes to go", plan
    # the first shared process is one progress line, naming the user's op, out of the 6
    progress = [x for x in seen if x.startswith("[")]
    assert len(progress) == 1 and progress[0].startswith("[1/6] r1_A relu (+2 control ops) ok"), seen
