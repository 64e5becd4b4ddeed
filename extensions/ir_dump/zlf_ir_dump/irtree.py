"""Reading and comparing IR dump trees (``<run dir>/ir/``, docs/ir.md) -- files only.

No Triton import: ``zlf compare`` and ``zlf ir-diff`` read run directories written by any
process, on any machine, with any compiler build. Layout::

    ir/<shape>/<kernel>/<name>.<kind>     one file per launched variant and IR kind
    ir/index.tsv                          every compiled variant (launched and sweep losers)
    ir/naming.md                          legend of the abbreviations in file names

Status words (per shape, per kernel): ``identical``, ``changed``, ``only A``, ``only B``.
"""
from __future__ import annotations

import collections
import difflib
import functools
import os
import re
from pathlib import Path
from typing import Optional

import attrs

from zlf import readers

IR_DIR = "ir"
INDEX = "index.tsv"
NAMING = "naming.md"
DIFF_DIR = "diffs"

IDENTICAL = "identical"
CHANGED = "changed"
ONLY_A = "only A"
ONLY_B = "only B"

#: ops shown first in the op-count summary (the ones a layout or MMA change moves).
KEY_OPS = (
    "tt.dot", "ttng.warp_group_dot", "ttng.warp_group_dot_wait", "ttng.tc_gen5_mma",
    "ttg.convert_layout", "ttg.local_alloc", "ttg.local_load", "ttg.local_store",
    "ttg.async_copy_global_to_local", "ttg.async_wait", "ttng.fence_async_shared",
    "tt.load", "tt.store", "tt.reduce",
)

# ``%1 = tt.dot ...``, ``%a:2 = scf.for ...``, ``tt.store ...``, ``"tt.reduce"(...)``.
_DBG = re.compile(r", !dbg !\d+")
_OP_LINE = re.compile(r'^\s*(?:%[\w#:.,\s%]*=\s*)?"?([a-z_][a-z0-9_]*\.[a-z0-9_.]+)"?[\s(<{]')


def ir_root(path) -> Optional[Path]:
    """The ``ir/`` folder of a run directory (or ``path`` itself when it is an ``ir/`` tree)."""
    p = Path(path)
    if (p / IR_DIR).is_dir() and not (p / IR_DIR).is_symlink():  # a linked ir/ leaves the run dir
        return p / IR_DIR
    if p.is_dir() and ((p / INDEX).is_file() or p.name == IR_DIR):
        return p
    return None


def _entries(folder: Path, want_dir: bool) -> list:
    """Folders (or regular files) directly in ``folder``, symbolic links left out: a tree read
    from another machine may link to anything (``/etc/passwd``), and what we read we copy into
    diffs."""
    return sorted(p for p in folder.iterdir() if not p.is_symlink() and (p.is_dir() if want_dir else p.is_file()))


def symlinks_in(root: Path) -> list:
    """The symbolic links under ``root`` (shape, kernel and file levels), which the diff ignores."""
    found = []
    for folder, dirs, files in os.walk(root):  # os.walk does not descend into linked folders
        found.extend(Path(folder) / n for n in sorted(dirs + files) if (Path(folder) / n).is_symlink())
    return found


def kernel_files(root: Path) -> dict:
    """``{(shape, kernel): {file name: Path}}`` for every IR file under ``root`` (regular files
    in real folders only: symbolic links are never followed)."""
    tree: dict = {}
    for shape_dir in (p for p in _entries(root, True) if p.name != DIFF_DIR):
        for kernel_dir in _entries(shape_dir, True):
            files = {f.name: f for f in _entries(kernel_dir, False)}
            if files:
                tree[(shape_dir.name, kernel_dir.name)] = files
    return tree


