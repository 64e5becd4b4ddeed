"""File names of dumped variants (docs/ir.md) -- pure functions, no Triton import.

A (shape, kernel) group is every variant launched for that kernel under that shape (sweep losers
are named among themselves, for index.tsv only), so a side that replays recorded autotune configs
and runs no sweep names its files exactly as the side that recorded them. A name
lists only the parameters whose values differ inside the group (``BM128_BN256_w8s3``); when none
differ it is ``w<num_warps>s<num_stages>``. Collisions are resolved in this order: dtype suffix
(``__fp16``), specialization suffix (``__EMdiv16``), then a prefix of the cache hash.
Everything except the hash step depends only on what was compiled, so the A and B sides of an
A/B get the same names and ``diff -r A/ir B/ir`` lines up.
"""
from __future__ import annotations

import collections
import re
from typing import Optional

import attrs

#: compile options in names: (attribute, letter). Glued together as in ``w4s3``.
OPTIONS = (("num_warps", "w"), ("num_stages", "s"), ("num_ctas", "c"), ("maxnreg", "r"))
_MISSING = object()


@attrs.frozen
class Variant:
    """One compiled variant of a kernel, as far as naming and index.tsv need it."""

    kernel: str
    hash: str
    constants: dict = attrs.field(factory=dict)
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None
    num_ctas: Optional[int] = None
    maxnreg: Optional[int] = None
    signature: dict = attrs.field(factory=dict)
    specialization: dict = attrs.field(factory=dict)
    target: str = ""

    @property
    def dtype(self) -> str:
        """Element types of the pointer arguments in order (``fp16``, ``fp16_fp32``); scalar
        types when the kernel takes no pointer."""
        types = [t[1:] for t in self.signature.values() if isinstance(t, str) and t.startswith("*")]
        if not types:
            types = [t for t in self.signature.values() if isinstance(t, str) and t != "constexpr"]
        return "_".join(dict.fromkeys(sanitize(t) for t in types)) or "none"

    def sort_key(self) -> tuple:
        """Order independent of the hash and of the order of compilation."""
        return (
            tuple((k, repr(v)) for k, v in self.constants.items()),
            tuple(repr(getattr(self, attr)) for attr, _ in OPTIONS),
            self.dtype,
            tuple(sorted(self.specialization.items())),
            self.hash,
        )


def sanitize(text) -> str:
    """Keep a value file-name safe and readable: letters, digits, ``.``, ``+``, ``-``."""
    return re.sub(r"[^A-Za-z0-9.+-]", "", str(text)) or "x"


def abbreviate(name: str) -> str:
    """``BLOCK_SIZE_M`` -> ``BSM``; a one-word name stays as it is."""
    words = [w for w in name.split("_") if w]
    return "".join(w[0] for w in words) if len(words) > 1 else name


def abbreviations(names) -> dict:
    """``{name: short}`` for ``names``; names whose initials would clash keep their full name."""
    names = list(dict.fromkeys(names))
    short = {n: abbreviate(n) for n in names}
    clashes = collections.Counter(short.values())
    full = set(names)
    return {n: (s if clashes[s] == 1 and (s == n or s not in full) else n) for n, s in short.items()}


def _spec_word(value: str) -> str:
    if value == "D":
        return "div16"
    if value.startswith("D") and value[1:].isdigit():
        return f"div{value[1:]}"
    if value.startswith("="):
        return f"eq{sanitize(value[1:])}"
    return sanitize(value)


@attrs.frozen
class GroupNames:
    """Names of one (shape, kernel) group and the abbreviations they use."""

    names: dict  # hash -> file name without extension
    legend: dict  # short -> full parameter name


def _collisions(names: dict) -> list:
    by_name = collections.defaultdict(list)
    for h, n in names.items():
        by_name[n].append(h)
    return [hs for hs in by_name.values() if len(hs) > 1]


def name_group(variants) -> GroupNames:
    """Name every variant of one (shape, kernel) group; see the module docstring."""
    variants = sorted(variants, key=Variant.sort_key)
    by_hash = {v.hash: v for v in variants}
    keys = list(dict.fromkeys(k for v in variants for k in v.constants))
    differing = [k for k in keys if len({repr(v.constants.get(k, _MISSING)) for v in variants}) > 1]
    options = [(a, letter) for a, letter in OPTIONS if len({getattr(v, a) for v in variants}) > 1]
    spec_args = list(dict.fromkeys(a for v in variants for a in v.specialization))
    short = abbreviations(differing + [a for a in spec_args if a not in differing])
    used = set(differing)  # parameters that appear in some name (legend entries)

    def base(v: Variant) -> str:
        consts = "_".join(f"{short[k]}{sanitize(v.constants[k])}" for k in differing if k in v.constants)
        opts = "".join(f"{letter}{getattr(v, a)}" for a, letter in options if getattr(v, a) is not None)
        return "_".join(p for p in (consts, opts) if p) or f"w{v.num_warps}s{v.num_stages}"

    names = {v.hash: base(v) for v in variants}

    def by_dtype(members):
        return {h: by_hash[h].dtype for h in members}

    def by_specialization(members):
        args = [a for a in spec_args
                if len({by_hash[h].specialization.get(a, "") for h in members}) > 1]
        used.update(args)
        return {
            h: "_".join(f"{short[a]}{_spec_word(by_hash[h].specialization[a])}"
                        for a in args if a in by_hash[h].specialization)
            for h in members
        }

    for step in (by_dtype, by_specialization):
        for members in _collisions(names):
            suffixes = step(members)
            if len(set(suffixes.values())) > 1:
                for h, suffix in suffixes.items():
                    if suffix:
                        names[h] = f"{names[h]}__{suffix}"
    for members in _collisions(names):
        width = 8
        while len({h[:width] for h in members}) < len(members) and width < 64:
            width += 4
        for h in members:
            names[h] = f"{h[:width]}__{names[h]}"
    legend = {short[k]: k for k in used if short[k] != k}
    return GroupNames(names=names, legend=legend)
