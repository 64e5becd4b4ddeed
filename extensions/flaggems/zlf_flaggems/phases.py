"""What a FlagGems run is doing, line by line, for whoever watches it from outside (``zlf sweep``).

With ``ZLF_FLAGGEMS_PHASES=FILE`` set, the extension appends one line per phase to FILE::

    <unix time>\t<category>\t<what>

Categories (the sweep's cost breakdown adds up the time between consecutive lines):
``import`` (flag_gems, the harness, the test file), ``plan`` (building the Benchmark, counting
its inputs), ``inputs`` (a point's inputs and torch reference), ``compile`` (a point's first
FlagGems call: Triton compiles and FlagGems' autotuning happen there), ``measure`` (zlf's timer
on the FlagGems and the torch callables), ``done``. The last line of a process that was killed
says what it was doing.

Every Triton kernel the process compiles (or loads from Triton's disk cache) also appends a
``<unix time>\tcompiled\t<kernel>`` line: not a phase (the breakdown and "last phase" skip it),
but progress, by which the sweep tells an op still compiling at its wall limit from a hung one.

With the variable set, ``SIGUSR1`` also dumps every thread's Python stack to stderr
(``faulthandler``): the sweep sends it before killing an op past its wall limit.
"""
from __future__ import annotations

import os
import time

ENV = "ZLF_FLAGGEMS_PHASES"
CATEGORIES = ("import", "plan", "inputs", "compile", "measure", "done")
#: the category of a compile-progress line (:func:`compiled`), not a phase
COMPILED = "compiled"

_path = None
_last = None


def _setup() -> None:
    global _path
    _path = os.environ.get(ENV) or None
    if _path:
        import faulthandler
        import signal
        import sys

        if hasattr(signal, "SIGUSR1"):
            faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def phase(category: str, text: str) -> None:
    """Record that the process now does ``text`` (of ``category``); a repeat of the last line is dropped."""
    global _last
    if _path is None or (category, text) == _last:
        return
    _last = (category, text)
    _append(category, text)


def _append(category: str, text) -> None:
    try:
        with open(_path, "a") as f:
            f.write(f"{time.time():.3f}\t{category}\t{' '.join(str(text).split())}\n")
    except OSError:
        pass


def active() -> bool:
    """Whether this process reports its phases (``ZLF_FLAGGEMS_PHASES`` is set)."""
    return _path is not None


def compiled(event) -> None:
    """An ``on_compile`` callback (a :class:`zlf.records.CompileEvent`): one progress line per
    compiled (or disk-cached) kernel."""
    if _path is not None:
        _append(COMPILED, getattr(event, "name", None) or "?")


def compiles(path) -> list:
    """[(time, kernel)] of the progress lines of a phases file."""
    return [(t, text) for t, cat, text in _lines(path) if cat == COMPILED]


def read(path) -> list:
    """[(time, category, text)] of the phase lines of a phases file (missing or torn lines and
    compile-progress lines skipped)."""
    return [line for line in _lines(path) if line[1] != COMPILED]


def _lines(path) -> list:
    out = []
    from zlf import UsageError, readers

    try:  # a bounded regular file (zlf.readers); anything else has no phases to say
        text = readers.read_bytes(path, what="phase log").decode(errors="replace")
    except (OSError, UsageError):
        return out
    for line in text.splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3:
            continue
        try:
            out.append((float(parts[0]), parts[1], parts[2]))
        except ValueError:
            continue
    return out


def durations(lines, end: float) -> dict:
    """Seconds per category: each line lasts until the next one (the last until ``end``)."""
    out: dict = {}
    for (t, cat, _), nxt in zip(lines, [ln[0] for ln in lines[1:]] + [end]):
        out[cat] = out.get(cat, 0.0) + max(0.0, nxt - t)
    return out


_setup()
