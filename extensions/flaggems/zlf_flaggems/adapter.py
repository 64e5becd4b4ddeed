"""One FlagGems ``Benchmark`` object as one zlf Op.

A point is (shape, dtype[, variant]): zlf puts the one shape into the benchmark, takes the
input its own ``get_input_iter`` yields (the n-th when it yields several per shape: variants
``v0``, ``v1`` ...), and times the FlagGems callable through zlf's ``time_fn``; the torch callable
is timed by the same ``time_fn`` afterwards and recorded alongside.

How a shape gets into a benchmark depends on the class (the ``kind``):

* ``yaml``: ``get_input_iter`` walks ``self.shapes`` (filled from core_shapes.yaml by op name or
  a class name of the MRO). zlf sets ``self.shapes = [shape]``.
* ``set_shapes``: the class overrides ``set_shapes`` with a built-in list, ignoring the yaml;
  its iterator still walks ``self.shapes``, so zlf injects the same way (zlf never calls
  ``set_shapes`` for a point).
* ``iter_hardcoded``: ``get_input_iter`` loops over a list of its own and calls
  ``self.input_fn(shape, dtype, device)``; zlf calls ``input_fn`` with its shape. The built-in
  list is read by running the iterator with a recording ``input_fn``.
* ``bespoke``: the class builds its inputs from private configs; a handler in :data:`BESPOKE`
  maps a shape to those inputs.

* ``fixed``: the class yields inputs of its own choosing (no ``self.shapes``, no ``input_fn``):
  one point per input, under the shape of its first tensor; no other shape can be given.

Entries need not be flat: ``((3, 33), (1, 1))`` (a shape, then pads) or ``(4, 16, 1024, 64, True,
False)`` is point shape ``3x33x1x1`` / ``4x16x1024x64``, and the entry's layout (nesting and
constants) rebuilds what the benchmark gets; layouts sharing a number of ints become variants.

Every point is checked like any zlf op: the benchmark's torch op runs on clones of the inputs
in ``make_inputs``, before FlagGems' dispatch is entered, and the FlagGems call's tensors are
compared with it (relative L2 error, :data:`TOLERANCE`).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import re
from typing import Callable, Optional

import attrs

from zlf import Op, UsageError

from .phases import phase

#: relative L2 error allowed against the torch reference, by point dtype; other dtypes (ints,
#: bool) must match exactly. fp32 is 10x core's default: the reference is torch's own fp32
#: kernel, not a float64 one, and long reductions (prod, cumsum over 64K elements) in another
#: order reach ~1e-5 (docs/flaggems.md).
TOLERANCE = {"float64": 1e-7, "float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2,
             "complex64": 1e-4, "complex128": 1e-7}
#: words of op names (split at "_") whose output is random or uninitialised: never compared.
UNCHECKED_WORDS = {"rand", "randn", "randint", "randperm", "dropout", "normal", "uniform", "exponential",
                   "multinomial", "bernoulli", "poisson", "geometric", "cauchy", "empty"}
#: ops whose output is random though no word of their name says so: fractional max pooling draws
#: its pooling regions (``_random_samples``) per call, torch's and FlagGems' each their own. Their
#: backward gets the forward's indices and stays checked.
RANDOM_OPS = {"fractional_max_pool2d", "fractional_max_pool3d"}

#: how a point that ran past ``--time-limit`` in its first FlagGems call (Triton compiling,
#: FlagGems tuning: 68 s for one upsample_bicubic2d_aa_backward point with eight ops compiling at
#: once on the H200) is named, apart from a hang in measurement
COMPILE_LIMIT = "time limit during compile (the point's first FlagGems call: Triton compiles, FlagGems tunes)"

KIND_YAML = "yaml"
KIND_SET_SHAPES = "set_shapes"
KIND_ITER = "iter_hardcoded"
KIND_BESPOKE = "bespoke"
KIND_FIXED = "fixed"


# ----------------------------------------------------------------------------- bespoke handlers
@attrs.frozen
class Bespoke:
    """Shapes and inputs for a class whose inputs do not come from ``self.shapes``."""

    shape_desc: str
    default_shapes: Callable   # (bench) -> list of int tuples
    inputs: Callable           # (bench, shape, torch dtype) -> iterator of input tuples


def _upsample_aa_backward_shapes(bench) -> list:
    # _cfgs rows: (N, C, Hi, Wi, Ho, Wo, align_corners, label); zlf keeps the six sizes.
    return [tuple(int(v) for v in cfg[:6]) for cfg in getattr(bench, "_cfgs", ()) if not cfg[6]]


def _upsample_aa_backward_inputs(bench, shape, dtype):
    import torch

    n, c, hi, wi, ho, wo = shape
    grad = torch.randn([n, c, ho, wo], device=bench.device, dtype=dtype)
    yield grad, [ho, wo], [n, c, hi, wi], False, None, None


#: class name -> handler. Classes that build inputs from private config lists and that zlf maps
#: to int shapes; docs/flaggems.md lists the classes that have none yet.
BESPOKE = {
    "UpsampleBicubic2dAaBackwardBenchmark": Bespoke(
        "N, C, H_in, W_in, H_out, W_out", _upsample_aa_backward_shapes, _upsample_aa_backward_inputs),
    "UpsampleBilinear2dAaBackwardBenchmark": Bespoke(  # the same _cfgs rows (later checkouts)
        "N, C, H_in, W_in, H_out, W_out", _upsample_aa_backward_shapes, _upsample_aa_backward_inputs),
}


# ----------------------------------------------------------------------------- helpers
class _Collect(logging.Filter):
    """Takes the records logged while FlagGems registers its kernels (counted by message) and
    drops them: FlagGems logs its own registration warnings on the root logger, at every
    ``use_gems()`` -- four lines per point on the terminal at later checkouts."""

    def __init__(self, sink: dict):
        super().__init__()
        self.sink = sink

    def filter(self, record) -> bool:
        message = record.getMessage()
        self.sink[message] = self.sink.get(message, 0) + 1
        return False


@contextlib.contextmanager
def _collect_root_logging(sink: dict):
    root, collect = logging.getLogger(), _Collect(sink)
    root.addFilter(collect)
    try:
        yield
    finally:
        root.removeFilter(collect)


def _defining_class(cls, name: str):
    for c in cls.__mro__:
        if name in vars(c):
            return c
    return None


def _source(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _iter_source(cls) -> str:
    """The source of ``get_input_iter`` as it runs: a subclass's that wraps
    ``super().get_input_iter(...)`` (adding an ``out=`` buffer, say) with its parent's after it."""
    text, start = "", cls
    while start is not None:
        owner = _defining_class(start, "get_input_iter")
        if owner is None:
            break
        own = _source(owner.get_input_iter)
        text += own
        if "super().get_input_iter" not in own:
            break
        mro = start.__mro__
        start = mro[mro.index(owner) + 1] if mro.index(owner) + 1 < len(mro) else None
    return text


