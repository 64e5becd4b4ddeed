"""ATTACK (atk43): hostile and careless input to zlf history and zlf bisect.

Each case asserts what docs/history.md and issue 43 promise: bad input is one line and exit code 2
(no traceback), a run is recorded once from any path, a URL's password is never printed, the
dashboard escapes every text and only replaces folders zlf wrote, a bisect state file never
supplies a command or a path outside the repository.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from zlf.testing import write_run_dir
from zlf_history.store import Store
from bisect_fixtures import commit_series
from history_fixtures import history_db, postgres_server  # noqa: F401  (fixtures)

POINT = "add/5000/float32"


def run(tmp_path, name="r0", ms=1.0, meta=None, points=None):
    m = {"started": "2026-01-01T00:00:00+00:00", "fingerprint": {"torch": "2.11", "triton": "3.6"}}
    m.update(meta or {})
    return write_run_dir(tmp_path / "runs", points or {POINT: ms}, name=name, meta=m)


def cli(zlf_cli, *args):
    return zlf_cli.inprocess(*map(str, args))


def one_line_2(res):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1, res.stderr


def listed(zlf_cli, db):
    res = cli(zlf_cli, "history", "ls", "--db", db, "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# ----------------------------------------------------------------------------- run directories
def test_a_copied_run_is_recorded_once(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(r, copy)
    assert cli(zlf_cli, "history", "add", r, "--db", db).returncode == 0
    out = cli(zlf_cli, "history", "add", copy, "--db", db)
    assert out.returncode == 0 and "already recorded" in out.stdout
    assert len(listed(zlf_cli, db)) == 1


def test_the_same_run_twice_on_one_command_line_is_recorded_once(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    out = cli(zlf_cli, "history", "add", r, str(r) + "/", str(r) + "/./", "--db", db)
    assert out.returncode == 0 and out.stdout.count("already recorded") == 2
    assert len(listed(zlf_cli, db)) == 1


def test_a_run_without_meta_json_that_later_grows_is_not_recorded_twice(zlf_cli, tmp_path):
    """A results.jsonl with no meta.json is a run that may still grow (killed, or running): docs say
    a run that may still grow is not recorded. Recording it and then its grown self gives two runs
    with the same point measured twice in the series."""
    db = tmp_path / "h.sqlite"
    r = run(tmp_path, points={POINT: 1.0, "add/1024/float32": 1.0})
    lines = (r / "results.jsonl").read_bytes().splitlines(keepends=True)
    (r / "meta.json").unlink()
    (r / "results.jsonl").write_bytes(lines[0])
    cli(zlf_cli, "history", "add", r, "--db", db)
    (r / "results.jsonl").write_bytes(b"".join(lines))
    cli(zlf_cli, "history", "add", r, "--db", db)
    assert len(listed(zlf_cli, db)) <= 1


@pytest.mark.parametrize("content", [
    b"\xff\xfe{not utf8}",
    b"[" * 100000 + b"]" * 100000,
    b'{"started": 5, "command": "zlf run add", "fingerprint": [1,2], "device_name": {"a": 1}, "status": 7}',
    b'{"started": NaN, "status": "complete"}',
], ids=["non-utf8", "deep", "wrong-types", "nan"])
def test_a_hostile_meta_json_is_one_line_or_recorded_sanely(zlf_cli, tmp_path, content):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    (r / "meta.json").write_bytes(content)
    res = cli(zlf_cli, "history", "add", r, "--db", db)
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode in (0, 2)
    if res.returncode == 2:
        one_line_2(res)
    else:
        for row in listed(zlf_cli, db):
            assert isinstance(row["started"], str) and isinstance(row["device"], str)


def test_a_huge_results_line_and_nan_medians_do_not_enter_a_series(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    with open(r / "results.jsonl", "ab") as f:
        f.write(b'{"point": "x/1/float32", "median_ms": ' + b"9" * 400 + b"}\n")
        f.write(b'{"point": "y/1/float32", "op": "y", "status": "ok", "median_ms": NaN, "samples": []}\n')
    res = cli(zlf_cli, "history", "add", r, "--db", db)
    assert res.returncode == 0, res.stderr
    exp = json.loads(cli(zlf_cli, "history", "export", "--format", "json", "--db", db).stdout)
    for row in exp:
        assert row["median_ms"] is None or (0 < row["median_ms"] < 1e300)


def test_meta_json_as_a_fifo_does_not_hang(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    (r / "meta.json").unlink()
    os.mkfifo(r / "meta.json")
    res = zlf_cli("history", "add", str(r), "--db", str(db), timeout=60)
    assert res.returncode in (0, 2) and "Traceback" not in res.stderr


def test_campaign_json_as_a_fifo_does_not_hang(zlf_cli, tmp_path):
    c = tmp_path / "camp"
    c.mkdir()
    os.mkfifo(c / "campaign.json")
    res = zlf_cli("history", "add", str(c), "--db", str(tmp_path / "h.sqlite"), timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def _campaign(tmp_path, runs, sides=None, name="camp"):
    c = tmp_path / name
    c.mkdir()
    (c / "campaign.json").write_text(json.dumps({
        "label": "x", "started": "2026-01-02T00:00:00+00:00", "status": "complete", "command": ["zlf", "ab"],
        "sides": sides or [], "runs": runs}))
    return c


def test_campaign_run_dirs_outside_the_campaign_are_not_read(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    outside = run(tmp_path, name="outside")
    c = _campaign(tmp_path, [])
    (c / "inlink").symlink_to(outside)
    data = json.loads((c / "campaign.json").read_text())
    data["runs"] = [{"dir": str(outside), "status": "ok", "side": "A", "round": 0},
                    {"dir": "../runs/outside", "status": "ok", "side": "A", "round": 1},
                    {"dir": "inlink", "status": "ok", "side": "B", "round": 1}]
    (c / "campaign.json").write_text(json.dumps(data))
    res = cli(zlf_cli, "history", "add", c, "--db", db)
    assert res.returncode == 0, res.stderr
    assert listed(zlf_cli, db) == []


def test_a_campaign_json_with_wrong_types_is_one_line_or_recorded(zlf_cli, tmp_path):
    c = tmp_path / "camp"
    c.mkdir()
    (c / "campaign.json").write_text(json.dumps({"label": ["x"], "sides": {"A": 1}, "runs": "abc",
                                                 "started": {"y": 1}, "aa": "no"}))
    (c / "summary.json").write_text(json.dumps({"points": [{"point": "p", "verdict": "SLOWER", "rounds": True,
                                                            "delta_pct": float("nan")}, 7, None]}).replace("NaN", "NaN"))
    res = cli(zlf_cli, "history", "add", c, "--db", tmp_path / "h.sqlite")
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode in (0, 2)


# ----------------------------------------------------------------------------- labels, terminal output
def test_a_label_value_with_terminal_controls_is_refused_or_cleaned(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    res = cli(zlf_cli, "history", "add", r, "--db", db, "--label", "compiler=abc\u202edcb\u009b31m")
    if res.returncode == 0:
        out = cli(zlf_cli, "history", "ls", "--db", db).stdout
        assert "\u202e" not in out and "\u009b" not in out
    else:
        one_line_2(res)


def test_a_device_name_with_escape_sequences_is_not_sent_to_the_terminal(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path, meta={"device_name": "GPU\x1b]0;owned\x07\x1b[2J"})
    assert cli(zlf_cli, "history", "add", r, "--db", db).returncode == 0
    out = cli(zlf_cli, "history", "ls", "--db", db).stdout
    assert "\x1b" not in out and "\x07" not in out


def test_a_secret_in_the_recorded_command_is_not_kept(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path, meta={"command": ["zlf", "run", "add", "--db", "postgresql://u:hunter2pw@h/db",
                                        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456"]})
    assert cli(zlf_cli, "history", "add", r, "--db", db).returncode == 0
    exp = cli(zlf_cli, "history", "export", "--format", "json", "--db", db).stdout
    ls = cli(zlf_cli, "history", "ls", "--db", db, "--format", "json").stdout
    raw = (db).read_bytes()
    for text in (exp, ls):
        assert "hunter2pw" not in text and "abcdefghijklmnopqrstuvwxyz123456" not in text
    assert b"hunter2pw" not in raw and b"abcdefghijklmnopqrstuvwxyz123456" not in raw


def test_export_csv_cells_never_start_a_formula_from_any_field(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path, meta={"device_name": "=HYPERLINK(\"http://x\")",
                            "fingerprint": {"torch": "+1+cmd|' /C calc'!A0", "triton": "@SUM(1)", "driver": "-2+3"}})
    assert cli(zlf_cli, "history", "add", r, "--db", db, "--label", "k=x").returncode == 0
    import csv
    import io
    rows = list(csv.reader(io.StringIO(cli(zlf_cli, "history", "export", "--db", db).stdout)))
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(("=", "+", "@", "-")) or cell.lstrip("-").replace(".", "").isdigit(), cell


# ----------------------------------------------------------------------------- databases
def test_a_postgres_password_in_the_query_string_is_never_printed(zlf_cli, tmp_path):
    res = cli(zlf_cli, "history", "ls", "--db", "postgresql://u@127.0.0.1:1/db?password=hunter2secret")
    assert res.returncode == 2
    assert "hunter2secret" not in res.stderr + res.stdout


def test_a_postgres_password_with_a_slash_is_never_printed(zlf_cli, tmp_path):
    res = cli(zlf_cli, "history", "ls", "--db", "postgresql://u:hun/ter2secret@127.0.0.1:1/db")
    assert res.returncode == 2
    assert "ter2secret" not in res.stderr + res.stdout


def test_an_unreachable_postgres_server_is_one_line(zlf_cli, tmp_path):
    res = cli(zlf_cli, "history", "ls", "--db", "postgresql://u:pw1secret@127.0.0.1:1/db")
    one_line_2(res)
    assert "pw1secret" not in res.stderr


def test_a_schema_version_that_is_not_a_number_is_one_line(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    with Store(str(db)):
        pass
    con = sqlite3.connect(db)
    con.execute("UPDATE zlf_history_info SET value='2b' WHERE key='schema_version'")
    con.commit()
    con.close()
    one_line_2(cli(zlf_cli, "history", "ls", "--db", db))


def test_a_truncated_database_is_one_line(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run(tmp_path)
    assert cli(zlf_cli, "history", "add", r, "--db", db).returncode == 0
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2 + 100])
    res = cli(zlf_cli, "history", "ls", "--db", db)
    assert res.returncode in (0, 2) and "Traceback" not in res.stderr + res.stdout


def test_a_database_path_under_a_file_is_one_line(zlf_cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    one_line_2(cli(zlf_cli, "history", "ls", "--db", tmp_path / "afile" / "h.sqlite"))


# ----------------------------------------------------------------------------- the dashboard
XSS = "<img src=x onerror=alert(1)>'\"</script>"


def test_every_shown_field_is_escaped_on_the_dashboard(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    for i, lvl in enumerate([1.0] * 12 + [1.5] * 12):
        r = run(tmp_path, name=f"r{i}", ms=lvl,
                meta={"started": f"2026-01-{i + 1:02d}T00:00:00+00:00", "device_name": "dev" + XSS,
                      "fingerprint": {"torch": "t" + XSS, "triton": "3.6", "driver": "d" + XSS},
                      "command": ["zlf", "run", "add" + XSS]})
        assert cli(zlf_cli, "history", "add", r, "--db", db, "--label", "c=" + XSS + str(i // 12)).returncode == 0
    out = tmp_path / "site"
    res = cli(zlf_cli, "history", "html", out, "--db", db)
    assert res.returncode == 0, res.stderr
    for page in out.glob("*.html"):
        text = page.read_text()
        assert "<img" not in text and "onerror=alert" not in text.replace("onerror=alert(1)&gt;", ""), page.name
        assert text.count("</script>") == (1 if page.name == "index.html" else 0)


def test_repro_command_env_names_cannot_smuggle_shell(zlf_cli, tmp_path):
    """A campaign's side env name is pasted unquoted into the repro command: a name like
    'X=1; touch /tmp/p; Y' becomes a command a reviewer copies and runs."""
    from zlf_history import dashboard

    run_row = {"side": "A", "command": ["zlf", "ab", "add"]}
    sides = {"A": {"env": {"X=1; touch /tmp/pwned_atk43; Y": "v"}, "python": ""}}
    cmd = dashboard._repro(run_row, sides)
    words = shlex.split(cmd)
    assert all(";" not in w for w in words[:1]), cmd
    assert "; touch" not in cmd, cmd


def test_html_does_not_delete_a_users_files_in_an_old_site_folder(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    cli(zlf_cli, "history", "add", run(tmp_path), "--db", db)
    out = tmp_path / "site"
    assert cli(zlf_cli, "history", "html", out, "--db", db).returncode == 0
    (out / "notes-from-review.md").write_text("my notes")
    res = cli(zlf_cli, "history", "html", out, "--db", db)
    # either refused (a folder of other files) or the notes survive
    assert res.returncode == 2 or (out / "notes-from-review.md").is_file()


def test_html_into_a_link_is_refused(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    cli(zlf_cli, "history", "add", run(tmp_path), "--db", db)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("k")
    (tmp_path / "site").symlink_to(victim)
    res = cli(zlf_cli, "history", "html", tmp_path / "site", "--db", db)
    one_line_2(res)
    assert (victim / "keep.txt").read_text() == "k"


def test_html_with_a_planted_mark_link_in_someone_elses_folder(zlf_cli, tmp_path):
    """A folder of someone's files with a planted link named like zlf's mark: the mark must be
    zlf's own file, not a link to any file."""
    db = tmp_path / "h.sqlite"
    cli(zlf_cli, "history", "add", run(tmp_path), "--db", db)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    (victim / ".zlf-history-site").symlink_to("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd")
    res = cli(zlf_cli, "history", "html", victim, "--db", db)
    assert (victim / "thesis.tex").is_file(), "someone else's files were removed"
    assert res.returncode == 2


