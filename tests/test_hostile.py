"""Hostile inputs and faults (docs/hostile.md): records, names, trees and arguments a careless or
malicious user, another machine or a full disk hands zlf. Each case is a reproduction: it failed
before its fix (a traceback, a secret in a record, a file outside ``--out``, a raw escape
sequence on the terminal, a lost record). Processes, signals and the judge: test_hostile_procs.py.

Every case ends the same way: one line ``zlf: error: ...`` and exit code 2, or a note and a
clean result; never a traceback, never a finished record lost.
"""
from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_run, ROOT, core_only_env, read_records, run_dir_from, zlf_core

TASKPKG = ROOT / "tests" / "data" / "taskpkg_vecadd"
ESC = "\x1b]0;pwned\x07\x1b[2J"  # set the window title, ring the bell, clear the screen


def one_line_error(proc, *needles) -> str:
    """Assert exit code 2 with exactly one ``zlf: error:`` line and no traceback; return it."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"rc={proc.returncode}\n{out}"
    assert "Traceback" not in out, out
    lines = [l for l in proc.stderr.splitlines()
             if l.strip() and not l.startswith("zlf: warning:") and not re.match(r"\[\d+/\d+\] ", l)]  # progress
    assert len(lines) == 1 and lines[0].startswith("zlf: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def clean_exit(proc, rc=0) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, f"rc={proc.returncode}\n{out}"
    assert "Traceback" not in out, out


def no_control(text: str) -> None:
    """No control character but zlf's own colours (FORCE_COLOR)."""
    text = re.sub("\x1b\\[(?:0|1|2|31|32|33)m", "", text)
    assert "\x1b" not in text and "\x07" not in text, repr(text[:400])


# ----------------------------------------------------------------------------- fixtures
def rewrite_records(run_dir: Path, change) -> None:
    docs = read_records(run_dir)
    change(docs)
    (run_dir / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))


def zlf(*args, cwd, env=None, preexec_fn=None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    # core alone, unless the test (autouse fixture, extensions marker) chose already
    full_env.update({"ZLF_NO_PROGRESS": "1", **({} if "ZLF_DISABLE" in os.environ else core_only_env()), "ZLF_CACHE_DIR": str(Path(cwd) / "cache")})
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300, preexec_fn=preexec_fn)


OP_FILE = '''
import torch, zlf

def make(shape, dtype, device):
    x = torch.ones(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))

def copy(x, out):
    out.copy_(x)

def shout(x, out):
    raise RuntimeError("bad kernel \\x1b]0;pwned\\x07\\x1b[2J")

escape = zlf.Op(name="../../../x", fn=copy, make_inputs=make, shapes=[(64,)], reference=lambda x, out: x,
                outputs=(1,), dtypes=["float32"])
noisy = zlf.Op(name="noisy", fn=shout, make_inputs=make, shapes=[(64,)], reference=lambda x, out: x,
               outputs=(1,), dtypes=["float32"])
many = zlf.Op(name="many", fn=copy, make_inputs=make, shapes=[(n,) for n in range(16, 56)],
              reference=lambda x, out: x, outputs=(1,), dtypes=["float32"])
'''


@pytest.fixture
def op_file(tmp_path) -> Path:
    path = tmp_path / "hostile_ops.py"
    path.write_text(OP_FILE)
    return path


# ----------------------------------------------------------------------------- 1 secrets
def test_credentials_stay_out_of_meta_and_report(tmp_path):
    env = {"NVIDIA_API_KEY": "nvapi-SECRET1", "TORCH_HUB_TOKEN": "th_SECRET2",
           "TRITON_REMOTE_URL": "https://me:SECRET3@cache.example/x", "ZLF_NOTE": "ghp_SECRET4abcdef",
           "CUDA_SOMETHING": "Zx9QmT4vLp2RkW8sHn3JdF6yBc5", "TRITON_DEBUG": "1"}
    proc = zlf("run", "add", "--out", "runs", cwd=tmp_path, env=env)
    clean_exit(proc)
    run_dir = run_dir_from(proc.stdout, tmp_path)
    clean_exit(zlf("report", run_dir, cwd=tmp_path))
    for name in ("meta.json", "report.md"):
        text = (run_dir / name).read_text()
        for secret in ("SECRET", "nvapi-", "Zx9QmT4vLp2RkW8sHn3JdF6yBc5", "NVIDIA_API_KEY", "TORCH_HUB_TOKEN"):
            assert secret not in text, (name, secret)
        assert "TRITON_DEBUG" in text  # what changes the measurement is still recorded
    recorded = json.loads((run_dir / "meta.json").read_text())["environment"]
    assert recorded["TRITON_REMOTE_URL"] == "https://me:<redacted>@cache.example/x"


