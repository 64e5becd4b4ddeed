"""GPU cheat: the work on a stream of its own that the current stream never waits for, so a timer
that brackets the current stream (events) sees an empty call. The worker's device-wide
synchronise still waits for it, so the answer is there when the checker looks."""
import torch

from _honest import run_kernel as honest_kernel

_side = []


def run_kernel(*args):
    if not _side:
        _side.append(torch.cuda.Stream())
    with torch.cuda.stream(_side[0]):
        honest_kernel(*args)
