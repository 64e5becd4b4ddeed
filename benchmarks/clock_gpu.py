"""Clock-aware measurement and campaign cost on one GPU (run through clock_gpu.sh).

Stage ``spread``: the pinned-config 4096³ fp16 matmul (clock_ops.py) in N separate ``zlf run``
processes; per process its median time, its cycles (time × median SM clock) and the SM clock
(min / median / max) and throttle reasons recorded while it sampled; the spread between processes
in time and in cycles, (max − min) / median.

Stage ``campaign``: the wall time of a 3-round A/A ``zlf ab`` over FlagGems ``softmax`` and ``mm``
with one process per (round, side) for both ops (the default) and with ``--process-per-op``. The
shared campaign runs first, so the per-op one finds the Triton and libtuner caches warm: the
comparison leans in the per-op campaign's favour.

    python3 benchmarks/clock_gpu.py --out DIR [--stages spread,campaign] [--processes 6]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def sh(cmd, log: Path, env=None, timeout=600) -> tuple:
    """Run ``cmd``, stdout and stderr to ``log``; ``(rc, seconds, stdout)``."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, "", f"timed out after {timeout}s"
    seconds = time.monotonic() - t0
    log.write_text("$ " + " ".join(map(str, cmd)) + f"\n(rc {rc}, {seconds:.1f}s)\n" + out + "\n--- stderr\n" + err)
    return rc, seconds, out