def test_html_inside_a_linked_parent_stays_there(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    cli(zlf_cli, "history", "add", run(tmp_path), "--db", db)
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "lnk").symlink_to(real)
    res = cli(zlf_cli, "history", "html", tmp_path / "lnk" / "site", "--db", db)
    assert res.returncode in (0, 2) and "Traceback" not in res.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site.")]


# ----------------------------------------------------------------------------- bisect input
def small_repo(tmp_path, extra=None):
    """Three commits of ops.py; ``extra(repo)`` adds to the second. Returns (repo, shas)."""
    def write(repo, k):
        (repo / "ops.py").write_text(f"X = {k}\n")
        if extra and k == 1:
            extra(repo)

    return commit_series(tmp_path / "repo", 3, write, lambda k: f"c{k}")


@pytest.mark.parametrize("rev", ["--output=/tmp/atk43_x", "-n1", "HEAD --all", "HEAD\n", "@{-1}", "--end-of-options"])
def test_bisect_revs_that_look_like_options_are_one_line(zlf_cli, tmp_path, rev):
    repo, shas = small_repo(tmp_path)
    res = cli(zlf_cli, "bisect", "ops.py::x", "--repo", repo, "--good", rev, "--bad", shas[-1], "--out", tmp_path / "o")
    one_line_2(res)
    assert not os.path.exists("/tmp/atk43_x")


