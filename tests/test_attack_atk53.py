"""ATTACK atk53: how `zlf` ends (core/cli.py guarded(), main(), console.last_word) beyond atk50/atk51:
`zlf ab` and `zlf task` with stderr gone, full or closed (and stopped by SIGTERM / SIGINT then),
SIGHUP with stderr full, in-process main() with sys.stderr None or closed, main() called again
from a plugin hook, a plugin that swaps sys.stdout, a plugin's own EBADF, a FIFO stdout.

Each case runs zlf in a fresh process (python -m zlf, or a small script calling zlf.cli.main), on
the cpu backend with atk51's tiny ops (tests/data/attack_atk51/ops.py)."""
from __future__ import annotations

import json
import os
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
HERE = Path(__file__).parent
OPS = HERE / "data" / "attack_atk51" / "ops.py"
TASK = HERE / "data" / "taskpkg_vecadd"
FAST = ["--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "0"]


def _env(tmp_path, **more):
    from zlf.testing import clean_env

    e = clean_env({})
    e.pop("TRITON_INTERPRET", None)
    e["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    e.update(more)
    return e


def _dead_pipe():
    r, w = os.pipe()
    os.close(r)
    return w


def _stderr(kind):
    if kind == "dead_pipe":
        return _dead_pipe()
    if kind == "dead_terminal":  # a terminal whose window closed (not zlf's controlling one): EIO
        import pty
        master, slave = pty.openpty()
        os.close(master)
        return slave
    return os.open("/dev/full", os.O_WRONLY)


def _only_dir(parent: Path) -> Path:
    dirs = [d for d in parent.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _records(run: Path):
    f = run / "results.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []
    return [r["status"] for r in recs], json.loads((run / "meta.json").read_text())["status"]


def _zlf(tmp_path, *args, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([PY, "-m", "zlf", *map(str, args)], cwd=tmp_path, env=kw.pop("env", _env(tmp_path)),
                          timeout=kw.pop("timeout", 300), **kw)


def _wait_file(path: Path, proc=None):
    end = time.monotonic() + CEILING
    while not path.exists():
        assert proc is None or proc.poll() is None, f"zlf ended early: rc={proc.returncode}"
        assert time.monotonic() < end, f"{path} never came"
        time.sleep(0.05)


def _script(tmp_path, body, **kw):
    f = tmp_path / "attack_script.py"
    f.write_text(textwrap.dedent(body))
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([PY, str(f)], text=True, env=_env(tmp_path), cwd=tmp_path, timeout=300,
                          stdin=subprocess.DEVNULL, **kw)


# ----------------------------------------------------------------------------- zlf ab / zlf task, stderr gone
AB = ["ab", f"{OPS}::fast", "--switch", "X", "--rounds", "3", *FAST, "--out", "o"]


@pytest.mark.parametrize("stderr", ["dead_pipe", "/dev/full"])
def test_ab_with_stderr_gone_or_full_runs_its_campaign_to_the_end(tmp_path, stderr):
    """README: "A closed or full stdout or stderr costs what it would have shown, never a record"."""
    w = _stderr(stderr)
    try:
        p = _zlf(tmp_path, *AB, stdout=subprocess.PIPE, stderr=w, text=True, timeout=600)
    finally:
        os.close(w)
    state = json.loads((_only_dir(tmp_path / "o") / "campaign.json").read_text())
    assert state["status"] == "complete", (p.returncode, state["status"], [r["status"] for r in state["runs"]])
    assert p.returncode == 0, p.returncode


def test_ab_with_a_warning_and_stderr_a_dead_pipe_still_makes_its_campaign(tmp_path):
    w = _dead_pipe()
    try:
        p = _zlf(tmp_path, "ab", f"{OPS}::fast", "--switch", "X", "--rounds", "1", *FAST, "--out", "o",
                 stdout=subprocess.PIPE, stderr=w, text=True, timeout=600)
    finally:
        os.close(w)
    assert (tmp_path / "o").is_dir() and p.returncode == 0, p.returncode


@pytest.mark.extensions("task")
@pytest.mark.parametrize("stderr", ["dead_pipe", "/dev/full"])
def test_task_with_stderr_gone_or_full_judges_every_case(tmp_path, stderr):
    w = _stderr(stderr)
    try:
        p = _zlf(tmp_path, "task", TASK, "--candidate", TASK / "candidates" / "correct.py", "--out", "t",
                 stdout=subprocess.PIPE, stderr=w, text=True, timeout=600)
    finally:
        os.close(w)
    statuses, status = _records(_only_dir(tmp_path / "t"))
    assert status == "complete" and statuses and set(statuses) == {"ok"}, (p.returncode, status, statuses)
    assert p.returncode == 0, p.returncode


@pytest.mark.extensions("task")
def test_task_with_stderr_closed_judges_every_case(tmp_path):
    """`zlf task ... 2>&-`: fd 2 closed before zlf starts; /dev/null takes its place."""
    p = _zlf(tmp_path, "task", TASK, "--candidate", TASK / "candidates" / "correct.py", "--out", "t",
             stdout=subprocess.PIPE, text=True, timeout=600, preexec_fn=lambda: os.close(2))
    statuses, status = _records(_only_dir(tmp_path / "t"))
    assert p.returncode == 0 and status == "complete" and set(statuses) == {"ok"}, (p.returncode, status)


def _ab_stopped(tmp_path, sig, close_stderr=True):
    gate, pidfile = tmp_path / "go", tmp_path / "worker.pid"
    proc = subprocess.Popen([PY, "-m", "zlf", "ab", f"{OPS}::slow", "--switch", "X", "--rounds", "3", *FAST,
                             "--out", "o"], cwd=tmp_path, env=_env(tmp_path, ATK_GATE=str(gate), ATK_PID=str(pidfile)),
                            stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=(lambda: os.close(2)) if close_stderr else None)
    try:
        _wait_file(pidfile, proc)
        time.sleep(0.3)
        if sig == signal.SIGINT:
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
    state = json.loads((_only_dir(tmp_path / "o") / "campaign.json").read_text())
    return rc, state["status"], alive(worker)


@pytest.mark.parametrize("sig,code,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
                         ids=["SIGTERM", "SIGINT"])
def test_ab_stopped_with_stderr_closed_keeps_its_code_and_campaign(tmp_path, sig, code, word):
    rc, status, worker_alive = _ab_stopped(tmp_path, sig)
    assert not worker_alive
    assert (rc, status) == (code, word)


# ----------------------------------------------------------------------------- SIGHUP, stderr /dev/full
def test_sighup_of_a_supervised_run_with_stderr_full_is_143_and_terminated(tmp_path):
    gate, pidfile = tmp_path / "go", tmp_path / "worker.pid"
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        proc = subprocess.Popen([PY, "-m", "zlf", "run", f"{OPS}::slow", *FAST, "--out", "r"], cwd=tmp_path,
                                env=_env(tmp_path, ATK_GATE=str(gate), ATK_PID=str(pidfile)),
                                stdout=subprocess.DEVNULL, stderr=full, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(full)
    try:
        _wait_file(pidfile, proc)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGHUP)
        rc = proc.wait(timeout=CEILING)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    statuses, status = _records(_only_dir(tmp_path / "r"))
    assert statuses[:1] == ["ok"] and status == "terminated", (rc, status, statuses)
    assert rc == 143, rc


# ----------------------------------------------------------------------------- in-process: sys.stderr None / closed
STDERR_STATE = """
import io, os, sys
from zlf.cli import main
saved = os.dup(2)
fds = len(os.listdir("/proc/self/fd"))
%s
mine = sys.stderr
try:
    rc = main(["run", "no_such_op_atk53", "--backend", "cpu"])
except BaseException as exc:
    rc = "RAISED " + repr(exc)
same = sys.stderr is mine
os.write(saved, ("RC %%s SAME %%s LEAK %%d\\n" %% (rc, same, len(os.listdir("/proc/self/fd")) - fds)).encode())
"""


@pytest.mark.parametrize("how", ["none", "closed_file", "closed_stringio"])
def test_in_process_usage_error_with_sys_stderr_gone_is_2_and_gives_it_back(tmp_path, how):
    setup = {"none": "sys.stderr = None",
             "closed_file": "f = open('e.txt', 'w'); f.close(); sys.stderr = f",
             "closed_stringio": "s = io.StringIO(); s.close(); sys.stderr = s"}[how]
    p = _script(tmp_path, STDERR_STATE % setup)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line == ["RC 2 SAME True LEAK 0"], (p.stdout, p.stderr)


BOTH_GONE = """
import os, sys
from zlf.cli import main
f = open("closed.txt", "w"); f.close()
mine = f
sys.stdout = f                                  # the caller's stdout object closed ...
r, w = os.pipe(); os.close(r); os.dup2(w, 1); os.close(w)   # ... and fd 1's reader gone too
fds = len(os.listdir("/proc/self/fd"))
try:
    rc = main(%r)
except BaseException as exc:
    rc = "RAISED " + repr(exc)
os.write(2, ("RC %%s SAME %%s LEAK %%d\\n" %% (rc, sys.stdout is mine, len(os.listdir("/proc/self/fd")) - fds)).encode())
"""


def test_in_process_closed_sys_stdout_and_a_gone_reader_returns_a_code_and_gives_it_back(tmp_path):
    p = _script(tmp_path, BOTH_GONE % (["run", f"{OPS}::fast", *FAST, "--out", "r"],))
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line and "RAISED" not in line[0] and line[0].endswith("SAME True LEAK 0"), p.stderr
    assert line[0].split()[1] in ("0", "141"), line
    statuses, status = _records(_only_dir(tmp_path / "r"))
    assert statuses == ["ok", "ok"] and status == "complete"


# ----------------------------------------------------------------------------- re-entrant main()
REENTRANT = """
import os, random, signal, sys, zlf
from zlf.cli import main
saved = os.dup(2)
inner = []

class Again:
    @zlf.hookimpl
    def configure(self, session):
        if not inner:
            inner.append("busy")
            inner[0] = main(["plugins"])          # a plugin hook that runs zlf again
            inner.append((getattr(sys.stdout, "closed", None), getattr(sys.stderr, "closed", None)))

sys.stdout = None                                 # the caller has no stdout object
random.seed(3)
before = (len(os.listdir("/proc/self/fd")), signal.getsignal(signal.SIGTERM), dict(os.environ), random.getstate())
rc = main(["run", "%s::fast", "--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "0", "--out", "r"],
          extra_plugins=[("again", Again())])
after = (len(os.listdir("/proc/self/fd")), signal.getsignal(signal.SIGTERM), dict(os.environ), random.getstate())
names = ["fds", "SIGTERM", "environ", "random"]
os.write(saved, ("RC %%s INNER %%s STDOUT %%r INNER_STDOUT_CLOSED %%s CHANGED %%s\\n" %% (
    rc, inner[0], sys.stdout, inner[1][0],
    [n for n, x, y in zip(names, before, after) if x != y])).encode())
"""


def test_main_called_again_from_a_plugin_hook_restores_in_the_right_order(tmp_path):
    p = _script(tmp_path, REENTRANT % OPS)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line == ["RC 0 INNER 0 STDOUT None INNER_STDOUT_CLOSED False CHANGED []"], (p.stdout[-2000:], p.stderr[-3000:])
    statuses, status = _records(_only_dir(tmp_path / "r"))
    assert statuses == ["ok", "ok"] and status == "complete"


# ----------------------------------------------------------------------------- a plugin that swaps sys.stdout
SWAP = """
import io, os, sys, zlf
from zlf.cli import main
saved = os.dup(2)
theirs = io.StringIO()

class Swap:
    @zlf.hookimpl
    def configure(self, session):
        sys.stdout = theirs                      # a plugin capturing the command's output
        sys.stderr = theirs

mine_out, mine_err = sys.stdout, sys.stderr
rc = main(["plugins"], extra_plugins=[("swap", Swap())])
os.write(saved, ("RC %s OUT %s ERR %s\\n" % (rc, sys.stdout is mine_out, sys.stderr is mine_err)).encode())
"""


def test_a_plugin_that_swaps_sys_stdout_leaves_the_callers_own_in_place(tmp_path):
    """An in-process caller gets its sys.stdout and sys.stderr objects back, whatever a plugin did."""
    p = _script(tmp_path, SWAP)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line == ["RC 0 OUT True ERR True"], p.stderr


# ----------------------------------------------------------------------------- EBADF / EPIPE not about stdout
EBADF_PLUGIN = """
import os, sys, zlf
from zlf.cli import main

class Closer:
    @zlf.hookimpl
    def after_run(self, run, results):
        fd = os.open(os.devnull, os.O_RDONLY)
        os.close(fd)
        os.write(fd, b"x")                       # the plugin's own descriptor, long closed: EBADF

rc = main(%r, extra_plugins=[("closer", Closer())])
"""


@pytest.mark.parametrize("stdout", ["pipe", "read_only"])
def test_a_plugins_own_ebadf_is_not_said_to_be_stdout(tmp_path, stdout):
    """EBADF from a plugin's own descriptor is not "stdout is not open for writing", even where
    stdout happens to be read-only (the run's table is not what failed: the records are all there)."""
    argv = ["run", f"{OPS}::fast", *FAST, "--out", "r", "--format", "json"]
    if stdout == "pipe":
        p = _script(tmp_path, EBADF_PLUGIN % (argv,))
    else:
        with open(os.devnull) as ro:
            p = _script(tmp_path, EBADF_PLUGIN % (argv,), stdout=ro)
    assert "stdout is not open for writing" not in p.stderr, p.stderr
    assert "Bad file descriptor" in p.stderr, p.stderr


def test_stdout_a_fifo_whose_reader_left_is_quiet_141(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(fifo, os.O_WRONLY)
    os.close(r)  # the reader (`zlf ... > fifo` read by a process that went away)
    try:
        p = _zlf(tmp_path, "plugins", stdout=w, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == "", (p.returncode, p.stderr)


PLUGIN_EPIPE_FIFO = """
import os, sys, zlf
from zlf.cli import main

class Feed:
    @zlf.hookimpl
    def after_run(self, run, results):
        fifo = "feed.fifo"
        os.mkfifo(fifo)
        r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        w = os.open(fifo, os.O_WRONLY)
        os.close(r)
        os.write(w, b"results\\n")             # the plugin's own FIFO lost its reader: EPIPE, not stdout's

rc = main(%r, extra_plugins=[("feed", Feed())])
sys.stdout.flush()
os.write(2, ("RC %%s\\n" %% rc).encode())
"""


def test_a_plugins_fifo_epipe_with_stdout_a_regular_file_is_an_error_not_141(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        p = _script(tmp_path, PLUGIN_EPIPE_FIFO % (["run", f"{OPS}::fast", *FAST, "--out", "r"],), stdout=f)
    assert "RC 1" in p.stderr and "zlf: error:" in p.stderr and "Broken pipe" in p.stderr, p.stderr
    statuses, status = _records(_only_dir(tmp_path / "r"))
    assert statuses == ["ok", "ok"]


# ----------------------------------------------------------------------------- sharded zlf run (--gpus on cpu)
SHARDED = ["run", f"{OPS}::fast", *FAST, "--gpus", "0,1", "--out", "s"]


@pytest.mark.parametrize("stderr", ["dead_pipe", "/dev/full"])
def test_a_sharded_run_with_stderr_gone_or_full_runs_every_point(tmp_path, stderr):
    w = _stderr(stderr)
    try:
        p = _zlf(tmp_path, *SHARDED, stdout=subprocess.PIPE, stderr=w, text=True, timeout=600)
    finally:
        os.close(w)
    assert (tmp_path / "s").is_dir(), p.returncode
    statuses, status = _records(_only_dir(tmp_path / "s"))
    assert statuses == ["ok", "ok"] and status == "complete", (p.returncode, status, statuses)
    assert p.returncode == 0


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_sharded_run_stopped_with_stderr_closed_keeps_its_code(tmp_path, sig, code):
    gate, pidfile = tmp_path / "go", tmp_path / "worker.pid"
    proc = subprocess.Popen([PY, "-m", "zlf", "run", f"{OPS}::slow", *FAST, "--gpus", "0,1", "--out", "s"],
                            cwd=tmp_path, env=_env(tmp_path, ATK_GATE=str(gate), ATK_PID=str(pidfile)),
                            stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: os.close(2))
    try:
        _wait_file(pidfile, proc)
        time.sleep(0.3)
        if sig == signal.SIGINT:
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
    assert not alive(worker)
    assert rc == code, rc


# ----------------------------------------------------------------------------- in-process: closed fds, supervise
FD_CLOSED = """
import os, sys
from zlf.cli import main
saved = os.dup(2)
os.close(%d)                                     # the caller closed one of its standard descriptors
fds = sorted(os.listdir("/proc/self/fd"))
try:
    rc = main(["plugins"])
except BaseException as exc:
    rc = "RAISED " + repr(exc)
try:
    os.fstat(%d)
    state = "OPEN"
except OSError:
    state = "CLOSED"
os.write(saved, ("RC %%s FD %%s NEW %%s\\n" %% (rc, state, sorted(set(os.listdir("/proc/self/fd")) - set(fds)))).encode())
"""


@pytest.mark.parametrize("fd", [0, 1])
def test_in_process_main_gives_back_a_closed_standard_descriptor_closed(tmp_path, fd):
    p = _script(tmp_path, FD_CLOSED % (fd, fd))
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line and line[0].startswith("RC 0 "), p.stderr
    assert line[0].endswith("FD CLOSED NEW []"), line


SUPERVISED = """
import os, random, signal, sys
from zlf.cli import main

def mine(*a):
    pass

for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGCHLD, signal.SIGUSR1):
    signal.signal(sig, mine)
r, w = os.pipe(); os.set_blocking(w, False)
signal.set_wakeup_fd(w)
random.seed(11)
names = ["SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGCHLD", "SIGUSR1"]
def state():
    return ([signal.getsignal(getattr(signal, n)) for n in names], sorted(os.listdir("/proc/self/fd")),
            dict(os.environ), random.getstate(), signal.pthread_sigmask(signal.SIG_BLOCK, []))
before = state()
rc = main(%r, supervise=True)
wake = signal.set_wakeup_fd(-1)
after = state()
changed = [n for n, x, y in zip(names, before[0], after[0]) if x != y]
changed += [n for n, x, y in zip(["_", "fds", "environ", "random", "sigmask"], before, after) if n != "_" and x != y]
if wake != w:
    changed.append("wakeup_fd")
os.write(2, ("RC %%s CHANGED %%s\\n" %% (rc, changed)).encode())
"""


def test_in_process_supervised_run_gives_back_every_handler_and_descriptor(tmp_path):
    p = _script(tmp_path, SUPERVISED % (["run", f"{OPS}::fast", *FAST, "--out", "r"],))
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line == ["RC 0 CHANGED []"], p.stderr[-3000:]
    statuses, status = _records(_only_dir(tmp_path / "r"))
    assert statuses == ["ok", "ok"] and status == "complete"


# ----------------------------------------------------------------------------- stderr a closed terminal, stdout fine
@pytest.mark.parametrize("cmd", ["ab", "sharded_run", pytest.param("task", marks=pytest.mark.extensions("task"))])
def test_stderr_a_closed_terminal_costs_no_work(tmp_path, cmd):
    argv = {"ab": AB, "sharded_run": SHARDED,
            "task": ["task", TASK, "--candidate", TASK / "candidates" / "correct.py", "--out", "t"]}[cmd]
    w = _stderr("dead_terminal")
    try:
        p = _zlf(tmp_path, *argv, stdout=subprocess.PIPE, stderr=w, text=True, timeout=600, start_new_session=True)
    finally:
        os.close(w)
    out = tmp_path / {"ab": "o", "sharded_run": "s", "task": "t"}[cmd]
    found = sorted(str(f.relative_to(out)) for f in out.rglob("*")) if out.is_dir() else None
    assert p.returncode == 0, (p.returncode, found)
    run = _only_dir(out)
    if cmd == "ab":
        assert json.loads((run / "campaign.json").read_text())["status"] == "complete"
    else:
        assert _records(run)[1] == "complete"


# ----------------------------------------------------------------------------- in-process stop, sys.stderr gone
STOP_INPROC = """
import io, os, signal, sys, zlf
from zlf.cli import main
saved = os.dup(2)

class Stopper:
    @zlf.hookimpl
    def after_run(self, run, results):
        os.kill(os.getpid(), %s)                 # Ctrl-C / SIGTERM while the command ends

def mine(*a):
    pass

signal.signal(signal.SIGTERM, mine)
%s
theirs = sys.stderr
fds = len(os.listdir("/proc/self/fd"))
try:
    rc = main(["run", "%s::fast", "--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "0", "--out", "r"],
              extra_plugins=[("stopper", Stopper())])
except BaseException as exc:
    rc = "RAISED " + repr(exc)
os.write(saved, ("RC %%s SAME %%s HANDLER %%s LEAK %%d\\n" %% (
    rc, sys.stderr is theirs, signal.getsignal(signal.SIGTERM) is mine, len(os.listdir("/proc/self/fd")) - fds)).encode())
"""


@pytest.mark.parametrize("sig,code", [("signal.SIGTERM", 143), ("signal.SIGINT", 130)], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("how", ["none", "closed_file"])
def test_in_process_stop_with_sys_stderr_gone_keeps_code_stream_handler(tmp_path, sig, code, how):
    setup = {"none": "sys.stderr = None", "closed_file": "f = open('e.txt', 'w'); f.close(); sys.stderr = f"}[how]
    p = _script(tmp_path, STOP_INPROC % (sig, setup, OPS))
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RC ")]
    assert line == [f"RC {code} SAME True HANDLER True LEAK 0"], p.stderr[-3000:]
    statuses, _ = _records(_only_dir(tmp_path / "r"))
    assert statuses == ["ok", "ok"]


SLOW_CANDIDATE = '''
import time
import torch


def run_kernel(a, b, out, n):
    if n == 4096:  # the second case never ends (bounded)
        end = time.monotonic() + 300
        while time.monotonic() < end:
            time.sleep(0.05)
    torch.add(a, b, out=out)
'''


@pytest.mark.extensions("task")
@pytest.mark.parametrize("sig,code,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted"),
                                           (signal.SIGHUP, 143, "terminated")],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_task_stopped_with_stderr_closed_keeps_code_and_finished_cases(tmp_path, sig, code, word):
    cand = tmp_path / "slow.py"
    cand.write_text(SLOW_CANDIDATE)
    proc = subprocess.Popen([PY, "-m", "zlf", "task", str(TASK), "--candidate", str(cand), "--out", "t"],
                            cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=lambda: os.close(2), restore_signals=True)
    try:
        end = time.monotonic() + CEILING
        while True:
            assert proc.poll() is None, proc.returncode
            assert time.monotonic() < end
            runs = [d for d in (tmp_path / "t").glob("*") if d.is_dir()] if (tmp_path / "t").is_dir() else []
            res = runs[0] / "results.jsonl" if runs else None
            if res is not None and res.exists() and res.read_text().count("\n") >= 1:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        rc = proc.wait(timeout=CEILING)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    statuses, status = _records(_only_dir(tmp_path / "t"))
    assert statuses[:1] == ["ok"] and status == word, (rc, status, statuses)
    assert rc == code


# ----------------------------------------------------------------------------- SIGHUP (a closed terminal) beyond zlf run
def test_ab_hung_up_is_143_and_terminated(tmp_path):
    """README's exit table: 143 terminated (SIGTERM or SIGHUP: handled like Ctrl-C)."""
    rc, status, worker_alive = _ab_stopped(tmp_path, signal.SIGHUP)
    assert not worker_alive
    assert (rc, status) == (143, "terminated")


def test_a_sharded_run_hung_up_is_143(tmp_path):
    gate, pidfile = tmp_path / "go", tmp_path / "worker.pid"
    proc = subprocess.Popen([PY, "-m", "zlf", "run", f"{OPS}::slow", *FAST, "--gpus", "0,1", "--out", "s"],
                            cwd=tmp_path, env=_env(tmp_path, ATK_GATE=str(gate), ATK_PID=str(pidfile)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True, restore_signals=True)
    try:
        _wait_file(pidfile, proc)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGHUP)
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
    assert not alive(worker)
    assert rc == 143, rc


# ----------------------------------------------------------------------------- --help into a gone reader
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"]], ids=["version", "help", "run_help"])
def test_help_and_version_into_a_gone_reader_are_the_same_quiet_141(tmp_path, args):
    w = _dead_pipe()
    try:
        p = _zlf(tmp_path, *args, stdout=w, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(w)
    assert p.stderr == "" and p.returncode == 141, (p.returncode, p.stderr)


# ----------------------------------------------------------------------------- a plugin's EPIPE while stdout is gone too
PLUGIN_SOCKET = """
import os, socket, sys, zlf
from zlf.cli import main

class Dashboard:
    @zlf.hookimpl
    def after_run(self, run, results):
        a, b = socket.socketpair()
        b.close()
        a.sendall(b"results")                   # the plugin's own socket lost its peer: EPIPE, not stdout's

r, w = os.pipe(); os.close(r); os.dup2(w, 1); os.close(w)   # and stdout's reader is gone too (| head)
rc = main(%r, extra_plugins=[("dashboard", Dashboard())])
os.write(2, ("RC %%s\\n" %% rc).encode())
"""


def test_a_plugins_broken_socket_is_said_even_when_stdouts_reader_is_gone_too(tmp_path):
    p = _script(tmp_path, PLUGIN_SOCKET % (["run", f"{OPS}::fast", *FAST, "--out", "r"],))
    statuses, _ = _records(_only_dir(tmp_path / "r"))
    assert statuses == ["ok", "ok"]
    assert "zlf: error:" in p.stderr and "Broken pipe" in p.stderr, p.stderr
    assert "RC 141" not in p.stderr, p.stderr
