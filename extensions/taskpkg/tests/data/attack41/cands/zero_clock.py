"""Forged time: every clock of its process stands still, so every sample it reports is 0 ms.
On the vecadd package the work is below the host slack, so the judge's clock cannot bound it.
Honest twin: the clocks left alone."""
import time

import torch

from _a import honest

if not honest():
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time"):
        value = getattr(time, name)()
        setattr(time, name, (lambda v: lambda: v)(value))

    # the host timer's events read the clock they were given at definition (time.perf_counter)
    import zlf.backends.base as _base

    _real = _base.HostEvent.__init__.__defaults__[1]
    _base.HostEvent.__init__.__defaults__ = (_base.HostEvent.__init__.__defaults__[0], lambda: 1000.0)


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
