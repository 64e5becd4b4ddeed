"""A/A spread of the built-in suite between processes, per timer, as ``zlf run`` times it.

Each variant is a set of ``zlf run`` arguments; every round runs each variant once, in a rotating
order, each in a fresh process (the unit an A/B replicates over). Per point and variant: the median
of the process medians and their spread, (max − min) / median, and the standard deviation of the
log medians, in percent. A benchmark, not a test.

    python3 benchmarks/aa_spread_gpu.py --out DIR [--processes 6] [--deadline-s 420]
        [--variant 'cupti=--ext cupti' --variant 'graph=--ext cudagraph' ...]

Writes DIR/aa_spread.json and DIR/summary.md (and prints the summary).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_VARIANTS = ("cupti=--ext cupti", "cupti_1copy=--ext cupti --input-copies 1", "graph=--ext cudagraph")


def spread(values) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values) if len(values) >= 2 else float("nan")


def sd_log(values) -> float:
    logs = [math.log(v) for v in values if v and v > 0]
    return 100.0 * statistics.stdev(logs) if len(logs) >= 2 else float("nan")


def run_once(name: str, args: list, out: Path, k: int) -> dict:
    """One ``zlf run`` process; ``{point: (median_ms, timer, extra.input_copies)}`` or an error."""
    parent = out / "runs"
    cmd = [sys.executable, "-m", "zlf", "run", *args, "--out", str(parent), "--name", f"{name}_{k}"]
    env = dict(os.environ, ZLF_NO_PROGRESS="1", NO_COLOR="1")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    (out / f"{name}_{k}.log").write_text(proc.stdout + proc.stderr)
    dirs = sorted(parent.glob(f"{name}_{k}_*"))
    if proc.returncode != 0 or not dirs:
        return {"error": f"{name} {k}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"}
    points = {}
    for line in (dirs[-1] / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("status") == "ok" and r.get("median_ms"):
            points[r["point"]] = (r["median_ms"], r.get("timer"), (r.get("extra") or {}).get("input_copies"))
    return {"points": points, "seconds": round(time.monotonic() - t0, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--deadline-s", type=float, default=420.0, help="no new round after this (default %(default)s)")
    parser.add_argument("--variant", action="append", help="NAME=ZLF RUN ARGS (repeatable; default: %s)" %
                        "; ".join(DEFAULT_VARIANTS))
    args = parser.parse_args(argv)
    variants = [(v.split("=", 1)[0], shlex.split(v.split("=", 1)[1])) for v in (args.variant or DEFAULT_VARIANTS)]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results, notes = {name: [] for name, _ in variants}, []
    for k in range(args.processes):
        if k and time.monotonic() - t0 > args.deadline_s:
            notes.append(f"{k} of {args.processes} rounds ran (--deadline-s {args.deadline_s:g})")
            break
        order = variants[k % len(variants):] + variants[:k % len(variants)]
        for name, vargs in order:
            res = run_once(name, vargs, out, k)
            if "error" in res:
                notes.append(res["error"])
            else:
                results[name].append(res)
            print(f"[{time.monotonic() - t0:.0f}s] round {k + 1} {name}: {res.get('seconds', 'failed')} s",
                  file=sys.stderr, flush=True)
    names = [n for n, _ in variants]
    points = sorted({p for runs in results.values() for r in runs for p in r["points"]})
    rows, table = [], []
    for p in points:
        row = {"point": p}
        for n in names:
            meds = [r["points"][p][0] * 1e3 for r in results[n] if p in r["points"]]
            timers = sorted({r["points"][p][1] for r in results[n] if p in r["points"]})
            copies = sorted({json.dumps(r["points"][p][2]) for r in results[n] if p in r["points"]})
            row[n] = {"us": meds, "median_us": statistics.median(meds) if meds else None, "spread": spread(meds),
                      "sd": sd_log(meds), "timers": timers, "input_copies": copies}
        rows.append(row)
        table.append(f"| {p} | " + " | ".join(
            f"{row[n]['median_us']:.2f} / {row[n]['spread']:.2f} / {row[n]['sd']:.2f}" if row[n]["median_us"] else "–"
            for n in names) + " |")
    text = ["## A/A over processes: µs (median of process medians) / spread % / sd % per variant", "",
            f"processes per variant: {', '.join(f'{n} {len(results[n])}' for n in names)}", "",
            "| point | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|", *table, ""]
    if len(names) >= 2:
        first, last = names[0], names[-1]
        comparable = [r for r in rows if r[first]["median_us"] and r[last]["median_us"]]
        better = sum(1 for r in comparable if r[first]["sd"] <= r[last]["sd"])
        text.append(f"- {first} sd ≤ {last} sd on {better} of {len(comparable)} points; median sd "
                    f"{statistics.median([r[first]['sd'] for r in comparable]):.2f} % against "
                    f"{statistics.median([r[last]['sd'] for r in comparable]):.2f} %")
    text += [f"- {n}" for n in notes] + [f"\nelapsed {time.monotonic() - t0:.0f} s"]
    (out / "aa_spread.json").write_text(json.dumps({"variants": dict(variants), "rows": rows, "notes": notes,
                                                    "seconds": {n: [r["seconds"] for r in results[n]] for n in names}},
                                                   indent=1))
    summary = "\n".join(text) + "\n"
    (out / "summary.md").write_text(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
