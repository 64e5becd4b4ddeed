"""What the bisect tests build: generated git repositories of an op, and a deterministic fake
clock (imported by the test modules that use them, as ``history_fixtures`` is: a ``conftest.py``
here would shadow the suite's own)."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable, Optional

import pytest

#: an op of REPS multiplications; a revision that is ``broken`` does not import
OP_FILE = '''"""A test op: REPS multiplications (revision {k})."""
import torch
import zlf
{broken}
REPS = {reps}


def make_inputs(shape, dtype, device):
    a = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (a, torch.empty_like(a))


def work(a, out):
    for _ in range(REPS):
        torch.mul(a, 1.5, out=out)


work_op = zlf.Op(name="work", fn=work, make_inputs=make_inputs, shapes=[({size},)], dtypes=("float32",),
                 reference=lambda a, out: a * 1.5, outputs=(1,), cpu_shapes=[({size},)])
'''

#: A timer whose readings depend on the work an op declares, never on the machine's load: the
#: end-to-end search must reach the same answer on a busy CI machine as on an idle one. It reads
#: the op module's REPS (1 or 4) and adds a fixed +-0.3 % of noise drawn per process.
FAKE_CLOCK = '''
import os
import random

from zlf import hookimpl
from zlf.records import Timing


@hookimpl
def time_fn(fn, point, op):
    fn()
    reps = op.fn.__globals__.get("REPS", 1)
    # A process's level moves by at most 0.03 %: well inside the smallest change a 3-round
    # campaign decides at a bisect step's level (a step that is really unchanged is SAME whatever
    # the process ids; at 0.3 % a step came out UNSURE now and then)
    rng = random.Random(os.getpid())
    level = reps * (1.0 + rng.uniform(-0.0003, 0.0003))
    return Timing.from_samples([level * (1.0 + rng.uniform(-0.0001, 0.0001)) for _ in range(20)], timer="fake_clock")
'''


def work_op(k: int, reps: int, broken: bool = False, size: int = 1 << 20) -> str:
    """The op module of revision ``k``: ``reps`` multiplications of ``size`` floats."""
    return OP_FILE.format(k=k, reps=reps, size=size, broken="import zlf_no_such_module_anywhere" if broken else "")


@pytest.fixture
def fake_clock(tmp_path):
    """The fake clock as an installed extension (entry point ``fakeclock``) for child processes:
    the environment to give them (``--timer fakeclock`` selects it)."""
    from zlf.testing import pythonpath

    site = tmp_path / "site"
    info = site / "zlf_fake_clock-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zlf-fake-clock\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zlf]\nfakeclock = zlf_fake_clock\n")
    (site / "zlf_fake_clock.py").write_text(FAKE_CLOCK)
    return pythonpath(site)


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit_series(repo: Path, count: int, write: Callable[[Path, int], None],
                  message: Optional[Callable[[int], str]] = None) -> tuple:
    """A fresh repository ``repo`` of ``count`` commits; before commit ``k``, ``write(repo, k)``
    changes its files. Returns ``(repo, [sha0, ..., sha(count-1)])``."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    shas = []
    for k in range(count):
        write(repo, k)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message(k) if message else f"commit {k}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas
