"""Core's own hook implementations, registered as plugin ``core`` and always ``trylast``."""
from __future__ import annotations

from . import hookimpl
from .config import as_budget
from .timing import time_direct, time_kernels


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
def make_inputs(op, point, backend):
    if point.variant:
        return tuple(op.make_inputs(point.shape, point.dtype, backend.device, variant=point.variant))
    return tuple(op.make_inputs(point.shape, point.dtype, backend.device))


@hookimpl(trylast=True)
def kernel_timer(backend, options):
    offer = getattr(backend, "kernel_timer", None)  # a backend from before the contract had it
    return offer(options) if offer is not None else None


@hookimpl(trylast=True)
def time_fn(fn, point, backend, options, kernel_timer):
    budget = as_budget(options)
    warmup_ms, rep_ms = budget.budgets(backend)
    flush_l2 = budget.flush(backend)
    if kernel_timer is not None:
        timing = time_kernels(kernel_timer, fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2)
        if timing is not None:
            return timing
    return time_direct(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2,
                       min_samples=budget.min_samples, max_samples=budget.max_samples)
