"""ATTACK atk50: the checker's /dev/shm view (MS_NOSYMFOLLOW), the spawn server's trait check,
in-process zlf.cli.main (random generators, BrokenPipeError), zlf ab --status's `verified` column.
Each risky case runs in its own process."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PY = sys.executable
DATA = Path(__file__).parent / "data" / "attack_atk48" / "campaign"


def _env(tmp_path, **more):
    from zlf.testing import clean_env

    e = clean_env({})
    e.pop("TRITON_INTERPRET", None)
    e["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    e.update(more)
    return e


def _script(tmp_path, body, timeout=240, **kw):
    f = tmp_path / "attack_script.py"
    f.write_text(textwrap.dedent(body))
    kw.setdefault("capture_output", True)
    return subprocess.run([PY, str(f)], text=True, env=_env(tmp_path), cwd=tmp_path, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


RUN = '["run", "add", "--backend", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--out", "r"]'

# ----------------------------------------------------------------------------- 3. in-process main()

CAPTURED = """
import contextlib, io, os, sys, zlf
from zlf.cli import main

class Dashboard:
    @zlf.hookimpl
    def after_run(self, run, results):
        raise BrokenPipeError(32, "Broken pipe")  # the plugin's own socket, not zlf's stdout

buf = io.StringIO()
try:
    with contextlib.redirect_stdout(buf):  # a caller capturing zlf's output (a notebook, a test's capsys)
        rc = main(%s, extra_plugins=[("dashboard", Dashboard())])
except BaseException as exc:
    os.write(2, b"RAISED %%r\\n" %% repr(exc).encode())
    rc = -1
os.write(1, b"AFTER rc=%%d\\n" %% rc)
""" % RUN


def test_plugin_broken_pipe_under_redirect_stdout_is_one_line_and_exit_1(tmp_path):
    r = _script(tmp_path, CAPTURED)
    assert "RAISED" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "AFTER rc=1" in r.stdout, (r.stdout, r.stderr)
    assert "zlf: error:" in r.stderr and "Broken pipe" in r.stderr


FILE_OUT = """
import os, sys, zlf
from zlf.cli import main

class Dashboard:
    @zlf.hookimpl
    def after_run(self, run, results):
        raise BrokenPipeError(32, "Broken pipe")

rc = main(%s, extra_plugins=[("dashboard", Dashboard())])
sys.stdout.flush()
os.write(1, b"AFTER rc=%%d\\n" %% rc)
""" % RUN


def test_plugin_broken_pipe_with_stdout_a_file_is_exit_1_and_keeps_the_file(tmp_path):
    out = tmp_path / "stdout.txt"
    with open(out, "w") as f:
        r = _script(tmp_path, FILE_OUT, capture_output=False, stdout=f, stderr=subprocess.PIPE)
    assert "Traceback" not in r.stderr, r.stderr
    assert "AFTER rc=1" in out.read_text(), (out.read_text(), r.stderr)
    assert "zlf: error:" in r.stderr


def _zlf_plugins_to_socket(tmp_path, how):
    a, b = socket.socketpair()
    try:
        if how == "closed":
            b.close()
        else:
            b.shutdown(socket.SHUT_RD)  # the reader says it reads no more
        proc = subprocess.Popen([PY, "-m", "zlf", "plugins"], cwd=tmp_path, env=_env(tmp_path), stdout=a.fileno(),
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        a.close()
        err = proc.stderr.read().decode()
        return proc.wait(timeout=300), err
    finally:
        a.close()
        b.close()


def test_stdout_a_socket_whose_reader_closed_ends_quietly_with_141(tmp_path):
    rc, err = _zlf_plugins_to_socket(tmp_path, "closed")
    assert rc == 141, err
    assert "Traceback" not in err and "error" not in err, err


def test_stdout_a_socket_whose_reader_stopped_reading_ends_quietly_with_141(tmp_path):
    rc, err = _zlf_plugins_to_socket(tmp_path, "shut_rd")
    assert rc == 141, err
    assert "Traceback" not in err and "error" not in err, err


def test_stdout_a_terminal_that_is_gone_is_no_traceback(tmp_path):
    import pty
    master, slave = pty.openpty()
    os.close(master)  # the terminal's window closed; not zlf's controlling terminal, so no SIGHUP
    try:
        proc = subprocess.Popen([PY, "-m", "zlf", "plugins"], cwd=tmp_path, env=_env(tmp_path), stdout=slave,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(slave)
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=300)
    assert "Traceback" not in err and rc == 141, (rc, err)  # quiet, as for any reader gone
    assert rc != 0 and len(err.strip().splitlines()) <= 1, (rc, err)


NUMPY_LATE = """
import sys
from zlf.cli import main
assert "numpy" not in sys.modules
rc = main(%s)
import numpy as np  # the caller's first use of numpy, after the command
print("RC", rc, "DRAW", repr(float(np.random.rand())))
""" % RUN


@pytest.mark.extensions("seed")
def test_numpy_first_imported_by_the_command_is_not_left_seeded(tmp_path):
    draws = []
    for _ in range(2):
        r = _script(tmp_path, NUMPY_LATE)
        assert "RC 0" in r.stdout, r.stdout + r.stderr
        draws.append(r.stdout.split("DRAW")[-1].strip())
    # a fresh numpy seeds itself from the OS: two processes drawing the same number means zlf's seed
    assert draws[0] != draws[1], draws


TORCH_LATE = """
import sys
if sys.argv[1] == "after":
    from zlf.cli import main
    assert "torch" not in sys.modules
    rc = main(%s)
    assert rc == 0, rc
