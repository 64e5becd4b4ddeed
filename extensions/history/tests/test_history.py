"""The history store, change points, missing data and the dashboard's files (no browser here)."""
from __future__ import annotations

import json
import math
import os
import random
import sqlite3
from pathlib import Path

import pytest

from zlf.testing import write_run_dir
from zlf_history import changes
from zlf_history.store import Store
from history_fixtures import history_db, postgres_server  # noqa: F401  (fixtures)

POINT = "add/5000/float32"
OTHER = "add/1024/float32"


def runs_with(tmp_path, levels, point=POINT, other=OTHER, noise=0.002, seed=1, start_day=1, name="r"):
    """One run directory per level (a day apart), ``point`` at that level times a little noise,
    ``other`` flat; returns their paths."""
    rng = random.Random(seed)
    paths = []
    for i, level in enumerate(levels):
        pts = {point: level * math.exp(rng.gauss(0, noise))}
        if other:
            pts[other] = 1.0 * math.exp(rng.gauss(0, noise))
        day = start_day + i
        paths.append(write_run_dir(tmp_path / "runs", pts, name=f"{name}{i}",
                                   meta={"started": f"2026-01-{day:02d}T00:00:00+00:00",
                                         "fingerprint": {"torch": "2.11", "triton": "3.6", "driver": "570"}}))
    return paths


def add(zlf_cli, db, *dirs, labels=()):
    args = ["history", "add", *map(str, dirs), "--db", db]
    for label in labels:
        args += ["--label", label]
    return zlf_cli.inprocess(*args, check_rc=0)


def test_a_run_is_recorded_once_with_its_labels(zlf_cli, tmp_path, history_db):
    (r,) = runs_with(tmp_path, [1.0])
    out = add(zlf_cli, history_db, r, labels=("compiler=abc", "gems=v5")).stdout
    assert "recorded:" in out and "(2 points)" in out
    # the same run again, and through another path to it: not recorded twice
    link = tmp_path / "link"
    link.symlink_to(r)
    again = add(zlf_cli, history_db, link).stdout
    assert "already recorded" in again
    listed = json.loads(zlf_cli.inprocess("history", "ls", "--db", history_db, "--format", "json", check_rc=0).stdout)
    assert len(listed) == 1 and listed[0]["labels"] == "compiler=abc gems=v5" and listed[0]["points"] == 2
    assert listed[0]["torch"] == "2.11" and listed[0]["triton"] == "3.6"
    only = json.loads(zlf_cli.inprocess("history", "ls", "--db", history_db, "--label", "gems=v4", "--format", "json",
                                        check_rc=0).stdout)
    assert only == []


def test_export_is_every_result_and_keeps_no_formula_or_secret(zlf_cli, tmp_path, history_db):
    r = write_run_dir(tmp_path / "runs", {POINT: 1.0, "=cmd/1/float32": 2.0}, name="x",
                      meta={"command": ["zlf", "run", "add", "--ray-address", "ray://admin:hunter2pw@head:10001"]})
    add(zlf_cli, history_db, r)
    text = zlf_cli.inprocess("history", "export", "--db", history_db, check_rc=0).stdout
    assert "hunter2pw" not in text
    rows = text.splitlines()
    assert rows[0].startswith("run,started,point") and len(rows) == 3
    assert any(line.split(",")[2] == "'=cmd/1/float32" for line in rows[1:])  # a formula is text
    doc = json.loads(zlf_cli.inprocess("history", "export", "--db", history_db, "--format", "json", check_rc=0).stdout)
    assert {d["point"] for d in doc} == {POINT, "=cmd/1/float32"}


