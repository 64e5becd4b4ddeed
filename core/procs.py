"""Child processes and signals: children die with their parent, SIGTERM stops like Ctrl-C, and a
point that never returns is stopped at its time limit.

* :func:`die_with_parent` -- a ``preexec_fn`` that asks Linux to signal the child when the process
  that started it dies (``PR_SET_PDEATHSIG``): a ``kill -9`` of zlf leaves no orphan holding a GPU.
* :class:`Terminated` -- what SIGTERM raises once :func:`handle_sigterm` is installed; it *is* a
  KeyboardInterrupt, so every path that keeps finished work on Ctrl-C keeps it on SIGTERM too.
* :class:`PointWatch` -- the per-point time limit of ``zlf run``: SIGALRM interrupts a hang in
  Python code; a watchdog thread handles a hang that cannot be interrupted (inside a C call).
* :func:`become_subreaper` and :func:`kill_descendants` -- orphans of this process's descendants
  (a double fork, ``setsid``) come back to it (Linux), where the end of a worker finds and kills them.
* :func:`leave_if_forked` -- a copy of a process made by an op's ``os.fork()`` that returned into
  zlf ends at once, before it writes or times anything.
* :func:`python_child_env` -- the environment of a Python child zlf starts (a campaign's runs, a
  sweep's ops, a judge's workers): it keeps its compiled bytecode where the environment keeps none.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
#: exit code of a run stopped by the watchdog: a point hung where it could not be interrupted.
EXIT_HUNG = 124

try:  # looked up in the parent: a dlopen between fork and exec can deadlock
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _prctl = None


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop as on Ctrl-C (finished work kept, state says so), exit 143."""


def stop_code(exc: BaseException) -> int:
    """Exit code of a stop by the user: 143 for SIGTERM, 130 for Ctrl-C."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def stop_word(exc: BaseException) -> str:
    """The status a run or campaign records when stopped: ``terminated`` or ``interrupted``."""
    return "terminated" if isinstance(exc, Terminated) else "interrupted"


def _raise_terminated(signum, frame):
    raise Terminated()


def process_age() -> "float | None":
    """Seconds since this process started (Linux: its start in /proc/self/stat against the boot
    clock, 10 ms resolution); None where that cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def handle_sigterm():
    """Turn SIGTERM into :class:`Terminated` (main thread only; elsewhere nothing); returns the
    previous handler, or None."""
    if threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGTERM, _raise_terminated)
    return None


def handle_stops() -> dict:
    """Turn SIGTERM, and SIGHUP (a closed terminal) unless it is ignored (``nohup``), into
    :class:`Terminated` (main thread only; elsewhere nothing); returns ``{signal: the previous
    handler}`` (None where it was not set from Python)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated)}
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, _raise_terminated)
    return previous


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when this process dies (Linux; elsewhere nothing).

    The parent here must be the thread that starts the child and lives as long as it (Linux ties
    the signal to the creating thread): zlf starts its children from the main thread.
    """
    parent = os.getpid()

    def preexec() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return preexec


