"""The candidate's sandbox, and the judge's guard against processes that outlive a case.

``--sandbox bwrap`` runs the worker (the candidate's process, :mod:`zlf_taskpkg.worker`) under
bubblewrap (``bwrap``, Debian/Ubuntu package ``bubblewrap``): a mount namespace where the whole
file system is bound read-only except a scratch directory of its own (``TMPDIR``, the compilers'
caches), a private ``/dev/shm`` (a directory of the judge's: only this pair's shared buffers), a private
``/tmp`` (an empty read-only tmpfs: no Unix socket of another process there to connect to; the run
directory, the package and the candidate's folder bound back read-only where they lie in it),
a ``/dev`` of its own holding the null/zero/random nodes plus the GPU's (``/dev/nvidia*``,
``/dev/dri``), no network, every capability dropped, and -- where the buffers do not cross by
legacy CUDA IPC, which refuses peers in other pid namespaces -- a pid namespace of its own (it
sees no other process; ``--die-with-parent`` and the namespace's end kill everything in it).
Where the pid namespace is shared (CUDA IPC) the checker is non-dumpable, so a process without
``CAP_SYS_PTRACE`` (the sandbox has none) cannot read or write its memory through ``/proc``.

``--sandbox none`` (and ``auto`` where bwrap cannot run) keeps only what needs no namespace: the
non-dumpable checker (no use against a candidate running as root), the private ``/dev/shm``
directory (mode 0700: no use against the same user), the child subreaper that kills every
descendant a case leaves, and everything the judge checks itself. :data:`NOT_PROTECTED` says
what that leaves open; the run's meta.json, run.log and stderr say it too.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from zlf import UsageError
from zlf.procs import become_subreaper, children_map as _children_map, descendants, kill_descendants  # noqa: F401

from .shared import SHM_DIR

AUTO, BWRAP, NONE = "auto", "bwrap", "none"
CHOICES = (AUTO, BWRAP, NONE)
#: what the worker is not protected from without bwrap (said in meta.json, run.log, stderr)
NOT_PROTECTED = ("the candidate runs unsandboxed, as the judge's user: it can write wherever that user can "
                 "(the package, site-packages, caches, the home directory: code planted for later runs), "
                 "signal or ptrace the judge's processes (the checker is non-dumpable, which stops neither "
                 "root nor a debugger with CAP_SYS_PTRACE), read other users' shared memory it has access "
                 "to, and use the network")
#: what bwrap's sandbox leaves open where the pid namespace is shared (legacy CUDA IPC)
SHARED_PID = ("the pid namespace is shared (legacy CUDA IPC refuses peers in other pid namespaces): the "
              "candidate sees the judge's processes and can signal them (a dead checker is a Judge Error, "
              "never an Accepted); their memory stays closed (non-dumpable checker, no capabilities)")
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"

PR_SET_DUMPABLE = 4

_libc = None


def _c():
    """The C library (None where it cannot be loaded)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError:
            _libc = False
    return _libc or None


def _prctl(option: int, value: int) -> bool:
    libc = _c()
    return libc is not None and libc.prctl(option, value, 0, 0, 0) == 0


def make_undumpable() -> bool:
    """No core dumps, and /proc/<pid>/mem and ptrace closed to processes without CAP_SYS_PTRACE."""
    return _prctl(PR_SET_DUMPABLE, 0)


# ----------------------------------------------------------------------------- processes
def kill_survivors(keep=()) -> list:
    """Kill (SIGKILL) and reap every descendant of this process but ``keep`` (pids of the
    processes the judge still uses) and theirs: what a finished case left running, however it
    detached -- orphans come back to this process, a subreaper. Returns the pids killed."""
    return kill_descendants(keep)


# ----------------------------------------------------------------------------- bubblewrap
def find_bwrap() -> Optional[str]:
    return shutil.which("bwrap")


_USABLE: dict = {}


