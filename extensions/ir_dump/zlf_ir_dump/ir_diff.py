"""Compare the IR trees of two run directories, per shape and kernel.

``zlf ir-diff A_DIR B_DIR``: each (shape, kernel) is identical, changed, only A or only B; a
changed one gets an op-count summary (``tt.dot 1→0, ttng.warp_group_dot 0→1``) and a unified
diff per changed file under ``--out``. Exit code: 0 identical, 1 something differs, 2 bad input
(the convention of diff(1)).
"""
from __future__ import annotations

from pathlib import Path

from tabulate import tabulate
from zlf import UsageError
from zlf.console import clean, clean_rows
from zlf_ir_dump.irtree import (CHANGED, IDENTICAL, ONLY_A, ONLY_B, diff_kernels, format_counts, ir_root, op_count_delta,
                        symlinks_in, write_diffs)
from zlf.rundir import timestamp


def configure_parser(p) -> None:
    p.add_argument("a_dir", metavar="A_DIR", help="run directory of side A (or its ir/ folder)")
    p.add_argument("b_dir", metavar="B_DIR", help="run directory of side B (or its ir/ folder)")
    p.add_argument("--out", metavar="DIR", help="where the unified diffs go (default: runs/ir-diff_<timestamp>)")
    p.add_argument("--all", action="store_true", help="list identical kernels too (default: only a count)")
    p.add_argument("--raw", action="store_true",
                   help="compare files byte for byte (default: source locations -- paths, line numbers -- are ignored)")


def _root(path: str) -> Path:
    root = ir_root(path)
    if root is None:
        raise UsageError(f"{path!r} has no ir/ tree (run with --ext ir_dump, or zlf ir)")
    return root


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except (OSError, UnicodeDecodeError):
        return ""


def main(args, session) -> int:
    a_root, b_root = _root(args.a_dir), _root(args.b_dir)
    diffs = diff_kernels(a_root, b_root, raw=args.raw)
    out_dir = Path(args.out) if args.out else Path("runs") / f"ir-diff_{timestamp()}"
    rows, counts = [], {IDENTICAL: 0, CHANGED: 0, ONLY_A: 0, ONLY_B: 0}
    for d in diffs:
        counts[d.status] += 1
        if d.status == IDENTICAL and not args.all:
            continue
        if d.status != CHANGED:
            files = d.only_a_files or d.only_b_files or tuple(d.a_files)
            rows.append([d.shape, d.kernel, d.status, ", ".join(files), ""])
            continue
        try:
            written = {p.name[: -len(".diff")]: p for p in write_diffs(d, out_dir, raw=args.raw)}
        except OSError as exc:
            raise UsageError(f"cannot write the diffs to {str(out_dir)!r}: {exc.strerror or exc}; "
                             "pass --out DIR somewhere writable") from exc
        for name in d.changed_files:
            delta = op_count_delta(_read(d.a_files[name]), _read(d.b_files[name]))
            rows.append([d.shape, d.kernel, d.status, name, format_counts(delta) or "same op counts"])
            rows.append(["", "", "", f"  diff: {written[name]}", ""])
        for name in d.only_a_files:
            rows.append([d.shape, d.kernel, d.status, f"{name} (only A)", ""])
        for name in d.only_b_files:
            rows.append([d.shape, d.kernel, d.status, f"{name} (only B)", ""])
        if not d.changed_files and not d.only_a_files and not d.only_b_files:
            rows.append([d.shape, d.kernel, d.status, "", ""])
    print(clean(f"A: {a_root}") + "\n" + clean(f"B: {b_root}"))
    for side, root in (("A", a_root), ("B", b_root)):
        links = symlinks_in(root)
        if links:
            print(f"note: {side}: {len(links)} symbolic link(s) in the IR tree left out (never followed), "
                  f"e.g. {clean(str(links[0]))}")
    if rows:
        print(tabulate(clean_rows(rows), headers=["shape", "kernel", "status", "file", "op counts A→B"]))
    print(", ".join(f"{n} {status}" for status, n in counts.items()) + " (shape, kernel) pairs")
    if counts[CHANGED]:
        print(f"diffs: {out_dir}")
    return 0 if counts[CHANGED] == counts[ONLY_A] == counts[ONLY_B] == 0 else 1
