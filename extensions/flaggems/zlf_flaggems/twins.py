"""Several FlagGems tests that build one op name, run as one zlf Op.

FlagGems v5.3.4 has them: ``test_searchsorted`` parametrised by dtype (each parameter builds
``searchsorted`` for its one dtype), ``test_upsample_nearest_exact2d`` and ``..._out`` (both
``op_name="upsample_nearest_exact2d"``), ``test_index_put_impl_acc_false`` / ``_acc_true``.

* Tests whose dtypes do not overlap (a dtype parameter) need nothing: a point's dtype names its
  test, and point ids stay those of one test (``searchsorted/1024/float16``).
* Otherwise every test's points carry a label, the test id less ``test_`` and the op name
  (``acc_false``, ``out``; ``base`` for the test named after the op alone), as the first part of
  the point's variant: ``index_put_impl/.../float16/acc_true``, ``.../out+v1`` when the test
  yields several inputs per shape. The label comes from FlagGems' own test names, so it is
  stable across runs and unique within the op.
"""
from __future__ import annotations

import re

from zlf import Op

SEP = "+"


def _words(member) -> list:
    case = member.case
    name = case.function.__name__
    name = name[len("test_"):] if name.startswith("test_") else name
    words = name.split("_") + ([case.ident] if case.ident else [])
    return words


def labels(members) -> list:
    """One label per member: ``""`` each when their dtypes are disjoint, else each test id less
    ``test_`` and the op name (or, when a test is not named after the op, the words all of them
    share at the front): ``acc_false``, ``out``, a parameter id; ``base`` when nothing is left."""
    dtypes = [set(m.dtypes) for m in members]
    if sum(len(d) for d in dtypes) == len(set().union(*dtypes)):
        return [""] * len(members)
    words = [_words(m) for m in members]
    op = members[0].bench.op_name.split("_")
    if all(w[:len(op)] == op for w in words):
        common = len(op)
    else:
        common = 0
        while all(len(w) > common for w in words) and len({w[common] for w in words}) == 1:
            common += 1
    out = []
    for w in words:
        label = re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(w[common:])).strip("-_") or "base"
        out.append(label)
    if len(set(out)) < len(out) or any(re.fullmatch(r"v\d+|l\d+", lab) for lab in out):
        out = [f"t{i}" for i in range(len(members))]
    return out


class Twins:
    """The tests building one op name (members, each a BenchmarkOp) behind one zlf Op."""

    def __init__(self, members: list):
        self.members = list(members)
        self.labels = labels(self.members)
        self.active = self.members[0]

    @property
    def name(self) -> str:
        return self.active.bench.op_name

    def all(self) -> list:
        return self.members

    def _pick(self, dtype: str, variant: str) -> tuple:
        """(member, the member's own variant) of a point."""
        if any(self.labels):
            label, _, rest = variant.partition(SEP)
            member = self.members[self.labels.index(label)]
            return member, rest
        return next(m for m in self.members if dtype in m.dtypes), variant

    def for_point(self, point):
        self.active, _ = self._pick(point.dtype, point.variant)
        return self.active

    def variants(self, shape, dtype) -> list:
        shape = tuple(int(d) for d in shape)
        builtin = [m for m in self.members if shape in m.shapes]
        out = []
        for member, label in zip(self.members, self.labels):
            if dtype not in member.dtypes or (builtin and member not in builtin):
                continue
            for own in member.variants(shape, dtype):
                out.append(SEP.join(p for p in (label, own) if p))
        return out

    def make_inputs(self, shape, dtype, device, variant: str = ""):
        member, own = self._pick(dtype, variant)
        self.active = member
        return member.make_inputs(shape, dtype, device, own)

    def to_op(self) -> Op:
        ops = [m.to_op() for m in self.members]
        first = ops[0]
        shapes = []
        for op in ops:
            shapes.extend(s for s in op.shapes if s not in shapes)
        dtypes = []
        for op in ops:
            dtypes.extend(d for d in op.dtypes if d not in dtypes)
        checked = any(op.reference is not None for op in ops)
        has = {key: any(getattr(op, key) is not None for op in ops) for key in ("bytes", "flops")}
        tests = ", ".join(m.case.node_id + (f" ({lab})" if lab else "") for m, lab in zip(self.members, self.labels))
        return Op(
            name=first.name,
            fn=first.fn,
            make_inputs=self.make_inputs,
            reference=(lambda call, *tensors: call.reference()) if checked else None,
            tolerance=dict(first.tolerance),
            shapes=shapes,
            dtypes=tuple(dtypes),
            bytes=self.active_amount("bytes") if has["bytes"] else None,
            flops=self.active_amount("flops") if has["flops"] else None,
            shape_desc="; ".join(dict.fromkeys(op.shape_desc for op in ops if op.shape_desc)),
            aliases=first.aliases,
            description=f"FlagGems {first.name} built by {len(ops)} tests: {tests}",
            variants=self.variants,
            outside=lambda: self.active.paused(),
            copies=False,  # as each twin's: the call object holds the arguments
        )

    def active_amount(self, key):
        def fn(shape, dtype):
            value = self.active.current.get(key)
            return value if value else None
        return fn

    def describe(self) -> dict:
        """The first test's description, with every test, its label and dtypes under ``twins``."""
        out = dict(self.members[0].describe())
        out["test"] = [m.case.node_id for m in self.members]
        out["twins"] = {m.case.node_id: {"label": lab, "class": m.class_name, "dtypes": list(m.dtypes)}
                        for m, lab in zip(self.members, self.labels)}
        return out
