"""``zlf run``'s supervising parent: the points run in a worker process, so that an op that kills
its process (``os._exit``, ``abort()``, a segfault, a signal) costs that point and nothing else.

The ``zlf`` process forks its worker before any backend is set up: no device is open and no
thread pool exists yet, so the fork is safe and costs milliseconds, not a second interpreter.
The worker is the run as it always was (it sets up the backend, plans the points, writes the run
directory, prints the table) and tells the parent through a pipe where the run directory is, which
points it plans, and when each point begins and ends. A worker that dies without saying it is done
leaves the run directory to the parent, which:

* gives the point that was running a FAILED record naming the cause (``worker died: SIGSEGV
  (signal 11)``, ``worker died: exit code 3``) unless the worker wrote its record already (a point
  never gets two), adds the death to meta.json's ``worker_deaths`` and to run.log, and
* forks a fresh worker that goes on with the next point in the same run directory.

A point that hangs where neither SIGALRM nor the worker's watchdog thread can act (native code
that holds the interpreter and ignores signals) is killed by the parent once the watchdog is
:func:`~zlf.procs.hard_hang_grace` late: its FAILED record, meta.json ``hung`` and exit 124, as
when the watchdog stops the run itself. Ctrl-C, SIGTERM and SIGHUP of the parent are passed on to
the worker, which stops as a run always stopped (130 or 143); one that does not stop within
:data:`STOP_GRACE_S` is killed and the parent writes meta.json's status; a SIGTERM or SIGINT the
worker gets that the parent did not pass on (an op signalling its own process) is the point's death.
The worker leads a process group of its own, and the parent is a child subreaper (Linux): whatever
an op started and left behind, in the group or detached from it, is killed when the worker ends.

Only the ``zlf`` program supervises (:func:`zlf.cli.main` with the process's own command line):
``zlf.cli.main(argv)`` called inside another program runs the points in that program's process,
which may hold threads or a device that a fork cannot take along (:func:`fork_safe`).
"""
from __future__ import annotations

import atexit
import ctypes
import datetime as _dt
import json
import mmap
import os
import selectors
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

from .procs import (EXIT_HUNG, Terminated, become_subreaper, children_map, die_with_parent, hard_hang_grace,
                    kill_descendants, leave_if_forked, stop_code, stop_word)
from .records import STATUS_FAILED, STATUS_OK, STATUS_OOM, PointRecord
from .rundir import LOG, RESULTS, RunDir, disk_full

#: how long a worker told to stop (Ctrl-C, SIGTERM, SIGHUP) has before it is killed
STOP_GRACE_S = 10.0
#: exit code of a worker whose pipe to the parent was closed under it (an op that closed the
#: worker's descriptors): it ends after the point's record, and a fresh worker goes on
EXIT_LINK_LOST = 75
LINK_LOST = "worker lost its pipe to zlf (an op closed its descriptors)"


def fork_safe() -> bool:
    """Whether this process can fork a worker that may use torch and the device: a single thread
    (a fork takes only the calling one along, not the locks others hold), and no CUDA context."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    torch = sys.modules.get("torch")
    try:
        return torch is None or not torch.cuda.is_initialized()
    except Exception:
        return False


def death_cause(status: int) -> str:
    """``worker died: SIGSEGV (signal 11)`` or ``worker died: exit code 3``, from a wait status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal"
        return f"worker died: {name} (signal {sig})"
    if os.WEXITSTATUS(status) == EXIT_LINK_LOST:
        return LINK_LOST
    return f"worker died: exit code {os.waitstatus_to_exitcode(status)}"


