"""Attacks (atk49) on three commits: the spawn server's namespace refusal (6c0d894), the
checker's /dev/shm view of a sandboxed CUDA pair (60cc524) and ir_dump's registry-less JIT walk
(75fc3fd).

The spawn server promises (tests/_devtools/zlf_spawn_server.py, zlf_spawn_client.py, and
tests/test_spawn_server.py's module docstring): "a process it forks must look to its caller like
the process the caller started"; "whatever does not match the server ... is refused, and this
process starts normally". Each spawn case below starts ``python -m`` in an environment of the
caller's making that is NOT a namespace (so 6c0d894's check lets it through) and asserts the
child sees that environment."""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from zlf_devsession import start_spawn_server, stop_spawn_server
from zlf.testing import pythonpath

LINUX = sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(sys, "orig_argv")
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

PROBE = r'''
import ctypes, os, sys
print("pid", os.getpid(), flush=True)
print("nice", os.nice(0), flush=True)
print("affinity", sorted(os.sched_getaffinity(0)), flush=True)
print("policy", os.sched_getscheduler(0), flush=True)
libc = ctypes.CDLL(None, use_errno=True)
print("ioprio", libc.syscall(252, 1, 0) if os.uname().machine == "x86_64" else -1, flush=True)  # ioprio_get(PROCESS, self)
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
for key in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp"):
    print(key, status[key].strip(), flush=True)
print("gid", os.getgid(), "groups", sorted(os.getgroups()), flush=True)
print("personality", open("/proc/self/personality").read().strip(), flush=True)
print("oom", open("/proc/self/oom_score_adj").read().strip(), flush=True)
print("slack", open("/proc/self/timerslack_ns").read().strip(), flush=True)
print("marker", os.path.exists("/mnt/zlf_atk49_marker"), flush=True)
import socket, time
print("monotonic", int(time.monotonic()), "host", socket.gethostname(), flush=True)
'''


def lines(text: str) -> dict:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in text.splitlines() if " " in line}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not LINUX:
        pytest.skip("the spawn server is Linux, Python 3.10+")
    folder = tmp_path_factory.mktemp("spawn49")
    (folder / "probe49.py").write_text(PROBE)
    (folder / "lib").mkdir()
    base = {**os.environ, **pythonpath(folder / "lib"), "PYTHONPYCACHEPREFIX": str(folder / "pycache")}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    with open(folder / "server.log", "w") as log:
        proc, env = start_spawn_server(folder, base, log)
    assert env is not None, (folder / "server.log").read_text()
    yield {**base, **env}, folder
    stop_spawn_server(proc)


def run_probe(server, wrapper=(), preexec_fn=None, cwd=None):
    env, folder = server
    proc = subprocess.Popen([*wrapper, sys.executable, "-m", "probe49"], cwd=cwd or folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec_fn)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    seen = lines(out)
    seen["forked"] = int(seen["pid"]) != proc.pid
    return seen


def test_control_a_plain_stand_in_is_forked_by_the_server(server):
    """The fixture works: a plain ``python -m`` is served (so the cases below test the server)."""
    assert run_probe(server)["forked"]


def test_spawn_nice_value_is_the_callers(server):
    seen = run_probe(server, preexec_fn=lambda: os.nice(7))
    assert seen["nice"] == "7", seen


def test_spawn_cpu_affinity_is_the_callers(server):
    cpu = min(os.sched_getaffinity(0))
    seen = run_probe(server, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert seen["affinity"] == f"[{cpu}]", seen


def test_spawn_scheduling_policy_is_the_callers(server):
    seen = run_probe(server, preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))
    assert seen["policy"] == str(os.SCHED_BATCH), seen


@pytest.mark.skipif(os.uname().machine != "x86_64" or not shutil.which("ionice"), reason="x86_64 ioprio_get, ionice")
def test_spawn_io_priority_is_the_callers(server):
    seen = run_probe(server, wrapper=(shutil.which("ionice"), "-c", "3"))
    assert int(seen["ioprio"]) >> 13 == 3, seen  # IOPRIO_CLASS_IDLE


def test_spawn_oom_score_adj_is_the_callers(server):
    def adj():
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    seen = run_probe(server, preexec_fn=adj)
    assert seen["oom"] == "500", seen


def test_spawn_timer_slack_is_the_callers(server):
    libc = ctypes.CDLL(None, use_errno=True)
    seen = run_probe(server, preexec_fn=lambda: libc.prctl(29, 777777, 0, 0, 0))
    assert seen["slack"] == "777777", seen


@pytest.mark.skipif(not shutil.which("setarch"), reason="setarch")
def test_spawn_personality_is_the_callers(server):
    seen = run_probe(server, wrapper=(shutil.which("setarch"), os.uname().machine, "-R"))
    assert int(seen["personality"], 16) & 0x0040000, seen  # ADDR_NO_RANDOMIZE


