"""Autotune noise across processes, with and without replay (one GPU, about 3-4 minutes on an H200).

    python3 benchmarks/autotune_replay_bench.py --out DIR

Runs N independent ``zlf run`` processes (default 6) that each autotune for themselves (record
mode), then N that replay the first one's record (``--replay-from``). Ops: the built-in
``matmul`` (4 configs) and ``matmul16`` (16 configs, benchmarks/autotune_matmul_ops.py), bf16,
shapes 4096x4096x4096 and 128x4096x4096. Prints two markdown tables -- the config each process
ran per point, and the spread of the per-process median times -- and writes everything to
``DIR/autotune_replay_bench.json`` (run directories under ``DIR/runs``).

What to expect: without replay the winners may differ between processes (on an H200 the 4-config
matmul picked BN=128 in 3 of 6 processes and BN=256 in the others on 4096^3); with replay every
process runs the record's config (6/6 identical, no AUTOTUNE_REPLAY_FALLBACK), and the spread of
the median narrows to timing noise alone.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPS_FILE = HERE / "autotune_matmul_ops.py"
SHAPES = [[4096, 4096, 4096], [128, 4096, 4096]]
MARKER = "AUTOTUNE_REPLAY_FALLBACK"


def installed_extensions() -> set:
    out = subprocess.run([sys.executable, "-m", "zlf", "plugins", "--json"], capture_output=True, text=True, check=True)
    return {e["name"] for e in json.loads(out.stdout) if e["status"] in ("active", "inactive")}


def short_config(config: dict) -> str:
    kw = config.get("kwargs", {})
    if {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(kw):
        label = f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}"
    else:
        label = ",".join(f"{k}={v}" for k, v in kw.items())
    return f"{label} w{config.get('num_warps')}s{config.get('num_stages')}"


def run_process(cmd: list, timeout: float) -> dict:
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.time() - t0
    start = proc.stdout.find('{"run_dir"')
    if start < 0:
        start = proc.stdout.find("{\n  \"run_dir\"")
    if proc.returncode not in (0, 1) or start < 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"rc": proc.returncode, "wall_s": wall, "error": " | ".join(tail)}
    doc, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    points = {}
    for r in doc["records"]:
        used = [d for d in r.get("extra", {}).get("autotune", []) if "matmul" in d["kernel"]]
        points[r["point"]] = {
            "status": r["status"],
            "median_ms": r.get("median_ms"),
            "config": used[0]["config"] if used else None,
            "how": used[0]["how"] if used else None,
            "fallback": any(MARKER in m for m in r.get("markers", [])),
        }
    return {"rc": proc.returncode, "wall_s": wall, "run_dir": doc["run_dir"], "points": points}


def summarise(processes: list) -> list:
    rows = []
    ok = [p for p in processes if "points" in p]
    point_ids = sorted({pid for p in ok for pid in p["points"]}, key=lambda s: (s.split("/")[0], s))
    for pid in point_ids:
        entries = [p["points"].get(pid) for p in ok]
        medians = [e["median_ms"] for e in entries if e and e["median_ms"]]
        configs = [json.dumps(e["config"], sort_keys=True) if e and e["config"] else None for e in entries]
        row = {"point": pid, "configs": [short_config(json.loads(c)) if c else "-" for c in configs],
               "distinct_configs": len(set(c for c in configs if c)), "medians_ms": medians,
               "fallbacks": sum(1 for e in entries if e and e["fallback"])}
        if medians:
            mid = statistics.median(medians)
            row.update(median_ms=mid, min_ms=min(medians), max_ms=max(medians),
                       spread_pct=100 * (max(medians) - min(medians)) / mid)
        rows.append(row)
    return rows


def markdown_tables(summary: dict, n: int) -> str:
    cols = " | ".join(f"p{i + 1}" for i in range(n))
    lines = ["**Config each process ran** (BLOCK_MxBLOCK_NxBLOCK_K, warps, stages)", "",
             f"| point | mode | {cols} | distinct |", "|---|---|" + "---|" * n + "---|"]
    for mode in ("no replay", "replay"):
        for row in summary[mode]:
            cells = " | ".join(row["configs"] + ["-"] * (n - len(row["configs"])))
            lines.append(f"| {row['point']} | {mode} | {cells} | {row['distinct_configs']} |")
    lines += ["", "**Per-process median time** (core direct timer; spread = (max - min) / median over processes)", "",
              "| point | mode | median µs | min µs | max µs | spread | distinct configs | fallbacks |",
              "|---|---|---|---|---|---|---|---|"]
    for mode in ("no replay", "replay"):
        for row in summary[mode]:
            if "median_ms" not in row:
                lines.append(f"| {row['point']} | {mode} | - | - | - | - | {row['distinct_configs']} | {row['fallbacks']} |")
                continue
            lines.append(f"| {row['point']} | {mode} | {row['median_ms'] * 1e3:.1f} | {row['min_ms'] * 1e3:.1f} | "
                         f"{row['max_ms'] * 1e3:.1f} | {row['spread_pct']:.1f}% | {row['distinct_configs']} | "
                         f"{row['fallbacks']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="output folder (run directories and the JSON)")
    parser.add_argument("--processes", type=int, default=6, help="processes per mode (default 6)")
    parser.add_argument("--backend", default="cuda", help="zlf backend (default cuda)")
    parser.add_argument("--ext", action="append", default=[], metavar="NAME",
                        help="one more extension for every process, e.g. --ext cudagraph (repeatable)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per process (default 240)")
    parser.add_argument("--shape", action="append", metavar="M,N,K",
                        help="shape instead of the defaults (repeatable; e.g. 64,64,64 with --backend cpu as a smoke test)")
    args = parser.parse_args(argv)
    shape_list = [[int(d) for d in s.split(",")] for s in args.shape] if args.shape else SHAPES

    args.out.mkdir(parents=True, exist_ok=True)
    shapes = args.out / "shapes.yaml"
    shapes.write_text(f"matmul:\n  shapes: {json.dumps(shape_list)}\nmatmul16:\n  shapes: {json.dumps(shape_list)}\n")
    have = installed_extensions()
    exts = ["autotune_replay", "shapes"] + (["seed"] if "seed" in have else []) + args.ext
    missing = [e for e in exts if e not in have]
    if missing:
        print(f"missing extensions: {', '.join(missing)} (run: make setup)", file=sys.stderr)
        return 2
    base = [sys.executable, "-m", "zlf", "run", "matmul", f"{OPS_FILE}::matmul16", "--dtype", "float32" if args.backend == "cpu" else "bfloat16",
            "--backend", args.backend, "--shapes", str(shapes), "--out", str(args.out / "runs"), "--json"]
    for e in exts:
        base += ["--ext", e]

    started = time.time()
    result = {"command": base, "extensions": exts, "shapes": shape_list, "no replay": [], "replay": []}
    for i in range(args.processes):
        p = run_process(base + ["--name", f"record{i + 1}"], args.timeout)
        result["no replay"].append(p)
        print(f"record {i + 1}/{args.processes}: rc={p['rc']} {p['wall_s']:.0f}s {p.get('error', '')}", file=sys.stderr)
    source = next((p["run_dir"] for p in result["no replay"] if "run_dir" in p), None)
    if source is None:
        print("no record run finished; nothing to replay", file=sys.stderr)
        (args.out / "autotune_replay_bench.json").write_text(json.dumps(result, indent=1))
        return 1
    result["replay_source"] = source
    for i in range(args.processes):
        p = run_process(base + ["--name", f"replay{i + 1}", "--replay-from", source], args.timeout)
        result["replay"].append(p)
        print(f"replay {i + 1}/{args.processes}: rc={p['rc']} {p['wall_s']:.0f}s {p.get('error', '')}", file=sys.stderr)

    result["summary"] = {mode: summarise(result[mode]) for mode in ("no replay", "replay")}
    record_configs = {pid: e["config"] for pid, e in result["no replay"][0].get("points", {}).items()}
    identical = {row["point"]: sum(1 for p in result["replay"] if p.get("points", {}).get(row["point"], {}).get("config")
                                   == record_configs.get(row["point"]))
                 for row in result["summary"]["replay"]}
    result["replay_identical_to_record"] = identical
    result["wall_s"] = time.time() - started
    (args.out / "autotune_replay_bench.json").write_text(json.dumps(result, indent=1))

    print(markdown_tables(result["summary"], args.processes))
    print()
    print("replay runs using the record's config: " + ", ".join(f"{k} {v}/{args.processes}" for k, v in identical.items()))
    print(f"total {result['wall_s']:.0f}s; JSON: {args.out / 'autotune_replay_bench.json'}")
    failed = [p for mode in ("no replay", "replay") for p in result[mode] if p.get("rc") != 0]
    return 1 if failed or any(v != args.processes for v in identical.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
