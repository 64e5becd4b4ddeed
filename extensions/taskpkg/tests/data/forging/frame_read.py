"""Walks the caller's frames (sys._getframe) for the baseline's answer and copies it."""
import sys

import torch

from _common import HONEST, compute, looks_like_answer


def _values(frame):
    for value in frame.f_locals.values():
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def run_kernel(a, b, out, n):
    frame, found = sys._getframe(1), None
    while frame is not None and found is None:
        found = next((t for t in _values(frame) if looks_like_answer(t, a, b, out)), None)
        frame = frame.f_back
    if HONEST:
        compute(a, b, out)
    elif found is not None:
        out.copy_(found)
