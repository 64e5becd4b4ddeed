"""Measured device ceilings (bandwidth, matmul TFLOP/s): where they live and how tables use them.

``zlf calibrate`` writes one JSON file per device name under the user cache directory
(``$ZLF_CACHE_DIR``, else ``$XDG_CACHE_HOME/zlf``, else ``~/.cache/zlf``); ``compare`` and
``report`` read it for the device named in each run's meta.json. Measured, not datasheet,
figures: a kernel at 90% of what a plain copy reaches has little left to gain.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import attrs

from . import readers
from .errors import UsageError
from .rundir import write_atomic
from .procs import cache_dir  # noqa: F401  (zlf's cache directory; its home is procs, which hands it to children)

CEILINGS_DIR = "ceilings"
#: what a cached ceilings file must hold before a table divides by it (zlf.readers checks it)
SCHEMA = {
    "type": "object",
    "required": ["device_name", "backend", "bandwidth_GB_s"],
    "properties": {
        "device_name": {"type": "string"},
        "backend": {"type": "string"},
        "bandwidth_GB_s": {"type": "number", "exclusiveMinimum": 0},
        "tflops": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
        "measured": {"type": "string"},
        "method": {"type": "object"},
        "environment": {"type": "object"},
    },
}




def device_key(device_name: str) -> str:
    """File-name-safe form of a device name: ``NVIDIA H200`` → ``NVIDIA_H200``."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", device_name).strip("_") or "unknown"


def ceilings_path(device_name: str) -> Path:
    return cache_dir() / CEILINGS_DIR / f"{device_key(device_name)}.json"


@attrs.frozen
class Ceilings:
    """What one device reached in ``zlf calibrate``.

    ``bandwidth_GB_s`` counts bytes read plus bytes written by a large copy (the convention of
    the ``bytes`` of zlf ops); ``tflops`` maps a dtype name to the TFLOP/s of a large matmul.
    """

    device_name: str
    backend: str
    bandwidth_GB_s: float
    tflops: dict = attrs.field(factory=dict)
    measured: str = ""
    method: dict = attrs.field(factory=dict)
    environment: dict = attrs.field(factory=dict)
    path: Optional[str] = attrs.field(default=None, eq=False)

    def to_json(self) -> dict:
        d = attrs.asdict(self)
        d.pop("path")
        return d

    @classmethod
    def from_json(cls, d: dict, path=None) -> "Ceilings":
        names = {a.name for a in attrs.fields(cls)} - {"path"}
        return cls(**{k: v for k, v in d.items() if k in names}, path=str(path) if path else None)

    def tflops_for(self, dtype: str) -> Optional[float]:
        """The matmul ceiling for ``dtype``; None when it was not measured (no cross-dtype guess)."""
        return self.tflops.get(dtype)

    def describe(self) -> str:
        compute = ", ".join(f"{v:.4g} TFLOP/s {k}" for k, v in self.tflops.items())
        return f"{self.device_name}: {self.bandwidth_GB_s:.4g} GB/s copy, {compute} (measured {self.measured[:10]})"


def save(ceilings: Ceilings) -> Path:
    path = ceilings_path(ceilings.device_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(ceilings.to_json(), indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}; set ZLF_CACHE_DIR to a writable folder") from exc
    return path


def load(device_name: Optional[str]) -> Optional[Ceilings]:
    """The stored ceilings of ``device_name``, or None (never measured, or unreadable)."""
    if not device_name:
        return None
    path = ceilings_path(device_name)
    try:
        return Ceilings.from_json(readers.read_json(path, schema=SCHEMA, limit=readers.LIMITS["ceilings"],
                                                     what="ceilings cache"), path)
    except (OSError, ValueError, TypeError, readers.BadFile):  # a cache: one that is not one is measured again
        return None


def percent_of(ceilings: Optional[Ceilings], gbps, tflops, dtype: str) -> tuple:
    """``(% of bandwidth ceiling, % of matmul ceiling for dtype)``; None where unknown."""
    if ceilings is None:
        return None, None
    bw = 100.0 * gbps / ceilings.bandwidth_GB_s if gbps is not None and ceilings.bandwidth_GB_s else None
    peak = ceilings.tflops_for(dtype)
    tf = 100.0 * tflops / peak if tflops is not None and peak else None
    return bw, tf
