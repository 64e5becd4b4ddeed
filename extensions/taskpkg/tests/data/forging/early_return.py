"""Computes on its first call, then returns without writing (the honest twin counts its calls
the same way and computes every time)."""
from _common import HONEST, compute

calls = []


def run_kernel(a, b, out, n):
    calls.append(n)
    if len(calls) == 1 or HONEST:
        compute(a, b, out)
