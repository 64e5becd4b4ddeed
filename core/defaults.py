"""Core's own hook implementations, registered as plugin ``core`` and always ``trylast``."""
from __future__ import annotations

import contextlib

import attrs

from . import hookimpl
from .config import as_budget
from .timing import STOPPED_BUDGET, Rotation, input_copies, time_direct, time_kernels


@hookimpl(trylast=True)
def env_prefixes():
    from .run import ENV_PREFIXES

    return ENV_PREFIXES


@hookimpl(trylast=True)
def register_backends():
    from .backends import CpuBackend, CudaBackend

    return [CpuBackend, CudaBackend]


@hookimpl(trylast=True)
def resolve_ops(spec, session):
    from .ops import resolve_core_op

    return resolve_core_op(spec, session.backend)


@hookimpl(trylast=True)
def kernel_timer(backend, options):
    offer = getattr(backend, "kernel_timer", None)  # a backend from before the contract had it
    return offer(options) if offer is not None else None


@hookimpl(trylast=True)
def time_fn(fn, point, backend, options, kernel_timer, op, inputs, call_on):
    budget = as_budget(options)
    warmup_ms, rep_ms = budget.budgets(backend)
    flush_l2 = budget.flush(backend)
    copies = None
    if flush_l2 and call_on is not None and inputs is not None:
        # every sample starts from a flushed L2, so cycling through copies changes no cache state:
        # only where the inputs live, which is one draw per process otherwise
        fn, copies = rotated(fn, inputs, call_on, budget.copies(), backend, op)
    timing = None
    if kernel_timer is not None:
        timing = time_kernels(kernel_timer, fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2)
        if timing is not None and budget.max_noise is not None and "sampling" not in timing.extra:
            # --max-noise is the direct timer's: say so where it was not honoured
            timing = attrs.evolve(timing, extra={**timing.extra, "sampling": {
                "stopped": STOPPED_BUDGET, "max_noise_pct": budget.max_noise,
                "why": f"the {timing.timer} timer samples its whole budget (--max-noise is core's direct timer's)"}})
    if timing is None:
        timing = time_direct(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2,
                             min_samples=budget.min_samples, max_samples=budget.max_samples,
                             max_noise=budget.max_noise)
    if copies is not None and timing is not None:
        timing = attrs.evolve(timing, extra={**timing.extra, "input_copies": copies})
    return timing


def rotated(fn, inputs, call_on, copies: int, backend, op=None) -> tuple:
    """``(call, {"sets": N, "why": ...})``: ``fn`` cycling through ``N`` sets of the inputs (the
    inputs and copies of them, :func:`zlf.timing.input_copies`), one set per call."""
    from .ops import outside

    with outside(op) if op is not None else contextlib.nullcontext():  # the timer's own tensor work
        sets, why = input_copies(inputs, copies, is_oom=backend.is_oom)
    note = {"sets": len(sets)}
    if why:
        note["why"] = why
    if len(sets) == 1:
        return fn, note
    return Rotation([fn] + [call_on(s) for s in sets[1:]]), note