def test_report_hides_credentials_of_an_old_record(base_run, tmp_path):
    run_dir = copy_run(base_run, tmp_path / "old")
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["environment"] = {"NVIDIA_API_KEY": "nvapi-SECRET1", "TRITON_DEBUG": "1"}
    (run_dir / "meta.json").write_text(json.dumps(meta))
    clean_exit(zlf("report", run_dir, cwd=tmp_path))
    page = (run_dir / "report.md").read_text()
    assert "SECRET" not in page and "NVIDIA_API_KEY" not in page and "TRITON_DEBUG" in page


def test_ab_refuses_a_credential_in_a_side_environment(tmp_path):
    proc = zlf("ab", "add", "--a-env", "HF_TOKEN=hf_SECRET", "--b-env", "X=1", "--dry-run", cwd=tmp_path)
    one_line_error(proc, "HF_TOKEN looks like a credential")
    proc = zlf("ab", "add", "--a-env", "X=0", "--b-env", "X=ghp_SECRETabcdef", "--dry-run", cwd=tmp_path)
    one_line_error(proc, "value of X looks like a credential")


# ----------------------------------------------------------------------------- 3 names that become paths
def test_run_name_cannot_leave_out(tmp_path):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    proc = zlf("run", "add", "--out", "out", "--name", "../../escape_name", cwd=cwd)
    clean_exit(proc)
    run_dir = run_dir_from(proc.stdout, cwd).resolve()
    assert run_dir.parent == (cwd / "out").resolve()
    assert run_dir.name.startswith("escape_name_")
    assert not list(tmp_path.glob("escape_name_*")) and not list((tmp_path / "a").glob("escape_name_*"))


def test_op_name_cannot_leave_out(tmp_path, op_file):
    cwd = tmp_path / "a" / "b" / "c"  # out/../../../x would be a/x_*
    cwd.mkdir(parents=True)
    proc = zlf("run", f"{op_file}::escape", "--out", "out", cwd=cwd)
    clean_exit(proc)
    run_dir = run_dir_from(proc.stdout, cwd).resolve()
    assert run_dir.parent == (cwd / "out").resolve() and run_dir.name.startswith("x_")
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("x_*")] == [run_dir.relative_to(tmp_path)]


def test_ab_refuses_an_op_name_that_leaves_the_campaign(tmp_path):
    proc = zlf("ab", "../../../x", "--aa", "--dry-run", cwd=tmp_path)
    one_line_error(proc, "cannot name a directory")


def test_campaign_run_paths_stay_inside_the_campaign(tmp_path):
    from zlf.executors import execute_spec
    from zlf.errors import UsageError

    root, victim = tmp_path / "campaign", tmp_path / "precious"
    root.mkdir()
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    spec = {"key": "k", "argv": [sys.executable, "-c", "pass"], "env": {}, "cwd": str(tmp_path),
            "staging": "op/.staging", "dir": "../precious", "log": "op/log.txt"}
    with pytest.raises(UsageError, match="outside"):
        execute_spec(spec, root)
    assert (victim / "keep.txt").read_text() == "mine"


@pytest.mark.extensions("task")
def test_task_package_named_dotdot_stays_a_plain_name(tmp_path):
    from zlf_taskpkg.package import TaskPackage

    pkg = tmp_path / "pkg"
    shutil.copytree(TASKPKG, pkg)
    meta = json.loads((pkg / "meta.json").read_text())
    (pkg / "meta.json").write_text(json.dumps({**meta, "name": ".."}))
    name = TaskPackage.open(pkg).name
    assert name not in ("", ".", "..") and "/" not in name