def kill_group(proc, sig: int = signal.SIGKILL) -> None:
    """Signal ``proc``'s process group (it was started with ``start_new_session``), then reap it."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait()
    except Exception:
        pass


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    a process that detached from its parent (double fork, ``setsid``) becomes this process's child
    when its parent dies, where :func:`kill_descendants` finds it. False where the kernel has no
    such request (not Linux): orphans go to init, out of reach, and only a process group kill
    (``killpg``) stops what an op started."""
    if _prctl is None:
        return False
    return _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children_map() -> dict:
    """``{ppid: [pid, ...]}`` of every process this process can see (``/proc``; {} without it)."""
    kids: dict = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return kids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the comm field may hold spaces and parentheses: the fields after its last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def descendants(pid: int, kids: Optional[dict] = None) -> list:
    """Every live descendant of ``pid``, each after its parent."""
    kids = children_map() if kids is None else kids
    out, todo = [], list(kids.get(pid, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def kill_descendants(keep=(), rounds: int = 10) -> list:
    """Kill (SIGKILL) and reap every descendant of this process but ``keep`` (pids of processes
    still in use) and theirs: what a finished worker left running, however it detached -- orphans
    come back to this process where it is a subreaper (:func:`become_subreaper`). A process that
    forked while the others were being killed is found by the next look, up to ``rounds`` of them.
    Returns the pids killed."""
    me, killed = os.getpid(), []
    for _ in range(rounds):
        kids = children_map()
        spared = set(keep)
        for k in keep:
            spared.update(descendants(k, kids))
        victims = [p for p in descendants(me, kids) if p not in spared]
        if not victims:
            break
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in victims:  # each after its parent: once a parent is reaped, its children are ours
            try:
                os.waitpid(p, 0)
            except (ChildProcessError, OSError):
                pass
        killed.extend(victims)
    return killed


def cache_dir() -> Path:
    """zlf's cache directory (ceilings, child bytecode); not created here."""
    if os.environ.get("ZLF_CACHE_DIR"):
        return Path(os.environ["ZLF_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "zlf"
    return Path.home() / ".cache" / "zlf"


def leave_if_forked(owner: int) -> None:
    """End this process at once (``os._exit``, nothing flushed, no exit function run) when it is
    not ``owner`` but a copy of it: an op that calls ``os.fork()`` and returns in both processes
    brings a second zlf into the run, which must write nothing (no record, no meta.json, no
    event to a supervising parent) and time nothing."""
    if os.getpid() != owner:
        os._exit(0)


# ----------------------------------------------------------------------------- point time limit
class PointTimeLimit(BaseException):
    """A point ran past ``--time-limit`` (a BaseException: an op's ``except Exception`` must not
    swallow it)."""


def hard_hang_grace(limit: float) -> float:
    """How long after SIGALRM the watchdog waits before declaring the process stuck."""
    return max(2.0, min(60.0, 0.1 * limit))


class PointWatch:
    """Arms a limit around one point. ``on_hang(point)`` runs in the watchdog thread when the
    main thread did not come back ``hard_hang_grace`` seconds after the limit; it must write what
    it can and end the process (``os._exit``)."""

    def __init__(self, limit: Optional[float], on_hang: Callable, on_extend: Optional[Callable] = None):
        self.limit = limit if limit and limit > 0 else None
        self.on_hang = on_hang
        self.on_extend = on_extend  # told the seconds extend() gives (a supervising parent's deadline moves too)
        self._lock = threading.Lock()
        self._token = 0
        self._armed = False
        self._start = 0.0
        self._extra = 0.0  # seconds the point being watched was given beyond the limit (extend)
        self._usable = self.limit is not None and threading.current_thread() is threading.main_thread() \
            and hasattr(signal, "setitimer")
        self._previous = None  # (the SIGALRM handler, the timer's (left, interval), when) given back by close()
        if self._usable:
            self._previous = (signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL),
                              time.monotonic())
            signal.signal(signal.SIGALRM, self._alarm)

    def close(self) -> None:
        """Give back the SIGALRM handler and the timer found when this watch was made: an
        in-process caller (a test, a library user) keeps its own, so a later alarm does what it
        expects. A timer armed before is rearmed with what it had left (due now if that time
        passed meanwhile). Safe to call twice."""
        if self._previous is None:
            return
        handler, (left, interval), since = self._previous
        self._previous = None
        self._armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler if handler is not None else signal.SIG_DFL)
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - since), 1e-6), interval)

    def _alarm(self, signum, frame):
        if self._armed:
            self._armed = False
            extra = f" + {self._extra:g} s allowed for a first call that compiles" if self._extra else ""
            raise PointTimeLimit(f"time limit: no result within {self.allowed:g} s (--time-limit{extra})")

    @property
    def allowed(self) -> Optional[float]:
        """The seconds the point being watched has: the limit plus what :meth:`extend` gave."""
        return None if self.limit is None else self.limit + self._extra

    def extend(self, seconds: float) -> None:
        """Give the point being watched ``seconds`` more (an extension's first call that compiles:
        a slow compile is not a hang). A no-op when no point is armed."""
        if not self._usable or not self._armed or not seconds or seconds <= 0:
            return
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        self._extra += seconds
        signal.setitimer(signal.ITIMER_REAL, left + seconds)
        if self.on_extend is not None:
            self.on_extend(seconds)

    def _deadline(self) -> float:
        """When the watchdog gives up on the point being watched (monotonic clock)."""
        return self._start + self.allowed + hard_hang_grace(self.allowed)

    def __call__(self, point):
        return _Armed(self, point)

    def _watch(self, token: int, point, done: threading.Event) -> None:
        while time.monotonic() < self._deadline():  # the deadline moves when extend() gives more time
            if done.wait(max(0.0, self._deadline() - time.monotonic())):
                return
        if done.is_set():
            return
        with self._lock:
            if token != self._token:
                return
            self._token += 1
        self.on_hang(point)


