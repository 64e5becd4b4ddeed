"""Hostile cases: processes, signals and the judge (docs/hostile.md lists them).

Each test reproduces one fault as a user met it: real subprocesses are killed with SIGKILL or
SIGTERM and the test checks that nothing is left running, that the state on disk says what
happened, and that the message is one line.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from conftest import ROOT, read_records
from process_tools import CEILING, alive, cmdline, descendants, gone_within, only_dir, wait_for

from zlf.ab import Campaign, OpSpec, Side
from zlf.cli import main

PKG = ROOT / "tests" / "data" / "taskpkg_vecadd"
#: a candidate that says when it runs, then never returns
HANG = textwrap.dedent('''
    import os, time

    def run_kernel(*args):
        open(os.environ["ZLF_TEST_MARKER"], "w").close()
        while True:
            time.sleep(0.05)
''')

OPS = textwrap.dedent('''
    import signal, sys, time, torch, zlf

    def make(shape, dtype, device):
        x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
        return (x, torch.empty_like(x))

    def ok(x, out):
        out.copy_(x)

    def hang(x, out):               # a Python-level hang: SIGALRM reaches it
        while True:
            time.sleep(0.05)

    def hard(x, out):               # a hang SIGALRM cannot reach (as inside a C call or a device sync)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(1000)

    def bye(x, out):
        sys.exit(3)

    ref = lambda x, out: x.clone()
    def op(name, fn):
        return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(64,)], reference=ref, outputs=(1,))

    a_ok, b_hang, c_ok, d_exit, e_hard = (op("a_ok", ok), op("b_hang", hang), op("c_ok", ok),
                                          op("d_exit", bye), op("e_hard", hard))

    def cmake(shape, dtype, device):
        x = torch.randn(shape, dtype=torch.complex64, device=device)
        return (x, torch.empty_like(x))

    def conj_imag_wrong(x, out):    # right real part, wrong imaginary part
        out.copy_(torch.conj(x).resolve_conj())

    def cplx_ok(x, out):
        out.copy_(x)

    c_wrong = zlf.Op(name="c_wrong", fn=conj_imag_wrong, make_inputs=cmake, shapes=[(256,)], dtypes=["complex64"],
                     reference=ref, outputs=(1,))
    c_right = zlf.Op(name="c_right", fn=cplx_ok, make_inputs=cmake, shapes=[(256,)], dtypes=["complex64"],
                     reference=ref, outputs=(1,))
''')


@pytest.fixture
def ops_file(tmp_path) -> Path:
    path = tmp_path / "ops.py"
    path.write_text(OPS)
    return path


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict:
    """A private config home (the campaign signing key) for this process and its children."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    e = dict(os.environ)
    e.pop("FORCE_COLOR", None)
    return e




def spawn(args, cwd, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run(args, cwd, env, timeout=CEILING) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout)


