"""Nsight Compute: which metrics zlf asks for, the ``ncu`` command line, and reading its CSV.

``ncu --csv`` writes one row per (profiled kernel launch, metric) with the columns ``ID``,
``Kernel Name``, ``Block Size``, ``Grid Size``, ``Metric Name``, ``Metric Unit``, ``Metric Value``
(values carry thousands separators: ``"9,760"``). Lines that are not CSV (``==PROF==`` notes,
the application's own output) are skipped. Clocks are never touched (``--clock-control none``):
the counters then describe the kernel at the clocks the timing runs saw.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import statistics
from typing import Optional

import attrs

ENV_NCU = "ZLF_NCU"

#: (key, label, unit shown, ncu metric names summed, "lower" | "higher" | "" = which way is better)
METRICS = (
    ("duration_us", "duration", "µs", ("gpu__time_duration.sum",), "lower"),
    ("sm_pct", "SM throughput", "% of peak", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",), "higher"),
    ("dram_pct", "DRAM throughput", "% of peak", ("dram__throughput.avg.pct_of_peak_sustained_elapsed",), ""),
    ("occupancy_pct", "achieved occupancy", "%", ("sm__warps_active.avg.pct_of_peak_sustained_active",), "higher"),
    ("registers", "registers per thread", "", ("launch__registers_per_thread",), ""),
    ("smem_bytes", "shared memory per block", "bytes",
     ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"), ""),
    ("local_bytes", "local-memory (spill) traffic", "bytes",
     ("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"), "lower"),
    ("l2_hit_pct", "L2 hit rate", "%", ("lts__t_sector_hit_rate.pct",), "higher"),
    ("instructions", "instructions executed", "", ("smsp__inst_executed.sum",), "lower"),
    ("grid", "launch grid (blocks)", "", ("launch__grid_size",), ""),
    ("block", "launch block (threads)", "", ("launch__block_size",), ""),
)
METRIC_KEYS = tuple(m[0] for m in METRICS)
LABELS = {m[0]: m[1] for m in METRICS}
UNITS = {m[0]: m[2] for m in METRICS}
BETTER = {m[0]: m[4] for m in METRICS}
NCU_METRICS = tuple(dict.fromkeys(name for m in METRICS for name in m[3]))

# Units ncu may print (it scales values when it likes); everything is converted to the base unit
# of the metric's family: ns for time, bytes for sizes.
_SCALE = {
    "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9,
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "kibyte": 1024.0, "mibyte": 1024.0 ** 2,
    "gibyte": 1024.0 ** 3,
}


def find_ncu(explicit: Optional[str] = None) -> Optional[str]:
    """The ``ncu`` executable: ``--ncu PATH``, ``$ZLF_NCU``, ``ncu`` on PATH, or CUDA's bin folder."""
    for candidate in (explicit, os.environ.get(ENV_NCU)):
        if candidate:
            found = shutil.which(candidate)
            return found or None
    found = shutil.which("ncu")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base and os.access(os.path.join(base, "bin", "ncu"), os.X_OK):
            return os.path.join(base, "bin", "ncu")
    return None


def command(ncu: str, log_file: str, app: list, kernels=(), launch_count: Optional[int] = None,
            export: Optional[str] = None) -> list:
    """The ncu command line around ``app``.

    Profiling is off until the application calls ``cudaProfilerStart`` (zlf does that around the
    point's calls only), so kernels of other points, of input creation and of the timing loop
    are never profiled. ``kernels``: names to profile (the run's launch record); empty = every
    kernel inside the range. ``launch_count`` caps the profiled launches (a safety net).
    """
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--log-file", log_file,
           "--metrics", ",".join(NCU_METRICS)]
    if kernels:
        names = "|".join(_regex_escape(k) for k in dict.fromkeys(kernels))
        cmd += ["-k", f"regex:^({names})$"]
    if launch_count:
        cmd += ["--launch-count", str(int(launch_count))]
    if export:
        cmd += ["--export", export, "--force-overwrite"]
    return cmd + list(app)


def _regex_escape(name: str) -> str:
    return "".join("\\" + c if c in r".^$*+?()[]{}|\/" else c for c in name)


# ----------------------------------------------------------------------------- reading the CSV
@attrs.frozen
class Launch:
    """One profiled kernel launch: its name, launch shape and metric values in base units."""

    id: int
    kernel: str
    block: str = ""
    grid: str = ""
    values: dict = attrs.field(factory=dict)

    def metric(self, key: str) -> Optional[float]:
        return self.values.get(key)


