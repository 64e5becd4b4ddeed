"""Adversarial pass atk40 (issue 40), part 2: full disks and closed streams, files read back,
YAML, numeric flags, task packages, points listed twice."""
from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

# written against a full install: every test runs with every extension of this repository active
# (the extensions' session of make test), and is skipped in core's own session
_ALL = ("autotune_replay", "cudagraph", "cupti", "flaggems", "history", "ir_dump", "profile", "seed", "shapes", "task")
pytestmark = pytest.mark.extensions(*_ALL)


def _installed() -> set:
    from zlf.testing import installed_extensions

    return set(installed_extensions())


if not set(_ALL) <= _installed():  # module-scoped fixtures run zlf with them before any test could skip
    pytest.skip("needs every extension of this repository installed", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_attack40 import FAST, base, copy, no_tb, one_line, records, run_dir, write_ops, zlf  # noqa: E402,F401


def fsize(n):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))


# ---------------------------------------------------------------- (7) full disk, unwritable, streams
def test_report_on_a_full_disk_is_one_line(base, tmp_path):
    r = copy(base, tmp_path / "r")
    p = zlf("report", r, cwd=tmp_path, preexec_fn=fsize(200))
    one_line(p)


def test_report_where_report_md_is_a_folder_is_one_line(base, tmp_path):
    r = copy(base, tmp_path / "r")
    (r / "report.md").mkdir()
    (r / "report.md" / "x").write_text("keep")
    p = zlf("report", r, cwd=tmp_path)
    no_tb(p)
    assert p.returncode in (0, 2)
    assert (r / "report.md" / "x").read_text() == "keep"


def test_history_add_on_a_full_disk_is_one_line(base, tmp_path):
    p = zlf("history", "add", base, cwd=tmp_path, preexec_fn=fsize(4096))
    one_line(p)


def test_history_html_on_a_full_disk_is_one_line(base, tmp_path):
    assert zlf("history", "add", base, cwd=tmp_path).returncode == 0
    p = zlf("history", "html", tmp_path / "site", cwd=tmp_path, preexec_fn=fsize(300))
    one_line(p)


def test_compare_into_a_full_stdout_is_no_traceback(base, tmp_path):
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "zlf", "compare", str(base), str(base), "--format", "csv"],
                           cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                           env=dict(os.environ, ZLF_EXTENSIONS="seed"))
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode != 0


def test_history_export_into_a_closed_stdout_is_no_traceback(base, tmp_path):
    assert zlf("history", "add", base, cwd=tmp_path).returncode == 0
    p = zlf("history", "export", "--format", "csv", cwd=tmp_path, stdout=None,
            ) if False else subprocess.run(
        f"{sys.executable} -m zlf history export --format csv >&-", shell=True, cwd=tmp_path, text=True,
        capture_output=False, stderr=subprocess.PIPE, timeout=120,
        env=dict(os.environ, ZLF_HISTORY_DB=str(tmp_path / "hist.sqlite"), ZLF_EXTENSIONS="history"))
    assert "Traceback" not in p.stderr, p.stderr[-2000:]


def test_ops_listing_into_a_full_stdout_is_no_traceback(tmp_path):
    write_ops(tmp_path)
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "zlf", "ops", "ops.py", "--backend", "cpu"], cwd=tmp_path,
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=dict(os.environ, ZLF_EXTENSIONS="seed"))
    assert "Traceback" not in p.stderr, p.stderr[-2000:]