@attrs.frozen
class KernelDiff:
    """How one kernel under one shape differs between side A and side B."""

    shape: str
    kernel: str
    status: str
    #: file names whose content differs (``changed``), present on one side only, or identical.
    changed_files: tuple = ()
    only_a_files: tuple = ()
    only_b_files: tuple = ()
    a_files: dict = attrs.field(factory=dict)
    b_files: dict = attrs.field(factory=dict)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def strip_locations(text: str) -> str:
    """IR text without source locations (MLIR ``#loc`` / ``loc(...)``, PTX ``.loc`` / ``.file``,
    LLVM ``!dbg``): they carry absolute paths and line numbers, so two checkouts or an edited
    comment would otherwise make every kernel "changed"."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("#loc", ".loc", ".file", "!")):
            continue
        cut = line.rfind(" loc(")
        if cut >= 0 and line.rstrip().endswith(")"):
            line = line[:cut]
        line = _DBG.sub("", line)
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


def _content(path: Path, raw: bool) -> str:
    text = _read(path)
    return text if raw else strip_locations(text)


def diff_kernels(a_root: Path, b_root: Path, raw: bool = False) -> list:
    """Compare two ``ir/`` trees kernel by kernel; sorted by (shape, kernel).

    :param raw: compare the files byte for byte; by default source locations are ignored.
    """
    a, b = kernel_files(a_root), kernel_files(b_root)
    out = []
    for key in sorted(set(a) | set(b)):
        shape, kernel = key
        fa, fb = a.get(key, {}), b.get(key, {})
        if not fb:
            out.append(KernelDiff(shape, kernel, ONLY_A, only_a_files=tuple(fa), a_files=fa))
            continue
        if not fa:
            out.append(KernelDiff(shape, kernel, ONLY_B, only_b_files=tuple(fb), b_files=fb))
            continue
        common = sorted(set(fa) & set(fb))
        changed = tuple(n for n in common if _content(fa[n], raw) != _content(fb[n], raw))
        only_a = tuple(sorted(set(fa) - set(fb)))
        only_b = tuple(sorted(set(fb) - set(fa)))
        status = CHANGED if (changed or only_a or only_b) else IDENTICAL
        out.append(KernelDiff(shape, kernel, status, changed, only_a, only_b, fa, fb))
    return out


def _roll_up(statuses) -> str:
    statuses = set(statuses)
    if statuses == {ONLY_A}:
        return ONLY_A
    if statuses == {ONLY_B}:
        return ONLY_B
    return IDENTICAL if statuses == {IDENTICAL} else CHANGED


def shape_status(a_run_dir, b_run_dir, raw: bool = False) -> dict:
    """``{shape dir name: identical | changed | only A | only B}`` over two run directories.

    A shape is ``changed`` when any of its kernels changed or exists on one side only. Returns
    ``{}`` when either side has no ``ir/`` tree (nothing was dumped: no column to show).
    """
    a_root, b_root = ir_root(a_run_dir), ir_root(b_run_dir)
    if a_root is None or b_root is None:
        return {}
    by_shape: dict = collections.defaultdict(list)
    for d in diff_kernels(a_root, b_root, raw=raw):
        by_shape[d.shape].append(d.status)
    return {shape: _roll_up(s) for shape, s in sorted(by_shape.items())}


# ----------------------------------------------------------------------------- op counts
def op_counts(text: str) -> collections.Counter:
    """How often each MLIR op (``dialect.op``) occurs in an IR text."""
    counts: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = _OP_LINE.match(line)
        if m:
            counts[m.group(1)] += 1
    return counts


def op_count_delta(a_text: str, b_text: str, limit: int = 8) -> list:
    """``[(op, count A, count B)]`` for the ops whose counts differ; key ops first, then by size."""
    ca, cb = op_counts(a_text), op_counts(b_text)
    differing = [op for op in set(ca) | set(cb) if ca[op] != cb[op]]
    rank = {op: i for i, op in enumerate(KEY_OPS)}
    differing.sort(key=lambda op: (rank.get(op, len(KEY_OPS)), -abs(ca[op] - cb[op]), op))
    return [(op, ca[op], cb[op]) for op in differing[:limit]]


def format_counts(delta) -> str:
    """``tt.dot 1→0, ttng.warp_group_dot 0→1`` (empty when the counts agree)."""
    return ", ".join(f"{op} {a}\u2192{b}" for op, a, b in delta)


def unified_diff(a_path: Path, b_path: Path, a_label: str, b_label: str, raw: bool = False) -> str:
    a_lines = _content(a_path, raw).splitlines(keepends=True)
    b_lines = _content(b_path, raw).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a_lines, b_lines, fromfile=a_label, tofile=b_label, n=3))


def write_diffs(diff: KernelDiff, out_dir: Path, raw: bool = False) -> list:
    """Write one unified diff per changed file of ``diff`` under ``out_dir/<shape>/<kernel>/``.

    :return: the paths written.
    """
    from zlf.rundir import ensure_dir, write_atomic

    written = []
    for name in diff.changed_files:
        target = out_dir / diff.shape / diff.kernel / f"{name}.diff"
        # out_dir may be an old folder: no file or folder link planted in it is followed
        ensure_dir(target.parent, out_dir)
        rel = f"{diff.shape}/{diff.kernel}/{name}"
        write_atomic(target, unified_diff(diff.a_files[name], diff.b_files[name], f"A/{rel}", f"B/{rel}", raw=raw),
                     root=out_dir)
        written.append(target)
    return written


@functools.lru_cache(maxsize=None)
def _row_schema() -> dict:
    """The extension's own schema of an index.tsv row (it left core's schemas), with no column
    required: each column present is checked, a missing one is allowed."""
    from .schema import load

    doc = load()
    doc.pop("required", None)
    return doc


def read_index(root: Path) -> list:
    """Rows of ``index.tsv`` as dicts (empty when absent)."""
    if (root / INDEX).is_symlink():
        return []
    try:  # a bounded regular file (zlf.readers: one line if not); a row not of the schema is left out
        lines = readers.read_bytes(root / INDEX, readers.LIMITS["ir_index"], INDEX).decode(errors="replace").splitlines()
    except OSError:
        return []
    if not lines:
        return []
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:] if line.strip()]
    return [r for r in rows if readers.valid(r, _row_schema())]  # a column may be missing (older trees)
