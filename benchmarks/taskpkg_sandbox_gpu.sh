#!/usr/bin/env bash
# Does zlf task's sandbox cost kernel time? Judge each honest paged-KV decode candidate (naive and
# split-K Triton, CUDA C++, TileLang where it imports) twice on one NVIDIA GPU, alternating
# --sandbox none and --sandbox bwrap, then compare the per-case candidate times of the two runs
# (ratio bwrap / none per case; the brief is within 2 %). Then the GPU cheats (side stream,
# capture-aware, persistent-style delayed work) under bwrap: each must be refused or its time not
# trusted.
#
#   bash benchmarks/taskpkg_sandbox_gpu.sh            # all 12 cases
#   CASES=1,12 bash benchmarks/taskpkg_sandbox_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export ZLF_NO_PROGRESS=1 NO_COLOR=1
PKG=examples/tasks/paged_kv_decode
OUT=${OUT:-runs/taskpkg_sandbox_gpu_$(date +%Y%m%d-%H%M%S)}
CASES=${CASES:-1-12}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
command -v bwrap >/dev/null || { echo "bwrap not found: apt-get install bubblewrap" >&2; exit 2; }

cands=(naive_triton.py better_triton.py paged_decode.cu)
$PY -c "import tilelang" 2>/dev/null && cands+=(tilelang_decode.py)
for cand in "${cands[@]}"; do
  for mode in none bwrap; do
    echo "=== $cand --sandbox $mode"
    $PY -m zlf task "$PKG" --candidate "$PKG/candidates/$cand" --backend cuda --cases "$CASES" --reuse-worker \
        --sandbox "$mode" --ext task --out "$OUT" --name "${cand%.*}_$mode" 2>&1 | tee "$OUT/${cand%.*}_$mode.txt"
  done
done

echo "=== bwrap / none, candidate ms per case (within 2 % expected)"
$PY - "$OUT" "${cands[@]}" <<'PY'
import json, sys
from pathlib import Path

out, cands = Path(sys.argv[1]), sys.argv[2:]
def times(name):
    (d,) = [p for p in out.iterdir() if p.is_dir() and p.name.startswith(name + "_2")] or [None]
    if d is None:
        return {}
    return {r["extra"]["case"]: r["median_ms"] for r in map(json.loads, (d / "results.jsonl").read_text().splitlines())
            if r["extra"].get("verdict") == "Accepted"}
worst = 0.0
for cand in cands:
    stem = cand.rsplit(".", 1)[0]
    a, b = times(stem + "_none"), times(stem + "_bwrap")
    ratios = {c: b[c] / a[c] for c in a if c in b and a[c]}
    worst = max([worst] + [abs(r - 1) for r in ratios.values()])
    print(stem, " ".join(f"{c}:{r:.3f}" for c, r in sorted(ratios.items())), f"(accepted {len(a)} / {len(b)})")
print(f"largest difference: {100 * worst:.1f} %")
PY

for cheat in side_stream.py capture_aware.py persistent.py; do
  for timer in "" "--ext cudagraph --timer cudagraph" "--timer core"; do
    echo "=== cheat $cheat ${timer:-(default timer)}"
    # shellcheck disable=SC2086
    $PY -m zlf task "$PKG" --candidate extensions/taskpkg/tests/data/cheats/gpu/$cheat --backend cuda --cases 1,12 \
        --reuse-worker --sandbox bwrap --ext task $timer --out "$OUT" --name "cheat_${cheat%.*}" 2>&1 | tail -8
  done
done
