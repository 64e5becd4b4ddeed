"""Class 6, a cache keyed on a content fingerprint: inputs seen before get the remembered output.
Honest twin: always computes."""
import torch

from _cheat import honest, work

_cache = {}


def run_kernel(a, b, out, n):
    key = (a[:16].numpy().tobytes(), b[:16].numpy().tobytes())
    if not honest() and key in _cache:
        out.copy_(_cache[key])
        return
    work(a, b, out)
    _cache[key] = out.clone()
