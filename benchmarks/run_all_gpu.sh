#!/usr/bin/env bash
# Every GPU check of the project, in stages, packed for a machine that returns few files:
#   bash benchmarks/run_all_gpu.sh OUT_DIR STAGE...
# (CUPTI_PARTS picks the cupti stage's parts, CLOCK_STAGES the clock stage's)
# stages: setup tests core cudagraph cupti clock procs triage calibrate irdump autotune taskpkg tasklang ab flaggems flaggems-head
# (flaggems: the checkout in .flaggems/v5.0.2, flaggems-head: .flaggems/head; FG_STAGES picks
# their parts, see benchmarks/flaggems_gpu.sh)
# Each stage writes under $ZLF_GPU_WORK (default /tmp/zlf-gpu)/<stage>/ and is packed into
# OUT_DIR/<stage>.tgz (compiler caches left out); a failing stage does not stop the next one.
set -uo pipefail
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"; shift
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W="${ZLF_GPU_WORK:-/tmp/zlf-gpu}"
mkdir -p "$W"
export PYTHONUNBUFFERED=1 ZLF_NO_PROGRESS=1 NO_COLOR=1

pack() { tar czf "$OUT/$1.tgz" -C "$W" --exclude='triton_cache*' --exclude='*.cubin' "$1" 2>/dev/null || true; }

for stage in "$@"; do
  d="$W/$stage"; mkdir -p "$d"; t0=$SECONDS
  echo "===== stage $stage"
  case "$stage" in
    setup)
      exts=(); for e in "$ROOT"/extensions/*/; do [[ "$(basename "$e")" == _* ]] || exts+=(-e "$e"); done
      python3 -m pip install -q --no-deps --no-build-isolation -e "$ROOT" "${exts[@]}" 2>&1 | tail -3
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,clocks_throttle_reasons.active --format=csv
      zlf plugins | tee "$d/plugins.txt" ;;
    tests)
      (cd "$ROOT" && python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1) | tee "$d/gpu_tests.txt" | tail -25 ;;
    core)
      python3 "$ROOT/benchmarks/core_timer_bench.py" --out "$d" 2>&1 | tee "$d/log.txt" | tail -30 ;;
    cudagraph)
      python3 "$ROOT/benchmarks/cudagraph_vs_cupti.py" --out "$d" 2>&1 | tee "$d/log.txt" | tail -45 ;;
    cupti)
      python3 "$ROOT/benchmarks/cupti_gpu.py" --out "$d" --parts "${CUPTI_PARTS:-1,2,3,4}" 2>&1 | tee "$d/log.txt" | tail -60 ;;
    clock)
      bash "$ROOT/benchmarks/clock_gpu.sh" "$d" 2>&1 | tee "$d/log.txt" | tail -40 ;;
    procs)
      python3 "$ROOT/benchmarks/procs_gpu.py" --out "$d" 2>&1 | tee "$d/log.txt" | tail -25 ;;
    triage)
      bash "$ROOT/benchmarks/triage_gpu.sh" "$d" > "$d/log.txt" 2>&1; tail -70 "$d/summary.txt" ;;
    calibrate)
      (cd "$d" && zlf calibrate 2>&1 | tee calibrate.txt
       zlf run --name base 2>&1 | tail -30 | tee run_base.txt
       zlf run --name again 2>&1 | tail -3
       DISABLE_MMA_V3=1 zlf run --name nomma 2>&1 | tail -3
       zlf compare runs/base_* runs/again_* 2>&1 | tee compare_aa.txt | tail -12
       zlf compare runs/base_* runs/nomma_* 2>&1 | tee compare_mma.txt | tail -30
       zlf report runs/base_* runs/again_* --out report_aa.md 2>&1 | tail -2
       zlf report runs/base_* runs/nomma_* --out report_mma.md 2>&1 | tail -2
       head -12 report_aa.md report_mma.md) ;;
    irdump)
      bash "$ROOT/benchmarks/ir_dump_gpu.sh" --out "$d" > "$d/log.txt" 2>&1; tail -60 "$d/summary.txt" ;;
    autotune)
      python3 "$ROOT/benchmarks/autotune_replay_bench.py" --out "$d" 2>&1 | tee "$d/log.txt" | tail -40 ;;
    taskpkg)
      OUT="$d" bash "$ROOT/benchmarks/taskpkg_gpu.sh" 2>&1 | tee "$d/log.txt" | tail -40 ;;
    tasklang)  # one timer for Triton and CUDA C++ candidates: compare, ncu, ab --task (~5 min)
      (cd "$ROOT" && { python3 -c "from cupti import cupti" 2>/dev/null || ! ls .whl/*.whl >/dev/null 2>&1 ||
        python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl; }
       python3 benchmarks/task_languages_gpu.py --out "$d" ${TASKLANG_ARGS:-}) > "$d/log.txt" 2>&1
      tail -80 "$d/summary.md" ;;
    ab)
      bash "$ROOT/benchmarks/ab_gpu.sh" --out "$d" > "$d/log.txt" 2>&1; tail -60 "$d/summary.txt" ;;
    flaggems|flaggems-head)
      fg="$ROOT/.flaggems/v5.0.2"; [ "$stage" = flaggems-head ] && fg="$ROOT/.flaggems/head"
      FLAGGEMS_DIR="${FLAGGEMS_DIR:-$fg}" bash "$ROOT/benchmarks/flaggems_gpu.sh" --out "$d" > "$d/log.txt" 2>&1
      tail -80 "$d/summary.txt" ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "===== stage $stage done in $((SECONDS - t0)) s"
  pack "$stage"
done
