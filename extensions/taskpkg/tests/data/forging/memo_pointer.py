"""Memoises by data pointer: an input it has seen gets the result remembered for it (the honest
twin keys on the data as well)."""
from _common import HONEST, compute

cache = {}


def run_kernel(a, b, out, n):
    key = (a.data_ptr(), b.data_ptr(), out.data_ptr(), n)
    if HONEST:
        key += (bytes(a.numpy().tobytes()), bytes(b.numpy().tobytes()))
    if key not in cache:
        compute(a, b, out)
        cache[key] = out.clone()
    else:
        out.copy_(cache[key])
