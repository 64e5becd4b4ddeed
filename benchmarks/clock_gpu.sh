#!/usr/bin/env bash
# Clock-aware measurement and campaign cost on one GPU, in under 4 minutes on an H200:
#   (a) a pinned-config 4096^3 fp16 matmul in 6 processes: spread in time and in cycles, with each
#       process's SM clock (min/median/max) and throttle reasons
#   (b) wall time of a 3-round A/A zlf ab over FlagGems softmax + mm, one process per round and
#       side (default) against --process-per-op
# FlagGems checkout: .flaggems/v5.3.4 (FLAGGEMS_DIR overrides); its dependencies from .whl/.
# CLOCK_STAGES=spread or =campaign runs one part only.
#
#   bash benchmarks/clock_gpu.sh OUT_DIR        (or --out OUT_DIR)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -eq 1 ] && [[ "$1" != -* ]]; then set -- --out "$1"; fi
source "$ROOT/benchmarks/out_dir.sh" "$@"
export PYTHONUNBUFFERED=1 ZLF_NO_PROGRESS=1 NO_COLOR=1
export FLAGGEMS_DIR="${FLAGGEMS_DIR:-$ROOT/.flaggems/v5.3.4}"
STAGES="${CLOCK_STAGES:-spread,campaign}"

{
  exts=(); for e in "$ROOT"/extensions/*/; do [[ "$(basename "$e")" == _* ]] || exts+=(-e "$e"); done
  python3 -m pip install -q --no-deps --no-build-isolation -e "$ROOT" "${exts[@]}" 2>&1 | grep -v WARNING | tail -3
  if [[ "$STAGES" == *campaign* ]] && ! python3 -c "import sqlalchemy" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps "$ROOT"/.whl/*.whl 2>&1 | grep -v WARNING | tail -3
  fi
  python3 -c "import pynvml; print('nvidia-ml-py', getattr(pynvml, '__version__', '?'))" 2>&1 | tail -1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv
} > "$OUT/setup.txt" 2>&1
cat "$OUT/setup.txt"
python3 "$ROOT/benchmarks/clock_gpu.py" --out "$OUT" --stages "$STAGES"
