"""The ``cupti`` extension's hooks: a kernel-activity timer for backends that speak CUPTI.

It implements ``kernel_timer``, not ``time_fn``: core's own ``time_fn`` times every point with
it (``--ext cupti`` or ``--timer cupti``), and a graph timer whose capture fails for a point
falls back to it (``--ext cudagraph --ext cupti``). Where no CUPTI can be read (cpu, a vendor
backend, a machine without cupti-python and without torch's CUDA profiler) it says so in one
line and offers nothing: core's event timer decides, labelled as always.
"""
from __future__ import annotations

from zlf import hookimpl

from .sources import SOURCES, make_source
from .timer import MAX_SAMPLES, TIMER_NAME, CuptiTimer


def _warn(message: str) -> None:
    from zlf.console import warn

    warn(message)


class CuptiPlugin:
    """Hook implementations of the ``cupti`` entry point (instantiated once per invocation)."""

    def __init__(self):
        #: backend name -> the line said when no timer could be offered for it
        self.unavailable = {}
        self.source = None

    @hookimpl
    def add_options(self, parser, traits):
        if not traits.times_points:
            return
        g = parser.add_argument_group("cupti (extension)")
        g.add_argument("--cupti-source", choices=SOURCES, default="auto",
                       help="where CUPTI's activity records are read: cupti-python, torch's profiler, or "
                            "the first of them this machine has (default auto)")

    @hookimpl
    def kernel_timer(self, backend, options):
        if getattr(backend, "activity_api", "") != "cupti":
            return self._none(backend, f"backend {backend.name!r} has no CUPTI")
        from zlf.config import as_budget

        choice = as_budget(options).option("cupti_source") or "auto"
        source, why = make_source(choice)
        if source is None:
            return self._none(backend, why)
        self.source = source.name
        return CuptiTimer(source)

    def _none(self, backend, why: str):
        name = getattr(backend, "name", "?")
        if name not in self.unavailable:
            self.unavailable[name] = why
            _warn(f"extension cupti: no kernel-activity timer ({why}); core's timer decides")
        return None

    @hookimpl
    def before_run(self, run):
        # Ask now (the answer is kept for every point), so meta.json and run.log say which timer runs.
        offered = run.hooks.kernel_timer(run.backend, run.config.timing)
        why = self.unavailable.get(run.backend.name)
        run.meta["cupti"] = {
            "timer": TIMER_NAME,
            "active": isinstance(offered, CuptiTimer),
            "source": offered.source.name if isinstance(offered, CuptiTimer) else None,
            "source_choice": run.config.options.get("cupti_source", "auto"),
            "unavailable_reason": why,
            "max_samples": MAX_SAMPLES,
            "sample": "sum of the device durations of every kernel one call launched, on any stream "
                      "(memcpy / memset reported apart); host wall-clock per call in wall_ms",
        }
        if why:
            run.log.warning(f"extension cupti: no kernel-activity timer ({why}); core's timer decides")