@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv")
def test_spawn_no_new_privs_is_the_callers(server):
    seen = run_probe(server, wrapper=(shutil.which("setpriv"), "--no-new-privs"))
    assert seen["NoNewPrivs"] == "1", seen


def _seccomp_allow_all():
    """A seccomp filter that allows everything: the process is still under a filter (Seccomp: 2)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    insns = (Filter * 1)(Filter(0x06, 0, 0, 0x7fff0000))  # BPF_RET|BPF_K SECCOMP_RET_ALLOW
    prog = Prog(1, insns)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def test_spawn_seccomp_filter_is_the_callers(server):
    seen = run_probe(server, preexec_fn=_seccomp_allow_all)
    assert seen["Seccomp"] == "2", seen


@pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root to drop capabilities")
def test_spawn_dropped_capability_stays_dropped(server):
    seen = run_probe(server, wrapper=(shutil.which("setpriv"), "--bounding-set=-sys_admin", "--inh-caps=-all"))
    assert not int(seen["CapEff"], 16) & (1 << 21) and not int(seen["CapBnd"], 16) & (1 << 21), seen


@pytest.mark.skipif(not ROOT, reason="needs root to change gid and groups")
def test_spawn_gid_and_groups_are_the_callers(server):
    def ids():
        os.setgroups([4242])
        os.setresgid(4243, 4243, 4243)
    seen = run_probe(server, preexec_fn=ids)
    assert seen["gid"] == "4243 groups [4242]", seen


@pytest.mark.skipif(not ROOT or not shutil.which("unshare"), reason="needs root for mounts and chroot")
def test_spawn_chroot_in_the_same_mount_namespace_is_the_callers(server, tmp_path):
    """A chroot changes what '/' is without a namespace of its own. The chroot's tree is built in a
    private mount namespace of a helper (so nothing is mounted on the machine) and reached through
    /proc/HELPER/root; the stand-in itself stays in the server's mount namespace."""
    root = tmp_path / "root"
    root.mkdir()
    helper = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --rbind / {root} && mount -t tmpfs none {root}/mnt && touch {root}/mnt/zlf_atk49_marker"
         " && echo ready && exec sleep 300"], stdout=subprocess.PIPE, text=True)
    try:
        assert helper.stdout.readline().strip() == "ready"
        new_root = f"/proc/{helper.pid}/root{root}"
        _, folder = server

        def enter():
            os.chroot(new_root)
            os.chdir(str(folder))
        seen = run_probe(server, preexec_fn=enter, cwd="/")
        assert seen["marker"] == "True", seen
    finally:
        helper.kill()
        helper.wait(timeout=60)


def _unshare_can(*flags):
    if not ROOT or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", *flags, "true"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.skipif(not _unshare_can("--uts"), reason="unshare --uts unusable here")
def test_spawn_a_stand_in_in_its_own_uts_namespace_runs_inside_it(server):
    """What 6c0d894 covers, beyond its mount-namespace test: another uts namespace (its own
    hostname) starts plainly, inside it."""
    seen = run_probe(server, wrapper=("unshare", "--uts", "sh", "-c", 'hostname atk49-uts && exec "$@"', "sh"))
    assert seen["monotonic"].split()[2] == "atk49-uts" and not seen["forked"], seen


@pytest.mark.skipif(not _unshare_can("--time", "--fork"), reason="no time namespaces here")
def test_spawn_a_stand_in_in_its_own_time_namespace_keeps_its_clocks(server):
    offset = 86_400_000  # 1000 days on CLOCK_MONOTONIC: far above this machine's own uptime
    seen = run_probe(server, wrapper=("unshare", "--time", "--fork", "--monotonic", str(offset)))
    assert int(seen["monotonic"].split()[0]) >= offset, seen


# --- 60cc524: the checker of a sandboxed CUDA pair sees the pair's directory as its /dev/shm ---------

def _no_bwrap():
    try:
        from zlf_taskpkg import sandbox
    except ImportError as exc:
        return str(exc)
    return sandbox.bwrap_problem()


NO_BWRAP = _no_bwrap()


def needs_bwrap(test):
    """The task extension (run in the session where it is installed) and a usable bwrap."""
    test = pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")(test)
    return pytest.mark.extensions("task")(test)


@pytest.fixture
def place(tmp_path):
    from zlf_taskpkg import sandbox
    p = sandbox.Place(tmp_path / "out")
    yield p
    p.remove()


def _in_view(place, code, *args, **kw):
    from zlf_taskpkg import sandbox
    argv = sandbox.shm_view_command([sys.executable, "-c", code, *map(str, args)], place)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


