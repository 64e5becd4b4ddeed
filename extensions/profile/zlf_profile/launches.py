"""Which kernels a point launched: recorded during runs, read back when profiling.

During a run (the extension active), every point's record gets ``extra["launches"]``:
``{"kernels": [names of the checked call's own launches, in order], "sweep": n}`` where ``n``
counts the autotune sweep's launches (benchmarking configs, not the point's own work). A run
made without this extension is read through ir_dump's ``ir/index.tsv`` instead (kernel names per
shape, no order); a run with neither says so and every kernel of the call is profiled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import attrs
from zlf.records import shape_str

KEY = "launches"
#: Triton's element type names of the pointer arguments, per zlf dtype (index.tsv signatures).
TRITON_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "i8",
                "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1"}


class LaunchRecorder:
    """Collects the current point's launches from ``on_launch``."""

    def __init__(self):
        self.kernels: list = []
        self.sweep = 0

    def reset(self) -> None:
        self.kernels, self.sweep = [], 0

    def add(self, event) -> None:
        if event.in_autotune:
            self.sweep += 1
        else:
            self.kernels.append(event.name)

    def to_json(self) -> Optional[dict]:
        if not self.kernels and not self.sweep:
            return None
        return {"kernels": list(self.kernels), "sweep": self.sweep}


@attrs.frozen
class LaunchInfo:
    """What is known of a point's kernels: names in launch order (``ordered``), and from where."""

    kernels: tuple = ()
    ordered: bool = False
    sweep: int = 0
    source: str = ""

    @property
    def known(self) -> bool:
        return bool(self.kernels)

    def describe(self) -> str:
        if not self.kernels:
            return "the run has no launch record of this point: every kernel of the point's call was profiled"
        names = ", ".join(dict.fromkeys(self.kernels))
        per_call = f"{len(self.kernels)} launch(es) per call" if self.ordered else "launch count unknown"
        return f"kernels from {self.source}: {names} ({per_call})"


def from_record(record) -> LaunchInfo:
    data = (record.extra or {}).get(KEY) if record is not None else None
    if isinstance(data, dict) and data.get("kernels"):
        return LaunchInfo(tuple(data["kernels"]), True, int(data.get("sweep") or 0),
                          "the run's launch record (results.jsonl)")
    return LaunchInfo()


def from_ir_index(run_dir, shape, dtype: str) -> LaunchInfo:
    """Kernel names ir_dump saw launched under the point's shape (and dtype, when the
    signatures tell): no order and no count. Nothing without the ir_dump extension installed."""
    try:
        from zlf_ir_dump.irtree import ir_root, read_index
    except ImportError:
        return LaunchInfo()
    root = ir_root(run_dir) if run_dir else None
    if root is None:
        return LaunchInfo()
    rows = [r for r in read_index(Path(root)) if r.get("shape") == shape_str(shape) and r.get("status") == "launched"]
    ty = TRITON_TYPES.get(dtype)
    typed = [r for r in rows if ty and f"*{ty}" in (r.get("signature") or "").split(",")]
    names = tuple(dict.fromkeys(r.get("kernel", "") for r in (typed or rows) if r.get("kernel")))
    return LaunchInfo(names, False, 0, "ir_dump's ir/index.tsv") if names else LaunchInfo()


def launch_info(record, run_dir, point) -> LaunchInfo:
    info = from_record(record)
    if not info.known and point is not None:
        info = from_ir_index(run_dir, point.shape, point.dtype)
    return info