# ---------------------------------------------------------------- (8) files read back
def test_history_db_that_is_a_fifo_is_one_line(tmp_path):
    os.mkfifo(tmp_path / "h.sqlite")
    try:
        p = zlf("history", "ls", "--db", tmp_path / "h.sqlite", cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("zlf history hung on a FIFO database")
    one_line(p)


def test_history_db_that_is_text_is_one_line(tmp_path):
    (tmp_path / "h.sqlite").write_text("hello, not a database\n" * 100)
    one_line(zlf("history", "ls", "--db", tmp_path / "h.sqlite", cwd=tmp_path))


def test_history_db_with_foreign_tables_is_one_line(tmp_path):
    c = sqlite3.connect(tmp_path / "h.sqlite")
    c.execute("create table runs (x text)")
    c.execute("insert into runs values ('a')")
    c.commit()
    c.close()
    one_line(zlf("history", "ls", "--db", tmp_path / "h.sqlite", cwd=tmp_path))


def test_history_db_whose_rows_have_wrong_types_is_no_traceback(base, tmp_path):
    assert zlf("history", "add", base, cwd=tmp_path).returncode == 0
    c = sqlite3.connect(tmp_path / "hist.sqlite")
    tables = [r[0] for r in c.execute("select name from sqlite_master where type='table'")]
    for t in tables:
        cols = [r[1] for r in c.execute(f"pragma table_info({t})")]
        for col in cols:
            if col not in ("id",) and not col.endswith("_id"):
                try:
                    c.execute(f"update {t} set {col} = 'x\u0000<not a number>'")
                except sqlite3.Error:
                    pass
    c.commit()
    c.close()
    for cmd in (["ls"], ["export", "--format", "csv"], ["changes"]):
        p = zlf("history", *cmd, cwd=tmp_path)
        no_tb(p)
        assert p.returncode in (0, 1, 2)


def _bisect_state(tmp_path, **change):
    from zlf_history import bisect as b
    folder = tmp_path / "bis"
    folder.mkdir()
    sha = "a" * 40
    state = {"format": b.FORMAT, "repo": str(tmp_path), "good": "b" * 40, "bad": sha, "commits": [sha],
             "steps": [], "ops": ["ops.py::relu"], "mode": "repo", "direction": "slower", "points": [],
             "rounds": 1, "max_rounds": 1, "alpha": 0.05, "steps_max": 4, "alpha_step": 0.0125,
             "min_effect": None, "backend": "cpu", "ab_args": [], "build": None, "python": None,
             "good_python": None, "python_template": None, "status": "running", "command": ["zlf"]}
    state.update(change)
    (folder / "bisect.json").write_text(json.dumps(state, allow_nan=True))
    return folder


@pytest.mark.parametrize("change", [
    {"steps": [1]},
    {"steps": [{"commit": 5}]},
    {"alpha_step": float("nan")},
    {"direction": 7},
    {"ab_args": "--rounds"},
])
def test_a_hostile_bisect_json_is_one_line(tmp_path, change):
    folder = _bisect_state(tmp_path, **change)
    p = zlf("bisect", "--resume", folder, cwd=tmp_path, timeout=120)
    one_line(p)


def test_a_bisect_json_that_is_a_fifo_is_one_line(tmp_path):
    (tmp_path / "bis").mkdir()
    os.mkfifo(tmp_path / "bis" / "bisect.json")
    try:
        p = zlf("bisect", "--resume", tmp_path / "bis", cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("hung on a FIFO")
    one_line(p)


def test_history_add_of_a_run_whose_results_is_a_fifo_is_one_line(base, tmp_path):
    r = copy(base, tmp_path / "r")
    (r / "results.jsonl").unlink()
    os.mkfifo(r / "results.jsonl")
    try:
        p = zlf("history", "add", r, cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("hung on a FIFO")
    one_line(p)


# ---------------------------------------------------------------- (9) YAML and encodings
@pytest.mark.parametrize("name,data", [
    ("binary.yaml", b"relu:\n  shapes: !!binary aGVsbG8=\n"),
    ("set.yaml", b"relu:\n  shapes: !!set {? [64]}\n"),
    ("inf.yaml", b"relu:\n  shapes:\n  - [.inf]\n"),
    ("neg.yaml", b"relu:\n  shapes:\n  - [-64]\n"),
    ("utf32.yaml", "relu:\n  shapes:\n  - [64]\n".encode("utf-32")),
    ("nul.yaml", b"relu:\n  shapes:\n  - [64]\x00\n"),
    ("longline.yaml", b"relu: \"" + b"a" * 3_000_000 + b"\"\n"),
], ids=lambda v: v if isinstance(v, str) else "data")
def test_a_hostile_shape_file_is_one_short_line(tmp_path, name, data):
    write_ops(tmp_path)
    (tmp_path / name).write_bytes(data)
    p = zlf("run", "ops.py", *FAST, "--out", "runs", "--shapes", name, cwd=tmp_path, timeout=120)
    line = one_line(p)
    assert len(line) < 250, line


# ---------------------------------------------------------------- (10) numeric flags
@pytest.mark.parametrize("args,flag", [
    (["run", "ops.py", "--retries", "-1"], "--retries"),
    (["run", "ops.py", "--device", "-1"], "--device"),
    (["run", "ops.py", "--input-copies", "99999999999999"], "--input-copies"),
    (["run", "ops.py", "--warmup-ms", "inf"], "--warmup-ms"),
    (["run", "ops.py", "--rep-ms", "1e300"], "--rep-ms"),
    (["run", "ops.py", "--seed", "-1"], "--seed"),
    (["run", "ops.py", "--cudagraph-replay-ms", "nan"], "--cudagraph-replay-ms"),
    (["run", "ops.py", "--cudagraph-max-calls", "0"], "--cudagraph-max-calls"),
    (["compare", "A", "A", "--threshold", "-5"], "--threshold"),
    (["compare", "A", "A", "--threshold", "inf"], "--threshold"),
    (["compare", "A", "A", "--fail-if-slower", "-1"], "--fail-if-slower"),
    (["bisect", "ops.py::relu", "--good", "HEAD~1", "--bad", "HEAD", "--alpha", "nan"], "--alpha"),
    (["bisect", "ops.py::relu", "--good", "HEAD~1", "--bad", "HEAD", "--alpha", "2"], "--alpha"),
    (["bisect", "ops.py::relu", "--good", "HEAD~1", "--bad", "HEAD", "--max-rounds", "0"], "--max-rounds"),
    (["bisect", "ops.py::relu", "--good", "HEAD~1", "--bad", "HEAD", "--min-effect", "nan"], "--min-effect"),
    (["bisect", "ops.py::relu", "--good", "HEAD~1", "--bad", "HEAD", "--rounds", "-3"], "--rounds"),
    (["history", "ls", "--last", "-1"], "--last"),
])
def test_a_numeric_flag_out_of_range_is_one_line_naming_it(base, tmp_path, args, flag):
    write_ops(tmp_path)
    args = [str(base) if a == "A" else a for a in args]
    if args[0] == "run":
        args += FAST[:2] + ["--out", "runs"]
    p = zlf(*args, cwd=tmp_path, timeout=120)
    one_line(p, flag)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# ---------------------------------------------------------------- (11) task packages
PKG = Path(__file__).resolve().parent / "data" / "taskpkg_vecadd"


def _task_pkg(tmp_path):
    import shutil
    pkg = tmp_path / "pkg"
    shutil.copytree(PKG, pkg)
    return pkg


def _task(tmp_path, pkg, *extra):
    return zlf("task", pkg, "--candidate", PKG / "candidates" / "correct.py", "--out", tmp_path / "runs",
               *extra, cwd=tmp_path, env={"ZLF_EXTENSIONS": "task"}, timeout=300)


@pytest.mark.skipif(not PKG.exists(), reason="no vecadd package")
@pytest.mark.parametrize("meta", [b'{"name": "x", "cases": 1e400}', b"[" * 100000, b'{"name": "x\\u0000\\n../../y"}',
                                  b'{"name": 5}'], ids=["inf", "deep", "nul_name", "int_name"])
def test_task_metadata_hostile_is_one_line_or_a_plain_name(tmp_path, meta):
    pkg = _task_pkg(tmp_path)
    for n in ("meta.json", "problem.json"):
        if (pkg / n).exists():
            (pkg / n).write_bytes(meta)
            break
    p = _task(tmp_path, pkg)
    no_tb(p)
    if p.returncode != 2:
        for d in (tmp_path / "runs").iterdir() if (tmp_path / "runs").exists() else []:
            assert "\n" not in d.name and "\x00" not in d.name
        assert not (tmp_path / "y").exists()


@pytest.mark.skipif(not PKG.exists(), reason="no vecadd package")
def test_task_problem_that_kills_itself_with_a_signal_is_one_line(tmp_path):
    pkg = _task_pkg(tmp_path)
    (pkg / "problem.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + (pkg / "problem.py").read_text())
    p = _task(tmp_path, pkg)
    one_line(p, "importing it killed its process with SIGKILL")
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- (12) a point listed twice
def _ids(tmp_path, *args, body=""):
    write_ops(tmp_path, body)
    p = zlf("run", *args, *FAST, "--out", "runs", cwd=tmp_path)
    no_tb(p)
    if p.returncode == 2:
        one_line(p, "twice")  # refused in one line: allowed by the issue
        return []
    return [r["point"] for r in records(tmp_path / run_dir(p))]


def test_the_same_op_spec_twice_runs_each_point_once(tmp_path):
    ids = _ids(tmp_path, "ops.py::relu", "ops.py::relu")
    assert len(ids) == len(set(ids)) and len(ids) in (0, 2), ids


def test_a_file_and_one_of_its_ops_run_each_point_once(tmp_path):
    ids = _ids(tmp_path, "ops.py", "ops.py::relu")
    assert len(ids) == len(set(ids)) and len(ids) in (0, 2), ids


def test_two_ops_of_one_name_in_a_file_give_no_point_twice(tmp_path):
    ids = _ids(tmp_path, "ops.py", body="\nrelu2 = zlf.Op(name='relu', fn=fn, make_inputs=mk, shapes=[(64,)],"
               " dtypes=('float32',), reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,)])\n")
    assert len(ids) == len(set(ids)), ids


def test_a_variant_listed_twice_gives_no_point_twice(tmp_path):
    body = ("\ndef mkv(shape, dtype, device, variant=''):\n    return mk(shape, dtype, device)\n"
            "v = zlf.Op(name='v', fn=fn, make_inputs=mkv, shapes=[(64,)], dtypes=('float32',),"
            " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,)],"
            " variants=lambda shape, dtype: ['a', 'a'])\n")
    ids = _ids(tmp_path, "ops.py::v", body=body)
    assert len(ids) == len(set(ids)), ids


def test_a_shape_written_two_ways_in_a_shape_file_runs_once(tmp_path):
    (tmp_path / "s.yaml").write_text("relu:\n  shapes:\n  - [64]\n  - [64.0]\n  - [0x40]\n")
    write_ops(tmp_path)
    p = zlf("run", "ops.py", *FAST, "--out", "runs", "--shapes", "s.yaml", cwd=tmp_path)
    no_tb(p)
    if p.returncode == 2:
        return  # refused in one line: also fine
    ids = [r["point"] for r in records(tmp_path / run_dir(p))]
    assert len(ids) == len(set(ids)), ids


def test_a_dtype_named_two_ways_runs_once(tmp_path):
    write_ops(tmp_path)
    p = zlf("run", "ops.py", *FAST, "--out", "runs", "--dtype", "float32,torch.float32,fp32", cwd=tmp_path)
    no_tb(p)
    if p.returncode == 2:
        return
    ids = [r["point"] for r in records(tmp_path / run_dir(p))]
    assert len(ids) == len(set(ids)), ids


def test_compare_of_a_run_against_itself_listed_twice_is_not_paired_twice(base, tmp_path):
    r = copy(base, tmp_path / "r")
    lines = (r / "results.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["point"] = rec["point"].replace("float32", "Float32")  # same point, other spelling
    (r / "results.jsonl").write_text("\n".join(lines + [json.dumps(rec)]) + "\n")
    p = zlf("compare", base, r, "--format", "json", cwd=tmp_path)
    no_tb(p)


def test_a_shape_too_big_to_allocate_is_a_failed_point_not_a_crash(tmp_path):
    write_ops(tmp_path)
    (tmp_path / "huge.yaml").write_text("relu:\n  shapes:\n  - [100000000000000]\n")
    p = zlf("run", "ops.py", *FAST, "--out", "runs", "--shapes", "huge.yaml", cwd=tmp_path, timeout=120)
    no_tb(p)
    assert p.returncode in (1, 2)


# ---------------------------------------------------------------- (6, 10, 3) under zlf ab
def test_zlf_ab_with_an_op_that_sigkills_itself_on_side_b_goes_on(tmp_path):
    write_ops(tmp_path, "\ndef k(x, out):\n    if os.environ.get('ZLF_ATK_SIDE') == 'B' and x.numel() == 64:\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n    torch.clamp(x, min=0, out=out)\n"
              "killer = zlf.Op(name='killer', fn=k, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,), (128,)])\n")
    p = zlf("ab", "ops.py::killer", "--a-env", "ZLF_ATK_SIDE=A", "--b-env", "ZLF_ATK_SIDE=B", "--rounds", "2",
            "--controls", "none", "--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "1", "--out", "camp",
            cwd=tmp_path, timeout=400)
    no_tb(p)
    [c] = list((tmp_path / "camp").iterdir())
    state = json.loads((c / "campaign.json").read_text())
    assert state["status"] not in ("running",), state["status"]


@pytest.mark.parametrize("value", ["nan", "-1", "1e999"])
def test_zlf_ab_min_effect_and_alpha_out_of_range_are_one_line(tmp_path, value):
    write_ops(tmp_path)
    for flag in ("--min-effect", "--alpha"):
        p = zlf("ab", "ops.py::relu", "--switch", "ZLF_ATK_X", flag, value, "--backend", "cpu", "--out", "camp",
                cwd=tmp_path, timeout=120)
        one_line(p, flag)
    assert not (tmp_path / "camp").exists() or not any((tmp_path / "camp").iterdir())


def test_zlf_ab_side_env_with_a_jwt_is_refused_or_redacted(tmp_path):
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    write_ops(tmp_path)
    p = zlf("ab", "ops.py::relu", "--a-env", f"ZLF_ATK_CFG={jwt}", "--rounds", "1", "--controls", "none",
            "--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "1", "--out", "camp", "--dry-run",
            cwd=tmp_path, timeout=200)
    no_tb(p)
    assert jwt not in p.stdout + p.stderr
    for f in (tmp_path / "camp").rglob("*") if (tmp_path / "camp").exists() else []:
        if f.is_file():
            assert jwt.encode() not in f.read_bytes(), f