import torch  # the caller's first use of torch
print("DRAW", repr(float(torch.rand(1))))
""" % RUN


@pytest.mark.extensions("seed")
def test_torch_first_imported_by_the_command_is_not_left_seeded(tmp_path):
    """torch imported (and seeded with zlf's seed) by the command, not by the caller: the caller's
    first draws were the same in every process. They are drawn from a seed from the system now, as
    torch's own import does since 2.x (older torch seeds a fixed default at import)."""
    draws = []
    for _ in range(2):
        f = tmp_path / "torch_late.py"
        f.write_text(TORCH_LATE)
        r = subprocess.run([PY, str(f), "after"], capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path,
                           timeout=240, stdin=subprocess.DEVNULL)
        assert "DRAW" in r.stdout, r.stdout + r.stderr
        draws.append(r.stdout.split("DRAW")[-1].strip())
    assert draws[0] != draws[1], draws


FAILING_RNG = """
import random, numpy as np, torch
from zlf.cli import main

def draw():
    return (random.random(), float(np.random.rand()), float(torch.rand(1)))

def seed():
    random.seed(11); np.random.seed(11); torch.manual_seed(11)

seed(); expected = draw()
seed()
rc = main(["run", "nosuchop", "--backend", "cpu", "--out", "r"])
print("RC", rc, "SAME" if draw() == expected else "CHANGED")
"""


@pytest.mark.extensions("seed")
def test_failing_command_gives_back_the_callers_random_state(tmp_path):
    r = _script(tmp_path, FAILING_RNG)
    assert "RC " in r.stdout and "RC 0" not in r.stdout, r.stdout + r.stderr
    assert "SAME" in r.stdout


# ----------------------------------------------------------------------------- 4. zlf ab --status
@pytest.fixture
def campaign(tmp_path, monkeypatch):
    from zlf.ab.campaign import Campaign, signing_key

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    path = tmp_path / "camp"
    shutil.copytree(DATA, path, symlinks=True)
    assert signing_key(create=True)
    c = Campaign.open(path)
    c.seal()
    c.save()
    return path


def _edit(path, change):
    doc = json.loads((path / "campaign.json").read_text())
    change(doc)
    (path / "campaign.json").write_text(json.dumps(doc, indent=2))


def _status(path, capsys, fmt):
    from zlf.ab.cli import status

    rc = status(str(path), fmt)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_status_csv_clean_then_forged(campaign, capsys):
    rc, out, err = _status(campaign, capsys, "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and rows and "NOT VERIFIED" not in err
    assert all(r["verified"] == "True" for r in rows), out
    _edit(campaign, lambda doc: doc["statistics"].update(alpha=0.5))
    rc, out, err = _status(campaign, capsys, "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all(r["verified"] == "False" for r in rows), out


def test_status_csv_of_a_campaign_with_forged_runs_says_false(campaign, capsys):
    def swap(doc):
        for run in doc["runs"]:
            run["dir"] = run["dir"].replace("_A", "_@").replace("_B", "_A").replace("_@", "_B")
    _edit(campaign, swap)
    rc, out, err = _status(campaign, capsys, "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all(r["verified"] == "False" for r in rows), out


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_status_machine_output_of_a_forged_campaign_without_runs_says_false(campaign, capsys, fmt):
    _edit(campaign, lambda doc: doc.update(runs=[]))
    rc, out, err = _status(campaign, capsys, fmt)
    assert "NOT VERIFIED" in err
    assert "false" in out.lower(), out


@pytest.mark.xfail(strict=True, reason="ATTACK: a forged campaign whose table is empty (ops and runs emptied) prints "
                   "[] / a bare header in json/csv: nothing a machine reads says it is not verified")
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_status_machine_output_of_a_forged_empty_table_says_not_verified(campaign, capsys, fmt):
    _edit(campaign, lambda doc: doc.update(runs=[], ops=[]))
    rc, out, err = _status(campaign, capsys, fmt)
    assert "NOT VERIFIED" in err
    assert "false" in out.lower(), out  # somewhere in what a machine reads: verified false


# ----------------------------------------------------------------------------- 1. the checker's /dev/shm view
def _no_bwrap():
    try:
        from zlf_taskpkg import sandbox
    except ImportError as exc:
        return str(exc)
    return sandbox.bwrap_problem()


NO_BWRAP = _no_bwrap()


def needs_bwrap(test):
    test = pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")(test)
    return pytest.mark.extensions("task")(test)


@pytest.fixture
def place(tmp_path):
    from zlf_taskpkg import sandbox
    p = sandbox.Place(tmp_path / "out")
    yield p
    p.remove()


HEAD = "from zlf_taskpkg.sandbox import follow_no_links\nwhy = follow_no_links()\nassert why is None, why\n"


def _view(place, code, **kw):
    from zlf_taskpkg import sandbox
    return sandbox.shm_view_command([PY, "-c", HEAD + code], place)


def _flags(line_of_mountinfo):
    return set(line_of_mountinfo.split()[5].split(","))


@needs_bwrap
def test_view_remount_keeps_the_mounts_other_flags(place):
    code = ("import os\n"
            "line = [l for l in open('/proc/self/mountinfo') if l.split()[4] == '/dev/shm'][-1]\n"
            "print(line.split()[5])\n")
    before = subprocess.run(_view(place, "")[:-2] + ["-c", code], capture_output=True, text=True, timeout=120)
    after = subprocess.run(_view(place, code), capture_output=True, text=True, timeout=120)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    b, a = set(before.stdout.strip().split(",")), set(after.stdout.strip().split(","))
    assert "nosymfollow" in a and a - {"nosymfollow"} == b, (b, a)


@needs_bwrap
@pytest.mark.xfail(strict=True, reason="ATTACK: a FIFO the candidate plants under a name the checker opens for "
                   "writing in its /dev/shm blocks the checker for good: MS_NOSYMFOLLOW stops links only")
def test_view_a_planted_fifo_does_not_hang_the_checker(place):
    os.mkfifo(place.shm / "cuda.shm.planted")  # the candidate: mkfifo /dev/shm/cuda.shm.planted
    code = ("try:\n    open('/dev/shm/cuda.shm.planted', 'w').write('export')\n"
            "except OSError as exc:\n    print('refused', exc.errno)\nprint('went on')\n")
    try:
        done = subprocess.run(_view(place, code), capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the checker blocked opening the candidate's FIFO")
    assert "went on" in done.stdout, done.stderr


@needs_bwrap
@pytest.mark.xfail(strict=True, reason="ATTACK: the candidate truncates the file the checker exported and mapped "
                   "in the shared /dev/shm: the trusted checker dies of SIGBUS")
def test_view_candidate_truncating_the_checkers_export_does_not_kill_the_checker(place):
    code = ("import mmap, os, sys\n"
            "fd = os.open('/dev/shm/cuda.shm.export', os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)\n"
            "os.ftruncate(fd, 65536)\nm = mmap.mmap(fd, 65536)\nm[:] = b'\\1' * 65536\n"
            "print('ready', flush=True)\nsys.stdin.readline()\nprint('sum', sum(m[:4096]), flush=True)\n")
    proc = subprocess.Popen(_view(place, code), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.truncate(place.shm / "cuda.shm.export", 0)  # the candidate, on its /dev/shm/cuda.shm.export
        out, err = proc.communicate("\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "sum 4096" in out, (proc.returncode, out, err)


@needs_bwrap
def test_view_a_planted_hard_link_to_an_outside_file_cannot_be_made(place, tmp_path):
    """The candidate sees the pair's directory as its own bind mount: a hard link to a file of
    another mount (its out or scratch folder) is refused by link(2) with EXDEV there. Here, from
    the judge's side, the same holds for the checker's view: /dev/shm is its own mount."""
    victim = tmp_path / "out" / "verdict.json"
    victim.write_text("judge's")
    code = (f"import os, errno\ntry:\n    os.link({str(victim)!r}, '/dev/shm/cuda.shm.hl')\n"
            "except OSError as exc:\n    print('refused', exc.errno)\n")
    done = subprocess.run(_view(place, code), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused" in done.stdout, done.stdout


SYSPY = "/usr/bin/python3.11"
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


def _as_nobody(tmp_path, code):
    import tempfile
    top = Path(tempfile.mkdtemp(prefix="atk50-nobody-"))  # pytest's own tmp is root's alone (0700)
    try:
        return _as_nobody_in(top, tmp_path, code)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _as_nobody_in(top, tmp_path, code):
    os.chmod(top, 0o755)
    world = top / "world"
    world.mkdir()
    os.chmod(world, 0o777)
    # nobody may reach neither the interpreter nor the checkout (both can lie under /root, 0700):
    # the system's Python 3.11 with copies of zlf, zlf_taskpkg and their pure-Python dependencies
    import importlib
    deps = top / "deps"
    for name in ("zlf", "zlf_taskpkg", "pluggy", "attr", "attrs", "yaml", "tabulate"):
        shutil.copytree(Path(importlib.import_module(name).__file__).parent, deps / name,
                        ignore=shutil.ignore_patterns("__pycache__", "tests"))
    for d, _, files in os.walk(top):
        os.chmod(d, 0o755 if d != str(world) else 0o777)
        for name in files:
            os.chmod(os.path.join(d, name), 0o644)
    f = world / "probe.py"
    f.write_text(textwrap.dedent(code))
    os.chmod(f, 0o644)
    env = _env(tmp_path, HOME=str(world), XDG_CONFIG_HOME=str(world / "cfg"), PYTHONPATH=str(deps))
    return subprocess.run(NOBODY + [SYSPY, str(f), str(world)], capture_output=True, text=True, timeout=120,
                          env=env, cwd=world, stdin=subprocess.DEVNULL)


NOBODY_VIEW = """
import os, sys, subprocess
from pathlib import Path
from zlf_taskpkg import sandbox
place = sandbox.Place(Path(sys.argv[1]) / "out")
victim = Path(sys.argv[1]) / "out" / "verdict.json"
victim.write_text("judge's")
os.symlink(victim, place.shm / "cuda.shm.planted")
code = '''
from zlf_taskpkg.sandbox import follow_no_links
why = follow_no_links()
print("WHY", why)
try:
    open("/dev/shm/cuda.shm.planted", "w").write("candidate was here")
except OSError as exc:
    print("refused", exc.errno)
cap = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
print("CAPEFF", cap, "UID", os.getuid())
'''
argv = sandbox.shm_view_command([sys.executable, "-c", "import os\\n" + code], place)
done = subprocess.run(argv, capture_output=True, text=True, timeout=100)
print(done.stdout, done.stderr, "RC", done.returncode)
print("VICTIM", victim.read_text())
place.remove()
"""


@needs_bwrap
def test_view_as_nobody_follows_no_links(tmp_path):
    r = _as_nobody(tmp_path, NOBODY_VIEW)
    assert "RC 0" in r.stdout, r.stdout + r.stderr
    assert "WHY None" in r.stdout and "refused" in r.stdout, r.stdout
    assert "VICTIM judge's" in r.stdout and "UID 65534" in r.stdout, r.stdout


@needs_bwrap
def test_view_as_nobody_keeps_no_capability_after_the_remount(tmp_path):
    r = _as_nobody(tmp_path, NOBODY_VIEW)
    assert "RC 0" in r.stdout, r.stdout + r.stderr
    cap = r.stdout.split("CAPEFF")[1].split()[0]
    assert int(cap, 16) == 0, r.stdout


@needs_bwrap
def test_checker_that_cannot_remount_fails_closed_with_70_and_one_line(place, tmp_path):
    """A checker told it runs in the view (ZLF_TASK_SHM_VIEW) whose remount is refused (here a
    mount namespace without CAP_SYS_ADMIN) must refuse (70) in one clear line, never run with a
    /dev/shm that follows links."""
    from zlf_taskpkg import sandbox
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    r, w = os.pipe()
    argv = [sandbox.find_bwrap(), "--die-with-parent", "--cap-drop", "ALL", "--dev-bind", "/", "/",
            "--bind", str(place.shm), "/dev/shm", "--", PY, "-m", "zlf_taskpkg.checker", str(spec), str(r), str(w)]
    try:
        done = subprocess.run(argv, env={**os.environ, sandbox.SHM_VIEW_ENV: "1"}, pass_fds=(r, w),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        os.close(r)
        os.close(w)
    assert done.returncode == 70, (done.returncode, done.stderr)
    err = done.stderr
    assert err.count("\n") == 1 and err.startswith("zlf task: the checker will not share"), err


NOBODY_PLAIN = """
from zlf_taskpkg.sandbox import follow_no_links
print("WHY", repr(follow_no_links()))
"""


@pytest.mark.extensions("task")
def test_follow_no_links_as_nobody_without_a_namespace_says_why(tmp_path):
    r = _as_nobody(tmp_path, NOBODY_PLAIN)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "WHY 'mount(2) refused" in r.stdout, r.stdout


# ----------------------------------------------------------------------------- 2. the spawn server's traits
SPAWN_PROBE = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("pid", os.getpid(), flush=True)
sig = ctypes.c_int(-1)
libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
print("pdeathsig", sig.value, flush=True)
print("thp", libc.prctl(42, 0, 0, 0, 0), flush=True)  # PR_GET_THP_DISABLE
print("securebits", libc.prctl(27, 0, 0, 0, 0), flush=True)  # PR_GET_SECUREBITS
print("coredump", open("/proc/self/coredump_filter").read().strip(), flush=True)
print("cgroup", "|".join(l.strip() for l in open("/proc/self/cgroup") if ":pids:" in l), flush=True)
'''
LINUX = sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(sys, "orig_argv")
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _lines(text):
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in text.splitlines() if " " in line}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not LINUX:
        pytest.skip("the spawn server is Linux, Python 3.10+")
    from zlf_devsession import start_spawn_server, stop_spawn_server
    from zlf.testing import pythonpath
    folder = tmp_path_factory.mktemp("spawn50")
    (folder / "probe50.py").write_text(SPAWN_PROBE)
    (folder / "lib").mkdir()
    base = {**os.environ, **pythonpath(folder / "lib"), "PYTHONPYCACHEPREFIX": str(folder / "pycache")}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    with open(folder / "server.log", "w") as log:
        proc, env = start_spawn_server(folder, base, log)
    assert env is not None, (folder / "server.log").read_text()
    yield {**base, **env}, folder
    stop_spawn_server(proc)


def _spawn(server, preexec_fn=None):
    env, folder = server
    proc = subprocess.Popen([PY, "-m", "probe50"], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=preexec_fn)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    seen = _lines(out)
    seen["forked"] = int(seen["pid"]) != proc.pid
    return seen


def _prctl(*args):
    import ctypes
    assert ctypes.CDLL(None, use_errno=True).prctl(*(list(args) + [0] * (5 - len(args)))) == 0


def test_spawn_control_a_plain_stand_in_is_forked(server):
    seen = _spawn(server)
    assert seen["forked"], seen


def test_spawn_parent_death_signal_is_the_callers(server):
    seen = _spawn(server, preexec_fn=lambda: _prctl(1, 9))  # PR_SET_PDEATHSIG, SIGKILL (kept across exec)
    assert seen["pdeathsig"] == "9" or not seen["forked"], seen


def test_spawn_thp_disable_is_the_callers(server):
    seen = _spawn(server, preexec_fn=lambda: _prctl(41, 1))  # PR_SET_THP_DISABLE
    assert seen["thp"] == "1" or not seen["forked"], seen


@pytest.mark.skipif(not ROOT, reason="setting securebits needs CAP_SETPCAP")
def test_spawn_securebits_are_the_callers(server):
    seen = _spawn(server, preexec_fn=lambda: _prctl(28, 0x4))  # PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP
    assert seen["securebits"] == "4" or not seen["forked"], seen


def _coredump_none():
    with open("/proc/self/coredump_filter", "w") as f:
        f.write("0x0")


def test_spawn_coredump_filter_is_the_callers(server):
    seen = _spawn(server, preexec_fn=_coredump_none)
    assert int(seen["coredump"], 16) == 0 or not seen["forked"], seen


PIDS = Path("/sys/fs/cgroup/pids")


@pytest.mark.skipif(not (ROOT and PIDS.is_dir() and os.access(PIDS, os.W_OK)), reason="no writable pids cgroup")
def test_spawn_cgroup_membership_is_the_callers(server):
    group = PIDS / f"atk50-{os.getpid()}"
    group.mkdir()
    try:
        (group / "pids.max").write_text("64")

        def join():
            (group / "cgroup.procs").write_text(str(os.getpid()))
        seen = _spawn(server, preexec_fn=join)
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                import time
                time.sleep(0.1)
    assert group.name in seen["cgroup"] or not seen["forked"], seen