def _number(text: str) -> Optional[float]:
    text = (text or "").strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _base(value: float, unit: str) -> float:
    unit = (unit or "").strip().lower()
    head = unit.split("/")[0]  # "byte/block" -> byte
    return value * _SCALE.get(head, 1.0)


def csv_lines(text: str) -> list:
    """The CSV part of an ncu log: from the header row (``"ID",...``) on, quoted rows only."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('"ID"'):
            return [l for l in lines[i:] if l.startswith('"')]
    return []


def parse_csv(text: str) -> list:
    """Profiled launches, in launch order, from ncu's ``--csv`` output (other lines ignored)."""
    rows = csv_lines(text)
    if not rows:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(rows)))
    by_id: dict = {}
    raw: dict = {}
    for row in reader:
        try:
            lid = int(row.get("ID", ""))
        except ValueError:
            continue
        if lid not in by_id:
            by_id[lid] = {"kernel": row.get("Kernel Name", ""), "block": row.get("Block Size", ""),
                          "grid": row.get("Grid Size", "")}
            raw[lid] = {}
        value = _number(row.get("Metric Value", ""))
        if value is not None:
            raw[lid][row.get("Metric Name", "")] = _base(value, row.get("Metric Unit", ""))
    out = []
    for lid in sorted(by_id):
        values = {}
        for key, _, _, names, _ in METRICS:
            present = [raw[lid][n] for n in names if n in raw[lid]]
            if present:
                values[key] = sum(present)
        if "duration_us" in values:
            values["duration_us"] /= 1e3  # ns -> µs
        out.append(Launch(lid, by_id[lid]["kernel"], by_id[lid]["block"], by_id[lid]["grid"], values))
    return out


def notes(text: str) -> list:
    """ncu's own warnings and errors (``==WARNING==`` / ``==ERROR==`` lines), for the report."""
    return [l.strip() for l in text.splitlines() if l.startswith(("==ERROR==", "==WARNING=="))]


# ----------------------------------------------------------------------------- calls and kernels
def split_calls(launches: list, calls: int, per_call: Optional[int] = None) -> list:
    """Group launches into the ``calls`` profiled calls of the point (launch order).

    ``per_call``: kernels launched by one call (the launch record), when known. Without it the
    launches are split evenly when they divide; otherwise they are one call (noise unknown).
    """
    if not launches:
        return []
    n = len(launches)
    k = per_call if per_call and n == per_call * calls else (n // calls if calls and n % calls == 0 else n)
    return [launches[i:i + k] for i in range(0, n, k)]


@attrs.frozen
class KernelStats:
    """One kernel of the point (by position in the call): mean and noise (max - min) per metric."""

    index: int
    kernel: str
    block: str
    grid: str
    mean: dict
    noise: dict
    samples: int

    def to_json(self) -> dict:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "KernelStats":
        return cls(**{k: d.get(k) for k in ("index", "kernel", "block", "grid", "mean", "noise", "samples")})


def summarise(calls: list) -> list:
    """Per kernel position: the mean over the profiled calls and the noise (max - min); the
    noise is what one repeated measurement of the same kernel moves by on this machine."""
    if not calls:
        return []
    width = min(len(c) for c in calls)
    out = []
    for i in range(width):
        same = [c[i] for c in calls]
        mean, noise = {}, {}
        for key in METRIC_KEYS:
            values = [l.metric(key) for l in same if l.metric(key) is not None]
            if values:
                mean[key] = statistics.fmean(values)
                noise[key] = max(values) - min(values) if len(values) > 1 else None
        first = same[0]
        out.append(KernelStats(i, first.kernel, first.block, first.grid, mean, noise, len(same)))
    return out


def call_total(kernels: list, key: str = "duration_us") -> Optional[float]:
    values = [k.mean.get(key) for k in kernels]
    return sum(v for v in values if v is not None) if any(v is not None for v in values) else None


def fmt(key: str, value: Optional[float]) -> str:
    """A metric value as a table shows it."""
    if value is None:
        return "n/a"
    if key in ("smem_bytes", "local_bytes"):
        return _bytes(value)
    if key in ("registers", "grid", "block", "instructions"):
        return f"{value:,.0f}"
    if key.endswith("_pct"):
        return f"{value:.1f}"
    return f"{value:.4g}"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"
