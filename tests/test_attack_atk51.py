"""ATTACK atk51: how `zlf` ends when its output or its environment goes away or misbehaves
(core/cli.py: guarded(), _stdout_reader_gone(), main()'s restoring of the caller's state).

Each case runs zlf in a fresh process (python -m zlf, or a small script that calls zlf.cli.main),
on the cpu backend with tiny ops (tests/data/attack_atk51/ops.py)."""
from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from process_tools import CEILING, alive, stops_as_from_a_terminal


@pytest.fixture(autouse=True)
def _as_from_a_terminal():
    """Every zlf these cases start, and every in-process stop, meets SIGINT and SIGHUP as a
    terminal gives them, whatever this session inherited."""
    with stops_as_from_a_terminal():
        yield


PY = sys.executable
OPS = Path(__file__).parent / "data" / "attack_atk51" / "ops.py"
FAST = ["--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "0"]


def _env(tmp_path, **more):
    from zlf.testing import clean_env

    e = clean_env({})
    e.pop("TRITON_INTERPRET", None)
    e["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    e.update(more)
    return e


def _dead_pipe():
    """The write end of a pipe whose reader is gone."""
    r, w = os.pipe()
    os.close(r)
    return w


def _only_dir(parent: Path) -> Path:
    dirs = [d for d in parent.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _statuses(run: Path):
    recs = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
    return [(r["point"], r["status"]) for r in recs], json.loads((run / "meta.json").read_text())["status"]


def _wait_file(path: Path, proc=None):
    end = time.monotonic() + CEILING
    while not path.exists():
        assert proc is None or proc.poll() is None, f"zlf ended early: rc={proc.returncode}"
        assert time.monotonic() < end, f"{path} never came"
        time.sleep(0.05)


def _zlf(tmp_path, *args, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([PY, "-m", "zlf", *map(str, args)], cwd=tmp_path, env=kw.pop("env", _env(tmp_path)),
                          timeout=kw.pop("timeout", 300), **kw)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished runs of the same points (for compare / report)."""
    base = tmp_path_factory.mktemp("atk51_runs")
    for name in ("a", "b"):
        p = _zlf(base, "run", f"{OPS}::fast", f"{OPS}::slow", *FAST, "--out", name, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    return base, _only_dir(base / "a"), _only_dir(base / "b")


# ----------------------------------------------------------------------------- stderr gone, stdout healthy
@pytest.mark.parametrize("stderr", ["dead_pipe", "/dev/full"])
def test_bad_input_with_stderr_gone_or_full_still_exits_2(tmp_path, stderr):
    w = _dead_pipe() if stderr == "dead_pipe" else os.open("/dev/full", os.O_WRONLY)
    try:
        p = _zlf(tmp_path, "run", "no_such_op_atk51", *FAST, stdout=subprocess.PIPE, stderr=w)
    finally:
        os.close(w)
    assert p.returncode == 2, p.returncode


def test_an_argparse_error_with_stderr_a_dead_pipe_exits_2(tmp_path):
    w = _dead_pipe()
    try:
        p = _zlf(tmp_path, "run", "--no-such-flag-atk51", stdout=subprocess.PIPE, stderr=w)
    finally:
        os.close(w)
    assert p.returncode == 2


@pytest.mark.parametrize("where", ["dead_pipe", "dead_terminal"])
def test_bad_input_with_both_streams_into_a_gone_reader_is_141_or_2_never_1(tmp_path, where):
    if where == "dead_pipe":
        w = _dead_pipe()
    else:
        master, w = pty.openpty()
        os.close(master)
    try:
        p = _zlf(tmp_path, "run", "no_such_op_atk51", *FAST, stdout=w, stderr=w, start_new_session=True)
    finally:
        os.close(w)
    assert p.returncode in (141, 2), p.returncode


def test_a_run_with_stderr_a_dead_pipe_keeps_every_record_and_exits_0(tmp_path):
    w = _dead_pipe()
    try:
        p = _zlf(tmp_path, "run", f"{OPS}::fast", *FAST, "--out", "r", stdout=subprocess.PIPE, stderr=w)
    finally:
        os.close(w)
    assert p.returncode == 0
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert status == "complete" and [s for _, s in recs] == ["ok", "ok"]


def _stop_with_stderr_gone(tmp_path, sig, terminal=False):
    gate, pidfile = tmp_path / "go", tmp_path / "worker.pid"
    if terminal:  # stdout and stderr on a terminal whose window closed
        master, w = pty.openpty()
        os.close(master)
    else:
        w = _dead_pipe()
    try:
        proc = subprocess.Popen([PY, "-m", "zlf", "run", f"{OPS}::slow", *FAST, "--out", "r"], cwd=tmp_path,
                                env=_env(tmp_path, ATK_GATE=str(gate), ATK_PID=str(pidfile)),
                                stdout=w if terminal else subprocess.DEVNULL, stderr=w, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        os.close(w)
    try:
        _wait_file(pidfile, proc)
        time.sleep(0.3)
        if sig == signal.SIGINT:  # Ctrl-C at a terminal: the whole foreground group
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        rc = proc.wait(timeout=CEILING)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    worker = int(pidfile.read_text())
    end = time.monotonic() + 30
    while alive(worker) and time.monotonic() < end:
        time.sleep(0.1)
    return rc, _statuses(_only_dir(tmp_path / "r")), alive(worker)


def test_ctrl_c_with_stderr_a_dead_pipe_is_130_and_keeps_finished_points(tmp_path):
    rc, (recs, status), worker_alive = _stop_with_stderr_gone(tmp_path, signal.SIGINT)
    assert ("slow/64/float32", "ok") in recs and not worker_alive
    assert rc == 130, (rc, status)


def test_sigterm_with_stderr_a_dead_pipe_is_143_and_keeps_finished_points(tmp_path):
    rc, (recs, status), worker_alive = _stop_with_stderr_gone(tmp_path, signal.SIGTERM)
    assert ("slow/64/float32", "ok") in recs and not worker_alive
    assert rc == 143 and status == "terminated", (rc, status)


def test_sigterm_with_the_terminal_gone_is_143_and_keeps_finished_points(tmp_path):
    rc, (recs, status), worker_alive = _stop_with_stderr_gone(tmp_path, signal.SIGTERM, terminal=True)
    assert ("slow/64/float32", "ok") in recs and not worker_alive
    assert status == "terminated", status
    assert rc == 143, rc  # README: 143 terminated (SIGTERM), whatever became of the terminal


# ----------------------------------------------------------------------------- stdout full, read-only
def test_stdout_dev_full_is_one_line_and_2(tmp_path):
    with open("/dev/full", "w") as full:
        p = _zlf(tmp_path, "plugins", stdout=full, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == ["zlf: error: No space left on device"], p.stderr


def test_a_run_into_stdout_dev_full_keeps_every_record(tmp_path):
    with open("/dev/full", "w") as full:
        p = _zlf(tmp_path, "run", f"{OPS}::fast", *FAST, "--out", "r", stdout=full, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert [ln for ln in p.stderr.splitlines() if "error" in ln] == ["zlf: error: No space left on device"]
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"] and status == "complete"


def test_stdout_opened_read_only_is_no_traceback(tmp_path):
    with open(os.devnull, "r") as ro:
        p = _zlf(tmp_path, "plugins", stdout=ro, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) <= 1, p.stderr


# ----------------------------------------------------------------------------- the terminal closes mid-run
def _tty_env(tmp_path, progress, **more):
    e = _env(tmp_path, **more)
    if progress:  # as at a real terminal: the live progress display on
        e.pop("ZLF_NO_PROGRESS", None)
        e["TERM"] = "xterm-256color"
    return e


@pytest.mark.parametrize("progress", [False, True], ids=["no_progress", "progress_bar"])
@pytest.mark.parametrize("stderr_too", [True, False], ids=["both_on_the_terminal", "stderr_a_file"])
def test_terminal_closed_mid_run_keeps_records_finishes_meta_and_no_worker(tmp_path, stderr_too, progress):
    gate, pidfile, errf = tmp_path / "go", tmp_path / "worker.pid", tmp_path / "stderr.txt"
    master, slave = pty.openpty()
    with open(errf, "w") as err:
        try:
            proc = subprocess.Popen([PY, "-m", "zlf", "run", f"{OPS}::slow", *FAST, "--out", "r"], cwd=tmp_path,
                                    env=_tty_env(tmp_path, progress, ATK_GATE=str(gate), ATK_PID=str(pidfile)), stdout=slave,
                                    stderr=slave if stderr_too else err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            os.close(slave)
    try:
        _wait_file(pidfile, proc)  # the second point runs: the first is finished
        os.close(master)  # the terminal window closes
        master = None
        time.sleep(0.3)
        gate.touch()
        rc = proc.wait(timeout=CEILING)
    finally:
        if master is not None:
            os.close(master)
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    worker = int(pidfile.read_text())
    end = time.monotonic() + 30
    while alive(worker) and time.monotonic() < end:
        time.sleep(0.1)
    assert not alive(worker)
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert recs[0] == ("slow/64/float32", "ok")
    assert status != "running", status
    text = errf.read_text()
    assert "Traceback" not in text and "error" not in text, text
    assert rc in (0, 141), rc
    # the terminal costs what it would have shown, never a record: the run goes on to its end
    assert status == "complete" and [s for _, s in recs] == ["ok"] * 3, (rc, status, recs)


def _to_dead_terminal(tmp_path, *args):
    master, slave = pty.openpty()
    os.close(master)
    try:
        return _zlf(tmp_path, *args, stdout=slave, stderr=subprocess.PIPE, text=True, start_new_session=True)
    finally:
        os.close(slave)


@pytest.mark.parametrize("cmd", ["compare", "report", "ops", "ab-status"])
def test_commands_into_a_dead_terminal_stop_quietly_with_141(tmp_path, two_runs, cmd):
    base, a, b = two_runs
    args = {"compare": ["compare", a, b], "report": ["report", a, b, "--out", tmp_path / "rep.md"],
            "ops": ["ops", f"{OPS}::fast", f"{OPS}::slow", "--backend", "cpu"],
            "ab-status": ["ab", "--status", Path(__file__).parent / "data" / "attack_atk48" / "campaign"]}[cmd]
    if cmd == "report":
        helptext = _zlf(tmp_path, "report", "--help", capture_output=True, text=True).stdout
        if "--out" not in helptext:
            args = ["report", a, b]
    p = _to_dead_terminal(tmp_path, *args)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 141, (p.returncode, p.stderr)
    assert "error" not in p.stderr, p.stderr


def test_a_big_table_into_a_pipe_closed_mid_output_is_quiet_141(tmp_path, two_runs):
    base, a, b = two_runs
    proc = subprocess.Popen([PY, "-m", "zlf", "compare", str(a), str(b), "--format", "csv"], cwd=tmp_path,
                            env=_env(tmp_path, COLUMNS="40"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    proc.stdout.read(20)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=300)
    assert "Traceback" not in err and "error" not in err and "Exception ignored" not in err, err
    assert rc in (0, 141), rc


# ----------------------------------------------------------------------------- zlf.cli.main inside a program
def _script(tmp_path, body, stdout=None, **kw):
    f = tmp_path / "attack_script.py"
    f.write_text(textwrap.dedent(body))
    return subprocess.run([PY, str(f)], text=True, env=_env(tmp_path), cwd=tmp_path, timeout=300,
                          stdin=subprocess.DEVNULL, stdout=stdout if stdout is not None else subprocess.PIPE,
                          stderr=subprocess.PIPE, **kw)


STATE = """
import os, sys, random, signal
from zlf.cli import main
def fd1():
    st = os.fstat(1)
    return (st.st_dev, st.st_ino)
random.seed(7)
before = (fd1(), len(os.listdir("/proc/self/fd")), dict(os.environ), random.getstate(),
          signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
rc = main(%r)
after = (fd1(), len(os.listdir("/proc/self/fd")), dict(os.environ), random.getstate(),
         signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
names = ["fd1", "open fds", "environ", "random", "SIGTERM", "SIGINT"]
os.write(2, ("RC %%s CHANGED %%s\\n" %% (rc, [n for n, x, y in zip(names, before, after) if x != y])).encode())
"""


def _state_into_dead_pipe(tmp_path, argv):
    w = _dead_pipe()
    try:
        p = _script(tmp_path, STATE % (argv,), stdout=w)
    finally:
        os.close(w)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line, p.stderr
    return line[0]


def test_in_process_main_into_a_gone_reader_returns_141_and_restores_env_rng_signals(tmp_path):
    line = _state_into_dead_pipe(tmp_path, ["run", f"{OPS}::fast", *FAST, "--out", "r"])
    assert line.startswith("RC 141 "), line
    for name in ("environ", "random", "SIGTERM", "SIGINT"):
        assert f"'{name}'" not in line, line
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"] and status == "complete"


def test_in_process_main_141_leaves_the_callers_fd_1_alone(tmp_path):
    line = _state_into_dead_pipe(tmp_path, ["plugins"])
    assert line.startswith("RC 141 ") and "'fd1'" not in line, line


def test_in_process_main_141_leaks_no_descriptor(tmp_path):
    line = _state_into_dead_pipe(tmp_path, ["plugins"])
    assert line.startswith("RC 141 ") and "'open fds'" not in line, line


CLOSED = """
import io, json, os, sys, glob
from zlf.cli import main
f = open("closed.txt", "w"); f.close()
real, sys.stdout = sys.stdout, f  # a caller whose stdout object is closed
try:
    rc = main(%r)
except BaseException as exc:
    rc = "RAISED " + repr(exc)
sys.stdout = real
print("RC", rc)
"""


def test_in_process_main_with_a_closed_sys_stdout_returns_a_code(tmp_path):
    p = _script(tmp_path, CLOSED % (["run", f"{OPS}::fast", *FAST, "--out", "r"],))
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"] and status == "complete"  # the records are kept either way
    assert "RAISED" not in p.stdout and "Traceback" not in p.stderr, (p.stdout, p.stderr)


REDIRECT = """
import contextlib, io, os, sys, zlf
from zlf.cli import main

class Disk:
    @zlf.hookimpl
    def after_run(self, run, results):
        raise OSError(5, "Input/output error", "/mnt/flaky/results.bak")  # a device that fails, not stdout

buf = io.StringIO()
try:
    with contextlib.redirect_stdout(buf):
        rc = main(%r, extra_plugins=[("disk", Disk())])
except BaseException as exc:
    rc = "RAISED " + type(exc).__name__
os.write(1, ("RC %%s\\n" %% rc).encode())
"""


def test_an_eio_from_a_plugin_with_stdout_healthy_is_never_a_quiet_141(tmp_path):
    """EIO from something other than stdout (a plugin reading a failing device) while stdout works:
    not the quiet 'reader gone' path, the error must show."""
    p = _script(tmp_path, REDIRECT % (["run", f"{OPS}::fast", *FAST, "--out", "r"],))
    assert "RC 141" not in p.stdout, (p.stdout, p.stderr)
    # the error reaches the caller: raised to it, or said on stderr
    assert "RC RAISED OSError" in p.stdout or "Input/output error" in p.stderr, (p.stdout, p.stderr)
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"]


ENOSPC_PLUGIN = """
import os, sys, zlf
from zlf.cli import main

class Sink:
    @zlf.hookimpl
    def after_run(self, run, results):
        raise OSError(28, "No space left on device", "/mnt/full/copy.jsonl")

rc = main(%r, extra_plugins=[("sink", Sink())])
sys.stdout.flush()
os.write(1, ("RC %%s\\n" %% rc).encode())
"""


def test_a_full_disk_seen_by_a_plugin_is_one_line_and_2_and_the_run_stays(tmp_path):
    p = _script(tmp_path, ENOSPC_PLUGIN % (["run", f"{OPS}::fast", *FAST, "--out", "r"],))
    assert "RC 2" in p.stdout and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and errors[0].startswith(
        "zlf: error: No space left on device writing /mnt/full/copy.jsonl"), p.stderr
    recs, _ = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"]


NONE_STDOUT = """
import os, sys
from zlf.cli import main
sys.stdout = None  # pythonw, or a daemon that dropped its stdout
rc = main(%r)
os.write(2, ("RC %%s STDOUT %%r\\n" %% (rc, sys.stdout)).encode())
"""


def test_in_process_main_gives_back_a_none_sys_stdout(tmp_path):
    p = _script(tmp_path, NONE_STDOUT % (["plugins"],))
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line and line[0] == "RC 0 STDOUT None", p.stderr


def test_compare_with_fd_1_closed_is_0_and_quiet(tmp_path, two_runs):
    base, a, b = two_runs
    p = subprocess.run([PY, "-m", "zlf", "compare", str(a), str(b)], cwd=tmp_path, env=_env(tmp_path),
                       stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300,
                       preexec_fn=lambda: os.close(1))
    assert p.returncode == 0 and "Traceback" not in p.stderr and "error" not in p.stderr, p.stderr


def test_a_run_into_a_dead_terminal_and_a_dead_stderr_pipe_is_141_with_every_record(tmp_path):
    master, slave = pty.openpty()
    os.close(master)
    w = _dead_pipe()
    try:
        p = _zlf(tmp_path, "run", f"{OPS}::fast", *FAST, "--out", "r", stdout=slave, stderr=w, start_new_session=True)
    finally:
        os.close(slave)
        os.close(w)
    assert p.returncode == 141
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"] and status == "complete"


def test_ab_into_a_dead_terminal_keeps_its_campaign(tmp_path):
    master, slave = pty.openpty()
    os.close(master)
    errf = tmp_path / "err.txt"
    try:
        with open(errf, "w") as err:
            p = _zlf(tmp_path, "ab", f"{OPS}::fast", "--switch", "X", "--rounds", "1", *FAST, "--out", "o",
                     stdout=slave, stderr=err, start_new_session=True, timeout=600)
    finally:
        os.close(slave)
    text = errf.read_text()
    assert "Traceback" not in text, text
    state = json.loads((_only_dir(tmp_path / "o") / "campaign.json").read_text())
    assert state["status"] in ("complete",), (state["status"], p.returncode, text[-2000:])
    assert p.returncode in (0, 141), (p.returncode, text[-2000:])


def _unreadable_run(tmp_path, two_runs, name):
    """A copy of run a whose NAME reads as a failing device does: EIO (/proc/self/mem at offset 0)."""
    import shutil
    base, a, b = two_runs
    bad = tmp_path / "bad_run"
    shutil.copytree(a, bad)
    (bad / name).unlink()
    (bad / name).symlink_to("/proc/self/mem")
    return bad, b


@pytest.mark.parametrize("stdout", ["pipe", "dead_terminal"])
@pytest.mark.parametrize("name", ["results.jsonl", "meta.json"])
def test_a_run_file_on_a_failing_device_is_one_line_and_2_not_a_quiet_141(tmp_path, two_runs, stdout, name):
    """EIO from reading a run's file, not from stdout: an error, whatever stdout is."""
    bad, b = _unreadable_run(tmp_path, two_runs, name)
    if stdout == "pipe":
        p = _zlf(tmp_path, "compare", bad, b, capture_output=True, text=True)
    else:
        p = _to_dead_terminal(tmp_path, "compare", bad, b)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines() == [f"zlf: error: {bad / name}: cannot read this {name}: Input/output error"]


def test_an_op_file_on_a_failing_device_is_one_line_and_2(tmp_path):
    (tmp_path / "ops_eio.py").symlink_to("/proc/self/mem")
    p = _to_dead_terminal(tmp_path, "run", "ops_eio.py::x", *FAST, "--out", "r")
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "Input/output error" in p.stderr, p.stderr


EIO_NAMED = """
import os, pty, sys, zlf
from zlf.cli import main

class Disk:
    @zlf.hookimpl
    def after_run(self, run, results):
        raise OSError(5, "Input/output error", "/mnt/flaky/results.bak")  # a failing disk, named

master, slave = pty.openpty()
os.close(master)  # the terminal window closed too
os.dup2(slave, 1)
rc = main(%r, extra_plugins=[("disk", Disk())])
os.write(2, ("RC %%s\\n" %% rc).encode())
"""


def test_an_eio_naming_a_file_is_said_even_when_the_terminal_is_gone_too(tmp_path):
    p = _script(tmp_path, EIO_NAMED % (["run", f"{OPS}::fast", *FAST, "--out", "r"],), start_new_session=True)
    recs, _ = _statuses(_only_dir(tmp_path / "r"))
    assert [s for _, s in recs] == ["ok", "ok"]
    assert "Input/output error" in p.stderr and "/mnt/flaky/results.bak" in p.stderr, p.stderr


@pytest.mark.parametrize("where", ["dead_pipe", "dead_terminal", "/dev/full"])
def test_an_op_that_prints_into_a_gone_or_full_stdout_and_stderr_costs_no_record(tmp_path, where):
    """README: "A closed or full stdout or stderr costs what it would have shown, never a record"."""
    if where == "dead_pipe":
        w = _dead_pipe()
    elif where == "dead_terminal":
        master, w = pty.openpty()
        os.close(master)
    else:
        w = os.open("/dev/full", os.O_WRONLY)
    try:
        p = _zlf(tmp_path, "run", f"{OPS}::chatty", *FAST, "--out", "r", stdout=w, stderr=w, start_new_session=True)
    finally:
        os.close(w)
    recs, status = _statuses(_only_dir(tmp_path / "r"))
    assert recs == [("chatty/64/float32", "ok"), ("chatty/96/float32", "ok")], recs
    assert status == "complete" and p.returncode in (0, 2, 141), (status, p.returncode)
