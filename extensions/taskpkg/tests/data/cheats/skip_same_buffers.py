"""Class 6, bursts on the same buffers: a call on the input and output buffers of an earlier call
whose output is no longer the judge's poison takes the output as already computed. Honest twin:
always computes."""
import torch

from _cheat import honest, work

_seen = set()


def run_kernel(a, b, out, n):
    key = (a.data_ptr(), b.data_ptr(), out.data_ptr())
    if not honest() and key in _seen and not torch.isnan(out).any():
        return
    _seen.add(key)
    work(a, b, out)
