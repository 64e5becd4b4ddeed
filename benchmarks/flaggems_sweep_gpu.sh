#!/usr/bin/env bash
# zlf sweep over a seeded sample of a FlagGems release's benchmark ops (default: v5.3.4, 120 ops,
# seed 22), one op per GPU at a time, within a wall budget per call; a second call resumes.
#
#   bash benchmarks/flaggems_sweep_gpu.sh --out DIR                          call 1
#   FG_RESUME=path/to/sweep bash benchmarks/flaggems_sweep_gpu.sh --out DIR  call 2: the sweep
#       directory call 1 returned (DIR/sweep), copied into the work tree so that it travels
#
# Needs .flaggems/v5.3.4 (FLAGGEMS_DIR overrides) and FlagGems' runtime wheels in .whl/
# (docs/flaggems.md, "GPU session"); flag_gems comes from the checkout's src/.
# Knobs: FG_SAMPLE (120), FG_SEED (22), FG_GPUS (every GPU nvidia-smi lists), FG_BUDGET_S (480:
# the sweep is stopped with SIGINT then; finished ops are kept, the rest resume), FG_OP_LIMIT
# (420 s per op process), FG_POINT_LIMIT (60 s per point), FG_COMPILE_LIMIT (120 s more for a
# point's first FlagGems call: compiling, tuning), FG_MAX_SHAPES (3 smallest built-in
# shapes per op; 0: all), FG_RUN_ARGS ("--warmup-ms 10 --rep-ms 40"), FG_OPS (a list instead of
# the sample), FG_CHECK (fail; warn: points whose reference disagrees are timed, UNCHECKED).
#
# The two ops that gave nothing within 60 s, with every built-in shape and their phases:
#   FG_OPS=bitwise_left_shift,fractional_max_pool2d,apply_rotary_pos_emb FG_MAX_SHAPES=0 FG_CHECK=warn \
#   FG_OP_LIMIT=420 FG_POINT_LIMIT=300 bash benchmarks/flaggems_sweep_gpu.sh --out DIR
set -uo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONUNBUFFERED=1 ZLF_NO_PROGRESS=1 NO_COLOR=1
FLAGGEMS_DIR="${FLAGGEMS_DIR:-$ROOT/.flaggems/v5.3.4}"
[ -f "$FLAGGEMS_DIR/benchmark/base.py" ] || { echo "no FlagGems checkout in $FLAGGEMS_DIR" >&2; exit 2; }
t0=$SECONDS

echo "== setup"
# FlagGems' runtime deps (sqlalchemy, greenlet) and cupti-python, from .whl/ (no index)
ls "$ROOT"/.whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps "$ROOT"/.whl/*.whl 2>&1 | grep -v WARNING | tail -3
python3 -m pip install -q --no-deps --no-build-isolation -e "$ROOT" \
  -e "$ROOT/extensions/flaggems" -e "$ROOT/extensions/timing_cudagraph" -e "$ROOT/extensions/timing_cupti" \
  -e "$ROOT/extensions/seed" 2>&1 | grep -v WARNING | tail -3
(cd "$FLAGGEMS_DIR/src" && python3 -c "import flag_gems, triton, torch; print('flag_gems', flag_gems.__version__, '| triton', triton.__version__, '| torch', torch.__version__, '|', torch.cuda.get_device_name())") 2>&1 | tail -2
RUN_EXTS=(--run-ext cudagraph --run-ext seed)
if python3 -c "from cupti import cupti" 2>/dev/null; then RUN_EXTS+=(--run-ext cupti); else echo "no cupti-python: ops run without --ext cupti"; fi
GPUS="${FG_GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}"
echo "gpus: $GPUS; setup took $((SECONDS - t0)) s"

BUDGET="${FG_BUDGET_S:-480}"
if [ -n "${FG_RESUME:-}" ]; then
  cp -r "$FG_RESUME" "$OUT/sweep"
  ARGS=(--resume "$OUT/sweep" --flaggems-dir "$FLAGGEMS_DIR")  # the checkout may sit elsewhere now
else
  if [ -n "${FG_OPS:-}" ]; then WHICH=(--ops "$FG_OPS"); else WHICH=(--sample "${FG_SAMPLE:-120}" --seed "${FG_SEED:-22}"); fi
  SHAPES=(); [ "${FG_MAX_SHAPES:-3}" != 0 ] && SHAPES=(--max-shapes "${FG_MAX_SHAPES:-3}")
  ARGS=(--flaggems-dir "$FLAGGEMS_DIR" "${WHICH[@]}" --check "${FG_CHECK:-fail}"
        --op-time-limit "${FG_OP_LIMIT:-420}" --time-limit "${FG_POINT_LIMIT:-60}"
        --compile-time-limit "${FG_COMPILE_LIMIT:-120}"
        "${SHAPES[@]}" "${RUN_EXTS[@]}" --run-args "${FG_RUN_ARGS:---warmup-ms 10 --rep-ms 40}"
        --out "$OUT" --name sweep)
fi
echo "== zlf sweep ${ARGS[*]} --gpus $GPUS (budget ${BUDGET} s)"
timeout -s INT -k 60 "$BUDGET" zlf sweep "${ARGS[@]}" --gpus "$GPUS" 2>"$OUT/sweep_progress.txt" | tee "$OUT/sweep_table.txt"
rc=${PIPESTATUS[0]}
# timeout(1) exits 124 when it had to stop the sweep (which itself ends 130 on SIGINT)
case $rc in
  124|130) echo "exit $rc: the ${BUDGET} s budget was reached; call again with FG_RESUME=<this call's DIR/sweep, copied into the work tree>" ;;
  *) echo "exit $rc" ;;
esac
# a fresh sweep directory is sweep_<time>: one name for the next call
if [ -z "${FG_RESUME:-}" ]; then d="$(ls -d "$OUT"/sweep_* 2>/dev/null | head -1)"; [ -n "$d" ] && mv "$d" "$OUT/sweep"; fi
tail -3 "$OUT/sweep_progress.txt"
echo "== ops that did not end ok (status, last phase, first error)"
python3 - "$OUT/sweep" <<'PY'
import json, sys
from pathlib import Path
lines = Path(sys.argv[1]) / "sweep.jsonl"
rows = [json.loads(l) for l in lines.read_text().splitlines() if l.strip()] if lines.exists() else []
for r in rows:
    if r["status"] != "ok":
        print(f"{r['op']:<40} {r['status']:<8} {r['last_phase'][:60]:<60} {(r['skip_reason'] or r['first_error'])[:140]}")
slow = sorted(rows, key=lambda r: -r["wall_s"])[:10]
print("slowest ops (wall s: startup/import/plan/inputs/compile/measure):")
for r in slow:
    print(f"  {r['op']:<40} {r['wall_s']:7.1f}: " + "/".join(f"{r[k]:.1f}" for k in
          ("startup_s", "import_s", "plan_s", "inputs_s", "compile_s", "measure_s")))
PY
# run directories hold every record; the logs hold stacks of killed ops
du -sh "$OUT/sweep" 2>/dev/null
# the device tool returns few files: the table, the state and the progress in one archive
tar czf "$OUT/sweep_result.tgz" -C "$OUT" sweep/sweep.json sweep/sweep.jsonl sweep/sweep.tsv \
  sweep_progress.txt sweep_table.txt 2>/dev/null && echo "packed $OUT/sweep_result.tgz"
echo "total $((SECONDS - t0)) s"