def _flat_int_shape(entry) -> Optional[tuple]:
    if isinstance(entry, int) and not isinstance(entry, bool):
        return (entry,)
    if isinstance(entry, (list, tuple)) and entry and all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in entry):
        return tuple(entry)
    return None


# A nested shape entry (``((3, 33), (1, 1))``: an input shape, then pads) becomes one flat point
# shape (3x33x1x1) of its ints; its layout rebuilds the entry from the flat shape: "i" for an int,
# ("c", repr, value) for a constant kept as it is (a bool, string, float, or an int that is not a
# positive size: ``accumulate=False``, a pad of 0),
# ("d", children, keys) for a dict of them, else (list or tuple, children). Entries of one class with the same number of ints but another
# layout (``is_causal`` True and False over the same sizes) are told apart by a variant label.
_SCALARS = (bool, str, float, type(None))


def _layout(entry):
    """The layout of an entry of ints and constants in lists, tuples and str-keyed dicts, or
    None (another type)."""
    if isinstance(entry, _SCALARS):
        return ("c", repr(entry), entry)
    if isinstance(entry, int):
        # a point's shape holds sizes; a zero or negative int (a pad of 0, a permuted dim 0) stays put
        return "i" if entry > 0 else ("c", repr(entry), entry)
    if type(entry) in (list, tuple) and entry:
        children = tuple(_layout(e) for e in entry)
        return None if None in children else (type(entry), children)
    if type(entry) is dict and entry and all(isinstance(k, str) for k in entry):
        # {"seq_len_q": 64, "topk": 64, ...}: the values, in the dict's order, keyed back on rebuild
        children = tuple(_layout(v) for v in entry.values())
        return None if None in children else ("d", children, tuple(entry))
    return None


def _leaves(layout, entry) -> list:
    if layout == "i":
        return [entry]
    if layout[0] == "c":
        return []
    values = entry.values() if layout[0] == "d" else entry
    return [v for child, e in zip(layout[1], values) for v in _leaves(child, e)]


def _rebuild(layout, values):
    if layout == "i":
        return next(values)
    if layout[0] == "c":
        return layout[2]
    if layout[0] == "d":
        return dict(zip(layout[2], (_rebuild(c, values) for c in layout[1])))
    kind, children = layout[:2]
    return kind(_rebuild(c, values) for c in children)


#: the layout of a plain entry (ints only, or one int): the benchmark gets the tuple of ints
PLAIN = "plain"


def _constants(layout) -> list:
    if layout == "i" or layout == PLAIN:
        return []
    if layout[0] == "c":
        return [layout[2]]
    return [c for child in layout[1] for c in _constants(child)]


