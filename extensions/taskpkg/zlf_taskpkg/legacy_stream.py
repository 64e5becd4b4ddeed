"""A CUDA C++ candidate under a graph timer without a kernel-activity timer: events, not host wall.

The candidate's kernels go to the legacy default stream (its ``<<<...>>>`` launches name no
stream, and ``run_kernel``'s signature has none to give). A graph timer captures on a stream of
its own, so the capture holds none of them; its replay check then finds the work unjoined and
falls back to a device-wide synchronise per sample (``host_wall_sync``: host cost included).
Events recorded on the worker's current stream -- the legacy default stream, which orders itself
with every launch there -- bracket those kernels exactly. So where the run's timer is an
extension's ``time_fn`` and no kernel-activity timer is offered, such a candidate is timed
directly with the backend's events, without attempting the capture, and marked as a graph
fallback is (``reason=illegal_stream_use``). With a kernel-activity timer (CUPTI) none of this
applies: it sees the kernels on any stream.
"""
from __future__ import annotations

from .candidate import KIND_CUDA
from .timers import extension_providers

REASON = "illegal_stream_use"
DETAIL = ("a CUDA C++ candidate launches on the legacy default stream, which no graph captures: "
          "timed with events on that stream instead (no capture attempted)")


def marker(op: str, point_id: str, timer: str) -> str:
    """The graph timers' fallback marker (docs/timing.md), so one grep finds every fallback."""
    return f"BENCHMARK_DIRECT_NO_CUDAGRAPH op={op} point={point_id} reason={REASON} timer={timer}"


def needs_events(hooks, backend, budget, kind: str) -> bool:
    """Whether ``kind`` would otherwise reach a graph timer with nothing better to fall back on."""
    if kind != KIND_CUDA or backend.host_timing or budget.timer == "core":
        return False
    if not extension_providers(hooks, "time_fn"):
        return False  # core's own time_fn: events (or the kernel timer) already
    return hooks.kernel_timer(backend, budget) is None


def time_candidate(run, kind: str, fn, point, op, inputs, budget):
    """The candidate's timing: :meth:`zlf.run.Run.time_point`, or direct events (see the module)."""
    if not needs_events(run.hooks, run.backend, budget, kind):
        return run.time_point(fn, point, op=op, inputs=inputs, budget=budget)
    import attrs
    from zlf.timing import time_direct

    warmup_ms, rep_ms = budget.budgets(run.backend)
    timing = time_direct(fn, run.backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=budget.flush(run.backend),
                         min_samples=budget.min_samples, max_samples=budget.max_samples)
    line = marker(point.op, point.id, timing.timer)
    run.mark(line)
    return attrs.evolve(timing, markers=(*timing.markers, line),
                        extra={**timing.extra, "task_timer": {"fallback": REASON, "detail": DETAIL,
                                                              "fallback_timer": timing.timer}})
