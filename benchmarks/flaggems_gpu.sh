#!/usr/bin/env bash
# FlagGems through zlf on one GPU, in stages (FG_STAGES, default "softmax mm ab"):
#   softmax  softmax with --ext cudagraph --ext ir_dump   (table + IR tree listing)
#   mm       mm (autotuned, libtuner) with a shape yaml
#   ab       zlf ab --switch DISABLE_MMA_V3 on mm, 3 rounds
# Needs a FlagGems checkout in .flaggems/v5.0.2 (tag v5.0.2; FLAGGEMS_DIR overrides; a checkout
# directly in .flaggems/ also works) and FlagGems' runtime dependencies as wheels in .whl/, both
# prepared on a machine with network access (docs/flaggems.md, "GPU session"). flag_gems itself
# comes from the checkout's src/ unless one is installed, so the benchmark harness and the
# kernels are always of the same version.
#
#   FG_STAGES="softmax mm" bash benchmarks/flaggems_gpu.sh --out DIR
set -uo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export ZLF_NO_PROGRESS=1
if [ -z "${FLAGGEMS_DIR:-}" ]; then
  FLAGGEMS_DIR="$ROOT/.flaggems"
  [ -d "$ROOT/.flaggems/v5.0.2/benchmark" ] && FLAGGEMS_DIR="$ROOT/.flaggems/v5.0.2"
fi
export FLAGGEMS_DIR
PY=python3
S="$OUT/summary.txt"; : > "$S"
say() { echo "== $*" | tee -a "$S"; }
run_dir() { grep '^run dir: ' "$1" | tail -1 | sed 's/^run dir: //'; }

[ -f "$FLAGGEMS_DIR/benchmark/performance_utils.py" ] || [ -f "$FLAGGEMS_DIR/benchmark/base.py" ] \
  || { echo "no FlagGems checkout in $FLAGGEMS_DIR (see docs/flaggems.md)" >&2; exit 2; }

STAGES="${FG_STAGES:-softmax mm ab}"
# The mm benchmark alone: v5.0.2 groups the BLAS ops in test_blas_perf.py; later, one file per op.
if [ -f "$FLAGGEMS_DIR/benchmark/base.py" ]; then MM=mm:mm::test_mm; else MM=mm:blas_perf::test_blas_benchmark; fi

say "setup: FlagGems' runtime dependencies from .whl/ (no index), zlf extensions"
if ! $PY -c "import sqlalchemy" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps "$ROOT"/.whl/*.whl 2>&1 | tail -3
fi
for e in flaggems timing_cudagraph ir_dump autotune_replay shapes seed; do
  $PY -m pip install -q --no-deps --no-build-isolation -e "$ROOT/extensions/$e" 2>&1 | grep -v WARNING | tail -2
done
(cd "$FLAGGEMS_DIR/src" && $PY -c "import flag_gems, triton, torch; print('flag_gems', flag_gems.__version__, flag_gems.__file__); print('triton', triton.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())") 2>&1 | tail -3 | tee -a "$S"
# the commit, when the checkout is a git work tree of its own (not a folder inside another one)
if [ "$(git -C "$FLAGGEMS_DIR" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$FLAGGEMS_DIR" && pwd -P)" ]; then
  git -C "$FLAGGEMS_DIR" log -1 --format="checkout $FLAGGEMS_DIR %H %d"
else
  echo "checkout $FLAGGEMS_DIR (no git metadata)"
fi | tee -a "$S"

# A fresh libtuner cache per process would let mm's winner differ per side; the ab below pins
# Triton's autotune through record/replay and keeps FlagGems' own cache shared.
COMMON=(--flaggems-level core --warmup-ms 10 --rep-ms 50 --out "$OUT/runs")

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has softmax; then
say "softmax: --ext flaggems --ext cudagraph --ext ir_dump"
TRITON_CACHE_DIR="$OUT/triton_cache/softmax" timeout 180 \
  zlf run --ext flaggems --ext cudagraph --ext ir_dump --ext seed softmax "${COMMON[@]}" --dtype float16,float32,bfloat16 --name fg_softmax \
  2>&1 | tee "$OUT/softmax.txt" | tee -a "$S"
D1="$(run_dir "$OUT/softmax.txt")"
if [ -n "$D1" ]; then
  say "FlagGems-format table ($D1/flaggems_results.txt)"; cat "$D1/flaggems_results.txt" | tee -a "$S"
  say "IR tree of $D1/ir"; (cd "$D1/ir" && find . -type f | sort) | tee -a "$S"
  grep -h BENCHMARK_DIRECT_NO_CUDAGRAPH "$D1/run.log" | head -5 | tee -a "$S"
fi
fi

cat > "$OUT/mm_shapes.yaml" <<'YAML'
BlasBenchmark:            # FlagGems' class-name key, as in core_shapes.yaml
  shapes:
    - [1, 4096, 4096, 4096]
    - [1, 128, 4096, 4096]
    - [1, 1024, 1024, 1024]
  shape_desc: "B, M, N, K"
YAML
# MM_DTYPES: float32 adds about 2 minutes of FlagGems' own tuning over its fp32 config space
if has mm; then
say "mm (autotuned) with a shape yaml: $MM"
TRITON_CACHE_DIR="$OUT/triton_cache/mm" timeout 240 \
  zlf run --ext flaggems --ext cudagraph --ext autotune_replay --ext shapes --ext seed "$MM" \
  --shapes "$OUT/mm_shapes.yaml" "${COMMON[@]}" --dtype "${MM_DTYPES:-float16,bfloat16}" --name fg_mm 2>&1 | tee "$OUT/mm.txt" | tee -a "$S"
D2="$(run_dir "$OUT/mm.txt")"
[ -n "$D2" ] && cat "$D2/flaggems_results.txt" | tee -a "$S"
[ -n "$D2" ] && ls "$D2/autotune_records" 2>/dev/null | tee -a "$S"
fi

if has ab; then
say "zlf ab --switch DISABLE_MMA_V3, 3 rounds: $MM"
timeout 300 zlf ab --switch DISABLE_MMA_V3 --rounds 3 --out "$OUT/ab" \
  --ext flaggems --ext cudagraph --ext autotune_replay --ext shapes --ext seed \
  "$MM" --shapes "$OUT/mm_shapes.yaml" --flaggems-level core --dtype bfloat16 \
  --warmup-ms 10 --rep-ms 50 2>&1 | tee "$OUT/ab.txt" | tee -a "$S"
fi
say "done; everything under $OUT"
