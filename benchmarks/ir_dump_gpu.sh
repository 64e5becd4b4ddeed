#!/usr/bin/env bash
# ir_dump on one GPU: the built-in suite with per-shape IR (ttgir + ptx), the same suite again
# with DISABLE_MMA_V3=1 (a compiler switch that only matmul feels), then zlf ir-diff between the
# two: expected matmul shapes "changed" (wgmma gone), add and softmax shapes "identical".
#
#   bash benchmarks/ir_dump_gpu.sh --out DIR        (everything lands under DIR; < 4 minutes on an H200)
set -euo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
export ZLF_NO_PROGRESS=1
# Each side its own compiler cache: a cache hit must never hide a compiler change.
CACHE_BASE="$OUT/triton_cache"

run_dir() { grep '^run dir: ' "$1" | tail -1 | sed 's/^run dir: //'; }

EXTS=(--ext ir_dump)
if zlf plugins --json | python3 -c 'import json,sys; sys.exit(0 if any(e["name"]=="cudagraph" and e["status"]=="active" for e in json.load(sys.stdin)) else 1)'; then
  EXTS=(--ext cudagraph --ext ir_dump)
  echo "== timer: cudagraph extension installed: using --ext cudagraph --ext ir_dump" | tee "$OUT/summary.txt"
else
  echo "== timer: cudagraph extension NOT installed: falling back to --ext ir_dump alone (core's direct timer)" | tee "$OUT/summary.txt"
fi

echo "== 1/3 built-in suite, default compiler" | tee -a "$OUT/summary.txt"
TRITON_CACHE_DIR="$CACHE_BASE/A" zlf run "${EXTS[@]}" --ir ttgir,ptx --out "$OUT/runs" --name suite_A \
  --warmup-ms 10 --rep-ms 40 2>&1 | tee "$OUT/run_A.txt"
A="$(run_dir "$OUT/run_A.txt")"

echo "== tree listing of $A/ir" | tee -a "$OUT/summary.txt"
(cd "$A/ir" && find . -type f | sort) | tee "$OUT/tree_A.txt" | tee -a "$OUT/summary.txt"
echo "== index.tsv excerpt (first 25 rows; sweep losers have no file)" | tee -a "$OUT/summary.txt"
head -26 "$A/ir/index.tsv" | cut -f1-9 | tee -a "$OUT/summary.txt"
echo "== status counts in index.tsv" | tee -a "$OUT/summary.txt"
tail -n +2 "$A/ir/index.tsv" | cut -f5 | sort | uniq -c | tee -a "$OUT/summary.txt"

echo "== 2/3 built-in suite again with DISABLE_MMA_V3=1 (the switch changes only matmul)" | tee -a "$OUT/summary.txt"
DISABLE_MMA_V3=1 TRITON_CACHE_DIR="$CACHE_BASE/B" zlf run "${EXTS[@]}" --ir ttgir,ptx --out "$OUT/runs" \
  --name suite_B_no_mma_v3 --warmup-ms 10 --rep-ms 40 2>&1 | tee "$OUT/run_B.txt"
B="$(run_dir "$OUT/run_B.txt")"

echo "== 3/3 zlf ir-diff A B (exit 1 = something differs, as diff(1))" | tee -a "$OUT/summary.txt"
set +e
zlf ir-diff "$A" "$B" --ext ir_dump --out "$OUT/ir_diff" 2>&1 | tee "$OUT/ir_diff.txt" | tee -a "$OUT/summary.txt"
rc=${PIPESTATUS[0]}
set -e
echo "ir-diff exit code: $rc" | tee -a "$OUT/summary.txt"
python3 - "$A" "$B" <<'PY' | tee -a "$OUT/summary.txt"
import sys
from zlf_ir_dump.irtree import shape_status
print("shape_status (what zlf compare shows as 'IR changed'):")
for shape, status in shape_status(sys.argv[1], sys.argv[2]).items():
    print(f"  {shape:>16}  {status}")
PY
echo "== expected: matmul shapes 'changed' (tt.dot -> no ttng.warp_group_dot), add/softmax shapes 'identical'"
echo "everything is under $OUT (summary.txt first)"
