#!/usr/bin/env bash
# zlf ab's in-campaign controls on one GPU (docs/ab.md, "Controls"):
#   1. sustained-load matmul A/A x 6 rounds (the built-in matmul at its largest shapes, long
#      repetitions so the GPU reaches its power cap), decided with controls (default auto:
#      the canaries) and re-decided without (--resume --controls none: the same runs); per
#      process, the factor the controls found beside the SM clock NVML recorded; false verdicts
#      and per-point spread both ways
#   2. the built-in suite A/A x 6, the same two ways
#   3. DISABLE_MMA_V3 on matmul x 6 with and without controls: the verdicts must not change
#
#   bash benchmarks/controls_gpu.sh --out DIR
set -uo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
export ZLF_NO_PROGRESS=1 NO_COLOR=1
HERE="$(cd "$(dirname "$0")" && pwd)"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
ROUNDS="${ROUNDS:-6}"
COMMON=(--out "$OUT/campaigns" --triton-cache "$OUT/triton_cache" --rounds "$ROUNDS")

campaign() {  # campaign NAME ZLF_AB_ARGS...: run it, then re-decide it without controls
  local name="$1"; shift
  say "== $name: zlf ab $*"
  zlf ab "$@" > "$OUT/$name.txt" 2> "$OUT/$name.progress.txt"
  say "   exit code $?"
  local dir
  dir="$(grep '^campaign dir: ' "$OUT/$name.txt" | tail -1 | sed 's/^campaign dir: //')"
  [ -n "$dir" ] || { tail -20 "$OUT/$name.progress.txt" | tee -a "$SUMMARY"; return; }
  cp "$dir/summary.json" "$OUT/$name.controls.summary.json"
  cp "$dir/summary.log" "$OUT/$name.controls.summary.log"
  zlf ab --resume "$dir" --controls none > "$OUT/$name.none.txt" 2>&1
  cp "$dir/summary.json" "$OUT/$name.none.summary.json"
  cp "$dir/summary.log" "$OUT/$name.none.summary.log"
  zlf ab --resume "$dir" --controls auto > /dev/null 2>&1  # leave the campaign decided as it ran
  python3 "$HERE/controls_gpu.py" "$dir" "$OUT/$name.none.summary.json" | tee -a "$SUMMARY"
}

campaign matmul_aa --aa matmul --rep-ms 2000 --warmup-ms 500 "${COMMON[@]}"  # 4096^3 among its shapes: seconds at the cap
campaign suite_aa --aa add softmax matmul "${COMMON[@]}"
campaign mma_v3 --switch DISABLE_MMA_V3 matmul "${COMMON[@]}"
say "== DISABLE_MMA_V3: verdicts with controls (left) and without (right) must agree:"
python3 - "$OUT/mma_v3.controls.summary.json" "$OUT/mma_v3.none.summary.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
vb = {p["point"]: p["verdict"] for p in b["points"]}
diff = [(p["point"], p["verdict"], vb.get(p["point"])) for p in a["points"] if vb.get(p["point"]) != p["verdict"]]
print("unchanged" if not diff else "\n".join(f"{p}: {x} with controls, {y} without" for p, x, y in diff))
PY
