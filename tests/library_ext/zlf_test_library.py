"""A stand-in op library for ``zlf ab --library`` tests: a backend whose clock only the ops move.

Installed the way any extension is (a dist-info folder on PYTHONPATH, entry point ``libfake``), so
a campaign's ``zlf run`` processes load it too. It declares the backend ``libfake``: torch on the
host CPU, timed by :class:`zlf.testing.FakeClock`, which an op of :func:`write_library` advances
by the op's cost on each call. A point's time is then what the op's recipe says, however loaded
the machine is: the verdicts cannot depend on load.

A recipe per op (``write_library``): ``same`` (the same cost on both sides), ``slow`` (3x on side B),
``crash`` (aborts its process on side B: a point that kills its worker), ``hang`` (sleeps past
any time limit, both sides). Side B is ``LIBFAKE_SWITCH=1`` (``--switch LIBFAKE_SWITCH``). Each
process adds a small deterministic factor per op, round and side (a crc32 of the three, +-0.1 %),
so rounds differ as real ones do and every result is the same on every machine.
"""
from __future__ import annotations

import os
import sys
import time
import zlib

from zlf import hookimpl
from zlf.testing import FakeClock, fake_backend_class

SWITCH = "LIBFAKE_SWITCH"
CLOCK = FakeClock()
#: the spread of a process's factor (uniform, +-)
JITTER = 0.001


def _round_side() -> str:
    """``r<k>_<side>`` of this run (its ``--name``), as the campaign names it."""
    argv = sys.argv
    for flag, value in zip(argv, argv[1:]):
        if flag == "--name":
            return value
    return "r0_?"


def take(name: str, base_ms: float, recipe: str) -> None:
    """One call of op ``name``: the clock moves by its cost on this side and in this process."""
    side_b = os.environ.get(SWITCH) == "1"
    if recipe == "hang":
        while True:
            time.sleep(0.05)
    if recipe == "crash" and side_b:
        os.abort()
    u = zlib.crc32(f"{name}/{_round_side()}".encode()) / 0xFFFFFFFF  # in [0, 1]
    cost = base_ms * (3.0 if recipe == "slow" and side_b else 1.0) * (1.0 + JITTER * (2.0 * u - 1.0))
    CLOCK.advance(cost)


class LibraryFake:
    @hookimpl
    def register_backends(self):
        return [fake_backend_class("libfake", clock=CLOCK)]


OP_FILE = '''\
"""A generated op library (tests/library_ext/zlf_test_library.py): {n} ops; side B is {switch}=1."""
import torch

import zlf
import zlf_test_library as lib


def _op(name, base_ms, recipe):
    def fn(x):
        lib.take(name, base_ms, recipe)
        return x + 1.0

    return zlf.Op(name=name, fn=fn, make_inputs=lambda shape, dtype, device: (torch.randn(shape, device=device),),
                  shapes=[(8,)], cpu_shapes=[(8,)], reference=lambda x: x + 1.0)


'''


def write_library(folder, recipes: dict) -> tuple:
    """``(op file, op list file)`` of a library of ops ``{name: recipe}`` in ``folder``; every op's
    base cost is 0.2-0.7 ms by its name."""
    from pathlib import Path

    folder = Path(folder)
    ops = folder / "lib_ops.py"
    lines = [OP_FILE.format(n=len(recipes), switch=SWITCH)]
    for name, recipe in recipes.items():
        base = 0.2 + 0.5 * (zlib.crc32(name.encode()) % 1000) / 1000.0
        lines.append(f"{name} = _op({name!r}, {base:.4f}, {recipe!r})\n")
    ops.write_text("".join(lines))
    listing = folder / "ops.txt"
    listing.write_text("# the generated library, one OP per line\n" + "".join(f"{n}:{ops}\n" for n in recipes))
    return ops, listing
