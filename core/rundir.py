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
import secrets
import shutil
from pathlib import Path
from typing import Optional

import attrs
import yaml

from . import readers
from .errors import UsageError
from .procs import leave_if_forked
from .records import PointRecord
from .redact import redact

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
    with os.fdopen(os.open(path, os.O_RDWR | os.O_NOFOLLOW), "r+") as f:
        f.write(text)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


class LinkRefused(UsageError):
    """A write that would go through a symbolic link (or a non-directory) below its root."""


def _refuse(path, where) -> LinkRefused:
    return LinkRefused(f"refusing to write {str(path)!r}: {str(where)!r} is a symbolic link or not a directory "
                       "(zlf never writes through a link)")


def open_dir(path, root=None) -> int:
    """A file descriptor of the directory ``path``, every component of it below ``root`` opened
    without following a link (a LinkRefused error names the one that is one). ``root`` is the place
    the user named (a run directory, ``--out``): it is taken as it resolves; without ``root``,
    ``path`` itself is (only the files written into it are never followed)."""
    path = Path(path)
    if root is None:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    root = Path(root)
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    parts = [] if rel == "." else Path(rel).parts
    if parts and parts[0] == "..":
        raise UsageError(f"{str(path)!r} is outside {str(root)!r}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    where = root
    try:
        for part in parts:
            where = where / part
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(path, where) from exc
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_nofollow(path, mode: str = "w", root=None):
    """``open(path, mode)`` (``w``, ``a``, ``wb``, ``ab``) for a file zlf writes into a directory
    it did not just create: the file itself (and, below ``root``, every folder) is never a link
    followed -- LinkRefused, one line."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    dfd = open_dir(path.parent, root)
    try:
        fd = os.open(path.name, flags, 0o666, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, path) from exc
        raise
    finally:
        os.close(dfd)
    return os.fdopen(fd, mode, **({} if "b" in mode else {"buffering": 1}))


def ensure_dir(path, root) -> Path:
    """Make the directory ``path`` and its missing parents below ``root``; none of them (old or
    new) may be a symbolic link: LinkRefused, one line. Returns ``path``."""
    path, root = Path(path), Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    parts = [] if rel == "." else Path(rel).parts
    if parts and parts[0] == "..":
        raise UsageError(f"{str(path)!r} is outside {str(root)!r}")
    where = root
    for part in parts:
        fd = open_dir(where, root)
        try:
            os.mkdir(part, dir_fd=fd)
        except FileExistsError:
            pass
        finally:
            os.close(fd)
        where = where / part
    os.close(open_dir(path, root))  # each component is a real directory
    return path


def write_atomic(path, text, root=None) -> None:
    """Replace ``path`` with ``text`` (str or bytes) so that a reader (or a crash) sees the old or
    the new file, never half of one, and no link is followed: a temporary file of a fresh name is
    created beside it (``O_EXCL | O_NOFOLLOW``, relative to the directory opened by
    :func:`open_dir`), flushed to disk and renamed over ``path`` (a link there is replaced, never
    written through). ``root``: the directories between it and ``path`` may not be links either."""
    path = Path(path)
    data = text.encode() if isinstance(text, str) else bytes(text)
    dfd = open_dir(path.parent, root)
    try:
        tmp = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)  # else a reboot can leave an empty file behind the rename
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:  # a full disk, a signal: the old file stays, no temporary one beside it
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        try:  # the rename itself lives in the directory
            os.fsync(dfd)
        except OSError:
            pass
    finally:
        os.close(dfd)


def write_figure(fig, path, root=None, **savefig) -> None:
    """Save a matplotlib figure to ``path`` as :func:`write_atomic` writes (never through a link)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    write_atomic(path, buf.getvalue(), root)


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
        #: absolute from the start: an op that changes the working directory cannot misplace a record
        self.path = Path(os.path.abspath(path))
        #: the path as given (relative to where zlf started): what messages show
        self.shown = Path(path)
        #: the process that writes here: a copy made by an op's os.fork() writes nothing (it ends)
        self.owner = os.getpid()

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
        leave_if_forked(self.owner)
        data = memoryview((json.dumps(redact(record.to_json()), default=str) + "\n").encode())
        path = self.path / RESULTS
        # os-level writes: a buffered file would retry the failed write when it is closed
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
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

    def write_meta(self, meta: dict, name: str = META, sort_keys: bool = True) -> None:
        """Rewrite meta.json (or the state file ``name``: a campaign's) atomically. On a full disk:
        give back the reserve and try again, then compactly, and as the last resort overwrite the
        old file in place (its blocks are already ours): a state file that says how the run ended
        beats one that says "running"."""
        leave_if_forked(self.owner)
        path = self.path / name
        meta = redact(meta)  # a record is for sharing: no credential, by name or by value
        text = json.dumps(meta, indent=2, sort_keys=sort_keys, default=str) + "\n"
        try:
            write_atomic(path, text)
            return
        except OSError as exc:
            if not disk_full(exc):
                raise
            error = exc
        self.release()
        compact = json.dumps(meta, sort_keys=sort_keys, separators=(",", ":"), default=str) + "\n"
        attempts = [lambda: write_atomic(path, text), lambda: write_atomic(path, compact)]
        # in place only into the old file's own blocks: longer text would cut the file at the limit
        # (no old file: the disk was full before the first one, nothing to overwrite)
        if path.exists() and len(compact.encode()) <= path.stat().st_size:
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
    _remove(old)
    if os.path.lexists(final):  # a link at ``final`` is moved aside and removed, never followed
        os.replace(final, old)
    os.replace(tmp, final)
    _remove(old)


def _remove(path: Path) -> None:
    """Remove a folder, a file or a link (the link, not what it names)."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)
