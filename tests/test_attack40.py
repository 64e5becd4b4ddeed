"""Adversarial pass atk40 (issue 40): new hostile cases over the 12 classes of the trust boundary.

Each case asserts what docs/hostile.md / the issue promise. Cases that fail are real defects,
kept as strict xfails with a one-line reason.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from process_tools import gone_within

# written against a full install: every test runs with every extension of this repository active
# (the extensions' session of make test), and is skipped in core's own session
_ALL = ("autotune_replay", "cudagraph", "cupti", "flaggems", "history", "ir_dump", "profile", "seed", "shapes", "task")
pytestmark = pytest.mark.extensions(*_ALL)


def _installed() -> set:
    from zlf.testing import installed_extensions

    return set(installed_extensions())


if not set(_ALL) <= _installed():  # module-scoped fixtures run zlf with them before any test could skip
    pytest.skip("needs every extension of this repository installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
OPS = '''
import os, signal, torch, zlf
def mk(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))
def fn(x, out): torch.clamp(x, min=0, out=out)
relu = zlf.Op(name="relu", fn=fn, make_inputs=mk, shapes=[(64,)], dtypes=("float32",),
    reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,), (128,)])
'''
FAST = ["--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "1"]


def zlf(*args, cwd, env=None, timeout=240, stdin=None, **kw):
    full = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "ZLF_DISABLE")}
    full.update({"ZLF_NO_PROGRESS": "1", "ZLF_CACHE_DIR": str(Path(cwd) / "cache"),
                 "ZLF_HISTORY_DB": str(Path(cwd) / "hist.sqlite"), "ZLF_EXTENSIONS": "seed,history,shapes"})
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=full, text=True,
                          capture_output=True, timeout=timeout, **kw)


def one_line(p, *needles):
    out = p.stdout + p.stderr
    assert p.returncode == 2, f"rc={p.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("zlf: warning:")]
    assert len(lines) == 1 and lines[0].startswith("zlf: error: ") and len(lines[0]) < 400, p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def no_tb(p):
    assert "Traceback" not in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]


def write_ops(d: Path, body: str = "", name="ops.py") -> Path:
    f = d / name
    f.write_text(OPS + body)
    return f


def run_dir(p) -> Path:
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith("run dir:"):
            return Path(line.split(":", 1)[1].strip())
    raise AssertionError((p.stdout + p.stderr)[-3000:])


def records(d: Path):
    return [json.loads(l) for l in (d / "results.jsonl").read_text().splitlines() if l.strip()]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("base")
    write_ops(d)
    p = zlf("run", "ops.py", *FAST, "--out", "runs", cwd=d)
    assert p.returncode == 0, p.stderr
    return d / run_dir(p)


def copy(base: Path, dest: Path) -> Path:
    import shutil
    shutil.copytree(base, dest, symlinks=True)
    return dest


# ---------------------------------------------------------------- (1) a file never becomes code
def _git_repo(d: Path) -> list:
    d.mkdir()
    g = lambda *a: subprocess.run(["git", "-C", str(d), "-c", "user.name=a", "-c", "user.email=a@b", *a],
                                  check=True, capture_output=True, text=True).stdout.strip()
    g("init", "-q")
    shas = []
    for k in range(3):
        (d / "ops.py").write_text(OPS + f"\n# {k}\n")
        g("add", "ops.py")
        g("commit", "-qm", f"c{k}")
        shas.append(g("rev-parse", "HEAD"))
    return shas


def test_bisect_resume_runs_no_interpreter_named_by_bisect_json(tmp_path):
    shas = _git_repo(tmp_path / "repo")
    evil = tmp_path / "evil.sh"
    marker = tmp_path / "PWNED"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexec {sys.executable} \"$@\"\n")
    evil.chmod(0o755)
    folder = tmp_path / "received"
    folder.mkdir()
    state = {"format": 1, "repo": str(tmp_path / "repo"), "good": shas[0], "bad": shas[2], "commits": shas[1:],
             "steps": [], "ops": ["ops.py::relu"], "mode": "repo", "direction": "slower", "points": [],
             "rounds": 1, "max_rounds": 1, "alpha": 0.05, "steps_max": 4, "alpha_step": 0.0125,
             "min_effect": None, "backend": "cpu", "ab_args": ["--a-python", str(evil), "--b-python", str(evil)],
             "build": None, "python": None, "good_python": None, "python_template": None, "status": "running",
             "command": ["zlf", "bisect"]}
    from zlf_history import bisect as b
    state["format"] = b.FORMAT
    (folder / "bisect.json").write_text(json.dumps(state))
    zlf("bisect", "--resume", folder, cwd=tmp_path, timeout=400)
    assert not marker.exists(), "an interpreter named by a received bisect.json ran"


@pytest.mark.parametrize("name,value", [
    ("TRITON_CACHE_MANAGER", "evil_mod:Manager"),          # Triton imports this module
    ("TRITON_REMOTE_CACHE_BACKEND", "evil_mod:Backend"),   # idem
    ("ZLF_HISTORY_DB", "postgresql://u@h/db"),
    ("TORCH_NVCC_FLAGS", "-ccbin=evilcc"),                  # names a program nvcc runs
    ("NVCC_CCBIN", "evilcc"),
    ("CUDAFLAGS", "-O3"),
    ("TRITON_SWITCH", "-ccbin=evilcc"),                     # the value names a program, whatever the name
    ("TRITON_SWITCH", "-O3 -Xclang -load"),
    ("TRITON_SWITCH", "-fplugin=evil"),
])
def test_replayable_environment_refuses_variables_that_name_code(name, value):
    from zlf.trust import replayable_environment
    ok, refused = replayable_environment({name: value}, ("TRITON_", "ZLF_", "TORCH_"))
    assert name not in ok, refused


def test_replay_from_a_run_whose_shapes_yaml_holds_a_python_tag_runs_nothing(base, tmp_path):
    r = copy(base, tmp_path / "recv")
    marker = tmp_path / "PWNED"
    (r / "shapes.yaml").write_text(f"relu:\n  shapes: !!python/object/apply:os.system ['touch {marker}']\n")
    write_ops(tmp_path)
    p = zlf("run", "ops.py", *FAST, "--out", "runs", "--replay-from", r, cwd=tmp_path)
    no_tb(p)
    assert not marker.exists()


# ---------------------------------------------------------------- (2) writes never follow links
def test_run_never_writes_through_a_planted_run_directory_link(tmp_path, monkeypatch, capsys):
    """Links planted under every name the run directory can take (the clock is fixed here, so the
    names are known, whatever the machine's speed: the name and its first suffixes)."""
    from zlf import rundir
    from zlf.cli import main

    write_ops(tmp_path)
    out = tmp_path / "runs"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    monkeypatch.setattr(rundir, "timestamp", lambda: "20260101-000000")
    for label in ("ops", "relu"):
        for suffix in ("", "-1", "-2", "-3"):
            (out / f"{label}_20260101-000000{suffix}").symlink_to(victim)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    rc = main(["run", "ops.py", *FAST, "--out", "runs"])
    assert list(victim.iterdir()) == [], "zlf run wrote into a folder a planted link named"
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err  # refused in one line: the name leads out of runs/
    assert err.strip().startswith("zlf: error: ") and "_20260101-000000' is outside 'runs'" in err, err


def test_history_html_never_writes_through_a_planted_index_link(base, tmp_path):
    assert zlf("history", "add", base, cwd=tmp_path).returncode == 0
    site = tmp_path / "site"
    site.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for n in ("index.html", "data.json", "data.js", "app.js", "style.css", "dashboard.html"):
        (site / n).symlink_to(victim)
    p = zlf("history", "html", site, cwd=tmp_path)
    no_tb(p)
    assert victim.read_text() == "keep"


def test_report_never_creates_a_file_through_a_dangling_link(base, tmp_path):
    r = copy(base, tmp_path / "recv")
    target = tmp_path / "created_elsewhere"
    (r / "report.md").symlink_to(target)
    (r / "report.png").symlink_to(tmp_path / "png_elsewhere")
    p = zlf("report", r, cwd=tmp_path)
    no_tb(p)
    assert not target.exists() and not (tmp_path / "png_elsewhere").exists()


def test_history_add_db_through_a_planted_journal_link(base, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / "hist.sqlite-journal").symlink_to(victim)
    p = zlf("history", "add", base, cwd=tmp_path)
    no_tb(p)
    assert victim.read_text() == "keep"


# ---------------------------------------------------------------- (3) secrets
@pytest.mark.parametrize("text,secret", [
    ("{'password': 'hunter2xyz'}", "hunter2xyz"),
    ('{"api_key": "abcd1234efgh"}', "abcd1234efgh"),
    ("password = 'hunter2xyz'", "hunter2xyz"),
    ("Cookie: sessionid=hunter2xyz", "hunter2xyz"),
    ("GET / HTTP/1.1\nset-cookie: a=1; sid=hunter2xyz; Path=/", "hunter2xyz"),
    ("PGPASSWORD='hunter2xyz' psql", "hunter2xyz"),
    ("X-Auth-Token: hunter2xyz", "hunter2xyz"),
])
def test_redact_text_masks_quoted_and_header_forms(text, secret):
    from zlf.redact import redact_text
    out = redact_text(text)
    assert secret not in out, out


def test_op_error_holding_a_dict_with_a_password_is_redacted_everywhere(tmp_path):
    write_ops(tmp_path, "\ndef bad(x, out):\n    raise RuntimeError(str({'password': 'hunter2xyz'}))\n"
              "leak = zlf.Op(name='leak', fn=bad, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,)])\n")
    p = zlf("run", "ops.py::leak", *FAST, "--out", "runs", cwd=tmp_path)
    d = tmp_path / run_dir(p)
    for f in d.iterdir():
        if f.is_file():
            assert "hunter2xyz" not in f.read_text(errors="replace"), f.name
    assert "hunter2xyz" not in p.stdout + p.stderr


def test_history_label_holding_a_token_is_not_kept(base, tmp_path):
    tok = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    p = zlf("history", "add", base, "--label", f"compiler={tok}", "--label", "db_password=hunter2xyz", cwd=tmp_path)
    no_tb(p)
    e = zlf("history", "export", "--format", "json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert tok not in e.stdout + e.stderr + p.stdout + p.stderr and "hunter2xyz" not in e.stdout
    assert tok.encode() not in (tmp_path / "hist.sqlite").read_bytes()
    assert b"hunter2xyz" not in (tmp_path / "hist.sqlite").read_bytes()


def test_history_db_url_password_never_printed(base, tmp_path):
    p = zlf("history", "ls", "--db", "postgresql://bob:hunter2xyz@127.0.0.1:1/db", cwd=tmp_path)
    assert p.returncode != 0
    no_tb(p)
    assert "hunter2xyz" not in p.stdout + p.stderr


def test_ray_address_password_never_printed(tmp_path):
    write_ops(tmp_path)
    p = zlf("run", "ops.py", *FAST, "--out", "runs", "--executor", "ray", "--gpus", "0",
            "--ray-address", "ray://admin:hunter2xyz@127.0.0.1:1", cwd=tmp_path, timeout=200)
    assert p.returncode == 2, p.stderr
    no_tb(p)
    assert p.stderr.strip().splitlines()[-1].startswith("zlf: error: cannot start Ray"), p.stderr
    assert "hunter2xyz" not in p.stdout + p.stderr
    for f in (tmp_path / "runs").rglob("*") if (tmp_path / "runs").exists() else []:
        if f.is_file():
            assert b"hunter2xyz" not in f.read_bytes(), f


def test_op_printing_a_credential_keeps_it_out_of_run_log(tmp_path):
    write_ops(tmp_path, "\ndef talk(x, out):\n    print('export HF_TOKEN=hf_' + 'aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5', flush=True)\n"
              "    torch.clamp(x, min=0, out=out)\n"
              "chatty = zlf.Op(name='chatty', fn=talk, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,)])\n")
    p = zlf("run", "ops.py::chatty", *FAST, "--out", "runs", cwd=tmp_path)
    d = tmp_path / run_dir(p)
    for f in d.iterdir():
        if f.is_file():
            assert "aB3dE5fG7hJ9kL1mN3pQ5" not in f.read_text(errors="replace"), f.name


# ---------------------------------------------------------------- (4) output injection
@pytest.mark.parametrize("cell", ["-1+1", "-A1", "-SUM(A1:A2)", "+1+cmd"])
def test_csv_cell_neutralises_arithmetic_that_is_not_a_number(cell):
    from zlf.console import csv_cell
    assert str(csv_cell(cell)).startswith("'"), csv_cell(cell)


@pytest.mark.parametrize("cell", ["-2", "-2.5e3", "3"])
def test_csv_cell_keeps_numbers(cell):
    from zlf.console import csv_cell
    assert not str(csv_cell(cell)).startswith("'")


def test_history_export_csv_neutralises_a_formula_label(base, tmp_path):
    assert zlf("history", "add", base, "--label", "compiler==HYPERLINK(\"http://x\")", cwd=tmp_path).returncode == 0
    e = zlf("history", "export", "--format", "csv", cwd=tmp_path)
    no_tb(e)
    import csv, io
    for row in csv.reader(io.StringIO(e.stdout)):
        for c in row:
            assert not c.lstrip().startswith(("=", "@")), row


def test_history_html_escapes_labels_and_errors(base, tmp_path):
    r = copy(base, tmp_path / "recv")
    lines = (r / "results.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec.update(status="FAILED", median_ms=None, samples=[], error="<script>alert(1)</script>")
    (r / "results.jsonl").write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    assert zlf("history", "add", r, "--label", "who=<img src=x onerror=alert(2)>", cwd=tmp_path).returncode == 0
    p = zlf("history", "html", tmp_path / "site", cwd=tmp_path)
    no_tb(p)
    text = "".join(f.read_text(errors="replace") for f in (tmp_path / "site").rglob("*") if f.is_file())
    assert "<script>alert(1)" not in text and "<img src=x onerror" not in text


# ---------------------------------------------------------------- (5) private caches
def test_bytecode_cache_open_to_others_is_not_used(tmp_path, monkeypatch):
    from zlf import procs
    folder = tmp_path / "pycache"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setattr(procs, "_bytecode_kept", lambda: False)
    monkeypatch.setattr(procs, "_file_size_limited", lambda: False)
    env = procs.python_child_env({}, folder=folder)
    assert env.get("PYTHONPYCACHEPREFIX") != str(folder)
    link = tmp_path / "linked"
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link.symlink_to(real)
    assert procs.python_child_env({}, folder=link).get("PYTHONPYCACHEPREFIX") != str(link)
    fresh = tmp_path / "fresh"
    assert procs.python_child_env({}, folder=fresh)["PYTHONPYCACHEPREFIX"] == str(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o700


def test_task_cache_dir_that_is_a_link_is_not_trusted(tmp_path):
    pytest.importorskip("zlf_taskpkg")
    from zlf_taskpkg.candidate import cache_refusal
    real = tmp_path / "real"
    (real / "e").mkdir(parents=True)
    real.chmod(0o700)
    (tmp_path / "link").symlink_to(real)
    assert cache_refusal(tmp_path / "link", tmp_path / "link" / "e") is not None


def test_task_cache_group_writable_entry_is_not_trusted(tmp_path):
    pytest.importorskip("zlf_taskpkg")
    from zlf_taskpkg.candidate import cache_refusal
    (tmp_path / "c" / "e").mkdir(parents=True)
    (tmp_path / "c").chmod(0o700)
    (tmp_path / "c" / "e").chmod(0o770)
    assert cache_refusal(tmp_path / "c", tmp_path / "c" / "e") is not None


# ---------------------------------------------------------------- (6) ops that kill their process
KILLERS = {
    "sigkill_self": "os.kill(os.getpid(), signal.SIGKILL)",
    "thread_exit": "import threading; t = threading.Thread(target=lambda: os._exit(7)); t.start(); t.join()",
    "closerange": "os.closerange(3, 4096)",
    "sigterm_self": "os.kill(os.getpid(), signal.SIGTERM)",
    "sigint_self": "os.kill(os.getpid(), signal.SIGINT)",
}
#: the cause a signal the op sent its own worker is recorded as (zlf sent none: not a stop of the run)
SIGNALLED = {"sigterm_self": "worker died: SIGTERM (signal 15)", "sigint_self": "worker died: SIGINT (signal 2)"}
BROKEN: dict = {}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=BROKEN[k]))
                                  if k in BROKEN else k for k in sorted(KILLERS)])
