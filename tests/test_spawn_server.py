"""The test sessions' spawn server (tests/_devtools/zlf_spawn_server.py with its stand-in,
zlf_spawn_client.py beside it):
a process it forks must look to its caller like the process the caller started."""
from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from process_tools import gone_within

from zlf.testing import pythonpath
from zlf_devsession import HERE as DEVTOOLS, SPAWN_ENV, socket_folder, start_spawn_server, stop_spawn_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open")
                                or not hasattr(sys, "orig_argv"), reason="the spawn server is Linux, Python 3.10+")

PROBE = r'''
import os, resource, signal, sys, time
print("pid", os.getpid(), flush=True)
print("argv", sys.argv[1:], "main", __name__, flush=True)
print("cwd", os.getcwd(), "var", os.environ.get("PROBE_VAR"), "umask", oct(os.umask(0)), flush=True)
print("fsize", resource.getrlimit(resource.RLIMIT_FSIZE)[0], "path0", sys.path[0], flush=True)
print("sigint", "ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "handled", flush=True)
import gc
print("frozen", gc.get_freeze_count(), "collecting", gc.isenabled(), flush=True)
mode = sys.argv[1]
if mode == "io":
    print("stdin", sys.stdin.readline().strip(), flush=True)
    os.write(int(sys.argv[2]), b"on the extra descriptor")
    print("to stderr", file=sys.stderr)
    sys.exit(3)
if mode == "wait":
    # short sleeps: time.sleep looks for a signal only once a signal interrupts it, so one that
    # lands between the last check and the start of a long sleep would wait for its end
    for _ in range(1200):
        time.sleep(0.05)
if mode == "interrupt":
    raise KeyboardInterrupt
if mode == "deathsig":  # its parent-death signal; with "wait", then stdin's end (or its death)
    import ctypes
    found = ctypes.c_int(-1)
    ctypes.CDLL(None).prctl(2, ctypes.byref(found), 0, 0, 0)  # PR_GET_PDEATHSIG
    print("deathsig", found.value, flush=True)
    if sys.argv[2:] == ["wait"]:
        sys.stdin.read()
if mode == "hangup":  # a handler of its own for a SIGHUP it started with ignored, as zlf run's parent has
    signal.signal(signal.SIGHUP, lambda signum, frame: sys.exit(5))
    print("ready", flush=True)
    for _ in range(1200):
        time.sleep(0.05)
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of this module's own (not the session's), and the environment of its stand-ins."""
    folder = tmp_path_factory.mktemp("spawn")
    (folder / "probe_mod.py").write_text(PROBE)
    (folder / "lib").mkdir()  # a folder on the server's path besides its own
    base = {**os.environ, **pythonpath(folder / "lib"), "PYTHONPYCACHEPREFIX": str(folder / "pycache")}
    base.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode kept under a prefix, as a session keeps it
    with open(folder / "server.log", "w") as log:
        proc, env = start_spawn_server(folder, base, log)
    assert env is not None, (folder / "server.log").read_text()
    # the server listens before it imports: a stand-in that asks meanwhile waits, and is forked
    # from the server as it is once its imports are done
    early = probe({**base, **env}, folder, "early")
    out, err = early.communicate(timeout=120)
    seen = lines(out)
    assert early.returncode == 0 and int(seen["pid"]) != early.pid, out + err
    assert int(seen["frozen"].split()[0]) > 100_000
    yield {**base, **env, "PROBE_VAR": "v"}, folder
    stop_spawn_server(proc)


def probe(env, folder, *args, preexec_fn=None, **kw):
    def preexec():
        # SIGINT as a terminal gives it: a session run in the background (nohup, `cmd &`) ignores
        # it, and a child inherits that
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if preexec_fn:
            preexec_fn()

    return subprocess.Popen([sys.executable, "-m", "probe_mod", *args], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec, **kw)


def lines(text: str) -> dict:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in text.splitlines() if " " in line}


def test_a_forked_child_has_its_callers_arguments_directory_environment_descriptors_and_exit(server, tmp_path):
    env, folder = server
    r, w = os.pipe()
    old = os.umask(0o027)
    try:
        proc = probe(env, folder, "io", str(w), stdin=subprocess.PIPE, pass_fds=(w,),
                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (10 ** 6, 10 ** 6)))
    finally:
        os.umask(old)
    os.close(w)
    out, err = proc.communicate("hello\n", timeout=60)
    seen = lines(out)
    assert int(seen["pid"]) != proc.pid  # forked by the server: the caller's process is its stand-in
    assert proc.returncode == 3 and err == "to stderr\n"
    assert seen["argv"] == f"['io', '{w}'] main __main__" and seen["stdin"] == "hello"
    assert seen["cwd"] == f"{folder} var v umask 0o27"
    assert seen["fsize"] == f"1000000 path0 {folder}" and seen["sigint"] == "handled"
    # the server's objects are frozen: the child's collector, still on, never walks them
    assert int(seen["frozen"].split()[0]) > 100_000 and seen["frozen"].endswith("collecting True")
    assert os.read(r, 100) == b"on the extra descriptor"
    os.close(r)


def test_signals_reach_the_child_and_the_stand_in_ends_as_it_does(server):
    env, folder = server
    for sig, session in ((signal.SIGTERM, False), (signal.SIGINT, True)):
        proc = probe(env, folder, "wait", start_new_session=session)
        pid = int(proc.stdout.readline().split()[1])
        assert pid != proc.pid
        for _ in range(5):
            proc.stdout.readline()
        (os.killpg if session else os.kill)(proc.pid, sig)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:  # seen once under load: say where each process stands
            stuck = _where(proc.pid, "stand-in") + _where(pid, "child") + (folder / "server.log").read_text()[-2000:]
            for each in (proc.pid, pid):
                with contextlib.suppress(OSError):
                    os.kill(each, signal.SIGKILL)
            pytest.fail(f"{sig.name}: the stand-in did not end within 30 s\n{stuck}")
        assert code == -sig
        assert gone_within(pid)


def _where(pid: int, who: str) -> str:
    """A process's state, signal masks and wait channel, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as exc:
        return f"{who} {pid}: {exc}\n"
    fields = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    keep = [line for line in status if line.split(":")[0] in fields]
    return f"{who} {pid}: wchan {wchan}; " + "; ".join(" ".join(line.split()) for line in keep) + "\n"


LATE_HANDLER = r'''
import json, os, signal, socket, sys, threading, time
import zlf_spawn_client as client

