"""Core's own hook implementations, registered as plugin ``core`` and always ``trylast``."""
from __future__ import annotations

from . import hookimpl
from .timing import budgets, flush_policy, time_direct


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
def time_fn(fn, point, backend, options):
    warmup_ms, rep_ms = budgets(options, backend)
    return time_direct(fn, backend, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_policy(options, backend))