def one_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.startswith("zlf: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def hang(tmp_path, env) -> Path:
    path = tmp_path / "hang.py"
    path.write_text(HANG)
    env["ZLF_TEST_MARKER"] = str(tmp_path / "candidate_runs")
    return path


def worker_of(pid: int) -> int:
    """The judge's worker (running the candidate) under process ``pid``, once it runs the candidate."""
    def find():
        found = [p for p in descendants(pid) if "zlf_taskpkg.worker" in cmdline(p)]
        return found[0] if found else None
    return wait_for(find, CEILING, "the judge's worker")


# ----------------------------------------------------------------------------- 2: --resume runs only what zlf ab wrote
def _campaign(tmp_path, python: str = "") -> Campaign:
    data = {"label": "t", "cwd": str(tmp_path), "aa": False, "switch": "X",
            "sides": [Side("A", {"X": "0"}, python).to_json(), Side("B", {"X": "1"}, python).to_json()],
            "ops": [OpSpec("add", "add").to_json()], "run_args": ["--backend", "cpu"], "extension_args": [],
            "replay": False, "backend": "cpu", "device": 0, "require_idle": False, "idle_wait": 0,
            "fail_on_slower": False, "guards": {"switch_source": []}, "triton_cache": str(tmp_path / "cache"),
            "statistics": {"alpha": 0.05, "margin_pct": 2.0, "min_effect_pct": 1.0, "noise_from": None, "floors": {},
                           "until_confident": False, "first_look": 1, "max_rounds": 1}}
    c = Campaign.create(tmp_path / "o", "t", data)
    c.add_round(1)
    return c


def test_resume_refuses_an_edited_interpreter(tmp_path, env):
    """campaign.json's sides[].python edited to a script, runs pending: --resume must not run it."""
    c = _campaign(tmp_path)
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    doc = json.loads((c.path / "campaign.json").read_text())
    doc["sides"][0]["python"] = str(evil)
    (c.path / "campaign.json").write_text(json.dumps(doc))
    done = run(["ab", "--resume", c.path], tmp_path, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "are not what zlf ab wrote" in one_line(done.stderr)
    assert not marker.exists()
    # naming the campaign's real interpreter does not make the edited one run either
    done = run(["ab", "--resume", c.path, "--a-python", sys.executable], tmp_path, env)
    assert done.returncode == 2 and "is not side A's interpreter" in one_line(done.stderr)
    assert not marker.exists()


@pytest.mark.parametrize("field, edit", [
    ("env", lambda d: d["sides"][1]["env"].update(LD_PRELOAD="/tmp/evil.so")),
    ("run_args", lambda d: d["run_args"].extend(["--ext", "evil"])),
    ("ops", lambda d: d["ops"][0].update(run_spec="/tmp/evil.py")),
    ("triton_cache", lambda d: d.update(triton_cache="/tmp/shared-cache")),
])
def test_resume_refuses_edited_command_lines(tmp_path, env, field, edit):
    c = _campaign(tmp_path)
    c.data = json.loads((c.path / "campaign.json").read_text())
    c.check_resume({"A": None, "B": None})  # negative control: as written, it verifies
    edit(c.data)
    with pytest.raises(Exception, match="are not what zlf ab wrote"):
        c.check_resume({"A": None, "B": None})


def test_resume_refuses_a_changed_interpreter_unless_named_again(tmp_path, env):
    python = tmp_path / "venv" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    python.chmod(0o755)
    c = _campaign(tmp_path, str(python))
    c.check_resume({"A": None, "B": None})
    python.write_text("#!/bin/sh\necho replaced\n")
    with pytest.raises(Exception, match=r"side A's interpreter .* changed .* name it again with --a-python"):
        c.check_resume({"A": None, "B": None})
    c.check_resume({"A": str(python), "B": str(python)})  # the user vouches for it: recorded anew
    c.check_resume({"A": None, "B": None})


def test_resume_refuses_an_edited_run_configuration(tmp_path, env):
    """_config/<side>.json is what every run of the side is given: an edit is refused like an
    edited interpreter, and so is a campaign.json that points a side at another file."""
    c = _campaign(tmp_path)
    c.check_resume({"A": None, "B": None})
    path = c.path / "_config" / "B.json"
    path.write_text(path.read_text().replace('"backend": null', '"backend": "evil"'))
    with pytest.raises(Exception, match=r"side B's run configuration .* changed"):
        c.check_resume({"A": None, "B": None})
    c = _campaign(tmp_path / "2")
    c.data["configs"]["B"] = "_config/A.json"
    with pytest.raises(Exception, match="are not what zlf ab wrote"):
        c.check_resume({"A": None, "B": None})


def _old_campaign(tmp_path, run_args, ops=None) -> Campaign:
    """A campaign as an older zlf wrote it: run options as flags, no run configurations."""
    c = _campaign(tmp_path)
    shutil.rmtree(c.path / "_config")
    del c.data["configs"]
    c.data.update(run_args=run_args, extension_args=[])
    if ops:
        c.data["ops"] = ops
    c.seal()
    c.save()
    return c


def test_resume_gives_an_old_campaign_its_run_configurations(tmp_path, env):
    c = _old_campaign(tmp_path, ["--backend", "cpu", "--dtype", "float32", "--warmup-ms", "0", "--rep-ms", "1"])
    done = run(["ab", "--resume", c.path], tmp_path, env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    state = json.loads((c.path / "campaign.json").read_text())
    assert state["configs"] == {"A": "_config/A.json", "B": "_config/B.json"} and state["run_args"] == []
    for side in "AB":
        config = json.loads((c.path / "_config" / f"{side}.json").read_text())
        assert config["backend"] == "cpu" and config["dtypes"] == ["float32"] and config["timing"]["rep_ms"] == 1.0
        assert config["timing"]["input_copies"] == 1  # its zlf made no input copies: its later rounds neither
        meta = json.loads((c.path / "add" / f"r1_{side}" / "meta.json").read_text())
        assert meta["options"]["rep_ms"] == 1.0 and meta["options"]["config"] == str(c.path / "_config" / f"{side}.json")
    assert [r["status"] for r in state["runs"]] == ["ok", "ok"]
    done = run(["report", c.path], tmp_path, env)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr


def _configured_campaign(tmp_path, without_copies: bool) -> Campaign:
    """A runnable campaign with run configurations (backend cpu); ``without_copies``: as a zlf
    before input copies wrote them (no ``input_copies`` in their timing)."""
    c = _campaign(tmp_path)
    c.data["run_args"] = []
    for side in "AB":
        path = c.path / "_config" / f"{side}.json"
        config = json.loads(path.read_text())
        config["backend"] = "cpu"
        config["timing"].update(warmup_ms=0, rep_ms=1)
        if without_copies:
            del config["timing"]["input_copies"]
        path.write_text(json.dumps(config))
    c.seal()
    c.save()
    return c


def test_a_campaign_begun_without_input_copies_is_resumed_without_them(tmp_path, env):
    """A campaign whose run configurations name no ``input_copies`` was begun by a zlf that timed
    every point on its inputs alone: resumed, its later rounds would have cycled through 32 sets
    while its first did not, and the rounds would pair unlike with unlike."""
    for without, copies in ((True, 1), (False, 32)):  # a campaign of this zlf keeps the default
        c = _configured_campaign(tmp_path / str(without), without)
        done = run(["ab", "--resume", c.path], tmp_path, env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        for side in "AB":
            assert Campaign.open(c.path).config(side).timing.copies() == copies
            assert json.loads((c.path / "add" / f"r1_{side}" / "meta.json").read_text())["options"]["input_copies"] == \
                (1 if without else None)


def test_resume_refuses_an_old_campaign_it_cannot_read_in_one_line(tmp_path, env):
    c = _old_campaign(tmp_path, ["--backend", "cpu", "--no-such-option", "1"])
    done = run(["ab", "--resume", c.path], tmp_path, env)
    assert done.returncode == 2 and "gives its runs options this zlf cannot read (--backend cpu --no-such-option 1)" in one_line(done.stderr)
    assert "configs" not in json.loads((c.path / "campaign.json").read_text())
    c = _old_campaign(tmp_path / "2", ["--cases", "1"], ops=[OpSpec("pkg", "/pkg", "/pkg", command="task").to_json()])
    done = run(["ab", "--resume", c.path], tmp_path, env)
    assert done.returncode == 2 and "gives zlf task its options as flags" in one_line(done.stderr)


# ----------------------------------------------------------------------------- 7: workers die with their judge
@pytest.mark.extensions("task")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_judge_leaves_no_worker(tmp_path, zlf_plain_processes, env, hang, sig):
    proc = spawn(["task", PKG, "--candidate", hang, "--ext", "task", "--backend", "cpu", "--time-limit", "100", "--sandbox", "none",
                  "--out", tmp_path / "runs"], tmp_path, env)
    worker = worker_of(proc.pid)
    wait_for((tmp_path / "candidate_runs").exists, CEILING, "the candidate to run")
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=CEILING)
    assert gone_within([worker]), f"worker {worker} outlived its judge"
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and "terminated; finished cases kept" in err, err
        meta = json.loads((only_dir(tmp_path / "runs") / "meta.json").read_text())
        assert meta["status"] == "terminated"


@pytest.mark.extensions("task")
def test_killed_task_campaign_leaves_no_worker(tmp_path, zlf_plain_processes, env, hang):
    """kill -9 of zlf ab --task: its zlf task run and that run's worker go too. Without the sandbox
    (as the judge's test): no pid namespace dies with the judge, only the parent-death signals do;
    and the candidate's marker in this test's folder is not hidden by the sandbox's private /tmp."""
    proc = spawn(["ab", "--task", PKG, "--a-candidate", hang, "--b-candidate", hang, "--rounds", "1",
                  "--time-limit", "100", "--backend", "cpu", "--ext", "task", "--sandbox", "none",
                  "--out", tmp_path / "o"], tmp_path, env)
    worker = worker_of(proc.pid)
    wait_for((tmp_path / "candidate_runs").exists, CEILING, "the candidate to run")
    tree = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=CEILING)
    assert gone_within(tree), [cmdline(p) for p in tree if alive(p)]
    assert worker in tree


# ----------------------------------------------------------------------------- 8: per-point time limit
def test_python_level_hang_is_a_failed_point_and_the_run_goes_on(tmp_path, env, ops_file):
    done = run(["run", f"{ops_file}::a_ok", f"{ops_file}::b_hang", f"{ops_file}::c_ok", "--backend", "cpu",
                "--time-limit", "1", "--out", tmp_path / "runs"], tmp_path, env)
    assert done.returncode == 1, done.stderr
    records = {r["op"]: r for r in read_records(only_dir(tmp_path / "runs"))}
    assert [records[o]["status"] for o in ("a_ok", "b_hang", "c_ok")] == ["ok", "FAILED", "ok"]
    assert records["b_hang"]["error"] == "time limit: no result within 1 s (--time-limit)"


def test_hard_hang_is_stopped_by_the_watchdog(tmp_path, env, ops_file):
    done = run(["run", f"{ops_file}::a_ok", f"{ops_file}::e_hard", f"{ops_file}::c_ok", "--backend", "cpu",
                "--time-limit", "1", "--out", tmp_path / "runs"], tmp_path, env)
    assert done.returncode == 124, done.stderr
    assert "hung past its time limit of 1 s" in done.stderr and "Traceback" not in done.stderr
    d = only_dir(tmp_path / "runs")
    records = read_records(d)
    assert [(r["op"], r["status"]) for r in records] == [("a_ok", "ok"), ("e_hard", "FAILED")]
    assert records[1]["error"].startswith("time limit: no result within 1 s, stuck where it cannot be interrupted")
    meta = json.loads((d / "meta.json").read_text())
    assert meta["status"] == "hung" and meta["counts"] == {"ok": 1, "FAILED": 1, "OOM": 0}
    assert not list(d.glob(".*.tmp"))


def test_bad_time_limit_is_one_line(tmp_path, env):
    done = run(["run", "add", "--backend", "cpu", "--time-limit", "-1", "--out", tmp_path / "runs"], tmp_path, env)
    assert done.returncode == 2 and "--time-limit -1: expected a non-negative number of seconds" in one_line(done.stderr)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


# ----------------------------------------------------------------------------- 9: SIGTERM is handled like Ctrl-C
def test_sigterm_of_a_run_keeps_points_and_says_terminated(tmp_path, env, ops_file):
    proc = spawn(["run", f"{ops_file}::a_ok", f"{ops_file}::b_hang", "--backend", "cpu",
                  "--time-limit", "0", "--out", tmp_path / "runs"], tmp_path, env)
    wait_for(lambda: any(p.stat().st_size for p in (tmp_path / "runs").glob("*/results.jsonl")), CEILING, "the first point")
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=CEILING)
    assert proc.returncode == 143 and "terminated; 1 finished points kept" in err, err
    d = only_dir(tmp_path / "runs")
    assert json.loads((d / "meta.json").read_text())["status"] == "terminated"
    assert [r["op"] for r in read_records(d)] == ["a_ok"]


def test_sigterm_of_a_campaign_leaves_it_resumable(tmp_path, zlf_plain_processes, env, ops_file):
    proc = spawn(["ab", f"{ops_file}::b_hang", "--switch", "X", "--rounds", "1", "--time-limit", "0", "--backend", "cpu",
                  "--controls", "none",  # the runs of the op alone (no canary processes)
                  "--out", tmp_path / "o"], tmp_path, env)
    camp = wait_for(lambda: next((tmp_path / "o").glob("ab_*/campaign.json"), None), CEILING, "campaign.json")
    run_proc = wait_for(lambda: next((p for p in descendants(proc.pid) if " run " in cmdline(p)), None), CEILING, "a run")
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=CEILING)
    assert proc.returncode == 143 and "continue with: zlf ab --resume" in err, err
    state = json.loads(camp.read_text())
    assert state["status"] == "terminated"
    assert [r["status"] for r in state["runs"]] == ["pending", "pending"]
    assert gone_within([run_proc])