# ----------------------------------------------------------------------------- 4 links in IR trees
@pytest.mark.extensions("ir_dump")
def test_ir_diff_never_follows_links_out_of_a_tree(tmp_path):
    secret = tmp_path / "passwd"
    secret.write_text("root:SECRET:0:0\n")
    for side, body in (("A", "tt.dot a\n"), ("B", "tt.dot b\n")):
        kernel = tmp_path / side / "ir" / "1024" / "kern"
        kernel.mkdir(parents=True)
        (kernel / "k.ttir").write_text(body)
    (tmp_path / "A" / "ir" / "1024" / "kern" / "x.ttir").write_text("harmless\n")
    os.symlink(secret, tmp_path / "B" / "ir" / "1024" / "kern" / "x.ttir")
    os.symlink(secret.parent, tmp_path / "B" / "ir" / "linked_shape")
    proc = subprocess.run([sys.executable, "-m", "zlf", "ir-diff", "A", "B", "--out", "d"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "ZLF_EXTENSIONS": "ir_dump"})
    clean_exit(proc, rc=1)
    assert "SECRET" not in proc.stdout
    assert "symbolic link(s) in the IR tree left out" in proc.stdout
    written = [p.read_text() for p in (tmp_path / "d").rglob("*") if p.is_file()]
    assert written and not any("SECRET" in t for t in written)


# ----------------------------------------------------------------------------- 5 terminal escapes
def test_compare_and_report_escape_control_characters_from_records(base_run, tmp_path):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")
    for run_dir in (a, b):
        def spoil(docs):
            docs[0]["point"] = docs[0]["point"] + ESC
            docs[1]["status"], docs[1]["error"] = "FAILED", "boom" + ESC
            docs[1]["markers"] = ["MARK" + ESC]
        rewrite_records(run_dir, spoil)
        meta = json.loads((run_dir / "meta.json").read_text())
        meta["device_name"] = "gpu" + ESC
        (run_dir / "meta.json").write_text(json.dumps(meta))
    for fmt in ("table", "markdown", "csv"):
        proc = zlf("compare", a, b, "--format", fmt, cwd=tmp_path, env={"FORCE_COLOR": "1"})
        clean_exit(proc)
        no_control(proc.stdout + proc.stderr)
        assert "\\x1b" in proc.stdout
    for dirs in ((a,), (a, b)):
        proc = zlf("report", *dirs, "--out", tmp_path / "r.md", cwd=tmp_path)
        clean_exit(proc)
        no_control(proc.stdout + proc.stderr + (tmp_path / "r.md").read_text())


def test_run_table_escapes_an_error_message(tmp_path, op_file):
    proc = zlf("run", f"{op_file}::noisy", "--out", "out", cwd=tmp_path)
    clean_exit(proc, rc=1)
    no_control(proc.stdout + proc.stderr)
    assert "bad kernel \\x1b]0;pwned\\x07" in proc.stdout
    no_control((run_dir_from(proc.stdout, tmp_path) / "run.log").read_text())  # "no escape codes"