def spread_pct(values) -> float:
    values = [v for v in values if v]
    return 100.0 * (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else float("nan")


def stage_spread(out: Path, n: int, rep_ms: float) -> list:
    d = out / "spread"
    d.mkdir(parents=True, exist_ok=True)
    rows, times, cycles = [], [], []
    for i in range(n):
        cmd = [PY, "-m", "zlf", "run", f"{ROOT}/benchmarks/clock_ops.py::matmul_pinned", "--ext", "seed",
               "--out", str(d / "runs"), "--name", f"p{i}", "--rep-ms", str(rep_ms), "--json"]
        rc, seconds, text = sh(cmd, d / f"p{i}.txt", env={"TRITON_CACHE_DIR": str(d / "triton_cache")})
        try:
            doc = json.loads(text[text.index("{"):])
            rec = doc["records"][0]
        except (ValueError, KeyError, IndexError):
            rows.append([i, f"rc {rc}", "", "", "", "", "", f"{seconds:.1f}"])
            continue
        clock = rec.get("clock") or {}
        ms = rec.get("median_ms")
        mhz = clock.get("sm_mhz_median")
        kcyc = ms * mhz if ms and mhz else None
        times.append(ms)
        cycles.append(kcyc)
        rows.append([i, f"{ms:.4f}" if ms else rec["status"], f"{kcyc:.1f}" if kcyc else "-",
                     f"{clock.get('sm_mhz_min', 0):.0f} / {clock.get('sm_mhz_median', 0):.0f} / {clock.get('sm_mhz_max', 0):.0f}"
                     if clock else "-",
                     ",".join(clock.get("throttle_reasons") or []) or "-",
                     f"{clock.get('throttled_readings', '-')}/{clock.get('readings', '-')}", clock.get("source") or "-",
                     f"{seconds:.1f}"])
    table = tabulate(rows, headers=["process", "time ms", "kcycles", "SM MHz min/med/max", "throttle reasons",
                                    "throttled/readings", "source", "process s"], disable_numparse=True)
    lines = [f"(a) pinned-config 4096^3 fp16 matmul, {n} processes (rep {rep_ms:g} ms each)", table,
             f"spread between processes, (max-min)/median: time {spread_pct(times):.2f} %, "
             f"cycles {spread_pct([c for c in cycles if c]):.2f} %  (target: cycles <= 0.5 %)"]
    (d / "spread.json").write_text(json.dumps({"times_ms": times, "kcycles": cycles, "rows": rows}, indent=2))
    return lines


def _campaign_facts(parent: Path) -> dict:
    found = sorted(parent.glob("ab_*/campaign.json"))
    if not found:
        return {}
    c = json.loads(found[-1].read_text())
    runs = c["runs"]
    # one shared log per shared process; a run without "process" had its own
    shared_logs = list((found[-1].parent / "_shared" / "logs").glob("*.txt"))
    processes = len(shared_logs) + sum(1 for r in runs if r["status"] in ("ok", "failed") and not r.get("process"))
    summary = found[-1].parent / "summary.json"
    counts = json.loads(summary.read_text()).get("counts", {}) if summary.is_file() else {}
    return {"processes": processes, "runs_ok": sum(r["status"] == "ok" for r in runs), "runs": len(runs),
            "alone": sum(bool(r.get("alone")) for r in runs), "counts": counts, "dir": str(found[-1].parent)}


MODES = {"shared": ("shared (default)", []), "per-op": ("per-op (--process-per-op)", ["--process-per-op"])}


def stage_campaign(out: Path, rounds: int, modes=("shared", "per-op"), label: str = "") -> list:
    d = out / "campaign"
    d.mkdir(parents=True, exist_ok=True)
    fg = Path(os.environ.get("FLAGGEMS_DIR", ROOT / ".flaggems" / "v5.3.4"))
    mm = "mm:mm::test_mm" if (fg / "benchmark" / "base.py").is_file() else "mm:blas_perf::test_blas_benchmark"
    shapes = d / "mm_shapes.yaml"
    shapes.write_text("BlasBenchmark:\n  shapes:\n    - [1, 4096, 4096, 4096]\n    - [1, 1024, 1024, 1024]\n"
                      "  shape_desc: \"B, M, N, K\"\n"
                      # a shape file names every op it is given to: one without softmax fails that op
                      "softmax:\n  shapes:\n    - [1024, 1024]\n    - [4096, 4096]\n")
    common = ["ab", "--aa", "--rounds", str(rounds), "softmax", mm, "--ext", "flaggems", "--ext", "autotune_replay",
              "--ext", "shapes", "--ext", "seed", "--shapes", str(shapes), "--flaggems-level", "core",
              "--dtype", "float16", "--warmup-ms", "10", "--rep-ms", "50", "--triton-cache", str(d / "triton_cache")]
    env = {"FLAGGEMS_DIR": str(fg), "TRITON_CACHE_DIR": str(d / "triton_cache")}
    # One uncounted run first, so that neither campaign pays the cold Triton and FlagGems caches
    # that whichever ran first paid before.
    warm = ["run", "softmax", mm, *common[common.index("--ext"):common.index("--triton-cache")], "--out", str(d / "warm")]
    rc, seconds, _ = sh([PY, "-m", "zlf", *warm], d / "warm.txt", env=env, timeout=300)
    rows, walls = [["warm-up zlf run (not counted)", rc, f"{seconds:.1f}", 1, "-", "-", "-"]], {}
    for mode, extra in (MODES[m] for m in modes):
        mode = f"{label}{mode}"
        parent = d / f"{label.strip().replace(' ', '_')}{'shared' if not extra else 'per_op'}"
        rc, seconds, _ = sh([PY, "-m", "zlf", *common, *extra, "--out", str(parent)], d / f"{parent.name}.txt", env=env,
                            timeout=420)
        facts = _campaign_facts(parent)
        walls[mode] = seconds
        c = facts.get("counts") or {}
        rows.append([mode, rc, f"{seconds:.1f}", facts.get("processes", "-"),
                     f"{facts.get('runs_ok', '-')}/{facts.get('runs', '-')}", facts.get("alone", "-"),
                     " ".join(f"{k} {v}" for k, v in c.items()) or "-"])
    table = tabulate(rows, headers=["campaign", "rc", "wall s", "processes", "runs ok", "runs alone", "verdicts"],
                     disable_numparse=True)
    shared, per_op = walls.get(f"{label}shared (default)"), walls.get(f"{label}per-op (--process-per-op)")
    ratio = f"shared / per-op wall time: {shared / per_op:.2f} (target <= 0.5)" if shared and per_op else ""
    return [f"(b) FlagGems softmax + {mm}, A/A, {rounds} rounds: wall time of the whole zlf ab", table, ratio]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--stages", default="spread,campaign")
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--rep-ms", type=float, default=200.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--campaign-modes", default="shared,per-op",
                   help="which campaigns the campaign stage runs: shared (one process per round and side), per-op "
                        "(--process-per-op), comma-separated (default %(default)s)")
    p.add_argument("--label", default="",
                   help="prefix for the campaign stage's rows and folders (to run the stage again with another zlf "
                        "installed, such as the code before a change, into the same --out)")
    args = p.parse_args()
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    lines = []
    if "spread" in stages:
        lines += stage_spread(out, args.processes, args.rep_ms) + [""]
    if "campaign" in stages:
        modes = [m.strip() for m in args.campaign_modes.split(",") if m.strip()]
        unknown = sorted(set(modes) - set(MODES))
        if unknown:
            p.error(f"--campaign-modes: unknown {', '.join(unknown)} (choose from {', '.join(MODES)})")
        lines += stage_campaign(out, args.rounds, modes, f"{args.label} " if args.label else "")
    text = "\n".join(lines)
    (out / "summary.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