class _Armed:
    def __init__(self, watch: PointWatch, point):
        self.watch, self.point = watch, point

    def __enter__(self):
        w = self.watch
        if not w._usable:
            return self
        with w._lock:
            w._token += 1
            token = w._token
        w._start, w._extra = time.monotonic(), 0.0
        self.done = threading.Event()
        threading.Thread(target=w._watch, args=(token, self.point, self.done), daemon=True, name="zlf-point-watchdog").start()
        w._armed = True
        signal.setitimer(signal.ITIMER_REAL, w.limit)
        return self

    def __exit__(self, *exc):
        w = self.watch
        if not w._usable:
            return False
        w._armed = False  # first: an alarm arriving now does nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        with w._lock:
            w._token += 1  # a watchdog about to fire sees the point is over
        self.done.set()
        return False


#: zlf's own bytecode cache for its Python children, under zlf's cache directory
PYCACHE_DIR = "pycache"


#: the packages whose bytecode decides whether a child starts fast: zlf's and its two heavy
#: dependencies' (torch alone is about 2,000 modules)
BYTECODE_PACKAGES = ("zlf", "torch", "triton")


def _bytecode_kept() -> bool:
    """Whether this interpreter finds its modules' compiled bytecode from one process to the next:
    not with ``PYTHONDONTWRITEBYTECODE`` (or ``-B``), nor where the cache file of zlf, torch or
    Triton is missing (a source tree Python cannot write to, such as a read-only image's
    site-packages: zlf's own tree may be writable while torch's is not)."""
    if sys.dont_write_bytecode:
        return False
    for name in BYTECODE_PACKAGES:
        module = sys.modules.get(name)
        if module is not None:
            cached = getattr(module, "__cached__", None)
        else:
            try:
                cached = getattr(importlib.util.find_spec(name), "cached", None)  # found, not imported
            except (ImportError, ValueError):
                continue
        if cached and not os.path.exists(cached):
            return False
    return True


def _file_size_limited() -> bool:
    try:
        import resource
    except ImportError:  # not on POSIX: no such limit
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def is_private_dir(path) -> bool:
    """Whether ``path`` is a folder of this user's only: a directory (not a link to one) that
    this user owns and no one else may write to or read (no group or other permission bits).
    What a cache whose files zlf runs (bytecode, compiled kernels) must be."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def python_child_env(env: dict, folder: Optional[Path] = None) -> dict:
    """``env`` for a Python child of zlf, which keeps its compiled bytecode between processes.

    A campaign starts a fresh Python process per run, and a sweep per op: where the environment
    keeps no bytecode (``PYTHONDONTWRITEBYTECODE``, as container images often set, or read-only
    source trees), every one of them compiles torch, Triton and FlagGems from source again (on an
    H200 machine without bytecode caches, 2,231 of a FlagGems run's 2,503 modules: 9.5 s of its 19).
    There the child writes and reads its bytecode in zlf's cache directory
    (``PYTHONPYCACHEPREFIX``; the source trees stay untouched), only while that folder is this
    user's alone (:func:`is_private_dir`): a ``.pyc`` planted there would run in every child. A ``PYTHONPYCACHEPREFIX`` already
    set is left alone, as is an environment that keeps bytecode; so is everything when the
    cache directory cannot be made. Timing is unaffected: bytecode is what Python runs anyway.

    Under a file-size limit (``ulimit -f``, which a child inherits) the child writes no bytecode at
    all: Python writes a cache file in one ``write`` whose short count it does not check, and
    renames the truncated file into place, so one limited process would leave every later one
    failing to import that module ("marshal data too short").

    :param folder: the cache folder (default: ``pycache`` in zlf's cache directory).
    """
    env = dict(env)
    if _file_size_limited():
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env
    if env.get("PYTHONPYCACHEPREFIX") or _bytecode_kept():
        return env
    if folder is None:
        folder = cache_dir() / PYCACHE_DIR
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return env
    if not is_private_dir(folder) or not os.access(folder, os.W_OK):
        return env  # bytecode another user could plant would run in every child
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(folder)
    return env