def test_bisect_over_a_repo_with_an_absolute_link_is_one_line_or_a_skip(zlf_cli, tmp_path):
    """git archive keeps links; the tar 'data' filter refuses a link to /etc and raises. That
    must be a skip or one line, not a traceback."""
    repo, shas = small_repo(tmp_path, extra=lambda r: (r / "passwd").symlink_to("/etc/passwd"))
    res = zlf_cli("bisect", "ops.py::x", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1],
                  "--out", str(tmp_path / "o"), "--rounds", "1", timeout=300)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-2000:]
    assert res.returncode in (1, 2)


def test_bisect_over_odd_file_names_extracts_them_as_files(tmp_path):
    def odd(r):
        (r / "-rf").write_text("x")
        (r / "new\nline.py").write_text("x")
        (r / "ü ß.py").write_text("x")
    repo, shas = small_repo(tmp_path, extra=odd)
    from zlf_history import bisect as b
    d = tmp_path / "t"
    d.mkdir()
    tree = b.extract(repo, shas[-1], d / "tree")
    assert (tree / "new\nline.py").is_file() and (tree / "-rf").is_file() and (tree / "ü ß.py").is_file()


@pytest.mark.parametrize("spec", ["/etc/passwd::x", "../outside.py::x", "sub/../../outside.py::x"])
def test_bisect_op_files_outside_the_repo_are_refused(zlf_cli, tmp_path, spec):
    repo, shas = small_repo(tmp_path)
    one_line_2(cli(zlf_cli, "bisect", spec, "--repo", repo, "--good", shas[0], "--bad", shas[-1],
                   "--out", tmp_path / "o"))


def _state(tmp_path, repo, shas, **over):
    d = tmp_path / "o" / "bisect_x_1"
    d.mkdir(parents=True)
    data = {"format": 1, "repo": str(repo), "good": shas[0], "bad": shas[-1], "commits": shas[1:], "steps": [],
            "ops": ["ops.py::x"], "mode": "repo", "direction": "slower", "points": [], "rounds": 1,
            "max_rounds": 10, "alpha": 0.05, "steps_max": 4, "alpha_step": 0.0125, "min_effect": None,
            "backend": None, "ab_args": [], "build": None, "python": None, "good_python": None,
            "python_template": None, "status": "running", "command": ["zlf", "bisect"]}
    data.update(over)
    (d / "bisect.json").write_text(json.dumps(data))
    return d


def test_resume_does_not_run_an_op_file_outside_the_repo_named_in_bisect_json(zlf_cli, tmp_path):
    repo, shas = small_repo(tmp_path)
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n")
    d = _state(tmp_path, repo, shas, ops=[f"{evil}::x"])
    res = zlf_cli("bisect", "--resume", str(d), timeout=300)
    assert not marker.exists(), "a file named only in bisect.json was executed"
    assert res.returncode == 2


def test_resume_does_not_run_an_interpreter_named_in_bisect_json(zlf_cli, tmp_path):
    repo, shas = small_repo(tmp_path)
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evilpy"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    evil.chmod(0o755)
    d = _state(tmp_path, repo, shas, mode="compiler", ops=["add"], build="true", python=str(evil),
               good_python=sys.executable)
    res = zlf_cli("bisect", "--resume", str(d), "--build", "true", timeout=300)
    assert not marker.exists(), "an interpreter named only in bisect.json was run"
    assert res.returncode == 2


