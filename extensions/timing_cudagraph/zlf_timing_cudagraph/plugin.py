"""The ``cudagraph`` extension's hooks: graph-replay ``time_fn`` with a per-point marked fallback.

A point whose callable cannot be captured (host sync, ``.item()``, device-to-host copy, illegal
stream use) or whose graph does not reproduce its outputs (work on an unjoined stream) is timed
by the kernel-activity timer when one is offered (``--ext cupti``), else by core's direct timer,
and its record and run.log carry
``BENCHMARK_DIRECT_NO_CUDAGRAPH op=<op> point=<id> reason=<cause> timer=<timer>``: a table
mixing timers says which rows used which.

The plugin is a class so that its state (a process that can no longer capture) lives in one
instance per plugin manager, never in a module global.
"""
from __future__ import annotations

import attrs

from zlf import hookimpl
from zlf.options import Number

from .capture_errors import REASONS, CaptureFailure, marker_line
from .graph_timer import MAX_CALLS, REPLAY_MS, TIMER_NAME, GraphSettings, graph_support, time_graph

PROBES = ("inline", "subprocess")


def _warn(message: str) -> None:
    from zlf.console import warn

    warn(message)


def _kernel_timer_name(run):
    hooks = getattr(run, "hooks", None)
    timer = hooks.kernel_timer(run.backend, run.config.timing) if hooks is not None else None
    return getattr(timer, "name", None)