def test_a_step_is_found_with_the_labels_that_changed_there(zlf_cli, tmp_path, history_db):
    levels = [1.0] * 8 + [1.10] * 8
    paths = runs_with(tmp_path, levels)
    for i, p in enumerate(paths):
        add(zlf_cli, history_db, p, labels=(f"compiler=c{i}", "gems=v5"))
    doc = json.loads(zlf_cli.inprocess("history", "changes", "--db", history_db, "--format", "json",
                                       check_rc=0).stdout)
    assert doc["series"] == 2
    (change,) = doc["changes"]
    assert change["point"] == POINT and 8 < change["change_pct"] < 12
    assert change["lo_pct"] < change["change_pct"] < change["hi_pct"]
    assert change["labels_changed"] == "compiler:c7->c8"  # gems did not change
    shown = zlf_cli.inprocess("history", "show", POINT, "--db", history_db, "--format", "json", check_rc=0).stdout
    marked = [r for r in json.loads(shown) if r["change_pct"] is not None]
    assert len(marked) == 1 and marked[0]["labels"].startswith("compiler=c8")


def test_a_flat_noisy_series_has_no_change():
    rng = random.Random(7)
    for trial in range(20):
        values = [math.exp(rng.gauss(0, 0.01)) for _ in range(40)]
        assert changes.detect(values) == [], trial


def test_a_known_step_is_recovered_where_it_is():
    rng = random.Random(3)
    values = [math.exp(rng.gauss(0, 0.005)) * (1.03 if i >= 25 else 1.0) for i in range(40)]
    (c,) = changes.detect(values)
    assert c.index == 25 and 2.0 < c.pct < 4.0 and c.lo < c.ratio < c.hi and c.p_value < changes.ALPHA


def test_a_point_that_stopped_reporting_is_listed(zlf_cli, tmp_path, history_db):
    paths = runs_with(tmp_path, [1.0] * 4)
    later = write_run_dir(tmp_path / "runs", {OTHER: 1.0}, name="later",  # add ran, add/5000 did not
                          meta={"started": "2026-02-01T00:00:00+00:00",
                                "fingerprint": {"torch": "2.11", "triton": "3.6", "driver": "570"}})
    add(zlf_cli, history_db, *paths, later)
    doc = json.loads(zlf_cli.inprocess("history", "changes", "--db", history_db, "--format", "json",
                                       check_rc=0).stdout)
    (m,) = doc["missing"]
    assert m["point"] == POINT and m["now"] == "absent" and m["runs_since"] == 1
    # another environment's later run does not make the point missing here
    fresh = tmp_path / "fresh.sqlite"
    other_env = write_run_dir(tmp_path / "runs", {OTHER: 1.0}, name="elsewhere",
                              meta={"started": "2026-02-02T00:00:00+00:00", "fingerprint": {"torch": "2.12"}})
    add(zlf_cli, str(fresh), *paths, other_env)
    doc = json.loads(zlf_cli.inprocess("history", "changes", "--db", str(fresh), "--format", "json", check_rc=0).stdout)
    assert doc["missing"] == []


def test_a_running_run_is_not_recorded(zlf_cli, tmp_path, history_db):
    r = write_run_dir(tmp_path / "runs", {POINT: 1.0}, meta={"status": "running"})
    out = add(zlf_cli, history_db, r).stdout
    assert "not recorded" in out and "still running" in out


def test_a_folder_that_is_no_run_is_one_line(zlf_cli, tmp_path):
    (tmp_path / "empty").mkdir()
    p = zlf_cli.inprocess("history", "add", str(tmp_path / "empty"), "--db", str(tmp_path / "h.sqlite"))
    assert p.returncode == 2 and "neither a zlf run directory nor a campaign" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("label", ["nokey", "=v", "k y=v", "k=" + "x" * 600, "k=a\x1bb"])
