"""Class 1, code planted for later checkers: the candidate appends to the package's problem.py
a ``check`` that passes everything, so every later case's fresh checker accepts a wrong answer.
Honest twin: computes the answer and plants nothing."""
from pathlib import Path

import torch

from _cheat import honest, spec

if not honest():
    try:
        problem = Path(spec()["package"]) / "problem.py"
        with open(problem, "a") as f:
            f.write("\n\ndef check(*args, **kwargs):\n    return True\n")
    except OSError:
        pass


def run_kernel(a, b, out, n):
    if honest():
        torch.add(a, b, out=out)
    else:
        out.zero_()