theirs, ours = socket.socketpair()
# the signal's handler plays the forward: the server then says how the child ended
signal.signal(signal.SIGUSR1, lambda signum, frame: ours.sendall(json.dumps({"signal": signum}).encode() + b"\n"))
waiting = threading.Event()


def send():
    waiting.wait()
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGUSR1)


threading.Thread(target=send, daemon=True).start()
waiting.set()
# the main thread keeps SIGUSR1 blocked: the other thread takes it, so the handler is due while
# the wait's system call goes on uninterrupted, as when a signal lands just before it begins
print(client._wait_for_end(theirs, bytearray(), {signal.SIGUSR1}), flush=True)
'''


def test_a_signal_whose_handler_is_due_before_the_stand_in_waits_still_ends_the_wait():
    """Python runs a signal's handler between bytecodes, after the signal interrupted a system
    call or at the interpreter's next check; a signal that lands just before the stand-in's wait
    begins must still be passed on. (One of the two places, with the probe's long sleep, where
    the SIGINT case above could wait out its 30 s under load.)"""
    env = {k: v for k, v in os.environ.items() if k != SPAWN_ENV}
    env.update(pythonpath(DEVTOOLS, env=env))
    proc = subprocess.run([sys.executable, "-c", LATE_HANDLER], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.strip() == f"{{'signal': {int(signal.SIGUSR1)}}}", proc.stderr


ORPHANING_PARENT = r'''
import subprocess, sys
server = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
assert server.stdout.readline().strip() == b"listening"
print(server.pid, flush=True)  # and exits while the server imports
'''


def test_a_server_whose_parent_dies_while_it_imports_stops(tmp_path):
    """The server serves until its parent exits. A parent gone while the server still imported
    (a session stopped at once) left it serving for good: it took the process that adopted it
    for its parent."""
    env = {k: v for k, v in os.environ.items() if k != SPAWN_ENV}
    folder = socket_folder(tmp_path)  # a short one where a long TMPDIR passes AF_UNIX's limit
    try:
        proc = subprocess.run([sys.executable, "-c", ORPHANING_PARENT, str(DEVTOOLS / "zlf_spawn_server.py"),
                               str(folder / "socket")], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert gone_within(int(proc.stdout), 120)
    finally:
        if folder != tmp_path:
            shutil.rmtree(folder, ignore_errors=True)


def test_an_uncaught_keyboard_interrupt_ends_in_sigint_with_its_traceback(server):
    env, folder = server
    proc = probe(env, folder, "interrupt")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT and err.rstrip().endswith("KeyboardInterrupt")
    assert "zlf_spawn_server" not in err  # the traceback starts where Python's would


def test_a_killed_stand_in_takes_its_child_with_it(server):
    env, folder = server
    proc = probe(env, folder, "wait")
    pid = int(proc.stdout.readline().split()[1])
    proc.kill()
    proc.wait(10)
    assert gone_within(pid)


def _set_death_signal(signum: int):
    return lambda: ctypes.CDLL(None).prctl(1, int(signum), 0, 0, 0)  # PR_SET_PDEATHSIG


@pytest.mark.parametrize("signum", [0, signal.SIGKILL, signal.SIGTERM])
def test_a_caller_with_a_parent_death_signal_or_none_is_forked_and_the_child_has_it(server, signum):
    """zlf starts its workers with a parent-death signal (``die_with_parent``), and the session
    starts the server with one: fork clears the server's, so the child takes the caller's instead
    of being refused (which would start all of zlf's workers plainly) or left with none."""
    env, folder = server
    proc = probe(env, folder, "deathsig", preexec_fn=_set_death_signal(signum) if signum else None)
    out, err = proc.communicate(timeout=120)
    seen = lines(out)
    assert proc.returncode == 0 and int(seen["pid"]) != proc.pid, out + err
    assert seen["deathsig"] == str(int(signum))


def test_a_child_whose_caller_set_a_parent_death_signal_dies_with_the_server(tmp_path):
    """The child's parent is the server: the signal its caller asked for comes when the server
    dies (the stand-in, told by the closed socket, exits with 70)."""
    (tmp_path / "probe_mod.py").write_text(PROBE)
    base = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
    with open(tmp_path / "server.log", "w") as log:
        server, env = start_spawn_server(tmp_path, base, log)
    assert env is not None, (tmp_path / "server.log").read_text()
    proc = probe({**base, **env}, tmp_path, "deathsig", "wait", stdin=subprocess.PIPE,
                 preexec_fn=_set_death_signal(signal.SIGKILL))
    try:
        pid = int(proc.stdout.readline().split()[1])
        while not proc.stdout.readline().startswith("deathsig"):
            pass
        assert pid != proc.pid
        server.kill()
        server.wait()
        assert proc.wait(60) == 70
        assert gone_within(pid)  # it would wait for its stdin's end for good
    finally:
        stop_spawn_server(server)
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()


def test_a_signal_the_stand_in_ignores_reaches_a_child_that_handles_it(server):
    """A session started with SIGHUP ignored (``nohup``, a detached job) gives its processes that
    disposition, and the child takes it over; a program may still install a handler of its own
    (``zlf run`` stops on SIGHUP). The stand-in ignored the signal too, so it never reached the
    child: test_sighup_to_zlf_run_stops_it_as_terminated waited out its ceiling in every session
    started that way. The stand-in passes every signal on; the child does what it would do."""
    env, folder = server
    proc = probe(env, folder, "hangup", preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    pid = int(proc.stdout.readline().split()[1])
    assert pid != proc.pid
    while proc.stdout.readline().strip() != "ready":
        pass
    os.kill(proc.pid, signal.SIGHUP)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        stuck = _where(proc.pid, "stand-in") + _where(pid, "child")
        for each in (proc.pid, pid):
            with contextlib.suppress(OSError):
                os.kill(each, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the SIGHUP did not reach the child within 30 s\n{stuck}")
    assert code == 5


def test_an_ignored_sigint_stays_ignored_in_the_child(server):
    env, folder = server
    proc = probe(env, folder, "none", preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    out, _ = proc.communicate(timeout=60)
    assert lines(out)["sigint"] == "ignored" and int(lines(out)["pid"]) != proc.pid


@pytest.mark.parametrize("change", [{"OMP_NUM_THREADS": "3"}, {"PYTHONHASHSEED": "7"}, {SPAWN_ENV: ""},
                                    {SPAWN_ENV: "/nonexistent/socket"}],
                         ids=["import-time variable", "python variable", "off", "no server"])
def test_what_the_server_would_not_run_the_same_way_starts_plainly(server, change):
    """A variable read when torch is imported (OpenMP's thread count): a child forked from the
    server would not see it, so the process starts on its own."""
    env, folder = server
    proc = probe({**env, **change}, folder, "none")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and int(lines(out)["pid"]) == proc.pid


def _bwrap_problem():
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not installed"
    done = subprocess.run([bwrap, "--dev-bind", "/", "/", "true"], capture_output=True, text=True, timeout=60)
    return None if done.returncode == 0 else f"bwrap cannot run here: {done.stderr.strip()[:200]}"


def test_a_stand_in_in_a_mount_namespace_of_its_own_starts_plainly_inside_it(server, tmp_path):
    """A sandbox (bwrap) starts ``python -m`` in a mount namespace of its own: a child forked from
    the server would run outside it. zlf task's checker, so forked, exported its CUDA IPC handles
    into the machine's /dev/shm instead of the pair's, and every sandboxed case failed on the GPU.
    The process starts on its own, inside the namespace."""
    why = _bwrap_problem()
    if why:
        pytest.skip(why)
    env, folder = server
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "only_in_the_namespace").write_text("")
    code = "import os; print('shm', sorted(os.listdir('/dev/shm')), flush=True)"
    (folder / "probe_shm.py").write_text(PROBE.replace('mode = sys.argv[1]', code + "\nmode = sys.argv[1]"))
    proc = subprocess.Popen([shutil.which("bwrap"), "--dev-bind", "/", "/", "--bind", str(shm), "/dev/shm", "--",
                             sys.executable, "-m", "probe_shm", "none"], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    seen = lines(out)
    assert proc.returncode == 0, out + err
    assert seen["shm"] == "['only_in_the_namespace']" and seen["frozen"].startswith("0 "), out


SHADOW = "import yaml; print('yaml', yaml.__file__, flush=True)\n"


@pytest.mark.parametrize("where", ["PYTHONPATH", "working directory"])
def test_a_folder_that_would_shadow_a_preloaded_module_starts_plainly(server, tmp_path, where):
    """A ``yaml.py`` where a fresh process finds it before the real one (a folder on PYTHONPATH, or
    the working directory that -m puts first): the child, which has yaml imported already, would
    run with the other one. The process starts on its own and imports the ``yaml.py``."""
    env, folder = server
    (tmp_path / "yaml.py").write_text("")
    if where == "working directory":  # the path is the server's own
        (folder / "lib" / "probe_shadow.py").write_text(SHADOW)
        cwd = tmp_path
    else:
        (tmp_path / "probe_shadow.py").write_text(SHADOW)
        env, cwd = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])}, folder
    proc = subprocess.Popen([sys.executable, "-m", "probe_shadow"], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert lines(out)["yaml"] == str(tmp_path / "yaml.py")


def test_added_folders_that_shadow_nothing_are_served_with_the_callers_path(server, tmp_path):
    """PYTHONPATH with folders of the caller's (as a test installing an extension into a folder
    sets): forked, and modules there import in the child."""
    env, folder = server
    (tmp_path / "probe_extra.py").write_text(PROBE)
    (tmp_path / "data").mkdir()  # a folder named like no module the server has
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), env["PYTHONPATH"], str(tmp_path / "missing")])}
    proc = subprocess.Popen([sys.executable, "-m", "probe_extra", "none"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert int(lines(out)["pid"]) != proc.pid and lines(out)["fsize"].endswith(f"path0 {tmp_path}")


def test_an_added_zip_archive_starts_plainly(server, tmp_path):
    """A zip archive on PYTHONPATH: its contents are not listed as a folder's are, so whether it
    shadows a preloaded module is not known; the process starts on its own (and imports from it)."""
    import zipfile

    env, folder = server
    with zipfile.ZipFile(tmp_path / "mods.zip", "w") as archive:
        archive.writestr("probe_zip.py", PROBE)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods.zip"), env["PYTHONPATH"]])}
    proc = subprocess.Popen([sys.executable, "-m", "probe_zip", "none"], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert int(lines(out)["pid"]) == proc.pid


def test_a_path_without_one_of_the_servers_folders_starts_plainly(server):
    """The server's ``lib`` folder left out: a fresh process would not find what is there."""
    env, folder = server
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if p != str(folder / "lib"))}
    proc = probe(env, folder, "none")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and int(lines(out)["pid"]) == proc.pid


BYTECODE_PROBE = r'''
import importlib, os, sys
print("pid", os.getpid(), "writes", not sys.dont_write_bytecode, flush=True)
leaf = importlib.import_module(sys.argv[1])  # a module no process imported before
print("cached", os.path.exists(importlib.util.cache_from_source(leaf.__file__)), flush=True)
import resource
print("fsize", resource.getrlimit(resource.RLIMIT_FSIZE)[0], flush=True)
'''


def test_a_child_that_writes_no_bytecode_is_forked_and_writes_none(server):
    """A process under a file-size limit gets ``PYTHONDONTWRITEBYTECODE`` from zlf (a truncated
    bytecode file would break every later import): forked all the same, it writes no bytecode
    for what it imports, and keeps the limit. Without the variable, it writes it."""
    import resource as _resource

    env, folder = server
    (folder / "probe_bytecode.py").write_text(BYTECODE_PROBE)
    seen = {}
    for name, extra in (("quiet", {"PYTHONDONTWRITEBYTECODE": "1"}), ("writing", {})):
        (folder / "lib" / f"leaf_{name}.py").write_text("X = 1\n")
        proc = subprocess.Popen([sys.executable, "-m", "probe_bytecode", f"leaf_{name}"], cwd=folder,
                                env={**env, **extra}, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=lambda: _resource.setrlimit(_resource.RLIMIT_FSIZE, (10 ** 7, 10 ** 7)))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        seen[name] = lines(out)
        assert int(seen[name]["pid"].split()[0]) != proc.pid and seen[name]["fsize"] == str(10 ** 7)  # forked
    assert seen["quiet"]["pid"].endswith("writes False") and seen["quiet"]["cached"] == "False"
    assert seen["writing"]["pid"].endswith("writes True") and seen["writing"]["cached"] == "True"


def test_a_test_asking_for_plain_processes_gets_them(zlf_plain_processes):
    assert os.environ[SPAWN_ENV] == ""


def test_a_request_that_is_not_a_stand_ins_leaves_the_server_serving(server):
    import socket

    env, folder = server
    for junk in (b"not json\n", b'{"argv": 3}\n', b"[]\n", b""):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(env[SPAWN_ENV])
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            try:
                assert sock.recv(100) == b""  # closed, no reply
            except ConnectionResetError:
                pass
    proc = probe(env, folder, "none")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and int(lines(out)["pid"]) != proc.pid


TRITON_PROBE = r'''
import os, sys, importlib.util
imported = []
sys.addaudithook(lambda event, args: imported.append(args[0]) if event == "import" and str(args[0]).startswith("triton.") else None)
found = importlib.util.find_spec("triton")  # finds it, imports nothing, decides nothing
print("found", found is not None, "imported", "triton" in sys.modules, flush=True)
if sys.argv[1] == "interpret":
    os.environ["TRITON_INTERPRET"] = "1"  # after the find, before the import (as the cpu backend sets it)
