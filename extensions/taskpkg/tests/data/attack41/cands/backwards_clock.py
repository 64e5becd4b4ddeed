"""Forged time: its process's clocks run backwards, so every sample is negative; the judge drops
a negative duration -- and with it the whole timing? Honest twin: the clocks left alone."""
import time

import torch

from _a import honest

if not honest():
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns"):
        real = getattr(time, name)
        start = real()
        setattr(time, name, (lambda real, start: lambda: start - (real() - start))(real, start))

    # the host timer's events read the clock they were given at definition (time.perf_counter)
    import zlf.backends.base as _base

    _real = _base.HostEvent.__init__.__defaults__[1]
    _base.HostEvent.__init__.__defaults__ = (_base.HostEvent.__init__.__defaults__[0], (lambda real, start: lambda: start - (real() - start))(_real, _real()))


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