# ----------------------------------------------------------------------------- 10: sys.exit inside an op
def test_sys_exit_in_an_op_is_the_points_failure(tmp_path, env, ops_file, capsys):
    rc = main(["run", f"{ops_file}::d_exit", f"{ops_file}::a_ok", "--backend", "cpu",
               "--out", str(tmp_path / "runs")])
    assert rc == 1
    records = read_records(only_dir(tmp_path / "runs"))
    assert [(r["op"], r["status"], r["error"]) for r in records] == [
        ("d_exit", "FAILED", "called sys.exit(3)"), ("a_ok", "ok", None)]


# ----------------------------------------------------------------------------- 15: no nvcc is the judge's problem
@pytest.mark.extensions("task")
def test_missing_nvcc_is_a_setup_error(tmp_path, env, monkeypatch, capsys):
    import zlf_taskpkg.candidate as candidate

    monkeypatch.setattr(candidate, "find_nvcc", lambda: None)
    rc = main(["task", str(PKG), "--candidate", str(PKG / "candidates" / "correct.cu"), "--ext", "task",
               "--backend", "cpu", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2 and "nvcc not found" in one_line(err)
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- 16: complex outputs, both parts
def test_complex_output_checked_on_both_parts(tmp_path, env, ops_file):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Casting complex values to real discards the imaginary part"
        rc = main(["run", f"{ops_file}::c_wrong", f"{ops_file}::c_right", "--backend", "cpu",
                   "--out", str(tmp_path / "runs")])
    records = {r["op"]: r for r in read_records(only_dir(tmp_path / "runs"))}
    assert rc == 1
    assert records["c_wrong"]["status"] == "FAILED" and "relative error" in records["c_wrong"]["error"]
    assert records["c_right"]["status"] == "ok"  # negative control


@pytest.mark.extensions("cudagraph")
def test_cudagraph_replay_comparison_is_complex():
    torch = pytest.importorskip("torch")
    graph_timer = pytest.importorskip("zlf_timing_cudagraph.graph_timer")
    x = torch.randn(256, dtype=torch.complex64)
    assert graph_timer._mismatch(torch.conj(x).resolve_conj(), x, 1e-5) is not None
    assert graph_timer._mismatch(x.clone(), x, 1e-5) is None


# ----------------------------------------------------------------------------- children's bytecode
@pytest.fixture
def no_bytecode_kept(monkeypatch, tmp_path):
    """An environment that keeps no bytecode (PYTHONDONTWRITEBYTECODE, as container images set)."""
    from zlf import procs

    monkeypatch.setattr(procs.sys, "dont_write_bytecode", True)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setenv("ZLF_CACHE_DIR", str(tmp_path / "cache"))
    return procs


def test_children_keep_their_bytecode_in_zlfs_cache_where_the_environment_keeps_none(no_bytecode_kept, tmp_path):
    """A campaign starts a Python process per run: without bytecode caches each one compiled
    torch, Triton and FlagGems from source again (9.5 s of a 19 s FlagGems run on an H200 machine).
    The child writes its bytecode to zlf's cache instead, and the source tree stays clean."""
    from zlf.executors import environment

    env = no_bytecode_kept.python_child_env(os.environ)
    folder = tmp_path / "cache" / "pycache"
    assert env["PYTHONPYCACHEPREFIX"] == str(folder) and "PYTHONDONTWRITEBYTECODE" not in env and folder.is_dir()
    assert environment({"X": "1"})["PYTHONPYCACHEPREFIX"] == str(folder)  # a campaign's runs get it

    src = tmp_path / "src"
    src.mkdir()
    (src / "some_module.py").write_text("VALUE = 42\n")
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", "import some_module; print(some_module.VALUE)"],
                              env={**env, "PYTHONPATH": str(src)}, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == "42", proc.stderr
    assert list(folder.rglob("some_module*.pyc")) and not (src / "__pycache__").exists()


def test_childrens_bytecode_leaves_a_users_prefix_and_a_working_environment_alone(no_bytecode_kept, monkeypatch, tmp_path):
    mine = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "mine")}
    assert no_bytecode_kept.python_child_env(mine) == mine  # the user's own prefix, and their variable kept
    monkeypatch.setattr(no_bytecode_kept.sys, "dont_write_bytecode", False)
    cached = tmp_path / "zlf.pyc"
    cached.write_bytes(b"")
    monkeypatch.setattr("zlf.__cached__", str(cached))
    plain = dict(os.environ)
    assert no_bytecode_kept.python_child_env(plain) == plain  # bytecode is kept: nothing to do
    monkeypatch.setattr("zlf.__cached__", str(tmp_path / "missing.pyc"))  # a tree zlf cannot write to
    assert "PYTHONPYCACHEPREFIX" in no_bytecode_kept.python_child_env(plain)