def _labels(layouts: list) -> list:
    """Variant labels telling apart layouts with the same number of ints (``True_False`` from
    their constants, ``l0``, ``l1`` ... when the constants do not); one layout: ``""``."""
    if len(layouts) == 1:
        return [""]
    labels = ["_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", str(c)).strip("-") or "x" for c in _constants(layout))
              for layout in layouts]
    if len(set(labels)) < len(labels) or "" in labels or any(re.fullmatch(r"v\d+", lab) for lab in labels):
        labels = [f"l{i}" for i in range(len(layouts))]
    return labels


def _render(layout) -> str:
    """``((3, 33), (1, 1))``'s layout as ``[2], [2]``: an int list as its length, an int as
    ``n``, a constant as itself."""
    def one(node):
        if node == "i":
            return "n"
        if node[0] == "c":
            return node[1]
        if node[0] == "d":
            return "{" + ", ".join(f"{k}: {one(c)}" for k, c in zip(node[2], node[1])) + "}"
        if all(c == "i" for c in node[1]):
            return f"[{len(node[1])}]"
        return "[" + ", ".join(one(c) for c in node[1]) + "]"
    if layout == PLAIN:
        return "ints"
    if layout == "i" or layout[0] in ("c", "d"):
        return one(layout)
    return ", ".join(one(c) for c in layout[1])


def _dtype_name(dtype) -> str:
    return str(dtype).split(".")[-1]


def _tensors(args, kwargs) -> list:
    import torch

    out = []
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, torch.Tensor))
    return out


def _clone(value):
    """A deep copy of the tensors in ``value`` (lists, tuples, dicts), keeping requires_grad."""
    import torch

    if torch.is_tensor(value):
        copy = value.detach().clone()
        return copy.requires_grad_() if value.requires_grad else copy
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _flat_tensors(value) -> list:
    import torch

    if torch.is_tensor(value):
        return [value.detach()]
    if isinstance(value, (list, tuple)):  # torch.return_types are tuples too
        return [t for v in value for t in _flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(v)]
    return []


def comparable(value) -> list:
    """The tensors of a result that are compared: the floating ones when there are any (index
    outputs beside values, as of ``max(dim)`` or ``topk``, differ legitimately on ties), else all."""
    tensors = _flat_tensors(value)
    floats = [t for t in tensors if t.is_floating_point() or t.is_complex()]
    return floats or tensors


def _same_nonfinite(actual, expected) -> tuple:
    """Zero the elements where both sides hold the same inf or NaN (``log`` of randn inputs):
    core's relative error would turn them into NaN, which reads as an unwritten output."""
    import torch

    if actual.shape != expected.shape or actual.device != expected.device:
        return actual, expected
    bad = ~torch.isfinite(expected)
    if not bool(bad.any()):
        return actual, expected
    same = bad & ((actual == expected) | (torch.isnan(actual) & torch.isnan(expected)))
    return torch.where(same, 0, actual), torch.where(same, 0, expected)


def _on_meta():
    """Every torch call given a ``device=`` makes its tensor on the meta device instead.

    Counting a point's inputs on the meta device must allocate nothing, but FlagGems' input
    functions make integer inputs on the CPU and then move them (``torch.randint(...,
    device="cpu").to(device)``: ``utils.generate_tensor_input``, bitwise_left_shift's shift
    amounts). For a 2**30-element shape that is seconds of CPU random numbers per tensor, per
    dtype, before the run's first point: ``bitwise_left_shift`` printed nothing for a minute.

    An input function that runs FlagGems' own kernels on its inputs (max_pool2d's and
    fractional_max_pool2d's backward benchmarks make the indices with the FlagGems forward;
    dispatch_fused_moe_kernel aligns its blocks with ``moe_align_block_size``) would launch them
    on meta tensors: reading a meta tensor's address (``data_ptr``, as Triton's launcher does)
    raises here, and the point is counted on the real device."""
    from torch.overrides import TorchFunctionMode

    import torch

    class OnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.Tensor.data_ptr and args and args[0].is_meta:
                # a kernel outside torch (FlagGems' Triton ones: max_pool2d_with_indices, run by
                # the backward benchmark's input function) would read address 0 and fault the
                # device (the H200 sweep: "an illegal memory access"): counted for real instead
                raise RuntimeError("a kernel outside torch reads a meta tensor's memory")
            if kwargs.get("device") is not None:
                kwargs = {**kwargs, "device": "meta"}
            return func(*args, **kwargs)

    return OnMeta()


#: elements below a dtype's smallest normal number whose two sides differ by at most this many
#: steps of its smallest subnormal count as equal (:func:`_subnormal_equal`)
SUBNORMAL_STEPS = 4


