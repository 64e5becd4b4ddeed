"""GPU cheat: does nothing while a CUDA graph is being captured, so the graph timer replays an
empty graph; outside a capture (the checked calls, the warm-up calls on every slot) it computes."""
import torch

from _honest import run_kernel as honest_kernel


def run_kernel(*args):
    if torch.cuda.is_current_stream_capturing():
        return
    honest_kernel(*args)
