"""Looking at processes from core's tests: whether one runs, its children, waiting for something
to happen. Every wait has a ceiling for a machine loaded many times over, never a measured
time: it returns as soon as what it waits for is there."""
from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

#: how long a test waits for what it looks for (a process started, a file written, a process gone)
CEILING = 120


@contextlib.contextmanager
def stops_as_from_a_terminal():
    """SIGINT and SIGHUP at their defaults while the block runs, so the processes it starts get
    them as from a terminal: a shell's background job (``nohup``, a CI runner) inherits both
    ignored, a Python started so never stops on them, and a test that sends one would wait for
    nothing. Only SIG_IGN survives exec: a child gets the default of a handler set here."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by whoever adopted it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(pid: int) -> list:
    """The processes below ``pid``, children first."""
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(predicate, timeout: float, what: str):
    """``predicate()``'s first true value; the test fails when none comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def gone_within(pids, seconds: float = CEILING) -> bool:
    """Whether every process of ``pids`` (or the one pid) is gone within ``seconds``; those left
    are killed, so that no test leaves them to the next."""
    pids = [pids] if isinstance(pids, int) else list(pids)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return False


def only_dir(parent: Path) -> Path:
    dirs = [d for d in parent.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]