def test_a_bad_label_is_one_line(zlf_cli, tmp_path, label):
    (r,) = runs_with(tmp_path, [1.0])
    p = zlf_cli.inprocess("history", "add", str(r), "--db", str(tmp_path / "h.sqlite"), "--label", label)
    assert p.returncode == 2 and "--label" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_locked_database_is_one_line(zlf_cli, tmp_path, monkeypatch):
    db = tmp_path / "h.sqlite"
    Store(str(db)).close()
    (r,) = runs_with(tmp_path, [1.0])
    holder = sqlite3.connect(db)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        monkeypatch.setenv("ZLF_HISTORY_LOCK_TIMEOUT", "0.05")
        p = zlf_cli.inprocess("history", "add", str(r), "--db", str(db))
    finally:
        holder.rollback()
        holder.close()
    assert p.returncode == 2 and "is locked by another process" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content", [b"\x00garbage" * 200, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_corrupt_database_is_one_line(zlf_cli, tmp_path, content):
    db = tmp_path / "h.sqlite"
    db.write_bytes(content)
    p = zlf_cli.inprocess("history", "ls", "--db", str(db))
    assert p.returncode == 2 and "history database" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_database_of_a_newer_zlf_is_refused(tmp_path, history_db):
    Store(history_db).close()
    import sqlalchemy as sa

    from zlf_history import store as store_mod

    engine = sa.create_engine(store_mod.engine_url(history_db))
    with engine.begin() as conn:
        conn.execute(store_mod.info.update().values(value="99"))
    engine.dispose()
    with pytest.raises(Exception, match="schema version 99, written by a newer zlf"):
        Store(history_db)


def test_an_older_database_is_migrated_in_place(tmp_path, history_db):
    import sqlalchemy as sa

    Store(history_db).close()  # version 1
    added = []

    def v2(conn):
        conn.execute(sa.text("CREATE TABLE extra_v2 (x INTEGER)"))
        added.append(True)
    s = Store(history_db, migrations=[lambda conn: None, v2])
    assert s.version == 2 and added == [True]
    s.close()
    assert Store(history_db, migrations=[lambda conn: None, v2]).version == 2 and added == [True]  # once


def test_a_database_with_foreign_tables_is_refused(tmp_path):
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    with pytest.raises(Exception, match="tables that are not zlf's history"):
        Store(str(db))


def test_a_campaign_records_its_verdicts_and_runs(zlf_cli, tmp_path, history_db):
    camp = tmp_path / "ab_x_20260101-000000"
    runs = []
    for k in (1, 2):
        for side in ("A", "B"):
            d = write_run_dir(camp / "add", {POINT: 1.0 if side == "A" else 1.2}, name=f"r{k}_{side}",
                              meta={"started": f"2026-01-0{k}T00:0{'AB'.index(side)}:00+00:00"})
            runs.append({"op": "add", "round": k, "side": side, "dir": str(d.relative_to(camp)), "status": "ok"})
    runs.append({"op": "add", "round": 3, "side": "A", "dir": "../../etc", "status": "ok"})  # stays outside
    (camp / "campaign.json").write_text(json.dumps({
        "format": 1, "label": "x", "status": "complete", "started": "2026-01-01T00:00:00+00:00", "aa": False,
        "sides": [{"name": "A", "env": {"SW": "0"}, "python": ""},
                  {"name": "B", "env": {"SW": "1", "HF_TOKEN_X": "hf_abcdefghijklmnopqrstuvwxyz0123"}, "python": ""}],
        "runs": runs}))
    (camp / "summary.json").write_text(json.dumps({"points": [
        {"point": POINT, "verdict": "SLOWER", "delta_pct": 20.0, "delta_lo_pct": 18.0, "delta_hi_pct": 22.0,
         "rounds": 2}]}))
    out = add(zlf_cli, history_db, camp).stdout
    assert "campaign" in out and "1 verdicts, 4 new run(s)" in out
    listed = json.loads(zlf_cli.inprocess("history", "ls", "--db", history_db, "--format", "json", check_rc=0).stdout)
    assert sorted(r["labels"] for r in listed) == sorted(
        f"campaign=x round={k} side={s}" for k in (1, 2) for s in "AB")
    again = add(zlf_cli, history_db, camp).stdout
    assert "already recorded: campaign" in again and "0 new run(s)" in again
    with Store(history_db) as s:
        (c,) = s.campaigns()
    assert c["verdicts"][0]["verdict"] == "SLOWER" and "hf_abcdef" not in json.dumps(c["sides"])


def test_run_with_history_records_itself(zlf_cli, tmp_path):
    db = tmp_path / "h.sqlite"
    p = zlf_cli("run", "add", "--rep-ms", "2", "--history", str(db), "--history-label", "compiler=abc", check_rc=0)
    assert "history: recorded: 2 points" in p.stdout
    listed = json.loads(zlf_cli("history", "ls", "--db", str(db), "--format", "json", check_rc=0).stdout)
    assert len(listed) == 1 and listed[0]["labels"] == "compiler=abc" and listed[0]["status"] == "complete"


