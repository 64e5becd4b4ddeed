"""The run directory: the only interface between ``run``, ``compare``, ``ab`` and ``report``.

Layout::

    <parent>/<name>_<YYYYmmdd-HHMMSS>/
      run.log         human log with marker lines, no escape codes
      results.jsonl   one PointRecord per line, appended (and flushed) as each point finishes
      meta.json       command line, extensions, backend, environment; rewritten atomically
      shapes.yaml     the shapes actually used, per op

Written incrementally: a crash loses nothing already measured.
"""
from __future__ import annotations

import datetime as _dt
import errno
import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Optional

import attrs
import yaml

from . import readers
from .errors import UsageError
from .records import PointRecord

RESULTS = "results.jsonl"
META = "meta.json"
LOG = "run.log"
SHAPES = "shapes.yaml"
#: space held while a run writes, given back to rewrite meta.json when the disk fills up.
RESERVE = ".zlf-reserve"
RESERVE_BYTES = 32 * 1024
#: what a write into a full disk (or past a file-size or quota limit) raises.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def safe_name(name, default: str = "run") -> str:
    """``name`` as one harmless path component: every run of characters other than letters,
    digits, ``_ . + -`` becomes ``_`` and leading/trailing dots and underscores go, so
    ``../../x`` is ``x`` and never ``..``, a separator or an absolute path."""
    text = re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(name)).strip("._")
    return text or default


def inside(parent, path) -> Path:
    """``path``, or a one-line UsageError when it does not resolve to a place under ``parent``
    (a name from a record or a command line must not lead out of its directory)."""
    base, target = Path(parent).resolve(), Path(path).resolve()
    if target != base and base not in target.parents:
        raise UsageError(f"{str(path)!r} is outside {str(parent)!r}")
    return Path(path)