def _subnormal_equal(actual, expected) -> tuple:
    """``(actual, expected, count)``: elements where both sides are subnormal (or zero) in the
    output's dtype and differ by at most :data:`SUBNORMAL_STEPS` steps of its smallest subnormal
    set equal. There the format has no relative precision left: FlagGems' fp16 ``mse_loss_backward``
    (a mean: values ~4e-6 at 1024x1024, steps of 6e-8) rounds once where torch rounds each
    intermediate, and the two differ by 1-3 steps on a fifth of the elements -- a relative L2
    error of 0.0099 (the H200 sweep's), though FlagGems' is the closer of the two to float64."""
    import torch

    dtype = actual.dtype
    if (not dtype.is_floating_point or dtype == torch.float64 or actual.shape != expected.shape
            or actual.device != expected.device or expected.dtype != dtype):
        return actual, expected, 0
    info = torch.finfo(dtype)
    step = info.smallest_normal * info.eps  # the smallest subnormal
    a, e = actual.double(), expected.double()
    near = ((a.abs() < info.smallest_normal) & (e.abs() < info.smallest_normal)
            & ((a - e).abs() <= SUBNORMAL_STEPS * step) & (a != e))
    count = int(near.sum())
    if not count:
        return actual, expected, 0
    return torch.where(near, expected, actual), expected, count


class BenchCall:
    """The per-point callables: FlagGems (the point under test) and torch (recorded alongside).

    Built like FlagGems' ``get_latency`` builds its ``fn``: a clone per call for in-place ops
    (when the harness does so), and for backward benchmarks one forward pass, then
    ``autograd.grad`` is what runs per call.

    The first FlagGems call is the one zlf checks (``run_point`` calls ``fn`` once before
    timing): it returns the result's comparable tensors, paired with :meth:`reference`. Later
    calls return what FlagGems returns; the only thing added to a timed call is a test that
    FlagGems' dispatch is active (zlf's work between calls leaves it: ``Op.outside``).
    """

    def __init__(self, adapter: "BenchmarkOp", args, kwargs, detail: str):
        self.adapter = adapter
        self.args, self.kwargs, self.detail = args, kwargs, detail
        self._gems = None
        self._torch = None
        self.expected: Optional[list] = None  # the torch reference's comparable tensors
        self.note = ""                        # how the point was checked, or why not
        self._dout = None                     # backward: the same output gradient on both sides
        self._checked = True
        self._calls = 0                       # FlagGems calls so far: the first compiles and tunes

    def compute_reference(self) -> None:
        """The torch op on clones of the inputs; call outside FlagGems' dispatch."""
        import torch

        bench = self.adapter.bench
        args, kwargs = _clone(list(self.args)), _clone(self.kwargs)
        name = getattr(bench.torch_op, "__name__", type(bench.torch_op).__name__)
        try:
            if bench.is_backward:
                out = bench.torch_op(*args, **kwargs)
                self._dout = torch.randn_like(out)
                xs = [a for a in args if torch.is_tensor(a) and a.requires_grad]
                value = torch.autograd.grad((out,), xs, grad_outputs=(self._dout,))
            else:
                with torch.no_grad():
                    value = bench.torch_op(*args, **kwargs)
        except Exception as exc:
            raise RuntimeError(f"reference (torch {name}) failed: {type(exc).__name__}: {exc}") from exc
        self.expected = comparable(value)
        self._checked = False
        if self.expected:
            self.note = f"torch {name} outside FlagGems' dispatch: {len(self.expected)} tensor(s) compared"
        else:
            self.note = f"not checked: torch {name} returned no tensor ({type(value).__name__})"

    def reference(self) -> list:
        """The expected tensors (handed over once; the point's timing does not hold them)."""
        expected, self.expected = self.expected or [], None
        return expected

    def __repr__(self) -> str:  # in the seed extension's input fingerprint: stable, short
        return f"FlagGemsCall({self.adapter.bench.op_name}, {self.detail})"

    def gems(self):
        if self._calls == 0:  # the first call compiles: --flaggems-compile-time-limit more for it
            self.adapter.allow_compile()
        self.adapter.enter_gems()  # a no-op once active
        if self._gems is None:
            bench = self.adapter.bench
            self._gems = self._build(bench.gems_op or bench.torch_op)
        self._calls += 1
        if self._calls <= 2:
            phase(*(("compile", f"{self.adapter.label}: first FlagGems call (compile, tuning)") if self._calls == 1
                    else ("measure", f"{self.adapter.label}: timing the FlagGems op")))
        if self._calls != 1:
            return self._call()
        from zlf.procs import PointTimeLimit

        try:
            return self._call()
        except PointTimeLimit as exc:  # the sweep tells a slow compile from a hang by these words
            raise PointTimeLimit(str(exc).replace("time limit:", f"{COMPILE_LIMIT}:", 1)) from exc

    def _call(self):
        if self._checked:
            return self._gems()
        self._checked = True
        result = self._gems()
        # what follows, and core's check after it, is zlf's work: on torch's kernels, not FlagGems'
        with self.adapter.paused():
            actual, expected = comparable(result), self.expected
            if not expected:
                return []  # nothing to compare: the note says so
            if len(actual) > len(expected):
                # FlagGems' cudnn_attention_forward returns aten's debug mask as an empty float
                # tensor where torch's is none: the outputs both return are compared, and said so
                self.note += (f"; compared {len(expected)} of {len(actual)} outputs "
                              f"(the reference returns {len(expected)})")
                actual = actual[:len(expected)]
            if len(actual) == len(expected):
                pairs = [_same_nonfinite(a, e) for a, e in zip(actual, expected)]
                evened = [_subnormal_equal(a, e) for a, e in pairs]
                actual, self.expected = [a for a, _, _ in evened], [e for _, e, _ in evened]
                count = sum(n for _, _, n in evened)
                if count:
                    self.note += (f"; {count} subnormal element(s) within {SUBNORMAL_STEPS} steps of the "
                                  f"smallest subnormal counted equal")
            return actual

    def torch(self):
        if self._torch is None:
            self._torch = self._build(self.adapter.bench.torch_op)
        return self._torch()

    def _build(self, op):
        import torch

        bench, args, kwargs = self.adapter.bench, self.args, self.kwargs
        if bench.is_inplace and self.adapter.clones_inplace:
            fn = lambda: op(*[a.clone() if torch.is_tensor(a) else a for a in args], **kwargs)  # noqa: E731
        else:
            fn = lambda: op(*args, **kwargs)  # noqa: E731
        if bench.is_backward:
            out = fn()
            dout = self._dout if self._dout is not None else torch.randn_like(out)
            xs = [a for a in args if torch.is_tensor(a) and a.requires_grad]
            fn = lambda: torch.autograd.grad((out,), xs, grad_outputs=(dout,), retain_graph=True)  # noqa: E731
        return fn