def _identity(fd: int):
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Link:
    """The worker's end of the pipe to its parent: one JSON line per event.

    Only the worker writes to it: a copy of the worker made by an op's ``os.fork()`` ends here
    (:func:`~zlf.procs.leave_if_forked`). A pipe an op closed (``os.closerange``), or whose number
    now names another file, is never written to: the link is ``lost``, and a worker that finds it
    lost when a point begins or ends exits (:data:`EXIT_LINK_LOST`; the point's record is written
    by then), so that the parent, which no longer hears what runs, goes on in a fresh worker."""

    def __init__(self, fd: int):
        self.fd = fd
        self.owner = os.getpid()
        self.identity = _identity(fd)
        self.lost = False

    def send(self, event: str, **fields) -> None:
        leave_if_forked(self.owner)
        if not self.lost and _identity(self.fd) != self.identity:
            self.lost = True
        if self.lost:
            if event in ("begin", "end"):
                os._exit(EXIT_LINK_LOST)
            return
        data = memoryview((json.dumps({"event": event, **fields}, default=str) + "\n").encode())
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:  # the parent is gone (this worker dies with it: PR_SET_PDEATHSIG), or the pipe closed
            self.lost = True


def point_fields(point) -> dict:
    """What the parent needs of a planned point to write its FAILED record."""
    return {"id": point.id, "op": point.op, "shape": list(point.shape), "dtype": point.dtype, "variant": point.variant}


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _counts(records) -> dict:
    return {s: sum(1 for r in records if r.status == s) for s in (STATUS_OK, STATUS_FAILED, STATUS_OOM)}


def _cut_torn_line(path: Path) -> None:
    """Cut results.jsonl back to its last whole line (a worker killed inside a write)."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
    except FileNotFoundError:
        pass


def _preload() -> None:
    """Import torch here, once: every worker forked after has it (a fresh worker after a death
    starts in milliseconds, not seconds). Importing starts no thread and opens no device."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass


def _say(text: str) -> None:
    """A line to stderr; a full or closed stderr loses the line, never the run."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def _hangup(signum, frame):
    raise Terminated()


try:
    _libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _libc = None


class _PassedOn:
    """``SIGUSR1`` and ``SIGUSR2`` sent to zlf reach the worker, where they mean something: a
    handler installed in C (``faulthandler.register``: a stack dump of the op, as ``zlf sweep``
    asks for before it kills a stuck op) is invisible to :func:`signal.getsignal`, so the signal's
    raw disposition (``sigaction``) is kept and given back to each worker."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGUSR1", "SIGUSR2") if hasattr(signal, n))

    def __init__(self):
        self.saved: dict = {}
        self.pid = None

    @staticmethod
    def _raw(sig: int):
        buf = ctypes.create_string_buffer(256)  # struct sigaction, opaque (glibc's: 152 bytes)
        return buf if _libc is not None and _libc.sigaction(sig, None, buf) == 0 else None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            raw = self._raw(sig)
            handler = int.from_bytes(raw.raw[:ctypes.sizeof(ctypes.c_void_p)], sys.byteorder) if raw else 0
            if handler in (0, 1):  # SIG_DFL, SIG_IGN: nothing to pass on (the default ends zlf, as it did)
                continue
            self.saved[sig] = (signal.getsignal(sig), raw)
            signal.signal(sig, self._forward)

    def _forward(self, signum, frame) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def restore(self) -> None:
        """The dispositions as they were (in the parent at its end, in each worker at its start)."""
        for sig, (python, raw) in self.saved.items():
            try:
                signal.signal(sig, python if callable(python) or python in (signal.SIG_DFL, signal.SIG_IGN)
                              else signal.SIG_DFL)
                _libc.sigaction(sig, raw, None)
            except (OSError, ValueError, TypeError):
                pass


#: seconds beyond the point time limit a worker has to load its ops (import their modules, which
#: may compile kernels) before its first point: a module whose import hangs costs this, not the run
LOAD_GRACE_S = 20.0


def load_limit(limit: Optional[float], specs: int) -> Optional[float]:
    """The seconds a worker has to load ``specs`` op arguments before its first point: the point
    limit once plus once per op argument, plus :data:`LOAD_GRACE_S` (None: no point limit, none)."""
    if not limit or limit <= 0:
        return None
    return limit * (1 + max(1, specs)) + LOAD_GRACE_S


