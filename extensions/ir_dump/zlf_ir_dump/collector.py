"""What was compiled and launched under which shape, and writing it as the ``ir/`` tree.

Fed by ``on_compile`` / ``on_launch`` events; written once at the end of the run and again
from the exit paths (atexit, SIGTERM, SIGHUP) when something changed since, so a run that dies
still leaves the IR compiled so far. The IR text is read when the kernel is compiled: the
compiler's cache may be gone (or be another process's) by the time the process exits.
"""
from __future__ import annotations

import atexit
import collections
import logging
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Callable, Optional

import attrs
from zlf_ir_dump.irtree import INDEX, NAMING
from zlf.records import shape_str
from zlf.rundir import replace_dir

from .naming import OPTIONS, Variant, name_group

log = logging.getLogger("zlf.ir_dump")

DEFAULT_KINDS = ("ttgir",)
LAUNCHED = "launched"
SWEEP_LOSER = "sweep loser"
NOT_LAUNCHED = "not launched"
NO_SHAPE = "-"

INDEX_COLUMNS = ("shape", "kernel", "name", "file", "status", "launches", "sweep_launches", "num_warps", "num_stages",
                 "num_ctas", "maxnreg", "constexprs", "specialization", "signature", "target", "hash")


def parse_kinds(text: Optional[str], available=()) -> tuple:
    """``"ttgir,ptx"`` -> ``("ttgir", "ptx")``; ``all`` means every kind ``available``."""
    if not text:
        return DEFAULT_KINDS
    kinds = []
    for k in (p.strip().lower() for p in text.split(",")):
        if k == "all":
            kinds.extend(available or ("ttir", "ttgir", "llir"))
        elif k:
            kinds.append(k)
    return tuple(dict.fromkeys(kinds)) or DEFAULT_KINDS


def _shape_sort_key(shape: str):
    try:
        return (0, tuple(int(d) for d in shape.split("x")), shape)
    except ValueError:
        return (1, (), shape)


def _kernel_dir(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in name) or "kernel"


@attrs.define
class Usage:
    launches: int = 0
    sweep_launches: int = 0


