"""GPU cheat in the manner of a persistent kernel: the call returns at once and the work runs
later, behind a long-running kernel on a stream of its own (a spin of about 2 ms), i.e. after
the timer's end mark on the current stream; a device-wide synchronise still waits for it."""
import torch

from _honest import run_kernel as honest_kernel

_side = []


def run_kernel(*args):
    if not _side:
        _side.append(torch.cuda.Stream())
    with torch.cuda.stream(_side[0]):
        torch.cuda._sleep(2_000_000)  # the "persistent" kernel: busy for a while, then the work
        honest_kernel(*args)