def bwrap_problem(bwrap: Optional[str] = None) -> Optional[str]:
    """Why bwrap cannot run here (not installed, user namespaces closed ...), or None."""
    bwrap = bwrap or find_bwrap()
    if bwrap is None:
        return f"bwrap not found on PATH ({INSTALL})"
    if bwrap in _USABLE:
        return _USABLE[bwrap]
    try:
        proc = subprocess.run([bwrap, "--unshare-pid", "--unshare-net", "--die-with-parent", "--cap-drop", "ALL",
                               "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
                              capture_output=True, text=True, timeout=30)
        why = None if proc.returncode == 0 else \
            f"bwrap cannot create its namespaces here (exit {proc.returncode}: {proc.stderr.strip()[:200]})"
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"bwrap cannot run: {exc}"
    _USABLE[bwrap] = why
    return why


def choose(mode: str) -> tuple:
    """``(mode in force, why)`` for ``--sandbox MODE``: ``bwrap`` or ``none``. ``bwrap`` where
    it cannot run is a usage error; ``auto`` falls back to ``none`` and says why."""
    if mode not in CHOICES:
        raise UsageError(f"--sandbox must be one of {', '.join(CHOICES)}, not {mode!r}")
    if mode == NONE:
        return NONE, "--sandbox none: " + NOT_PROTECTED
    why = bwrap_problem()
    if why is None:
        return BWRAP, "bwrap: read-only file system but a scratch directory, private /dev/shm, no network, " \
                      "no capabilities, own pid namespace where the sharing allows"
    if mode == BWRAP:
        raise UsageError(f"--sandbox bwrap: {why}")
    return NONE, f"no sandbox ({why}): " + NOT_PROTECTED


class Place:
    """The directories of one worker: ``scratch`` (its only writable place besides ``shm`` and
    ``out``), ``shm`` (its /dev/shm: the pair's shared buffers), ``out`` (the worker's run files).
    Removed by :meth:`remove` (the out directory stays: it is part of the run directory)."""

    def __init__(self, out: Path, visible=()):
        self.scratch = Path(tempfile.mkdtemp(prefix="zlf-task-scratch-"))
        #: what the worker must read (the run directory, the package, the candidate's folder):
        #: bound back, read-only, where it lies under the sandbox's private /tmp
        self.visible = [Path(p).resolve() for p in visible]
        base = SHM_DIR if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK) else None
        self.shm = Path(tempfile.mkdtemp(prefix="zlf-task-shm-", dir=base))
        self.out = out = Path(out).resolve()
        out.mkdir(parents=True, exist_ok=True)

    def remove(self) -> None:
        for d in (self.scratch, self.shm):
            shutil.rmtree(d, ignore_errors=True)


#: the folder the sandbox covers with a private tmpfs
TMP = "/tmp"
#: where the worker's tools keep their caches: inside the scratch directory under the sandbox
SCRATCH_ENV = ("TMPDIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME",
               "TILELANG_CACHE_DIR", "TVM_CACHE_DIR")


#: a test session's spawn server (zlf.testing) forks Python processes from outside: never the
#: candidate's, which must start inside its sandbox, as a child of the judge
SPAWN_SERVER_ENV = "ZLF_SPAWN_SERVER"


def worker_env(env: dict, place: Place, mode: str) -> dict:
    env = dict(env)
    env.pop(SPAWN_SERVER_ENV, None)
    env["ZLF_TASK_SHM_DIR"] = SHM_DIR if mode == BWRAP else str(place.shm)
    if mode == BWRAP:
        for name in SCRATCH_ENV:
            env[name] = str(place.scratch / ("tmp" if name == "TMPDIR" else name.lower()))
        for name in SCRATCH_ENV:
            Path(env[name]).mkdir(parents=True, exist_ok=True)
    return env


def checker_env(env: dict) -> dict:
    """The checker's environment: PyTorch's expandable segments off. Their CUDA IPC hands the
    memory over by ``pidfd_getfd``, which needs ptrace access to the checker -- closed: the
    checker is non-dumpable and the worker has no capabilities."""
    conf = env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_ALLOC_CONF")
    if not conf or "expandable_segments" not in conf:
        return env
    env = dict(env)
    kept = [part for part in conf.split(",") if not part.strip().startswith("expandable_segments")]
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if name in env:
            env[name] = ",".join(kept + ["expandable_segments:False"])
    return env


