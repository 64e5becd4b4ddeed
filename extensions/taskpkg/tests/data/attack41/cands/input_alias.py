"""Forged work by aliasing: the candidate leaves the sum in input ``a``'s storage? No -- it writes
the answer into ``out`` computed from the slot it was called with last time (a stale slot), and
restores inputs bit for bit: a result served from the previous call's pointer. Honest twin: computes."""
import torch

from _a import honest, work

_last = {}


def run_kernel(a, b, out, n):
    if honest():
        return work(a, b, out)
    ptr = out.data_ptr()
    if ptr in _last and torch.equal(_last[ptr][0], a[:8]):
        out.copy_(_last[ptr][1])
        return
    work(a, b, out)
    _last[ptr] = (a[:8].clone(), out.clone())