def test_childrens_bytecode_counts_torch_whose_tree_may_be_read_only_where_zlfs_is_not(no_bytecode_kept, monkeypatch,
                                                                                         tmp_path):
    """A GPU image: zlf installed editable from a writable checkout (its bytecode kept), torch in a
    read-only site-packages (its 2,000 modules compiled again by every child). Judged by zlf's
    own cache file alone, nothing was done there."""
    import types

    monkeypatch.setattr(no_bytecode_kept.sys, "dont_write_bytecode", False)
    kept = tmp_path / "zlf.pyc"
    kept.write_bytes(b"")
    monkeypatch.setattr("zlf.__cached__", str(kept))
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for name in ("torch", "triton"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__cached__=str(kept)))
    assert no_bytecode_kept.python_child_env(plain) == plain  # every cache file there: nothing to do
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__cached__=str(tmp_path / "ro" / "torch.pyc")))
    assert "PYTHONPYCACHEPREFIX" in no_bytecode_kept.python_child_env(plain)
    monkeypatch.delitem(sys.modules, "torch")  # not imported yet: found without importing it
    monkeypatch.setattr(no_bytecode_kept.importlib.util, "find_spec",
                        lambda name: types.SimpleNamespace(cached=str(tmp_path / "ro" / f"{name}.pyc")))
    assert "PYTHONPYCACHEPREFIX" in no_bytecode_kept.python_child_env(plain)