def gpu_nodes() -> list:
    """The device nodes a GPU needs inside the sandbox."""
    return sorted(set(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri") + glob.glob("/dev/kfd")))


def interpreter_paths(argv: list) -> set:
    """What the worker's Python reads to start: its executable, its environment's prefixes and
    the folders on its import path (an environment or an editable checkout under /tmp, as CI
    machines and throwaway environments have, would be hidden by the sandbox's private /tmp)."""
    paths = set()
    for p in [sys.prefix, sys.exec_prefix, sys.base_prefix, *(a for a in argv[:1] if os.path.isabs(a)), *sys.path]:
        if p and os.path.exists(p):
            paths.add(Path(p).resolve())
            if os.path.isfile(p):  # an interpreter's link resolves elsewhere: its folder too
                paths.add(Path(p).resolve().parent)
    for finder in sys.meta_path:  # editable installs (setuptools' finders) map packages to source folders
        mapping = getattr(finder, "MAPPING", None) or getattr(sys.modules.get(getattr(finder, "__module__", "")),
                                                              "MAPPING", None)
        if isinstance(mapping, dict):
            paths.update(Path(v).resolve() for v in mapping.values() if isinstance(v, str) and os.path.exists(v))
    return paths


#: set for a checker started by :func:`shm_view_command`: it calls :func:`follow_no_links` first
SHM_VIEW_ENV = "ZLF_TASK_SHM_VIEW"


def shm_view_command(argv: list, place: Place) -> list:
    """``argv`` (the checker) in a mount namespace of its own whose ``/dev/shm`` is the pair's
    directory. The CUDA driver keeps part of a legacy IPC export in ``/dev/shm``, where the
    importing process opens it: a worker whose sandbox shows it only the pair's directory failed
    every import ("mapping of buffer object failed") while the checker exported into the
    machine's ``/dev/shm``.

    Besides ``/dev/shm``, bwrap sets ``no_new_privs`` (the checker runs no setuid program), and
    where the judge is not root the checker gets a user namespace of its own with
    ``CAP_SYS_ADMIN`` in it, for :func:`follow_no_links` alone (which drops every capability once
    it has remounted); everything else is as it is."""
    cmd = [find_bwrap(), "--die-with-parent"]
    if os.geteuid() != 0:
        cmd += ["--unshare-user", "--cap-add", "CAP_SYS_ADMIN"]
    return cmd + ["--dev-bind", "/", "/", "--bind", str(place.shm), SHM_DIR, "--"] + list(argv)


#: mount(2) flags, and the statvfs(3) flags that say which of them a mount has now
MS_REMOUNT, MS_BIND, MS_NOSYMFOLLOW = 32, 4096, 256
_KEPT_FLAGS = ((os.ST_RDONLY, 1), (os.ST_NOSUID, 2), (os.ST_NODEV, 4), (os.ST_NOEXEC, 8), (os.ST_NOATIME, 1024),
               (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21))


def follow_no_links(path: str = SHM_DIR) -> Optional[str]:
    """Remount ``path`` (a bind mount of this process's own namespace) so that no symbolic link
    below it is followed (``MS_NOSYMFOLLOW``, Linux 5.10). The candidate can write to the pair's
    directory: a link it plants under a name the driver or torch will open in the checker's
    ``/dev/shm`` would carry the checker's write elsewhere (a record, the package). None when
    done, else why not."""
    libc = _c()
    if libc is None:
        return "no C library to call mount(2) with"
    flags = MS_REMOUNT | MS_BIND | MS_NOSYMFOLLOW
    now = os.statvfs(path).f_flag
    for st_flag, ms_flag in _KEPT_FLAGS:  # a remount keeps none it does not name (locked ones must stay)
        if now & st_flag:
            flags |= ms_flag
    if libc.mount(None, os.fsencode(path), None, flags, None) != 0:
        return f"mount(2) refused to stop {path} following links: {os.strerror(ctypes.get_errno())}"
    if os.geteuid() != 0 and not drop_capabilities():  # given by bwrap for the remount alone
        return f"the capabilities given for the remount could not be dropped: {os.strerror(ctypes.get_errno())}"
    return None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Drop every capability of this process (effective, permitted, inheritable: capset(2),
    version 3). True when done."""
    libc = _c()
    if libc is None:
        return False
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    return libc.capset(ctypes.byref(header), data) == 0


def bwrap_command(argv: list, place: Place, share_pid: bool, keep_fds=()) -> list:
    """``argv`` run under bwrap in ``place``; ``share_pid``: no pid namespace of its own."""
    cmd = [find_bwrap(), "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--unshare-net",
           "--unshare-uts", "--unshare-cgroup-try"]
    if not share_pid:
        cmd += ["--unshare-pid", "--unshare-ipc"]
    cmd += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for node in gpu_nodes():
        cmd += ["--dev-bind", node, node]
    # a private, read-only /tmp: a Unix socket another process listens on there (a read-only
    # mount does not stop a connect) is out of reach; what the worker needs from it is bound back
    tmp = Path(TMP).resolve()
    cmd += ["--tmpfs", str(tmp)]
    needed = set(place.visible) | interpreter_paths(argv)
    under = sorted({p for p in needed if p != tmp and tmp in p.parents}, key=lambda p: len(p.parts))
    for path in under:
        cmd += ["--ro-bind-try", str(path), str(path)]
    cwd = Path.cwd().resolve()
    if cwd == tmp or (tmp in cwd.parents and not any(cwd == p or p in cwd.parents for p in under)):
        cmd += ["--chdir", str(place.scratch)]  # the judge's folder is hidden: start in the scratch one
    cmd += ["--bind", str(place.shm), SHM_DIR,
            "--bind", str(place.scratch), str(place.scratch),
            "--bind", str(place.out), str(place.out),
            "--remount-ro", str(tmp), "--"]  # as read-only as the rest: scratch and out stay writable
    return cmd + list(argv)
