"""Draw every plot zlf draws for a 1 %, a 30 % and a 300× change, to look at them.

    python scripts/plot_examples.py [OUT]     # default OUT: a new folder under the temp dir

For each change it writes two run directories A and B (four points: the changed one, one 2 %
faster, two unchanged; samples with a fixed seed), then ``zlf report A`` (median time per
point), ``zlf report A B`` (B against A) and the campaign plot of ``zlf ab`` for eight rounds of
the same points. Prints the PNG paths. Nothing here is measured: it shows the drawing only.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from zlf import stats
from zlf.ab import report as ab_report
from zlf.records import PointRecord
from zlf.report import write_report
from zlf.rundir import RunDir

#: name -> the changed point's B/A time ratio
CHANGES = {"1pct": 1.01, "30pct": 1.30, "300x": 300.0}
#: point -> A's median ms
POINTS = {"add/1048576/float32": 0.0123, "softmax/4096x4096/float16": 0.0175,
          "matmul/4096x4096x4096/bfloat16": 0.142, "softmax/1024x1024/float16": 0.00228}
ROUNDS = 8


def _samples(rng, median_ms: float, n: int = 40, spread: float = 0.01) -> list:
    return sorted(float(v) for v in median_ms * (1.0 + spread * rng.standard_normal(n)))


def _run_dir(parent: Path, name: str, times: dict, rng) -> Path:
    rd = RunDir.create(parent, name)
    for point, ms in times.items():
        op, shape, dtype = point.split("/")
        samples = _samples(rng, ms)
        rd.append(PointRecord(point=point, op=op, shape=tuple(int(d) for d in shape.split("x")), dtype=dtype,
                              status="ok", timer="cudagraph", median_ms=float(np.median(samples)), samples=samples))
    rd.write_meta({"zlf_version": "example", "command": ["zlf", "run"], "status": "complete", "backend": "cuda",
                   "timer_default": "cudagraph", "host_timing": False, "device_name": "example GPU",
                   "started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:00:10+00:00",
                   "points": len(times), "extensions": [], "environment": {}, "options": {"command": "run"},
                   "warnings": []})
    return rd.path


def b_times(factor: float) -> dict:
    """B's medians: the first point changed by ``factor``, the second 2 % faster, the rest equal."""
    out = {}
    for k, (point, ms) in enumerate(POINTS.items()):
        out[point] = ms * (factor if k == 0 else 0.98 if k == 1 else 1.0)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="folder for the PNGs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="zlf_plots_"))
    out.mkdir(parents=True, exist_ok=True)
    for name, factor in CHANGES.items():
        rng = np.random.default_rng(7)
        work = Path(tempfile.mkdtemp(prefix=f"zlf_plot_{name}_"))
        try:
            a = _run_dir(work, "A", POINTS, rng)
            b = _run_dir(work, "B", b_times(factor), rng)
            _md, png, _lines = write_report([str(a)], out=str(work / "single.md"))
            shutil.copy(png, out / f"{name}_report_single.png")
            _md, png, _lines = write_report([str(a), str(b)], out=str(work / "pair.md"))
            shutil.copy(png, out / f"{name}_report_pair.png")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        values = {}
        for point, ms in POINTS.items():
            a_ms = [float(v) for v in ms * (1.0 + 0.01 * rng.standard_normal(ROUNDS))]
            b_ms = [float(v) for v in b_times(factor)[point] * (1.0 + 0.01 * rng.standard_normal(ROUNDS))]
            values[point] = (a_ms, b_ms)
        results = stats.analyse(values)
        why = ab_report.plot(results, out / f"{name}_campaign.png", f"example campaign: first point ×{factor:g}")
        if why:
            print(f"{name}: no campaign plot: {why}", file=sys.stderr)
    for png in sorted(out.glob("*.png")):
        print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
