"""The op API: what zlf benchmarks, and where ops come from.

An :class:`Op` is a named benchmarkable thing. A user's Python file defines ops like this::

    import torch, zlf

    def make(shape, dtype, device):
        x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
        return (x, torch.empty_like(x))          # inputs, then the output buffer

    def relu(x, out):                             # the callable that gets timed
        torch.relu(x, out=out)

    relu_op = zlf.Op(name="relu", fn=relu, make_inputs=make, shapes=[(1 << 20,)],
                     reference=lambda x, out: torch.relu(x), outputs=(1,),
                     bytes=lambda shape, dtype: 2 * zlf.ops.numel(shape) * zlf.ops.itemsize(dtype))

and is run with ``zlf run my_ops.py::relu_op`` (or ``zlf run my_ops.py`` for every op in it).
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
from typing import Callable, Optional, Sequence

import attrs

from ..errors import UsageError

BUILTIN_OPS = ("add", "softmax", "matmul")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "int16", "uint8", "bool", "complex64",
          "complex128", "float8_e4m3fn", "float8_e5m2")
#: relative L2 error allowed against the reference, by dtype (METHOD: fp32 far under 1e-3).
DEFAULT_TOLERANCE = {"float64": 1e-9, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2, "complex64": 1e-5,
                     "complex128": 1e-9}


def numel(shape) -> int:
    return int(math.prod(shape))


def itemsize(dtype: str) -> int:
    import torch

    return torch.empty((), dtype=torch_dtype(dtype)).element_size()


def torch_dtype(dtype: str):
    import torch

    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def _shape_list(value) -> list:
    return [tuple(int(d) for d in s) for s in value]


@attrs.frozen
class Op:
    """A benchmarkable operation.

    :param name: the op's name (first part of every point id).
    :param fn: the callable timed; called as ``fn(*inputs)``.
    :param make_inputs: ``(shape, dtype, device) -> tuple`` of inputs; random, never zeros.
    :param shapes: default shapes on a GPU.
    :param dtypes: default dtypes (names of torch dtypes).
    :param reference: ``(*inputs) -> expected`` output, computed independently of ``fn``.
    :param outputs: indices of inputs that ``fn`` writes in place; they are poisoned (NaN) before
        the checked call and compared to the reference. Empty: ``fn``'s return value is compared.
    :param bytes: ``(shape, dtype) -> int`` bytes moved, for GB/s.
    :param flops: ``(shape, dtype) -> int`` floating-point operations, for TFLOP/s.
    :param cpu_shapes: shapes used on the ``cpu`` backend (the interpreter is slow).
    :param cpu_dtypes: dtypes used on the ``cpu`` backend.
    :param tolerance: relative L2 error allowed, by dtype, overriding :data:`DEFAULT_TOLERANCE`.
    :param shape_rank: allowed shape lengths (None: any).
    :param shape_desc: names of the shape dimensions, e.g. ``"M, N, K"``.
    :param aliases: further keys this op answers to in shape files.
    :param variants: ``(shape, dtype) -> list of labels``: several points per (shape, dtype), one
        per label (``Point.variant``); ``make_inputs`` then receives ``variant=label``. None: one point.
    :param outside: ``() -> context manager`` for an op whose calls need an environment held
        across calls (e.g. FlagGems' aten dispatch, too costly to enter per call). zlf's own tensor
        work between the op's calls -- the correctness check, a timer's verification -- runs
        inside it (see :func:`outside`); the op's next call restores the environment. None: nothing.
    :param copies: ``fn`` runs on the inputs it is given, so copies of them elsewhere in device
        memory give the same call elsewhere (``--input-copies``). False for an op whose inputs
        only stand for work it holds itself (FlagGems' call objects): its calls are never
        cycled through copies.
    """

    name: str
    fn: Callable
    make_inputs: Callable
    shapes: Sequence = attrs.field(converter=_shape_list)
    dtypes: Sequence = ("float32",)
    reference: Optional[Callable] = None
    outputs: tuple = ()
    bytes: Optional[Callable] = None
    flops: Optional[Callable] = None
    cpu_shapes: Optional[Sequence] = attrs.field(default=None, converter=attrs.converters.optional(_shape_list))
    cpu_dtypes: Optional[Sequence] = None
    tolerance: dict = attrs.field(factory=dict)
    shape_rank: Optional[tuple] = None
    shape_desc: str = ""
    aliases: tuple = ()
    description: str = ""
    variants: Optional[Callable] = None
    outside: Optional[Callable] = None
    copies: bool = True

    def default_shapes(self, backend) -> list:
        if backend.host_timing and self.cpu_shapes:
            return list(self.cpu_shapes)
        return list(self.shapes)

    def default_dtypes(self, backend) -> list:
        if backend.host_timing and self.cpu_dtypes:
            return list(self.cpu_dtypes)
        return list(self.dtypes)

    def check_shape(self, shape) -> Optional[str]:
        """Why ``shape`` is not valid for this op, or None."""
        if not shape or any(int(d) <= 0 for d in shape):
            return f"shape {list(shape)} must be a non-empty list of positive integers"
        if self.shape_rank and len(shape) not in self.shape_rank:
            want = " or ".join(str(r) for r in self.shape_rank)
            desc = f" ({self.shape_desc})" if self.shape_desc else ""
            return f"op {self.name!r} takes shapes of {want} dimensions{desc}, got {list(shape)}"
        return None

    def tolerance_for(self, dtype: str) -> float:
        return self.tolerance.get(dtype, DEFAULT_TOLERANCE.get(dtype, 0.0))


def point_inputs(op: Op, point, backend) -> tuple:
    """The inputs of one point (a :class:`zlf.records.Point`) on ``backend``'s device: the op's
    own ``make_inputs``, given the point's variant when it has one."""
    if point.variant:
        return tuple(op.make_inputs(point.shape, point.dtype, backend.device, variant=point.variant))
    return tuple(op.make_inputs(point.shape, point.dtype, backend.device))


def outside(op):
    """The context for zlf's own tensor work between calls of ``op`` (checks, verification):
    ``op.outside()`` when the op has one, else nothing. Timers that compare or poison tensors
    inside ``time_fn`` use it too, so that work never runs on the op's replacement kernels."""
    factory = getattr(op, "outside", None)
    return factory() if factory is not None else contextlib.nullcontext()


def self_overlapping(t) -> bool:
    """Whether elements of ``t`` share memory (an expanded view, a stride of 0): no kernel writes
    such a tensor, and torch refuses to (``more than one element of the written-to tensor refers
    to a single memory location``). zlf never poisons one; it is compared as it is."""
    import torch

    try:
        return torch._debug_has_internal_overlap(t) == 1  # 0 no, 1 yes, 2 too hard to tell
    except Exception:
        return any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride()))