def test_resume_does_not_take_ab_arguments_from_bisect_json(zlf_cli, tmp_path):
    """ab_args of the state file go straight onto the campaign's command line (--a-python …): a
    bisect.json edited to add ``--a-python EVIL`` runs EVIL on --resume."""
    repo, shas = small_repo(tmp_path)
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evilpy"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    evil.chmod(0o755)
    envs = tmp_path / "envs"
    for sha in shas:
        (envs / sha).mkdir(parents=True)
        (envs / sha / "python").symlink_to(sys.executable)
    template = str(envs) + "/{rev}/python"
    d = _state(tmp_path, repo, shas, mode="compiler", ops=["add"], python_template=template,
               ab_args=["--a-python", str(evil)])
    zlf_cli("bisect", "--resume", str(d), "--python-template", template, timeout=600)
    assert not marker.exists(), "an interpreter named only in bisect.json's ab_args was run"


@pytest.mark.parametrize("steps", [[1, 2], [{"commit": 5}], [{"outcome": "bad"}], ["x"]])
def test_resume_of_a_state_with_malformed_steps_is_one_line(zlf_cli, tmp_path, steps):
    repo, shas = small_repo(tmp_path)
    d = _state(tmp_path, repo, shas, steps=steps)
    res = zlf_cli("bisect", "--resume", str(d), timeout=300)
    assert "Traceback" not in res.stderr, res.stderr[-1500:]
    assert res.returncode == 2


def test_resume_with_a_repo_that_is_not_the_one_searched_is_refused(zlf_cli, tmp_path):
    repo, shas = small_repo(tmp_path)
    d = _state(tmp_path, tmp_path / "nope", shas)
    res = zlf_cli("bisect", "--resume", str(d), timeout=300)
    assert "Traceback" not in res.stderr, res.stderr[-1500:]
    assert res.returncode == 2