@needs_bwrap
def test_view_a_planted_symlink_does_not_carry_the_checkers_shm_write_outside(place, tmp_path):
    """The candidate sees the pair's directory as its /dev/shm and may plant anything there. Before
    60cc524 the checker exported into the machine's /dev/shm, out of the candidate's reach; now
    a name the checker (or the CUDA driver / torch / multiprocessing for it) creates in /dev/shm can be
    a link of the candidate's to a file the candidate cannot write itself (the run directory's
    records). The checker in the view first makes its /dev/shm follow no links, as here."""
    victim = tmp_path / "out" / "verdict.json"
    victim.write_text("{\"verdict\": \"judge's\"}")
    os.symlink(victim, place.shm / "cuda.shm.planted")  # what the candidate did, seeing it as /dev/shm/cuda.shm.planted
    done = _in_view(place, "from zlf_taskpkg.sandbox import follow_no_links\n"
                           "why = follow_no_links()\nassert why is None, why\n"
                           "try:\n    open('/dev/shm/cuda.shm.planted', 'w').write('candidate was here')\n"
                           "except OSError as exc:\n    print('refused', exc.errno)\n"
                           "open('/dev/shm/cuda.shm.own', 'w').write('the checker was here')\n")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "{\"verdict\": \"judge's\"}"
    assert done.stdout.split() == ["refused", str(errno.ELOOP)]
    assert (place.shm / "cuda.shm.own").read_text() == "the checker was here"  # its own files still land there


@needs_bwrap
def test_view_keeps_cwd_env_tmp_fds_and_process_group(place, tmp_path):
    """'everything else as it is': the working directory, the environment, the machine's /tmp and
    the run directory, inherited descriptors, the process group and session of the judge's child."""
    (tmp_path / "out" / "spec.json").write_text("{}")
    r, w = os.pipe()
    code = ("import os, sys; s = os.getpgid(0), os.getsid(0);"
            "os.write(int(sys.argv[1]), repr((os.getcwd(), os.environ.get('ATK49'), "
            "open(sys.argv[2]).read(), os.listdir('/dev/shm'))).encode())")
    try:
        done = _in_view(place, code, w, tmp_path / "out" / "spec.json", pass_fds=(w,), cwd=tmp_path,
                        env={**os.environ, "ATK49": "kept"})
        assert done.returncode == 0, done.stderr
        seen = eval(os.read(r, 65536).decode())
    finally:
        os.close(r)
        os.close(w)
    assert seen == (str(tmp_path), "kept", "{}", [])


@needs_bwrap
def test_view_changes_nothing_but_dev_shm_no_new_privs(place):
    """bwrap sets no_new_privs on the checker in the view: shm_view_command's docstring says so (it
    said "everything else as it is")."""
    from zlf_taskpkg import sandbox
    code = "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0])"
    done = _in_view(place, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1" and "no_new_privs" in sandbox.shm_view_command.__doc__


def _pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pid, within=60.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not _pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


@needs_bwrap
def test_view_checker_dies_with_its_process_group(place):
    """The judge kills a pair by process group (kill_group): the checker behind bwrap is in it."""
    from zlf_taskpkg import sandbox
    r, w = os.pipe()
    code = "import os, sys, time; os.write(int(sys.argv[1]), str(os.getpid()).encode()); time.sleep(300)"
    argv = sandbox.shm_view_command([sys.executable, "-c", code, str(w)], place)
    proc = subprocess.Popen(argv, pass_fds=(w,), start_new_session=True)
    os.close(w)
    try:
        pid = int(os.read(r, 64))
        assert pid != proc.pid
        os.killpg(proc.pid, signal.SIGKILL)
        assert _gone(pid)
    finally:
        os.close(r)
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


@needs_bwrap
def test_view_checker_dies_when_the_judge_is_killed(place, tmp_path):
    """A judge killed with SIGKILL (no cleanup) leaves no checker running behind bwrap."""
    from zlf_taskpkg import sandbox
    code = "import os, sys, time; print(os.getpid(), flush=True); time.sleep(300)"
    argv = sandbox.shm_view_command([sys.executable, "-c", code], place)
    judge = ("import signal, subprocess, sys, time\nfrom zlf.procs import die_with_parent\n"
             f"p = subprocess.Popen({argv!r}, start_new_session=True, preexec_fn=die_with_parent(signal.SIGKILL))\n"
             "time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", judge], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(proc.stdout.readline())
        proc.kill()
        proc.wait(timeout=60)
        assert _gone(pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        if pid is not None and _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@needs_bwrap
def test_view_pair_directory_removed_without_following_planted_links(place, tmp_path):
    """Place.remove after a run in the view: the pair's directory goes, a candidate's link to a
    directory outside is removed as a link, not followed."""
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "f").write_text("x")
    os.symlink(outside, place.shm / "link")
    done = _in_view(place, "open('/dev/shm/made', 'w').write('y')")
    assert done.returncode == 0, done.stderr
    place.remove()
    assert not place.shm.exists() and (outside / "f").read_text() == "x"


# --- 75fc3fd: ir_dump's fake driver finds JIT functions by walking gc on a Triton without a registry --

IR_NO_REGISTRY = r'''
import triton.runtime.jit as jit
class Unlisted:
    def __init__(self): self.kept = {}
    def __setitem__(self, key, fn): self.kept[key] = fn
    def __getitem__(self, key): return self.kept[key]
    def __contains__(self, key): return key in self.kept
jit._triton_jit_function_registry = Unlisted()
import gc, weakref
import triton, triton.language as tl
from triton.runtime.jit import JITFunction
from zlf_ir_dump import fake_driver

@triton.jit
def plain(x):
    pass

@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=[])
@triton.heuristics({"B": lambda args: 1})
@triton.jit
def wrapped(x, B: tl.constexpr):
    pass

class Mine(JITFunction):
    pass

fns = {"plain": plain, "wrapped": wrapped.fn.fn}
fake = fake_driver.activate("cuda:90")
other = object()
for fn in fns.values():
    fn.device_caches[0] = ({"k": type("K", (), {"module": 1})()}, {}, fake.target, None, None)
    fn.device_caches[1] = ({}, {}, other, None, None)
MODE
fake_driver.deactivate(fake, None)
for name, fn in fns.items():
    print(name, sorted(fn.device_caches))
'''


def _ir_run(tmp_path, mode_code):
    pytest.importorskip("triton")
    pytest.importorskip("zlf_ir_dump")
    script = tmp_path / "ir_attack.py"  # @triton.jit reads its source from a file
    script.write_text(IR_NO_REGISTRY.replace("MODE", mode_code))
    done = subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, timeout=240, env={**os.environ, "ZLF_SPAWN_SERVER": ""})
    return done