class BenchmarkOp:
    """A captured FlagGems Benchmark and everything zlf needs to run it point by point."""

    def __init__(self, harness, bench, case, tolerance: Optional[dict] = None):
        self.harness, self.bench, self.case = harness, bench, case
        self.tolerance = {**TOLERANCE, **(tolerance or {})}
        cls = type(bench)
        base = harness.benchmark_class
        self.class_name = cls.__name__
        self.aliases = tuple(c.__name__ for c in cls.__mro__ if c is not object)
        self.clones_inplace = "is_inplace" in _source(base.get_latency)
        self.bespoke = next((BESPOKE[n] for n in self.aliases if n in BESPOKE), None)
        self.dropped: list = []
        self.current: dict = {}     # amounts of the point being run: bytes, flops
        self._gems_ctx: Optional[contextlib.ExitStack] = None
        self.registration_log: dict = {}  # what FlagGems logged while registering: message -> times
        self.empty: list = []  # points the benchmark yields no input for (no point made)
        self.label = bench.op_name  # what the phase lines call the current point
        self.allow_compile = lambda: None  # gives the point's first FlagGems call more time (before_point)
        try:
            bench.init_user_config()  # dtypes, metrics and shapes as FlagGems would set them
        except Exception as exc:
            if type(exc).__name__ == "Skipped":
                raise UsageError(f"FlagGems skips {case.node_id}: {exc}") from exc
            raise UsageError(f"FlagGems {case.node_id} ({self.class_name}): {exc}") from exc
        iter_src = _iter_source(cls)
        if self.bespoke is not None:
            self.kind = KIND_BESPOKE
            shapes = self.bespoke.default_shapes(bench)
            self.shape_desc = self.bespoke.shape_desc
        elif "self.shapes" in iter_src:
            self.kind = KIND_SET_SHAPES if _defining_class(cls, "set_shapes") is not base else KIND_YAML
            shapes = list(bench.shapes)
            self.shape_desc = getattr(bench, "shape_desc", "")
        elif hasattr(bench, "input_fn"):
            self.kind = KIND_ITER
            shapes = self._recorded_shapes()
            self.shape_desc = ""
        else:
            # inputs fixed by the class (no self.shapes, no input_fn): one point per yielded input,
            # under the shape of its first tensor; they cannot be given other shapes
            self.kind = KIND_FIXED
            self.fixed = self._fixed_items()
            shapes = list(self.fixed)
            self.shape_desc = "fixed by the class: its first tensor's shape"
        self.shapes = []
        # number of ints -> {variant label: layout}; more than one layout (e.g. is_causal True and
        # False over the same sizes) makes more than one point per shape, labelled by the constants
        self.layouts: dict = {}
        self.combos: dict = {}  # built-in point shape -> the labels its entries have
        seen: dict = {}  # number of ints -> layouts in order of first appearance
        entries = []
        for entry in shapes:
            flat = _flat_int_shape(entry)
            layout = PLAIN if flat is not None else _layout(entry)
            if layout is not None and flat is None:
                flat = tuple(_leaves(layout, entry))
            if layout is None or not flat:
                self.dropped.append(repr(entry))  # another type (a dict, a tensor), or no positive int
                continue
            group = seen.setdefault(len(flat), [])
            if layout not in group:
                group.append(layout)
            entries.append((flat, layout))
        for n, group in seen.items():
            self.layouts[n] = dict(zip(_labels(group), group))
        for flat, layout in entries:
            label = next(lab for lab, lay in self.layouts[len(flat)].items() if lay == layout)
            if flat not in self.shapes:
                self.shapes.append(flat)
            labels = self.combos.setdefault(flat, [])
            if label not in labels:
                labels.append(label)
        if not self.shapes:
            raise UsageError(
                f"FlagGems {case.node_id}: none of the {len(shapes)} built-in shape entries of class "
                f"{self.class_name} is made of positive ints (e.g. {self.dropped[:1]}); it needs a "
                f"bespoke handler (handlers: {', '.join(sorted(BESPOKE))})")
        if any(lay != PLAIN for group in self.layouts.values() for lay in group.values()):
            parts = [f"{n} ints" + (f" ({lab})" if lab else "") + f" = {_render(lay)}"
                     for n, group in sorted(self.layouts.items()) for lab, lay in group.items() if lay != PLAIN]
            plain = any(lay == PLAIN for group in self.layouts.values() for lay in group.values())
            own = f"{self.shape_desc}; " if self.shape_desc and plain else ""  # the class's, for its plain entries
            self.shape_desc = f"{own}nested entries, flattened: {'; '.join(parts)}"
        self.dtypes = [_dtype_name(d) for d in bench.to_bench_dtypes]
        random = sorted(UNCHECKED_WORDS & set(bench.op_name.split("_"))) or bench.op_name in RANDOM_OPS
        self.unchecked = f"not checked: {bench.op_name} has random or uninitialised output" if random else ""

    def keep_smallest(self, n: int) -> None:
        """Keep the ``n`` built-in shapes with the fewest elements (``--flaggems-max-shapes``), in order."""
        def size(shape):
            total = 1
            for d in shape:
                total *= d
            return total

        keep = set(sorted(self.shapes, key=size)[:n])
        self.shapes = [s for s in self.shapes if s in keep]

    # ------------------------------------------------------------------ shapes -> inputs
    def _fixed_items(self) -> dict:
        """A ``fixed`` class's inputs, by the shape of each one's first tensor: {shape: [index of
        the input in the iteration]}. Read on the meta device (nothing allocated), else the real one."""
        import torch

        bench = self.bench
        dtype = bench.to_bench_dtypes[0] if bench.to_bench_dtypes else torch.float32
        errors = []
        for device in ("meta", None):
            if device is not None:
                bench.device = device  # instance attribute shadows the class's device
            try:
                found: dict = {}
                meta = _on_meta() if device == "meta" else contextlib.nullcontext()
                with meta:  # no meta tensor reaches a kernel outside torch (_on_meta)
                    for index, item in enumerate(bench.get_input_iter(dtype)):
                        first = next(iter(_flat_tensors(item)), None)
                        shape = tuple(int(d) for d in first.shape) if first is not None else ()
                        if not shape or min(shape) <= 0:
                            shape = (1,)  # a 0-dim (or empty) tensor, or none: one "element"
                        found.setdefault(shape, []).append(index)
                if found:
                    return found
                errors.append("it yields no input")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                bench.__dict__.pop("device", None)
        raise UsageError(f"FlagGems {self.case.node_id}: class {self.class_name} builds its inputs without "
                         f"self.shapes or input_fn, and reading them failed ({'; '.join(errors)[:300]}); "
                         f"it needs a bespoke handler (handlers: {', '.join(sorted(BESPOKE))})")

    def _recorded_shapes(self) -> list:
        """The list an ``iter_hardcoded`` class loops over: its iterator run with a recording input_fn."""
        import torch

        bench, seen = self.bench, []
        own = bench.__dict__.get("input_fn")

        def record(shape, *args, **kwargs):
            seen.append(shape)
            return iter(())

        bench.input_fn = record
        try:
            dtype = bench.to_bench_dtypes[0] if bench.to_bench_dtypes else torch.float32
            for _ in bench.get_input_iter(dtype):
                pass
        finally:
            bench.input_fn = own
        return seen

    def entry(self, shape, label: str = ""):
        """The benchmark's own shape entry for a point shape: rebuilt with the layout ``label``
        names among those of the same number of ints (nested again, constants back in place);
        a plain tuple when there is none."""
        group = self.layouts.get(len(shape)) or {"": PLAIN}
        layout = group.get(label, PLAIN if label else next(iter(group.values())))
        if layout == PLAIN:
            return tuple(int(d) for d in shape)
        return _rebuild(layout, iter(int(d) for d in shape))

    def input_iter(self, shape, dtype, label: str = ""):
        bench = self.bench
        if self.kind == KIND_FIXED:
            return bench.get_input_iter(dtype)  # the class's own inputs; make_inputs picks one
        if self.kind == KIND_BESPOKE:
            return self.bespoke.inputs(bench, shape, dtype)
        if self.kind == KIND_ITER:
            return bench.input_fn(self.entry(shape, label), dtype, bench.device)
        bench.shapes = [self.entry(shape, label)]
        return bench.get_input_iter(dtype)

    def layout_labels(self, shape) -> list:
        """The layouts a point shape runs with: a built-in shape's own, a user's shape every layout
        of its number of ints (``[""]`` when there is one)."""
        shape = tuple(int(d) for d in shape)
        if shape in self.combos:
            return list(self.combos[shape])
        return list(self.layouts.get(len(shape)) or [""])

    def split_variant(self, shape, variant: str) -> tuple:
        """``variant`` -> (layout label, input index): ``True_False+v1``, ``True_False``, ``v1``."""
        if not variant:
            return "", 0
        label, _, rest = variant.rpartition("+")
        if label:
            return label, int(rest[1:])
        if variant in self.layout_labels(shape):
            return variant, 0
        return "", int(variant[1:])

    def _count(self, shape, dtype, device=None, label: str = "") -> int:
        bench = self.bench
        if device is not None:
            bench.device = device  # instance attribute shadows the class's device
        try:
            with (_on_meta() if device == "meta" else contextlib.nullcontext()):
                return sum(1 for _ in self.input_iter(shape, dtype, label))
        finally:
            bench.__dict__.pop("device", None)

    def variants(self, shape, dtype_name) -> list:
        """One label per (layout, input) of this shape: the layout's label (constants such as
        ``True_False``, see :meth:`layout_labels`), ``v0``, ``v1`` ... when the benchmark yields
        several inputs (``True_False+v1`` with both); ``[""]`` for one of each.

        Counted on the meta device (nothing allocated); an input function that needs real data
        is counted on the real device. A failure leaves one point, which then fails visibly; a
        layout the benchmark yields no input for gets no point (logged in run.log, as FlagGems
        skips it too)."""
        from zlf.ops import torch_dtype

        if self.kind == KIND_FIXED:
            found = self.fixed.get(tuple(int(d) for d in shape))
            if found is None:
                raise UsageError(
                    f"FlagGems {self.case.node_id}: class {self.class_name} fixes its own inputs; shape "
                    f"{'x'.join(map(str, shape))} is not one of them ({', '.join('x'.join(map(str, s)) for s in self.fixed)})")
            return [""] if len(found) == 1 else [f"v{i}" for i in range(len(found))]
        dtype = torch_dtype(dtype_name)
        labels = []
        phase("plan", f"counting the inputs of {self.bench.op_name} {'x'.join(map(str, shape))}/{dtype_name}")
        for layout in self.layout_labels(shape):
            try:
                n = self._count(shape, dtype, "meta", layout)
            except Exception:
                try:
                    n = self._count(shape, dtype, None, layout)
                except Exception:
                    n = 1
            if n == 0:  # the benchmark itself yields nothing here (an unsafe combination it skips)
                self.empty.append(f"{'x'.join(map(str, shape))}/{dtype_name}" + (f"/{layout}" if layout else ""))
            elif n == 1:
                labels.append(layout)
            else:
                labels.extend(f"{layout}+v{i}" if layout else f"v{i}" for i in range(n))
        return labels

    def make_inputs(self, shape, dtype_name, device, variant: str = ""):
        import torch

        from zlf.ops import poison, self_overlapping, torch_dtype

        self.exit_gems()  # inputs and the reference are built with plain torch
        label, index = self.split_variant(shape, variant)
        if self.kind == KIND_FIXED:
            index = self.fixed[tuple(int(d) for d in shape)][index]  # its place in the class's iteration
        item, count = None, 0
        for count, item in enumerate(self.input_iter(tuple(shape), torch_dtype(dtype_name), label)):
            if count == index:
                break
        else:
            raise RuntimeError(f"FlagGems {self.class_name} yielded {count + 1 if item is not None else 0} "
                               f"inputs for shape {list(shape)}, variant {variant!r} needs {index + 1}")
        bench = self.bench
        args, kwargs = bench.unpack_to_args_kwargs(item)
        for key, value in kwargs.items():
            # torch.empty output buffers hold garbage: poisoned as core poisons an op's outputs, so
            # an unwritten element fails the check and input fingerprints repeat
            if key.startswith("out") and torch.is_tensor(value) and not self_overlapping(value):
                value.fill_(True) if value.dtype == torch.bool else poison([value], [0])
        call = BenchCall(self, args, kwargs, str(bench.record_shapes(*args, **kwargs)))
        self.current = {"call": call, "bytes": self._bytes(args), "flops": self._flops(args, kwargs)}
        if self.unchecked:
            call.note = self.unchecked
        else:
            call.compute_reference()  # FlagGems' dispatch is not active here: plain torch
        return (call, *_tensors(args, kwargs))

    # ------------------------------------------------------------------ amounts (GB/s, TFLOP/s)
    def _has_gbps(self) -> bool:
        return _defining_class(type(self.bench), "get_gbps") is not self.harness.benchmark_class

    def _bytes(self, args) -> Optional[float]:
        bench = self.bench
        if not self._has_gbps():
            return None
        try:
            return float(bench.get_gbps(args, latency=1.0)) * 1e6  # GB/s at 1 ms -> bytes
        except Exception:
            return None

    def _flops(self, args, kwargs) -> Optional[float]:
        bench = self.bench
        if "tflops" not in (bench.to_bench_metrics or ()):
            return None
        try:
            return float(bench.get_tflops(bench.torch_op, *args, **kwargs))
        except Exception:
            return None

    def amount(self, key):
        def fn(shape, dtype):
            value = self.current.get(key)
            return value if value else None
        return fn

    # ------------------------------------------------------------------ FlagGems dispatch context
    def enter_gems(self) -> None:
        """Activate FlagGems' aten kernels, unless they are (or the op calls FlagGems directly).

        Active for the point's checked call, then again from its first timed call to its last:
        registering them costs far more than a kernel, so not per call. Inputs, the reference,
        core's check, the torch timing and every other extension's hooks run outside."""
        if self._gems_ctx is not None or self.bench.gems_op:
            return
        fg = self.harness.flag_gems
        kwargs = {}
        params = inspect.signature(fg.use_gems).parameters
        if "exclude" in params and self.bench.op_name != "zero_":
            kwargs["exclude"] = ["zero_"]  # FlagGems' own rule: zero_ also clears the L2 flush buffer
        stack = contextlib.ExitStack()
        with _collect_root_logging(self.registration_log):
            stack.enter_context(fg.use_gems(**kwargs))
        self._gems_ctx = stack

    @contextlib.contextmanager
    def paused(self):
        """``Op.outside``: zlf's own tensor work (checks, a timer's verification) runs on torch's
        kernels. FlagGems' may refuse it (its ``vector_norm`` has no float64) and would show up
        in IR dumps; the next FlagGems call enters the dispatch again."""
        self.exit_gems()
        yield

    def exit_gems(self) -> None:
        if self._gems_ctx is not None:
            stack, self._gems_ctx = self._gems_ctx, None
            stack.close()

    # ------------------------------------------------------------------ the zlf Op
    def all(self) -> list:
        """The BenchmarkOps behind this op name: this one (several: :class:`twins.Twins`)."""
        return [self]

    def for_point(self, point) -> "BenchmarkOp":
        return self

    def to_op(self) -> Op:
        return Op(
            name=self.bench.op_name,
            fn=lambda call, *tensors: call.gems(),
            make_inputs=self.make_inputs,
            reference=None if self.unchecked else (lambda call, *tensors: call.reference()),
            tolerance=dict(self.tolerance),
            shapes=self.shapes,
            dtypes=tuple(self.dtypes),
            bytes=self.amount("bytes") if self._has_gbps() else None,
            flops=self.amount("flops") if "tflops" in (self.bench.to_bench_metrics or ()) else None,
            shape_desc=self.shape_desc or "",
            aliases=self.aliases,
            description=f"FlagGems {self.case.node_id} ({self.class_name}, {self.kind})",
            copies=False,  # the call object holds FlagGems' own arguments: copies of the tensors change nothing
            variants=self.variants,
            outside=self.paused,
        )

    def describe(self) -> dict:
        return {"test": self.case.node_id, "class": self.class_name, "mro": list(self.aliases),
                "kind": self.kind, "builtin_shapes": [list(s) for s in self.shapes],
                "dropped_shape_entries": self.dropped,
                "nested_layouts": {str(n): {lab: _render(lay) for lab, lay in group.items()}
                                   for n, group in sorted(self.layouts.items())
                                   if any(lay != PLAIN for lay in group.values())} or None,
                "gems_op": getattr(self.bench.gems_op, "__name__", None),
                "torch_op": getattr(self.bench.torch_op, "__name__", repr(self.bench.torch_op)),
                "is_backward": bool(self.bench.is_backward), "is_inplace": bool(self.bench.is_inplace),
                "fixup": self.case.fixup or None,
                "check": self.unchecked or "torch op on clones of the inputs, outside FlagGems' dispatch"}