def test_an_op_that_hurts_its_process_costs_only_its_point(tmp_path, kind):
    write_ops(tmp_path, f"\ndef k(x, out):\n    if x.numel() == 64:\n        {KILLERS[kind]}\n    torch.clamp(x, min=0, out=out)\n"
              "killer = zlf.Op(name='killer', fn=k, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,), (128,)])\n")
    p = zlf("run", "ops.py::killer", *FAST, "--out", "runs", "--time-limit", "20", cwd=tmp_path, timeout=200)
    no_tb(p)
    d = tmp_path / run_dir(p)
    recs = records(d)
    ids = [r["point"] for r in recs]
    assert sorted(ids) == ["killer/128/float32", "killer/64/float32"], ids
    by = {r["point"]: r for r in recs}
    assert by["killer/128/float32"]["status"] == "ok"
    if kind != "closerange":
        assert by["killer/64/float32"]["status"] == "FAILED"
    if kind in SIGNALLED:
        assert by["killer/64/float32"]["error"] == SIGNALLED[kind]
    meta = json.loads((d / "meta.json").read_text())
    assert meta["status"] not in ("running",), meta["status"]


def test_an_op_that_stops_itself_is_stopped_by_its_time_limit(tmp_path):
    write_ops(tmp_path, "\ndef k(x, out):\n    if x.numel() == 64:\n        os.kill(os.getpid(), signal.SIGSTOP)\n"
              "    torch.clamp(x, min=0, out=out)\n"
              "stopper = zlf.Op(name='stopper', fn=k, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,), (128,)])\n")
    try:
        p = zlf("run", "ops.py::stopper", *FAST, "--out", "runs", "--time-limit", "3", cwd=tmp_path, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("zlf run hung on a stopped worker")
    no_tb(p)
    recs = records(tmp_path / run_dir(p))
    assert {r["point"]: r["status"] for r in recs}.get("stopper/64/float32") == "FAILED"


def test_a_setsid_child_of_an_op_does_not_outlive_the_run(tmp_path):
    pidfile = tmp_path / "child.pid"
    write_ops(tmp_path, f"\nimport subprocess\ndef k(x, out):\n    if not os.path.exists({str(pidfile)!r}):\n"
              f"        c = subprocess.Popen(['sleep', '300'], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              f"        open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
              "    torch.clamp(x, min=0, out=out)\n"
              "spawner = zlf.Op(name='spawner', fn=k, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,)])\n")
    p = zlf("run", "ops.py::spawner", *FAST, "--out", "runs", cwd=tmp_path)
    no_tb(p)
    pid = int(pidfile.read_text())
    assert gone_within(pid), "the op's setsid child outlived the run"  # killed when the run ended


def test_an_op_that_forks_gives_no_point_two_records(tmp_path):
    write_ops(tmp_path, "\n_done = []\ndef k(x, out):\n    if not _done:\n        _done.append(1)\n        os.fork()\n"
              "    torch.clamp(x, min=0, out=out)\n"
              "forker = zlf.Op(name='forker', fn=k, make_inputs=mk, shapes=[(64,)], dtypes=('float32',),"
              " reference=lambda x, out: torch.relu(x), outputs=(1,), cpu_shapes=[(64,), (128,)])\n")
    p = zlf("run", "ops.py::forker", *FAST, "--out", "runs", "--time-limit", "30", cwd=tmp_path, timeout=200)
    # no waiting: zlf kills the worker's process group, the fork included, before it exits
    ids = [r["point"] for r in records(tmp_path / run_dir(p))]
    assert len(ids) == len(set(ids)) == 2, ids