def test_a_history_that_cannot_be_written_keeps_the_run(zlf_cli, tmp_path):
    bad = tmp_path / "not_a_db.sqlite"
    bad.write_bytes(b"\x00" * 5000)
    p = zlf_cli("run", "add", "--rep-ms", "2", "--history", str(bad), check_rc=0)
    assert "history: run not recorded" in p.stderr and "zlf history add" in p.stderr
    assert "run dir:" in p.stdout


def test_the_dashboard_is_written_whole_and_escapes_what_it_shows(zlf_cli, tmp_path):
    db = str(tmp_path / "h.sqlite")
    evil = "<img src=x onerror=alert(1)>/1/float32"
    paths = runs_with(tmp_path, [1.0] * 6 + [1.2] * 6, other=evil)
    for i, p in enumerate(paths):
        add(zlf_cli, db, p, labels=(f"compiler=c{i}",))
    out = tmp_path / "site"
    zlf_cli.inprocess("history", "html", str(out), "--db", db, check_rc=0)
    index = (out / "index.html").read_text()
    assert "<img src=x" not in index and "&lt;img src=x onerror=alert(1)&gt;" in index
    assert "http://" not in index and "https://" not in index  # nothing fetched at view time
    pages = [p for p in out.glob("*.html") if p.name != "index.html"]
    assert len(pages) == 2
    page = next(p for p in pages if "add" in p.name and "5000" in p.name).read_text()
    assert "<svg" in page and "compiler" in page and "zlf run " in page
    # written again over its own site: fine; over a folder of someone else's: refused
    zlf_cli.inprocess("history", "html", str(out), "--db", db, check_rc=0)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    p = zlf_cli.inprocess("history", "html", str(mine), "--db", db)
    assert p.returncode == 2 and "not empty" in p.stderr and (mine / "notes.txt").read_text() == "keep"
    link = tmp_path / "linked"
    link.symlink_to(mine)
    p = zlf_cli.inprocess("history", "html", str(link), "--db", db)
    assert p.returncode == 2 and "is a link" in p.stderr


@pytest.mark.parametrize("args", [["changes", "--alpha", "nan"], ["changes", "--alpha", "0"],
                                  ["changes", "--min-effect", "-1"], ["ls", "--last", "0"]])
def test_bad_numbers_are_one_line(zlf_cli, tmp_path, args):
    p = zlf_cli.inprocess("history", *args, "--db", str(tmp_path / "h.sqlite"))
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and "error:" in last and args[1] in last and "Traceback" not in p.stderr


def test_an_unknown_scheme_is_refused(zlf_cli, tmp_path):
    p = zlf_cli.inprocess("history", "ls", "--db", "mysql://root:pw@host/db")
    assert p.returncode == 2 and "only SQLite files and postgresql://" in p.stderr and "pw@" not in p.stderr


def test_the_postgres_url_password_is_never_shown():
    from zlf_history.store import shown

    assert shown("postgresql://u:s3cret@h/db") == "postgresql://u:***@h/db"
    assert os.path.basename(shown("/tmp/h.sqlite")) == "h.sqlite"


def test_series_of_another_environment_stay_apart(zlf_cli, tmp_path, history_db):
    a = runs_with(tmp_path, [1.0] * 6, other=None, name="a")
    b = [write_run_dir(tmp_path / "runs", {POINT: 2.0}, name=f"b{i}",
                       meta={"started": f"2026-01-{10 + i:02d}T00:00:00+00:00", "fingerprint": {"torch": "9.9"}})
         for i in range(6)]
    add(zlf_cli, history_db, *a, *b)
    doc = json.loads(zlf_cli.inprocess("history", "changes", "--db", history_db, "--format", "json",
                                       check_rc=0).stdout)
    assert doc["series"] == 2 and doc["changes"] == []  # a 2x jump across torch versions is no change
    assert Path(a[0]).exists()