class Supervisor:
    """Runs ``body(link, resume)`` in forked workers until one finishes (see the module's docstring).

    ``body`` is the run (it returns the exit code); ``resume`` is None for the first worker, else
    ``{"dir": run directory, "start": index of the first point to run}``."""

    def __init__(self, body: Callable, clock=time.monotonic):
        self.body = body
        self.clock = clock
        self.dir: Optional[Path] = None
        self.shown = None       # the run directory as messages show it
        self.plan: Optional[list] = None
        self.next = 0           # the first point the next worker runs
        self.current = None     # the point running now (its index)
        self.began = 0.0
        self.allowed = None     # its time limit, seconds (None: none)
        self.began_any = False  # the worker now running began a point
        self.loading = None     # (when, seconds): the worker began loading its ops (a deadline before any point)
        self.final = None       # the exit code a worker said it ends with
        self.stopping = None    # the KeyboardInterrupt (Ctrl-C, SIGTERM, SIGHUP) that stops the run
        self.kill_at = None
        self.hung = False
        self.deaths: list = []
        self._mismatch = None
        self._passed_on = _PassedOn()
        #: set by the parent before it passes a stop on: a SIGTERM or SIGINT the worker gets while
        #: it is not set came from elsewhere (an op signalling its own process) and kills the worker
        self._told = mmap.mmap(-1, 1)
        self._children_before: set = set()
        #: the pipe a signal writes a byte to (:meth:`_wake_on_signals`), its read end watched
        #: beside the worker's pipe: the wait never sleeps through a stop
        self._wake: Optional[tuple] = None
        #: the stops' own handlers while they are held (:meth:`_hold_stops`), and the one held
        self._held: dict = {}
        self._held_stop: Optional[int] = None

    # ------------------------------------------------------------------ the parent
    def run(self) -> int:
        _preload()
        previous = None
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
            # a closed terminal stops the run, as SIGTERM does; ``nohup zlf run`` (SIGHUP ignored) runs on
            previous = signal.signal(signal.SIGHUP, _hangup)
        self._passed_on.install()
        previous_wakeup = self._wake_on_signals()
        # what an op leaves running after its worker ends, however it detached, comes back here
        become_subreaper()
        self._children_before = set(children_map().get(os.getpid(), ()))
        try:
            while True:
                self.began_any, self.final = False, None
                self._hold_stops()
                pid, fd = self._fork()
                status = self._wait(pid, fd)
                if self.final is not None:
                    return self.final
                rc = self._died(status)
                if rc is not None:
                    return rc
        finally:
            self._release_stops(raise_held=False)
            self._passed_on.restore()
            if previous is not None:
                signal.signal(signal.SIGHUP, previous)
            if self._wake is not None:
                signal.set_wakeup_fd(previous_wakeup)
                self._close_wake()

    #: the signals that stop a run
    STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def _hold_stops(self) -> None:
        """From the fork until the wait can take it, a stop (Ctrl-C, SIGTERM, SIGHUP) is kept, not
        raised: raised there (between bytecodes of the fork's bookkeeping), it left the parent
        without stopping the worker, and an exception came out of :meth:`run`.
        :meth:`_release_stops` puts the handlers back and raises the one kept, inside the wait."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._held_stop = None

        def keep(signum, frame):
            if self._held_stop is None:
                self._held_stop = signum

        for sig in self.STOPS:
            handler = signal.getsignal(sig)
            if callable(handler):
                self._held[sig] = handler
                signal.signal(sig, keep)

    def _release_stops(self, raise_held: bool = True) -> None:
        held, self._held = self._held, {}
        for sig, handler in held.items():
            signal.signal(sig, handler)
        signum, self._held_stop = self._held_stop, None
        if raise_held and signum is not None and signum in held:
            held[signum](signum, None)  # the handler raises its stop here, where the wait takes it

    def _wake_on_signals(self) -> int:
        """Have every signal write a byte to a pipe the wait watches; returns the wake-up file
        descriptor that was set before (-1: none). Python runs a signal's handler in the main
        thread between bytecodes: a signal taken by another thread (torch's, once imported), or
        one that lands just before the wait's system call begins, would leave the handler due
        while the wait slept on, and a worker in a long op would keep zlf from stopping for as
        long as the op runs. The byte ends the wait; the handler runs as it returns."""
        if threading.current_thread() is not threading.main_thread():
            return -1
        read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:
            os.close(read)
            os.close(write)
            return -1
        self._wake = (read, write)
        return previous

    def _close_wake(self) -> None:
        for fd in self._wake or ():
            os.close(fd)
        self._wake = None

    def _fork(self) -> tuple:
        resume = None if self.dir is None else {"dir": str(self.dir), "shown": self.shown, "start": self.next}
        read, write = os.pipe()
        preexec = die_with_parent(signal.SIGKILL)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        self._told[0] = 0
        pid = os.fork()
        if pid == 0:  # the worker
            self._release_stops(raise_held=False)  # its stops are its own (the parent passes them on)
            os.close(read)
            self._worker(write, resume, preexec)
        os.close(write)
        self._passed_on.pid = pid
        return pid, read

    def _wait(self, pid: int, fd: int) -> int:
        """Read the worker's events until it exits (or is killed at a deadline); its wait status."""
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ, "events")
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        if self._wake is not None:
            sel.register(self._wake[0], selectors.EVENT_READ, "signal")
        buf = b""
        try:
            while True:
                try:
                    self._release_stops()  # a stop that came since the fork is taken now
                    for key, _ in sel.select(self._timeout(pidfd is None)):
                        if key.data == "events":
                            chunk = os.read(fd, 1 << 16)
                            if chunk:
                                buf = self._events(buf + chunk)
                            else:
                                sel.unregister(fd)
                        elif key.data == "signal":  # its handler runs now, in this thread
                            try:
                                os.read(self._wake[0], 512)
                            except BlockingIOError:
                                pass
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        self._drain(fd, buf)
                        return status
                    if self._mismatch or self._overdue():
                        return self._kill(pid, fd, buf)
                except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: the worker stops the run
                    self._stop(pid, exc)
        finally:
            try:
                os.killpg(pid, signal.SIGKILL)  # what its ops left running
            except (ProcessLookupError, PermissionError):
                pass
            # and what left the worker's process group (setsid) or its parent (a double fork)
            kill_descendants(keep=self._children_before)
            sel.close()
            os.close(fd)
            if pidfd is not None:
                os.close(pidfd)

    def _timeout(self, polling: bool) -> Optional[float]:
        due = [t for t in (self._deadline(), self.kill_at) if t is not None]
        left = max(0.0, min(due) - self.clock()) if due else None
        if polling:  # no pidfd: look at the worker twice a second
            left = 0.5 if left is None else min(left, 0.5)
        return left

    def _deadline(self) -> Optional[float]:
        """When the parent gives up on the point running: the worker's own watchdog has had its
        grace (``hard_hang_grace``) and as much again. Before the first point, while the worker
        loads its ops (an op module's import runs no point and arms no watchdog): the load limit
        it said (:func:`load_limit`)."""
        if self.loading is not None and self.dir is None:
            return self.loading[0] + self.loading[1]
        if self.current is None or self.allowed is None:
            return None
        return self.began + self.allowed + 2 * hard_hang_grace(self.allowed)

    def _overdue(self) -> bool:
        now = self.clock()
        if self.kill_at is not None and now >= self.kill_at:
            return True
        deadline = self._deadline()
        if deadline is not None and now >= deadline and self.stopping is None:
            self.hung = True
            return True
        return False

    def _kill(self, pid: int, fd: int, buf: bytes) -> int:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        self._drain(fd, buf)
        return status

    def _stop(self, pid: int, exc: KeyboardInterrupt) -> None:
        """Pass a stop on to the worker (it has its own process group: Ctrl-C reached this process only)."""
        self.stopping = exc
        if self.kill_at is None:
            self.kill_at = self.clock() + STOP_GRACE_S
        self._told[0] = 1
        try:
            os.kill(pid, signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
        except ProcessLookupError:
            pass

    def _drain(self, fd: int, buf: bytes) -> None:
        """The events written before the worker ended (its children may hold the pipe open: no waiting for EOF)."""
        os.set_blocking(fd, False)
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            buf = self._events(buf + chunk)

    def _events(self, buf: bytes) -> bytes:
        *lines, rest = buf.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "loading":
                self.loading = (self.clock(), float(event["limit"]))
            elif kind == "dir":
                points = event["points"]
                if self.plan is not None and [p["id"] for p in points] != [p["id"] for p in self.plan]:
                    self._mismatch = "the fresh worker planned other points than the first one"
                self.dir, self.shown, self.plan = Path(event["dir"]), event.get("shown", event["dir"]), points
            elif kind == "begin":
                self.current, self.began, self.allowed = event["index"], self.clock(), event.get("limit")
                self.began_any = True
            elif kind == "extend" and self.allowed is not None:
                self.allowed += event["seconds"]
            elif kind == "end":
                self.current, self.next = None, event["index"] + 1
            elif kind == "exit":
                self.final = event["rc"]
        return rest

    # ------------------------------------------------------------------ a worker died
    def _died(self, status: int) -> Optional[int]:
        """File a worker's death: the exit code to end with, or None to go on in a fresh worker."""
        cause = self._mismatch or death_cause(status)
        if self.dir is None:
            if self.hung and self.loading is not None:
                _say(f"zlf: time limit: the ops did not load within {self.loading[1]:g} s (--time-limit and "
                     f"{LOAD_GRACE_S:g} s to import, per op module); killed while loading, nothing was run")
                return EXIT_HUNG
            _say(f"zlf: the run's {cause} before its run directory was made; nothing was run")
            return 1
        rd = RunDir(self.dir)
        try:
            return self._file_death(rd, status, cause)
        except OSError as exc:
            if not disk_full(exc):
                raise
            _say(f"zlf: error: {exc.strerror or exc} writing {exc.filename or self.shown} after the {cause}: "
                 f"the finished points are kept in {self.shown}")
            return 2

    def _file_death(self, rd: RunDir, status: int, cause: str) -> Optional[int]:
        _cut_torn_line(rd.path / RESULTS)
        records, _ = rd.records()  # the source of truth: what has a record is never run again
        done = {r.point for r in records}
        point = self.plan[self.current] if self.current is not None else None
        after = self.current + 1 if self.current is not None else self.next
        self.next = next((i for i in range(after, len(self.plan)) if self.plan[i]["id"] not in done), len(self.plan))
        if self.stopping is not None:  # stopped by the user, and the worker did not finish its files
            word = stop_word(self.stopping)
            self._finish(rd, records, word, f"the worker was killed {STOP_GRACE_S:g} s after it was told to stop")
            _say(f"\n{word}; {len(records)} finished points kept\nrun dir: {self.shown}")
            return stop_code(self.stopping)
        if point is not None and self.hung:
            from .run import hung_error, hung_message

            if point["id"] not in done:
                records.append(self._failed(rd, point, hung_error(self.allowed)))
            self._finish(rd, records, "hung", f"{point['id']}: {hung_error(self.allowed)}")
            _say(hung_message(point["id"], self.allowed, self.shown))
            return EXIT_HUNG
        if point is not None and point["id"] in done and os.WIFEXITED(status) \
                and os.WEXITSTATUS(status) == EXIT_HUNG:
            return EXIT_HUNG  # the worker's watchdog wrote the point's record and meta.json itself
        if point is None and (self.next >= len(self.plan) or not self.began_any or self._mismatch):
            # at the run's end (after_run, meta.json), or a fresh worker that never reached a point
            self._finish(rd, records, "crashed", f"{cause} after {len(records)} of {len(self.plan)} points")
            _say(f"zlf: the run's {cause} outside a point; {len(records)} finished point(s) kept\n"
                 f"run dir: {self.shown}")
            return 1
        death = {"cause": cause}
        recorded = point is not None and point["id"] in done
        if point is not None:
            death["point"] = point["id"]
            if not recorded:  # a point never gets two records
                records.append(self._failed(rd, point, cause))
            self.current = None
        self.deaths.append(death)
        meta = self._meta(rd)
        meta.update(worker_deaths=list(self.deaths), counts=_counts(records))
        rd.write_meta(meta)
        where = f"after point {point['id']}" if recorded else f"at point {point['id']}" if point else "between points"
        self._log(rd, f"WARNING {cause} {where}; the run goes on in a fresh worker")
        _say(f"zlf: {cause} {where}" + (" (its record: FAILED)" if point and not recorded else "")
             + "; the run goes on in a fresh worker")
        return None

    def _failed(self, rd: RunDir, point: dict, error: str) -> PointRecord:
        record = PointRecord(point=point["id"], op=point["op"], shape=tuple(point["shape"]), dtype=point["dtype"],
                             variant=point.get("variant") or "", status=STATUS_FAILED, error=error)
        rd.append(record)
        self._log(rd, f"{point['id']} {STATUS_FAILED} ({error})")
        return record

    def _finish(self, rd: RunDir, records: list, status: str, error: str) -> None:
        meta = self._meta(rd)
        meta.update(status=status, finished=_now(), error=error, counts=_counts(records))
        if self.deaths:
            meta["worker_deaths"] = list(self.deaths)
        try:
            rd.write_meta(meta)
        finally:
            rd.release()
        self._log(rd, f"run {status}: {len(records)} of {len(self.plan)} points written")

    @staticmethod
    def _meta(rd: RunDir) -> dict:
        try:
            return rd.meta()
        except Exception:  # a meta.json cut by the death: what the parent knows is still written
            return {}

    @staticmethod
    def _log(rd: RunDir, message: str) -> None:
        try:
            with open(rd.path / LOG, "a") as f:
                f.write(f"{_dt.datetime.now():%Y-%m-%d %H:%M:%S} {message}\n")
        except OSError:
            pass

    # ------------------------------------------------------------------ the worker
    def _stop_signal(self, signum, frame) -> None:
        """The worker's SIGINT and SIGTERM: a stop the parent passed on stops the run as it always
        did (130, 143); one the parent did not send (an op that signals its own process) kills
        the worker, which costs the point running and nothing else."""
        if self._told[0]:
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # not reached: the signal's default ends the process

    def _worker(self, fd: int, resume: Optional[dict], preexec) -> None:
        """The forked worker: run ``body``, say how it ended, exit (never returns)."""
        code = 1
        link = Link(fd)
        try:
            os.setpgid(0, 0)
            preexec()  # dies with the parent
            atexit._clear()  # the parent's exit functions are the parent's to run
            self._passed_on.restore()
            if self._wake is not None:  # the parent's: a signal of the worker's wakes no one
                signal.set_wakeup_fd(-1)
                self._close_wake()
            signal.signal(signal.SIGHUP, signal.SIG_DFL)  # an op's SIGHUP kills the worker, not the run
            signal.signal(signal.SIGINT, self._stop_signal)
            signal.signal(signal.SIGTERM, self._stop_signal)
            code = self.body(link, resume)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                link.send("exit", rc=int(code))
                atexit._run_exitfuncs()
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except (AttributeError, OSError, ValueError):
                        pass
            finally:
                os._exit(int(code) & 0xFF)