@pytest.mark.extensions("task")
def test_task_table_escapes_the_candidates_output(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text("import sys\n\ndef run_kernel(a, b, out, n):\n"
                    "    print('hello \\x1b]0;pwned\\x07', file=sys.stderr)\n"
                    "    raise RuntimeError('bad \\x1b[2J')\n")
    proc = zlf("task", TASKPKG, "--candidate", cand, "--cases", "1", "--out", "out", cwd=tmp_path,
               env={"ZLF_EXTENSIONS": "task"})
    assert proc.returncode == 1, proc.stderr  # Runtime Error; the details show the candidate's own traceback
    no_control(proc.stdout + proc.stderr)
    assert "bad \\x1b[2J" in proc.stdout


# ----------------------------------------------------------------------------- 6 Ray's Triton cache
def test_ray_cache_is_private_even_when_someone_made_it_first(tmp_path, monkeypatch):
    import tempfile

    from zlf import executors

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"zlf-ray-cache-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # made first by someone else, or open to everyone
    got = executors.private_dir("zlf-ray-cache")
    assert got != planted and got.stat().st_mode & 0o077 == 0 and got.stat().st_uid == os.getuid()
    planted.rmdir()
    os.symlink(tmp_path / "elsewhere", planted)
    assert executors.private_dir("zlf-ray-cache") != planted
    planted.unlink()
    mine = executors.private_dir("zlf-ray-cache")
    assert mine == planted and mine.stat().st_mode & 0o777 == 0o700
    assert executors.private_dir("zlf-ray-cache") == mine  # kept across tasks


# ----------------------------------------------------------------------------- 11 bad records
def test_compare_skips_a_line_that_is_not_utf8(base_run, tmp_path):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")
    with open(b / "results.jsonl", "ab") as f:
        f.write(b'{"point": "\xff\xfe"}\n')
    proc = zlf("compare", a, b, cwd=tmp_path)
    clean_exit(proc)
    assert "B: skipped 1 incomplete line(s)" in proc.stdout


def test_report_skips_a_line_that_is_not_utf8(base_run, tmp_path):
    a = copy_run(base_run, tmp_path / "a")
    with open(a / "results.jsonl", "ab") as f:
        f.write(b"\xff\n")
    proc = zlf("report", a, cwd=tmp_path)
    clean_exit(proc)
    assert "skipped 1 incomplete line(s)" in proc.stdout


@pytest.mark.extensions("seed", "autotune_replay")
def test_autotune_record_that_is_not_utf8_is_one_line(tmp_path):
    records = tmp_path / "rec" / "autotune_records"
    records.mkdir(parents=True)
    (records / "k.json").write_bytes(b'{"format": "\xff"}')
    proc = zlf("run", "add", "--out", "out", "--replay-from", tmp_path / "rec", cwd=tmp_path,
               env={"ZLF_EXTENSIONS": "seed,autotune_replay"})
    one_line_error(proc, "k.json:1: not UTF-8")


@pytest.mark.parametrize("doc", ["[1, 2]", "3", "null"])
def test_meta_json_that_is_not_an_object_is_one_line(base_run, tmp_path, doc):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")
    (b / "meta.json").write_text(doc)
    one_line_error(zlf("compare", a, b, cwd=tmp_path), "not a zlf meta.json")
    one_line_error(zlf("report", b, cwd=tmp_path), "not a zlf meta.json")


def test_meta_json_that_is_not_utf8_is_one_line(base_run, tmp_path):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")
    (b / "meta.json").write_bytes(b'{"status": "\xff"}')
    one_line_error(zlf("compare", a, b, cwd=tmp_path), "meta.json:1: not UTF-8")


@pytest.mark.parametrize("doc", ["[]", "[1, 2]"])
def test_campaign_json_that_is_not_an_object_is_one_line(tmp_path, doc):
    (tmp_path / "camp").mkdir()
    (tmp_path / "camp" / "campaign.json").write_text(doc)
    one_line_error(zlf("ab", "--resume", tmp_path / "camp", cwd=tmp_path), "not a zlf campaign")


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_report_of_a_nan_median(base_run, tmp_path, value):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")
    for run_dir in (a, b):
        text = (run_dir / "results.jsonl").read_text().splitlines()
        doc = json.loads(text[0])
        doc["median_ms"], doc["samples"] = "@", ["@", 1.0]
        text[0] = json.dumps(doc).replace('"@"', value)
        (run_dir / "results.jsonl").write_text("\n".join(text) + "\n")
    proc = zlf("report", a, cwd=tmp_path)
    clean_exit(proc)
    proc = zlf("report", a, b, cwd=tmp_path)
    clean_exit(proc)
    assert "no time" in (b / f"report_vs_{a.name}.md").read_text()


@pytest.mark.extensions("ir_dump")
def test_ir_diff_out_that_cannot_be_written_is_one_line(tmp_path):
    for side, body in (("A", "tt.dot a\n"), ("B", "tt.dot b\n")):
        kernel = tmp_path / side / "ir" / "1024" / "kern"
        kernel.mkdir(parents=True)
        (kernel / "k.ttir").write_text(body)
    (tmp_path / "afile").write_text("")
    proc = subprocess.run([sys.executable, "-m", "zlf", "ir-diff", "A", "B", "--out", "afile/diffs"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "ZLF_EXTENSIONS": "ir_dump"})
    one_line_error(proc, "cannot write the diffs")


# ----------------------------------------------------------------------------- 12 disk full
#: with a file-size limit, no bytecode: Python would leave truncated cache files for the session's
#: later processes (zlf.procs.python_child_env)
NO_BYTECODE = {"PYTHONDONTWRITEBYTECODE": "1"}


def _file_size_limit(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_disk_full_keeps_every_finished_record_and_a_consistent_meta(tmp_path, op_file):
    # RLIMIT_FSIZE: any file growing past 40 kB fails as a full disk does (EFBIG instead of
    # ENOSPC); meta.json stays below it, results.jsonl of 40 points (~9 kB each) does not.
    proc = zlf("run", f"{op_file}::many", "--out", "out", "--rep-ms", "1", "--warmup-ms", "0", cwd=tmp_path,
               env=NO_BYTECODE, preexec_fn=_file_size_limit(40_000))
    line = one_line_error(proc, "File too large", "finished point(s) kept in")
    kept = int(line.split(": ")[-1].split(" finished")[0])
    run_dir = next((tmp_path / "out").iterdir())
    records = read_records(run_dir)  # every line complete JSON
    assert 0 < len(records) == kept < 40
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "disk full" and meta["counts"]["ok"] == kept
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == []  # no .meta.json.tmp, no reserve


def test_a_disk_full_before_the_first_meta_json_is_one_line(tmp_path):
    """300 bytes: not even the first meta.json fits. The last resort (overwrite the old file in
    place) had no old file and raised FileNotFoundError: a traceback, exit 1."""
    proc = zlf("run", "add", "--out", "out", "--rep-ms", "1", "--warmup-ms", "0", cwd=tmp_path,
               env=NO_BYTECODE, preexec_fn=_file_size_limit(300))
    one_line_error(proc, "File too large", "0 finished point(s) kept in")
    assert "Traceback" not in proc.stderr


def test_atomic_write_into_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from zlf import rundir

    path = tmp_path / "meta.json"
    path.write_text('{"status": "running"}\n')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", full)
    with pytest.raises(OSError):
        rundir.write_atomic(path, '{"status": "complete"}\n')
    assert path.read_text() == '{"status": "running"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_meta_still_written_when_the_disk_is_full(tmp_path, monkeypatch):
    """The last meta.json of a run is written into the space reserved at its start."""
    from zlf import rundir

    rd = rundir.RunDir(tmp_path)
    rd.write_meta({"status": "running"})
    rd.reserve()
    real = rundir.write_atomic

    def full_unless_reserve_freed(path, text):
        if (tmp_path / rundir.RESERVE).exists():
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text)

    monkeypatch.setattr(rundir, "write_atomic", full_unless_reserve_freed)
    rd.write_meta({"status": "disk full"})
    assert rd.meta() == {"status": "disk full"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


# ----------------------------------------------------------------------------- 13 duplicate ids
def test_duplicate_point_ids_are_not_paired(base_run, tmp_path):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")
    docs = read_records(b)
    twin = dict(docs[0], median_ms=docs[0]["median_ms"] * 100)
    with open(b / "results.jsonl", "a") as f:
        f.write(json.dumps(twin) + "\n")
    proc = zlf("compare", a, b, "--format", "json", cwd=tmp_path)
    clean_exit(proc)
    rows = {r["point"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows[docs[0]["point"]]["status"] == "duplicate id in B" and rows[docs[0]["point"]]["delta_pct"] is None
    assert f"point id {docs[0]['point']!r} appears 2 times" in proc.stderr
    proc = zlf("report", a, b, cwd=tmp_path)
    clean_exit(proc)
    assert "appears 2 times" in proc.stdout


@pytest.fixture(scope="module")
def aa_campaign(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("aa")
    proc = zlf_core("ab", "add", "--aa", "--rounds", "1", "--out", "runs", cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next((cwd / "runs").iterdir())


def test_ab_leaves_out_a_duplicated_point(aa_campaign, tmp_path):
    camp = copy_run(aa_campaign, tmp_path / "camp")
    results = camp / "add" / "r1_B" / "results.jsonl"
    first = results.read_text().splitlines()[0]
    with open(results, "a") as f:
        f.write(first + "\n")
    proc = zlf("ab", "--resume", camp, cwd=tmp_path)
    clean_exit(proc)
    point = json.loads(first)["point"]
    assert f"left out {point}: point id appears twice in r1_B/results.jsonl: not paired" in proc.stdout


def test_ab_escapes_control_characters_from_its_runs(aa_campaign, tmp_path):
    camp = copy_run(aa_campaign, tmp_path / "camp")
    for side in ("A", "B"):
        def spoil(docs):
            docs[0]["point"] = docs[0]["point"] + ESC
        rewrite_records(camp / "add" / f"r1_{side}", spoil)
    proc = zlf("ab", "--resume", camp, cwd=tmp_path)
    clean_exit(proc)
    no_control(proc.stdout + proc.stderr + (camp / "report.md").read_text())
    assert "\\x1b]0;pwned" in proc.stdout


# ----------------------------------------------------------------------------- 14 arguments
BAD_ARGUMENTS = [
    (["ab", "add", "--aa", "--rounds", "0", "--dry-run"], "--rounds 0: expected a whole number of rounds from 1"),
    (["ab", "add", "--aa", "--dtype", ",", "--dry-run"], "--dtype ','"),
    (["ab", "add", "--aa", "--rep-ms", "-1", "--dry-run"], "--rep-ms -1"),
    (["ab", "add", "--aa", "--warmup-ms", "-1", "--dry-run"], "--warmup-ms -1"),
    (["ab", "add", "--aa", "--gpus", "abc", "--dry-run"], "'abc' is not a GPU index"),
    (["run", "add", "--dtype", ","], "--dtype ','"),
    (["run", "add", "--dtype", " , "], "names no dtype"),
    (["run", "add", "--rep-ms", "-1"], "--rep-ms -1"),
    (["run", "add", "--rep-ms", "0"], "--rep-ms 0"),
    (["run", "add", "--rep-ms", "nan"], "--rep-ms nan"),
    (["run", "add", "--warmup-ms", "-5"], "--warmup-ms -5"),
    (["run", "add", "--gpus", "abc"], "'abc' is not a GPU index"),
    (["run", "add", "--gpus", "0,x"], "'x' is not a GPU index"),
    (["task", TASKPKG, "--candidate", TASKPKG / "candidates" / "correct.py", "--rep-ms", "-1"], "--rep-ms -1"),
    (["task", TASKPKG, "--candidate", TASKPKG / "candidates" / "correct.py", "--warmup-ms", "-1"], "--warmup-ms -1"),
    (["task", TASKPKG, "--candidate", TASKPKG / "candidates" / "correct.py", "--iters", "0"], "--iters 0"),
]


@pytest.mark.parametrize("argv,needle", [
    pytest.param(a, needle, marks=[pytest.mark.extensions("task")] if a[0] == "task" else [],
                 id=" ".join(str(x) for x in a if not isinstance(x, Path) and x not in ("--candidate", "--dry-run")))
    for a, needle in BAD_ARGUMENTS])
def test_bad_argument_refused_before_anything_runs(tmp_path, argv, needle):
    proc = zlf(*argv, "--out", "out", cwd=tmp_path, env={"ZLF_EXTENSIONS": "task"} if argv[0] == "task" else {})
    one_line_error(proc, needle)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_l2_flush_kernel_survives_a_library_that_overrides_aten(recwarn):
    """FlagGems' use_gems() registers its own aten kernels (sum among them) while a point is timed;
    the CUDA backend's read flush then ran FlagGems' sum (milliseconds, and a different flush per
    side). The flush keeps torch's kernel, looked up before any override: checked here on the CPU
    key, where an override is visible."""
    import torch

    from zlf.backends.cuda import native_kernel

    kernel = native_kernel("aten::sum.IntList_out", "CPU")
    assert kernel is not None
    cache, sink = torch.ones(8, 100), torch.empty(8)
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("sum.IntList_out", lambda self, dim, keepdim=False, dtype=None, out=None: out.fill_(-7), "CPU")
        torch.sum(cache, dim=1, out=sink)
        assert sink.tolist() == [-7] * 8  # the override is active
        kernel.call_boxed(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), cache, [1], False, dtype=None, out=sink)
        assert sink.tolist() == [100] * 8
    finally:
        lib._destroy()
    torch.sum(cache, dim=1, out=sink)
    assert sink.tolist() == [100] * 8
    assert native_kernel("aten::no_such_op", "CPU") is None


@pytest.mark.parametrize("name", ["add_", "erfinv_"])
def test_ab_takes_an_in_place_op_name_ending_in_an_underscore(tmp_path, name):
    # FlagGems' in-place ops (add_, erfinv_, ...) end in "_": a library of them must be A/B-able
    proc = zlf("ab", f"{name}:add", "--aa", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout


@pytest.mark.parametrize("name", ["campaign.json", "summary.log", "library.json", "Report.md", "campaign.key"])
def test_ab_refuses_an_op_name_that_is_a_file_of_the_campaign(tmp_path, name):
    proc = zlf("ab", f"{name}:add", "--aa", "--dry-run", cwd=tmp_path)
    one_line_error(proc, "is a file of the campaign itself")