def test_childrens_bytecode_never_fails_a_run_over_its_cache(no_bytecode_kept, monkeypatch, tmp_path):
    """A cache directory that cannot be made (a file in the way, a read-only disk): the child
    runs as before, compiling from source, and nothing is raised."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("ZLF_CACHE_DIR", str(blocker / "cache"))
    env = no_bytecode_kept.python_child_env(os.environ)
    assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_child_under_a_file_size_limit_writes_no_bytecode_that_later_processes_would_fail_on(tmp_path):
    """Python writes a cache file in one write() whose short count it ignores, then renames it into
    place: a process under ``ulimit -f`` left a truncated .pyc in the shared cache, and every later
    process failed to import that module ("marshal data too short"). Its children now write none."""
    import resource

    src, cache = tmp_path / "src", tmp_path / "pycache"
    src.mkdir()
    (src / "big_module.py").write_text("VALUE = %r\n" % ("x" * 5000))
    probe = ("import resource, sys, os; resource.setrlimit(resource.RLIMIT_FSIZE, (800, 800)); "
             "from zlf.procs import python_child_env; import json; "
             "print(json.dumps(python_child_env(dict(os.environ))))")
    base = {**os.environ, "PYTHONPYCACHEPREFIX": str(cache)}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", probe], env=base, capture_output=True, text=True, timeout=60)
    child_env = json.loads(out.stdout)
    assert child_env.get("PYTHONDONTWRITEBYTECODE") == "1", out.stderr

    def limited_import(env):
        return subprocess.run([sys.executable, "-c", "import big_module"], env={**env, "PYTHONPATH": str(src)},
                              capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (800, 800)))

    assert limited_import(child_env).returncode == 0
    later = subprocess.run([sys.executable, "-c", "import big_module"], env={**base, "PYTHONPATH": str(src)},
                           capture_output=True, text=True, timeout=60)
    assert later.returncode == 0, later.stderr


def test_a_time_limit_watch_gives_back_the_callers_alarm_handler_and_timer():
    """A point watch (zlf run's --time-limit) takes SIGALRM while a run lasts; once closed, the
    caller's handler is back and the timer it had armed still runs (not cancelled by the points)."""
    from zlf.procs import PointWatch

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGALRM, mine)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1000)
        watch = PointWatch(5, lambda point: None)
        assert signal.getsignal(signal.SIGALRM) != mine
        with watch("p"):
            pass
        watch.close()
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert signal.getsignal(signal.SIGALRM) is mine and 0 < left <= 1000
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