class CudaGraphTimer:
    """Hook implementations of the ``cudagraph`` entry point (instantiated once per invocation)."""

    def __init__(self):
        #: one line saying why this process can no longer capture, once a failed capture broke it.
        self.poisoned = None
        self._skip_warned = False
        #: the session's :class:`zlf.config.RunConfig`: what a capture probe's child process is given
        self.config = None

    @hookimpl
    def configure(self, session):
        self.config = session.config

    # ------------------------------------------------------------------ command line
    @hookimpl
    def add_options(self, parser, traits):
        if not traits.times_points:
            return
        g = parser.add_argument_group("cudagraph (extension)")
        g.add_argument("--cudagraph-probe", choices=PROBES, default="inline",
                       help="where a point's first capture is tried: in this process (default; a failed "
                            "capture is cleaned up) or in a child process first (slower, isolates the device "
                            "state after a failed capture)")
        g.add_argument("--cudagraph-replay-ms", type=Number(float, 0, 60_000, low_open=True, unit="ms"),
                       default=REPLAY_MS, metavar="MS",
                       help=f"device time one graph replay aims at (default {REPLAY_MS})")
        g.add_argument("--cudagraph-max-calls", type=Number(int, 1, 10**6, unit="calls"), default=MAX_CALLS, metavar="N",
                       help=f"most calls captured into one graph (default {MAX_CALLS})")
        g.add_argument("--cudagraph-no-verify", action="store_true",
                       help="skip the replay-vs-direct output check that catches work on unjoined streams")

    # ------------------------------------------------------------------ run lifecycle
    @hookimpl
    def before_run(self, run):
        self.config = run.config
        why = graph_support(run.backend)
        settings = GraphSettings.from_options(run.config.timing, run.backend)
        run.meta["cudagraph"] = {
            "active": why is None,
            "skipped_reason": why,
            "timer": TIMER_NAME,
            "fallback_timer": run.backend.timer_name,
            # the timer a point whose capture fails is measured with (None: core's direct timer)
            "kernel_timer": _kernel_timer_name(run),
            "l2": settings.l2,
            "l2_method": settings.l2_method,
            "probe": run.config.options.get("cudagraph_probe", "inline"),
            "replay_ms": settings.replay_ms,
            "max_calls": settings.max_calls,
            "verify": settings.verify,
            "warmup_ms": settings.warmup_ms,
            "rep_ms": settings.rep_ms,
            "sample": "median over replays of (replay elapsed / calls per graph)",
            "marker": "BENCHMARK_DIRECT_NO_CUDAGRAPH op=<op> point=<id> reason=<" + "|".join(REASONS) + "> timer=<timer>",
        }
        if why:
            message = f"extension cudagraph skipped: {why}; points are timed by core's timer ({run.backend.timer_name})"
            run.log.warning(message)
            _warn(message)
            self._skip_warned = True

    # ------------------------------------------------------------------ timing
    @hookimpl
    def time_fn(self, fn, point, backend, options, op, inputs, kernel_timer):
        why = graph_support(backend)
        if why:
            if not self._skip_warned:  # embedded use without a Run: still say it once
                _warn(f"extension cudagraph skipped: {why}")
                self._skip_warned = True
            return None  # the next timer (core's direct one) decides
        from zlf.config import as_budget

        budget = as_budget(options)
        settings = GraphSettings.from_options(budget, backend)
        probe = budget.option("cudagraph_probe") or "inline"
        if self.poisoned:
            return self._direct(fn, point, backend, settings, CaptureFailure("context_poisoned", self.poisoned),
                                probe, kernel_timer)
        if probe == "subprocess":
            from .probe import probe_in_child

            failure = probe_in_child(self.config, point)
            if failure is not None:
                return self._direct(fn, point, backend, settings, failure, probe, kernel_timer)
        dtype = getattr(point, "dtype", "")
        try:
            timing = time_graph(fn, backend, settings, op=op, inputs=inputs, dtype=dtype)
        except CaptureFailure as failure:
            self._check_health(backend, failure)
            return self._direct(fn, point, backend, settings, failure, probe, kernel_timer)
        extra = dict(timing.extra)
        extra["cudagraph"] = {**extra.get("cudagraph", {}), "probe": probe}
        return attrs.evolve(timing, extra=extra)

    def _check_health(self, backend, failure: CaptureFailure) -> None:
        """After a failed capture, make sure this process can still allocate and capture."""
        import warnings

        from .graph_timer import capture

        try:
            backend.synchronize()
            backend.free_memory()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns that the test graph is empty
                capture(backend, backend.new_stream(), lambda: None, 1)
        except Exception as exc:
            self.poisoned = f"after {failure.reason} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            _warn(f"cudagraph: a failed capture left this process unable to capture ({self.poisoned}); "
                  "every later point is timed directly -- rerun with --cudagraph-probe subprocess")

    def _direct(self, fn, point, backend, settings: GraphSettings, failure: CaptureFailure, probe: str,
                kernel_timer=None):
        """The point timed without a graph, with the same L2 policy as graph mode, marked.

        By the kernel-activity timer when one is offered (``--ext cupti``): device time of every
        kernel on any stream, so neither host cost nor an unjoined stream distorts it. Else by
        core's direct timer, host-inclusive (``host_wall_sync`` for unjoined work).
        """
        from zlf.timing import time_direct, time_kernels

        timing = None
        if kernel_timer is not None:
            timing = time_kernels(kernel_timer, fn, backend, warmup_ms=settings.warmup_ms, rep_ms=settings.rep_ms,
                                  flush_l2=settings.flush_l2)
            if timing is None and failure.reason == "unjoined_stream_work":
                # The replay left the outputs untouched, and the activity tracer saw no kernel, copy
                # or memset in any call: nothing ran on another stream, nothing ran at all (a view
                # or metadata-only op, such as alias or unfold). Host time is all the call has.
                failure = CaptureFailure("no_device_work", f"{kernel_timer.name} saw no kernel, copy or memset in "
                                         f"any call; the replay check: {failure.detail}")
        if timing is None:
            # Work on a stream nobody joins is outside the current stream's events as well: only a
            # device-wide synchronize per sample sees it (an honest upper bound, host cost included).
            # A call without device work has host time only: the same host clock.
            host = failure.reason in ("unjoined_stream_work", "no_device_work")
            clock = _SynchronizedClock(backend) if host else backend
            timing = time_direct(fn, clock, warmup_ms=settings.warmup_ms, rep_ms=settings.rep_ms,
                                 flush_l2=settings.flush_l2)
        extra = dict(timing.extra)
        extra["cudagraph"] = {"fallback": failure.reason, "detail": failure.detail, "probe": probe,
                              "fallback_timer": timing.timer}
        return attrs.evolve(
            timing,
            fallback_reason=failure.reason,
            markers=tuple(timing.markers) + (marker_line(point.op, point.id, failure.reason, timing.timer),),
            extra=extra,
        )


class _SynchronizedClock:
    """A backend seen through host-clock events that synchronise the whole device first."""

    def __init__(self, backend):
        self._backend = backend
        self.timer_name = "host_wall_sync"

    def event(self):
        from zlf.backends import HostEvent

        return HostEvent(self._backend.synchronize)

    def __getattr__(self, name):
        return getattr(self._backend, name)