def _overwrite(path: Path, text: str) -> None:
    with open(path, "r+") as f:
        f.write(text)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def write_atomic(path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader (or a crash) sees the old or the new file,
    never half of one: write a temporary file beside it, flush it to disk, rename it over."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # else a reboot can leave an empty file behind the rename
        os.replace(tmp, path)
    except BaseException:  # a full disk, a signal: the old file stays, no temporary one beside it
        tmp.unlink(missing_ok=True)
        raise
    try:  # the rename itself lives in the directory
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _checked(record: PointRecord) -> PointRecord:
    """``record`` as readers can use it, or TypeError: a point id that is text; a median and
    samples that are finite numbers (JSON's ``NaN`` / ``Infinity`` are not a time: the median
    becomes None, the point reads as "no time", and such samples are dropped)."""
    if not isinstance(record.point, str) or not isinstance(record.status, str):
        raise TypeError("not a record")
    if record.median_ms is not None and not _number(record.median_ms):
        raise TypeError("median_ms is not a number")
    samples = tuple(s for s in record.samples or () if _number(s) and math.isfinite(s))
    median = record.median_ms if record.median_ms is None or math.isfinite(record.median_ms) else None
    if median != record.median_ms or samples != tuple(record.samples or ()):
        record = attrs.evolve(record, median_ms=median, samples=samples)
    return record


class RunDir:
    """Writer and reader of one run directory."""

    def __init__(self, path):
        self.path = Path(path)

    # ------------------------------------------------------------------ writing
    @classmethod
    def create(cls, parent, name: str) -> "RunDir":
        """Make ``parent/name_<timestamp>`` (``name`` through :func:`safe_name`); never reuse an
        existing directory."""
        parent = Path(parent)
        name = safe_name(name)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create output directory {str(parent)!r}: {exc.strerror}") from exc
        base = f"{name}_{timestamp()}"
        for k in range(1000):
            path = inside(parent, parent / (base if k == 0 else f"{base}-{k}"))
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:  # read-only parent, a name with a slash, /proc ...
                raise UsageError(f"cannot create run directory {str(path)!r}: {exc.strerror or exc}") from exc
            return cls(path)
        raise UsageError(f"cannot create a fresh run directory under {str(parent)!r}")

    def append(self, record: PointRecord) -> None:
        """Add one record line; when it cannot be written whole (a full disk), the file is cut
        back to the records before it and the error raised."""
        data = memoryview((json.dumps(record.to_json(), default=str) + "\n").encode())
        path = self.path / RESULTS
        # os-level writes: a buffered file would retry the failed write when it is closed
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            except OSError as exc:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
                raise OSError(exc.errno, exc.strerror, str(path)) from exc
        finally:
            os.close(fd)

    def reserve(self) -> None:
        """Hold :data:`RESERVE_BYTES` of disk until :meth:`release`, so that the final meta.json
        can still be written when the run fills the disk; best effort (no error without space)."""
        path = self.path / RESERVE
        try:
            # a quarter of what is free at most: on a tiny disk the reserve must not be the cause
            vfs = os.statvfs(self.path)
            size = min(RESERVE_BYTES, vfs.f_bavail * vfs.f_frsize // 4)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except (AttributeError, OSError) as exc:
                if disk_full(exc):
                    raise
                os.write(fd, bytes(size))  # a file system without fallocate
        except OSError:
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def release(self) -> bool:
        """Give back the space of :meth:`reserve`; True when there was some."""
        try:
            (self.path / RESERVE).unlink()
            return True
        except OSError:
            return False

    def write_meta(self, meta: dict) -> None:
        """Rewrite meta.json atomically. On a full disk: give back the reserve and try again,
        then compactly, and as the last resort overwrite the old file in place (its blocks are
        already ours): a meta.json that says how the run ended beats one that says "running"."""
        path = self.path / META
        text = json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n"
        try:
            write_atomic(path, text)
            return
        except OSError as exc:
            if not disk_full(exc):
                raise
            error = exc
        self.release()
        compact = json.dumps(meta, sort_keys=True, separators=(",", ":"), default=str) + "\n"
        attempts = [lambda: write_atomic(path, text), lambda: write_atomic(path, compact)]
        if path.exists():  # no old file (the disk was full before the first one): nothing to overwrite
            attempts.append(lambda: _overwrite(path, compact))
        for attempt in attempts:
            try:
                attempt()
                return
            except OSError as exc:
                if not disk_full(exc):
                    raise
                error = exc
        raise error

    def write_shapes(self, shapes_by_op: dict) -> None:
        doc = {op: {"shapes": [list(s) for s in shapes]} for op, shapes in shapes_by_op.items()}
        write_atomic(self.path / SHAPES, yaml.safe_dump(doc, sort_keys=False, default_flow_style=None))

    # ------------------------------------------------------------------ reading
    @classmethod
    def open(cls, path) -> "RunDir":
        """Open an existing run directory, or raise a one-line UsageError saying why it is not one."""
        p = Path(path)
        if not p.is_dir():
            raise UsageError(f"{str(path)!r} is not a directory")
        if not (p / META).is_file() and not (p / RESULTS).is_file():
            raise UsageError(f"{str(path)!r} is not a zlf run directory (no {META} or {RESULTS})")
        return cls(p)

    def meta(self) -> dict:
        """meta.json ({} when there is none); a file that is not one is a one-line UsageError
        (:mod:`zlf.readers`: a regular file, bounded, each field of the schema's type)."""
        try:
            return readers.read_json(self.path / META, schema="meta", what=META, partial=True)
        except FileNotFoundError:
            return {}

    def records(self) -> tuple:
        """``(records, skipped_lines)``: complete lines only (a crash can cut the last one; a
        line that is not UTF-8 JSON of a record is skipped and counted the same way)."""
        try:  # each field of its type; a median NaN, Infinity or out of range reads as no time (_checked)
            docs, skipped = readers.read_jsonl(self.path / RESULTS, schema="result", what=RESULTS, lenient=True,
                                               partial=True)
        except FileNotFoundError:
            return [], 0
        records = []
        for doc in docs:
            try:
                records.append(_checked(PointRecord.from_json(doc)))
            except (TypeError, ValueError):
                skipped += 1
        return records, skipped

    def shapes(self) -> Optional[dict]:
        try:
            return readers.read_yaml(self.path / SHAPES, what=SHAPES)
        except FileNotFoundError:
            return None


def replace_dir(tmp: Path, final: Path) -> None:
    """Swap a complete folder ``tmp`` in at ``final``: a reader never sees half of one."""
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