@pytest.mark.extensions("ir_dump")
def test_ir_no_registry_clears_fake_kernels_of_wrapped_functions_and_keeps_other_devices(tmp_path):
    """A JIT function held only inside Autotuner(Heuristics(...)) is found; the entry of another
    target (device 1) stays."""
    done = _ir_run(tmp_path, "pass")
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == {"plain": "[1]", "wrapped": "[1]"}, done.stdout


@pytest.mark.extensions("ir_dump")
def test_ir_no_registry_survives_a_dead_weak_proxy_elsewhere_in_the_process(tmp_path):
    """isinstance() on every collector object reads ``__class__``, which a dead weakref.proxy (or a
    lazy proxy whose ``__class__`` raises) answers with an exception: the walk breaks ``zlf ir``'s
    clean-up for an object that has nothing to do with Triton."""
    done = _ir_run(tmp_path, "class T: pass\nt = T(); dead = weakref.proxy(t); del t")
    assert done.returncode == 0, done.stderr[-2000:]
    assert lines(done.stdout) == {"plain": "[1]", "wrapped": "[1]"}, done.stdout


@pytest.mark.extensions("ir_dump")
def test_ir_no_registry_finds_a_subclass_instance(tmp_path):
    done = _ir_run(tmp_path, "def body(x):\n    pass\nsub = Mine(body)\nfns['sub'] = sub\n"
                   "sub.device_caches[0] = ({}, {}, fake.target, None, None)\n"
                   "sub.device_caches[1] = ({}, {}, other, None, None)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert lines(done.stdout) == {"plain": "[1]", "wrapped": "[1]", "sub": "[1]"}, done.stdout


@needs_bwrap
@pytest.mark.parametrize("mode", ["none", "bwrap"])
def test_view_checker_killed_by_a_signal_is_reported_as_killed(tmp_path, monkeypatch, mode):
    """A checker that dies of a signal (the OOM killer's SIGKILL, a driver's SIGSEGV) is reported
    as "the checker was killed by SIGKILL". In the view the judge's child is bwrap, which exits
    128 + N instead; WorkerProcess.exit_description translates that only for the sandboxed worker."""
    from zlf_taskpkg import judge, sandbox
    (tmp_path / "atk49_dies.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    monkeypatch.chdir(tmp_path)  # -m finds the module in the working directory
    place = sandbox.Place(tmp_path / "out")
    proc = None
    try:
        proc = judge.WorkerProcess(tmp_path / "spec.json", tmp_path / "checker.log", 1, "atk49_dies", place=place,
                                   mode=sandbox.BWRAP if mode == "bwrap" else sandbox.NONE, share_pid=True)
        what = proc.exit_description()
    finally:
        if proc is not None:
            proc.kill()
        place.remove()
    assert what == "the candidate's process was killed by SIGKILL", what
