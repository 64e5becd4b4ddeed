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
import json
import os
from pathlib import Path
from typing import Optional

import yaml

from .errors import UsageError
from .records import PointRecord

RESULTS = "results.jsonl"
META = "meta.json"
LOG = "run.log"
SHAPES = "shapes.yaml"


def timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def write_atomic(path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader (or a crash) sees the old or the new file,
    never half of one: write a temporary file beside it, flush it to disk, rename it over."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunDir:
    """Writer and reader of one run directory."""

    def __init__(self, path):
        self.path = Path(path)

    # ------------------------------------------------------------------ writing
    @classmethod
    def create(cls, parent, name: str) -> "RunDir":
        """Make ``parent/name_<timestamp>``; never reuse an existing directory."""
        parent = Path(parent)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create output directory {str(parent)!r}: {exc.strerror}") from exc
        base = f"{name}_{timestamp()}"
        for k in range(1000):
            path = parent / (base if k == 0 else f"{base}-{k}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:  # read-only parent, a name with a slash, /proc ...
                raise UsageError(f"cannot create run directory {str(path)!r}: {exc.strerror or exc}") from exc
            return cls(path)
        raise UsageError(f"cannot create a fresh run directory under {str(parent)!r}")

    def append(self, record: PointRecord) -> None:
        line = json.dumps(record.to_json(), default=str)
        with open(self.path / RESULTS, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_meta(self, meta: dict) -> None:
        write_atomic(self.path / META, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")

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
        try:
            return json.loads((self.path / META).read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as exc:
            raise UsageError(f"{self.path / META}: not valid JSON ({exc})") from exc

    def records(self) -> tuple:
        """``(records, skipped_lines)``: complete lines only (a crash can cut the last one)."""
        records, skipped = [], 0
        try:
            lines = (self.path / RESULTS).read_text().splitlines()
        except FileNotFoundError:
            return [], 0
        for line in lines:
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                if not isinstance(doc, dict):
                    raise TypeError("not a record")
                records.append(PointRecord.from_json(doc))
            except (json.JSONDecodeError, TypeError, ValueError):
                skipped += 1
        return records, skipped

    def shapes(self) -> Optional[dict]:
        try:
            return yaml.safe_load((self.path / SHAPES).read_text())
        except FileNotFoundError:
            return None
