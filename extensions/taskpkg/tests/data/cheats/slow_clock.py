"""Class 5, times the worker reports: the candidate slows the clock its process times with
(``time.perf_counter`` and friends run 1000x slow) and does 20 ms of work per call. Honest twin:
the same work, the clock left alone."""
import time

from _cheat import honest, work

if not honest():
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns"):
        real = getattr(time, name)
        start = real()
        setattr(time, name, (lambda real, start: lambda: start + (real() - start) / 1000)(real, start))
    # the host timer's events take their clock when they are defined (time.perf_counter as it
    # was then): slow that one too, or the cheat slows nothing the timer reads
    import zlf.backends.base as _base

    _sync, _clock = _base.HostEvent.__init__.__defaults__
    _base.HostEvent.__init__.__defaults__ = (_sync, time.perf_counter)


def run_kernel(a, b, out, n):
    work(a, b, out)