def tensors_in(value) -> list:
    """Every tensor in ``value``: a tensor, or lists, tuples and dicts of them, nested, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def poison_tensors(tensors) -> None:
    """Fill tensors with values a correct kernel overwrites: NaN (floating and complex), the
    largest value (integers), the negation of what is there (bool). A tensor whose elements
    share memory (:func:`self_overlapping`) is left as it is."""
    import torch

    for t in tensors:
        if self_overlapping(t):
            continue
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.fill_(torch.iinfo(t.dtype).max)


def poison(inputs, indices) -> None:
    """Poison the output buffers ``inputs[i]`` for ``i`` in ``indices`` before the checked call."""
    poison_tensors(inputs[i] for i in indices)


def compare_dtype(*tensors):
    """float64, or complex128 when any tensor is complex: a float64 cast drops the imaginary part."""
    import torch

    return torch.complex128 if any(t.dtype.is_complex for t in tensors) else torch.float64


def relative_error(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64, complex128 for complex results (inf for a shape
    mismatch, nan if out has NaN)."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    # On the device: copying a 64M-element output to the host would cost more than timing it.
    wide = compare_dtype(out, ref)
    r = ref.detach().to(out.device, wide)
    o = out.detach().to(wide)
    denom = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    return num / denom if denom > 0 else num


def check_output(op: Op, inputs, returned, dtype: str) -> tuple:
    """Compare the checked call against the reference: ``(max_rel_err, error or None)``."""
    if op.reference is None:
        return None, None
    expected = op.reference(*inputs)
    actual = [inputs[i] for i in op.outputs] if op.outputs else returned
    actual = list(actual) if isinstance(actual, (list, tuple)) else [actual]
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    if len(actual) != len(expected):
        return None, f"wrong result: {len(actual)} outputs, reference has {len(expected)}"
    if not expected:
        return None, None  # nothing to compare: "not checked", not "exact"
    tol = op.tolerance_for(dtype)
    worst = 0.0
    for k, (a, e) in enumerate(zip(actual, expected)):
        err = relative_error(a, e)
        if math.isnan(err) or err > tol:
            what = "NaN or unwritten elements" if math.isnan(err) else f"relative error {err:.3g} > {tol:g}"
            if math.isinf(err):
                what = f"shape {tuple(a.shape)} != reference {tuple(e.shape)}"
            return err, f"wrong result (output {k}): {what}"
        worst = max(worst, err)
    return worst, None


# ----------------------------------------------------------------------------- sources of ops
def builtin_ops(backend) -> dict:
    """The built-in ops by name. Imported lazily: kernels are decorated only after the backend
    has prepared the process (the interpreter must be on before ``@triton.jit`` runs)."""
    from . import builtin

    if _decorated_otherwise(builtin.add_kernel):
        # Imported before under the other mode (an in-process zlf ir, then a cpu run, or the
        # reverse): its kernels would launch on a driver that runs nothing, or not compile.
        builtin = importlib.reload(builtin)
    return builtin.make_ops()


def _decorated_otherwise(kernel) -> bool:
    """Whether ``kernel`` was decorated with the interpreter in the other state than now."""
    from triton.runtime.jit import JITFunction

    return isinstance(kernel, JITFunction) == triton_interpreting()


def triton_interpreting() -> bool:
    """Whether ``@triton.jit`` decorates interpreted kernels now (``TRITON_INTERPRET``, as Triton
    reads it; a Triton before 3.4, a vendor fork's among them, has no ``triton.knobs``: the
    environment says)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _load_module(path: str):
    if not os.path.isfile(path):
        raise UsageError(f"op file {path!r} not found")
    modname = "zlf_user_ops_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"op file {path!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _as_ops(value, where: str) -> list:
    if callable(value) and not isinstance(value, Op):
        try:
            value = value()
        except Exception as exc:
            raise UsageError(f"{where} is not a zlf.Op, and calling it to get ops failed: {type(exc).__name__}: {exc}") from exc
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items or not all(isinstance(v, Op) for v in items):
        raise UsageError(f"{where} is not a zlf.Op (nor a function returning ops)")
    return items


def ops_from_file(path: str, name: Optional[str] = None) -> list:
    module = _load_module(path)
    if name:
        value = getattr(module, name, None)
        if isinstance(value, (Op, list, tuple)):
            return _as_ops(value, f"{path}::{name}")
        # `op:op_file` (docs/ab.md) names the op, not the Python attribute that holds it.
        named = [v for v in vars(module).values() if isinstance(v, Op) and v.name == name]
        if named:
            return named
        if value is None:
            raise UsageError(f"op file {path!r} has no attribute or zlf.Op named {name!r}")
        return _as_ops(value, f"{path}::{name}")
    ops = [v for v in vars(module).values() if isinstance(v, Op)]
    if not ops:
        raise UsageError(f"op file {path!r} defines no zlf.Op")
    return ops


def resolve_core_op(spec: str, backend) -> Optional[list]:
    """Built-in names, ``builtin`` (the suite), ``file.py`` and ``file.py::name``."""
    path, _, name = spec.partition("::")
    if path.endswith(".py"):
        return ops_from_file(path, name or None)
    ops = builtin_ops(backend)
    if spec in ("builtin", "all"):
        return [ops[n] for n in BUILTIN_OPS]
    if spec in ops:
        return [ops[spec]]
    return None
