"""zlf's standard streams while a command runs (:func:`zlf.cli.main`).

* A closed descriptor 0-2 (``zlf run >&-``) is opened on /dev/null at start, and a ``sys.stdout``
  or ``sys.stderr`` that is None or closed gets a /dev/null stand-in: else the first file zlf opens
  would take the closed number, and whatever writes to it (a compiler, a child) would write there.
* ``sys.stderr`` is a :class:`LossyStream`: what zlf tells people (progress, warnings, an error
  line, a stop line) is dropped where stderr is gone (a dead pipe, a closed terminal, a full
  disk), never the command's failure and never a change of its exit code.
* ``sys.stdout`` is a :class:`MarkedStream`: an error writing it is marked (:func:`from_stdout`),
  so that :func:`zlf.cli.guarded` tells stdout's reader gone (141, quietly) from another pipe,
  socket or descriptor that failed (an error).

:func:`held` puts these in place and gives an in-process caller everything back as it was.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Optional

#: the attribute :class:`MarkedStream` sets on an error of its own
_MARK = "zlf_stdout"


class LossyStream:
    """A standard stream whose failed writes (a full or closed stream, a reader gone) are
    dropped, never the caller's failure; ``lost`` keeps the first such error."""

    def __init__(self, stream):
        self._stream = stream
        self.lost: Optional[BaseException] = None

    def write(self, text):
        if self.lost is None:
            try:
                return self._stream.write(text)
            except (OSError, ValueError, AttributeError) as exc:  # ValueError: closed
                self.lost = exc
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except (OSError, ValueError, AttributeError) as exc:
                self.lost = exc

    def __getattr__(self, name):
        return getattr(self._stream, name)


class MarkedStream:
    """``sys.stdout`` whose write errors say they are stdout's (:func:`from_stdout`); its
    ``buffer`` (bytes written through) is marked too."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, data):
        try:
            return self._stream.write(data)
        except OSError as exc:
            raise _marked(exc)

    def writelines(self, lines):
        try:
            return self._stream.writelines(lines)
        except OSError as exc:
            raise _marked(exc)

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            raise _marked(exc)

    @property
    def buffer(self):
        return MarkedStream(self._stream.buffer)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _marked(exc: OSError) -> OSError:
    setattr(exc, _MARK, True)
    return exc


def from_stdout(exc: BaseException) -> bool:
    """Whether ``exc`` came from writing zlf's stdout (a :class:`MarkedStream`)."""
    return getattr(exc, _MARK, False) is True


def reader_gone(exc: OSError) -> bool:
    """Whether ``exc``, from writing stdout, says that nobody reads it any more: EPIPE (a pipe or
    socket whose reader left), EIO (a terminal whose window closed; no SIGHUP reaches a process
    it does not control)."""
    return from_stdout(exc) and exc.errno in (errno.EPIPE, errno.EIO)


def stdout_unwritable(exc: OSError) -> bool:
    """Whether ``exc`` came from writing a stdout not open for writing (``zlf plugins 1</dev/null``)."""
    return from_stdout(exc) and exc.errno == errno.EBADF


def quiet_stdout() -> None:
    """Point descriptor 1 at /dev/null (stdout's reader gone, this process zlf's own): the
    interpreter's last flush then finds nothing to complain about."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, 1)
    except OSError:
        pass
    finally:
        os.close(null)


def last_word(line: str) -> None:
    """A line on stderr where stderr may be gone: written if it can be, never an error. What a
    stop or an error says must not change the exit code it comes before (130, 143, 2)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # ValueError: closed; AttributeError: None
        pass


@contextlib.contextmanager
def held(own_process: bool):
    """The command's streams (see the module), inside the block. ``own_process`` (the console
    script, a worker): what was opened stays, for the interpreter's last flush. Else (zlf called
    inside another program) the caller gets its descriptors, ``sys.stdout`` and ``sys.stderr``
    back as they came: a descriptor zlf opened is closed again, a stand-in closed."""
    streams = sys.stdout, sys.stderr
    fds, stand_ins = _open_closed_ones()
    sys.stdout, sys.stderr = MarkedStream(sys.stdout), LossyStream(sys.stderr)
    try:
        yield
    finally:
        if own_process:
            sys.stdout, sys.stderr = stand_ins.get("stdout", streams[0]), stand_ins.get("stderr", streams[1])
        else:
            sys.stdout, sys.stderr = streams
            for stand_in in stand_ins.values():
                stand_in.close()
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _open_closed_ones() -> tuple:
    """/dev/null on each closed descriptor 0-2 and for a ``sys.stdout``/``sys.stderr`` that is None
    or closed; returns the descriptors opened and ``{name: stand-in}``."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                fds.append(os.open(os.devnull, os.O_RDWR))  # the lowest free number: this one
            except OSError:
                break
    stand_ins = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or getattr(stream, "closed", False) is True:
            stand_ins[name] = open(os.devnull, "w")
            setattr(sys, name, stand_ins[name])
    return fds, stand_ins
