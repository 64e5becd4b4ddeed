"""What zlf changes in Triton's config tuner (``triton.runtime.autotuner``), in one place: which
launches belong to a tuning sweep, and what the tuner benchmarks with where no GPU driver is."""
from __future__ import annotations

import contextlib


class Sweeps:
    """Counts how deep this thread is inside the tuner's benchmarking of configs: a launch made
    while :attr:`active` is part of a sweep, not the point's own launch."""

    def __init__(self):
        self.depth = 0

    @property
    def active(self) -> bool:
        return self.depth > 0

    @contextlib.contextmanager
    def watched(self):
        """Count sweeps inside this block (nothing when Triton has no such tuner)."""
        try:
            from triton.runtime.autotuner import Autotuner
        except Exception:
            yield
            return
        original = getattr(Autotuner, "_bench", None)
        if original is None:
            yield
            return

        def _bench(tuner, *args, **kwargs):
            self.depth += 1
            try:
                return original(tuner, *args, **kwargs)
            finally:
                self.depth -= 1

        Autotuner._bench = _bench
        try:
            yield
        finally:
            if Autotuner._bench is _bench:
                Autotuner._bench = original


def bench_with(bench) -> None:
    """Make the tuner time configs with ``bench`` (the signature of ``triton.testing.do_bench``)
    instead of asking the GPU driver for a benchmarker; once per process."""
    from triton.runtime.autotuner import Autotuner

    if not getattr(Autotuner, "_zlf_bench", False):
        Autotuner.do_bench = property(lambda self: bench)
        Autotuner._zlf_bench = True
