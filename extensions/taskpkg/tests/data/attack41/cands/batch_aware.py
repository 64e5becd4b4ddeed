"""Forged time, refused: the candidate tells the judge's clocked batch (``Worker.batch`` on its
stack) from the timed loop, is honest there, and in the timed loop computes a slot only while
its output is still poison. Honest twin: always computes."""
import torch

from _a import honest, in_frame, work


def run_kernel(a, b, out, n):
    if honest() or in_frame("batch") or torch.isnan(out).any():
        return work(a, b, out)