class IrCollector:
    """Per shape: which compiled variants of which kernel were launched, and how often."""

    def __init__(self, kinds=DEFAULT_KINDS):
        self.kinds = tuple(kinds)
        self.variants: dict = {}  # hash -> Variant
        self.texts: dict = {}  # hash -> {kind: bytes}
        self.missing_kinds: dict = collections.defaultdict(set)  # hash -> kinds the compiler did not produce
        self.usage: dict = collections.defaultdict(dict)  # shape -> {hash: Usage}
        self.point_shapes: dict = {}  # point id -> shape dir name
        self.current_shape: Optional[str] = None
        self.unmatched_launches = 0
        self.changes = 0  # bumped on every event; the writer compares it to what it wrote
        self._order: list = []  # hashes in compile order (launch fallback when no hash is given)

    # ------------------------------------------------------------------ feeding
    def begin_point(self, point) -> None:
        self.current_shape = shape_str(point.shape)
        self.point_shapes[point.id] = self.current_shape

    def end_point(self) -> None:
        self.current_shape = None

    def compiled(self, event) -> None:
        if not event.hash:
            return
        self.changes += 1
        if event.hash not in self.variants:
            self.variants[event.hash] = Variant(
                kernel=event.name, hash=event.hash, constants=dict(event.constants),
                num_warps=event.num_warps, num_stages=event.num_stages, num_ctas=event.num_ctas,
                maxnreg=event.maxnreg, signature=dict(event.signature),
                specialization=dict(event.specialization), target=event.target,
            )
            texts = {}
            for kind in self.kinds:
                path = event.asm_paths.get(kind)
                try:
                    texts[kind] = Path(path).read_bytes() if path else None
                except OSError:
                    texts[kind] = None
                if texts[kind] is None:
                    self.missing_kinds[event.hash].add(kind)
            self.texts[event.hash] = {k: v for k, v in texts.items() if v is not None}
            self._order.append(event.hash)
        if self.current_shape is not None:
            self.usage[self.current_shape].setdefault(event.hash, Usage())

    def _match(self, event) -> Optional[str]:
        if event.hash and event.hash in self.variants:
            return event.hash
        # No load hook on this Triton: the newest variant of that name is the one just loaded.
        same_name = [h for h in self._order if self.variants[h].kernel == event.name]
        return same_name[-1] if same_name else None

    def launched(self, event) -> None:
        shape = self.point_shapes.get(event.point, self.current_shape) if event.point else self.current_shape
        if shape is None:
            return
        h = self._match(event)
        if h is None:
            self.unmatched_launches += 1
            return
        self.changes += 1
        usage = self.usage[shape].setdefault(h, Usage())
        if event.in_autotune:
            usage.sweep_launches += 1
        else:
            usage.launches += 1

    # ------------------------------------------------------------------ writing
    def _rows_and_files(self):
        """``(rows, files, legend)``: index rows, ``{relative path: bytes}``, naming legend."""
        rows, files = [], {}
        legend = collections.defaultdict(dict)  # kernel -> {short: full}
        seen = set()
        for shape in sorted(self.usage, key=_shape_sort_key):
            by_kernel = collections.defaultdict(list)
            for h in self.usage[shape]:
                by_kernel[self.variants[h].kernel].append(self.variants[h])
            for kernel in sorted(by_kernel):
                # Files are named within the launched variants alone: a replaying side runs no
                # sweep, and its names must still match the recording side's (diff -r A B).
                launched = [v for v in by_kernel[kernel] if self.usage[shape][v.hash].launches]
                others = [v for v in by_kernel[kernel] if not self.usage[shape][v.hash].launches]
                names = {}
                for members in (launched, others):
                    if members:
                        group = name_group(members)
                        legend[kernel].update(group.legend)
                        names.update(group.names)
                for v in sorted(by_kernel[kernel], key=lambda v: (not self.usage[shape][v.hash].launches, names[v.hash])):
                    seen.add(v.hash)
                    use = self.usage[shape][v.hash]
                    status = LAUNCHED if use.launches else (SWEEP_LOSER if use.sweep_launches else NOT_LAUNCHED)
                    name = names[v.hash]
                    if status == LAUNCHED:
                        for kind, text in sorted(self.texts.get(v.hash, {}).items()):
                            files[f"{shape}/{_kernel_dir(kernel)}/{name}.{kind}"] = text
                    rows.append(self._row(shape, v, name, status, use, with_file=status == LAUNCHED))
        for h in self._order:  # compiled outside every point: listed, never named
            if h not in seen:
                rows.append(self._row(NO_SHAPE, self.variants[h], "", NOT_LAUNCHED, Usage(), with_file=False))
        return rows, files, legend

    @staticmethod
    def _row(shape, v: Variant, name, status, use: Usage, with_file: bool) -> dict:
        return {
            "shape": shape, "kernel": v.kernel, "name": name,
            "file": f"{shape}/{_kernel_dir(v.kernel)}/{name}" if with_file else "", "status": status,
            "launches": use.launches, "sweep_launches": use.sweep_launches,
            "num_warps": v.num_warps, "num_stages": v.num_stages, "num_ctas": v.num_ctas, "maxnreg": v.maxnreg,
            "constexprs": ";".join(f"{k}={val}" for k, val in v.constants.items()),
            "specialization": ";".join(f"{k}:{val}" for k, val in v.specialization.items()),
            "signature": ",".join(str(t) for t in v.signature.values() if t != "constexpr"),
            "target": v.target, "hash": v.hash,
        }

    def write(self, ir_dir) -> dict:
        """(Re)write ``ir_dir`` completely; returns ``{"files": n, "variants": n, "launched": n}``."""
        ir_dir = Path(ir_dir)
        rows, files, legend = self._rows_and_files()
        tmp = ir_dir.with_name(f".{ir_dir.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            for rel, data in files.items():
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                _write(target, data)
            lines = ["\t".join(INDEX_COLUMNS)]
            for r in rows:
                lines.append("\t".join("" if r[c] is None else str(r[c]).replace("\t", " ") for c in INDEX_COLUMNS))
            _write(tmp / INDEX, ("\n".join(lines) + "\n").encode())
            _write(tmp / NAMING, naming_markdown(legend, self.kinds).encode())
        except BaseException:  # a full disk: no half tree left beside the old one
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # Swap in the complete tree: a reader never sees half of the new one.
        replace_dir(tmp, ir_dir)
        launched = sum(1 for r in rows if r["status"] == LAUNCHED)
        return {"files": len(files), "variants": len(self.variants), "launched": launched,
                "sweep_losers": sum(1 for r in rows if r["status"] == SWEEP_LOSER)}


def _write(path: Path, data: bytes) -> None:
    """``path`` with ``data``; an error names the file (a full disk says where it was full)."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def naming_markdown(legend: dict, kinds) -> str:
    out = [
        "# Names of the IR files",
        "",
        "`ir/<shape>/<kernel>/<name>.<kind>`: one file per variant launched under that shape and IR kind "
        f"({', '.join(kinds)}). Autotune sweep losers and variants compiled but not launched are only in "
        "`index.tsv`.",
        "",
        "A name lists only the parameters whose values differ among the variants launched for that kernel "
        "under that shape (sweep losers and variants not launched are named among themselves, in "
        "`index.tsv`), so a side that replays a recorded config names its files as the recording side "
        "does; when none differ it is `w<num_warps>s<num_stages>`.",
        "",
        "| in a name | meaning |",
        "|---|---|",
    ]
    for attr, letter in OPTIONS:
        out.append(f"| `{letter}N` | {attr} = N |")
    out += [
        "| `__fp16` | dtype suffix: element types of the pointer arguments (added when the dtype tells colliding names apart) |",
        "| `__EMdiv16` | specialization: argument EM is divisible by 16 (`eq1`: an int argument equal to 1, folded) |",
        "| `<hash>__` | prefix of the cache hash: the last resort when nothing else tells two variants apart "
        "(differs between compiler builds, so such files do not line up in an A/B diff) |",
        "",
    ]
    shown = {k: v for k, v in sorted(legend.items()) if v}
    if shown:
        out += ["## Abbreviations (initials of multi-word parameter names)", "",
                "| kernel | short | parameter |", "|---|---|---|"]
        for kernel, table in shown.items():
            for short, full in sorted(table.items()):
                out.append(f"| {kernel} | `{short}` | `{full}` |")
        out.append("")
    return "\n".join(out)


class ExitGuard:
    """Calls ``write`` when the process exits before the run's normal end: atexit, and SIGTERM /
    SIGHUP (the previous handler runs afterwards; a default one still kills the process with the
    same signal, so the exit status says what happened)."""

    SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)

    def __init__(self, write: Callable[[str], None]):
        self._write = write
        self._previous: dict = {}
        self._installed = False

    def install(self) -> "ExitGuard":
        atexit.register(self._at_exit)
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                try:
                    self._previous[sig] = signal.signal(sig, self._on_signal)
                except (ValueError, OSError):  # not allowed here (embedded interpreter ...)
                    pass
        self._installed = True
        return self

    def remove(self) -> None:
        if not self._installed:
            return
        atexit.unregister(self._at_exit)
        for sig, previous in self._previous.items():
            try:
                signal.signal(sig, previous)
            except (ValueError, OSError, TypeError):
                pass
        self._previous.clear()
        self._installed = False

    def _at_exit(self) -> None:
        self._safe_write("atexit")

    def _safe_write(self, why: str) -> None:
        try:
            self._write(why)
        except Exception:  # the process is going down anyway; say so and let it
            log.exception("ir_dump: writing the IR tree at %s failed", why)

    def _on_signal(self, signum, frame) -> None:
        self._safe_write(f"signal {signum}")
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.remove()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


class IrDump:
    """An :class:`IrCollector` bound to its ``ir/`` folder, written at the end and on exit paths."""

    def __init__(self, ir_dir, kinds=DEFAULT_KINDS, note: Callable[[str], None] = lambda line: None):
        self.ir_dir = Path(ir_dir)
        self.collector = IrCollector(kinds)
        self.summary: Optional[dict] = None
        self._note = note
        self._written_changes = -1
        self.guard = ExitGuard(self.write)

    def write(self, why: str = "end of run") -> Optional[dict]:
        """Write the tree unless nothing changed since the last write."""
        if self.collector.changes == self._written_changes:
            return self.summary
        changes = self.collector.changes
        self.summary = self.collector.write(self.ir_dir)
        self._written_changes = changes
        s = self.summary
        self._note(f"ir_dump: wrote {s['files']} files for {s['launched']} launched variants "
                   f"({s['sweep_losers']} sweep losers, {s['variants']} compiled) to {self.ir_dir} at {why}")
        return s