import torch
import triton
import triton.language as tl
print("pid", os.getpid(), flush=True)
print("flavour", type(tl.standard.sum).__name__, "spec", triton.__spec__.origin == triton.__file__, flush=True)
print("native", triton._C.libtriton is sys.modules["triton._C.libtriton"], flush=True)
print("imports", len(imported), flush=True)


@triton.jit
def row_sum(x_ptr, out_ptr, N: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, N)), axis=0))


if sys.argv[1] == "interpret":
    x, out = torch.arange(8, dtype=torch.float32), torch.zeros(1)
    row_sum[(1,)](x, out, N=8)
    print("result", out.item(), flush=True)
else:  # compiled for a GPU target on this machine, stdlib's tl.sum inlined
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    kernel = triton.compile(ASTSource(row_sum, {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"}, {"N": 8}),
                            target=GPUTarget("cuda", 90, 32))
    print("result", "tt.reduce" in kernel.asm["ttir"], flush=True)
'''


@pytest.mark.parametrize("flavour", ["interpret", "compile"])
def test_a_child_gets_the_triton_its_environment_asks_for_when_it_imports_it(server, flavour):
    """The server imports Triton twice (``@triton.jit``, Triton's own functions among them, reads
    TRITON_INTERPRET as it decorates); a child that sets the variable after finding triton and
    before importing it (as the cpu backend does) gets interpreted functions, one without gets
    compiled ones, both imported by the server (no module of Triton's imported again), both
    working. The same probe started plainly imports Triton's modules itself."""
    pytest.importorskip("triton")
    env, folder = server
    (folder / "probe_triton.py").write_text(TRITON_PROBE)
    env = {k: v for k, v in env.items() if k != "TRITON_INTERPRET"}
    runs = {}
    for how, extra in (("forked", {}), ("plain", {SPAWN_ENV: ""})):
        proc = subprocess.Popen([sys.executable, "-m", "probe_triton", flavour], cwd=folder, env={**env, **extra},
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        runs[how] = (lines(out), proc.pid)
    (forked, stand_in), (plain, plain_pid) = runs["forked"], runs["plain"]
    assert int(forked["pid"]) != stand_in and int(plain["pid"]) == plain_pid
    for seen in (forked, plain):
        assert seen["found"] == "True imported False"
        assert seen["flavour"] == ("InterpretedFunction" if flavour == "interpret" else "JITFunction") + " spec True"
        assert seen["native"] == "True" and seen["result"] == ("28.0" if flavour == "interpret" else "True")
    assert int(forked["imports"]) == 0 and int(plain["imports"]) > 10


def _server_pid(socket_path: str) -> int:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and socket_path in (entry / "cmdline").read_bytes().decode(errors="replace"):
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no server on {socket_path}")


def _waits_for_its_answer(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/wchan").read_text() == "unix_stream_read_generic"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_that_comes_while_the_stand_in_waits_for_its_answer_reaches_the_child(server, sig):
    """The server answers late while it imports (a session's workers start meanwhile) or forks
    another child: a signal the stand-in gets while it waits is held, then reaches the child as
    if it came as the module started (not in the stand-in's start-up code, nor the child's)."""
    env, folder = server
    server_pid = _server_pid(env[SPAWN_ENV])
    os.kill(server_pid, signal.SIGSTOP)  # busy
    try:
        proc = probe(env, folder, "wait")
        deadline = time.monotonic() + 30
        while not _waits_for_its_answer(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if not _waits_for_its_answer(proc.pid) and proc.poll() is None:
            pytest.skip("/proc/PID/wchan does not say where a process waits")
        os.kill(proc.pid, sig)
    finally:
        os.kill(server_pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -sig, (out, err)
    assert "sitecustomize" not in err and "spawn server" not in err and "Fatal" not in err, err
    if sig == signal.SIGINT:
        assert err.rstrip().endswith("KeyboardInterrupt")  # the child's, from where the module was
    if out:
        assert gone_within(int(lines(out)["pid"]))
