#!/usr/bin/env bash
# zlf ab --library over a seeded sample of a FlagGems release (default: v5.3.4, 40 ops, seed 22) on
# one GPU: an A/A (both sides DISABLE_MMA_V3=0), then a DISABLE_MMA_V3 A/B of the same ops, within
# a wall budget per call; a second call resumes what the first left. Prints each library table,
# the measuring share of wall time, the cost per op, and both extrapolated to the 929 ops of the
# release on 1 GPU and on 8 (one chunk of each round per GPU).
#
#   bash benchmarks/library_ab_gpu.sh --out DIR                              call 1
#   LIB_STATE=path/to/state bash benchmarks/library_ab_gpu.sh --out DIR      call 2: call 1's
#       DIR/state, copied into the work tree so that it travels (campaigns and the signing key
#       --resume verifies them with; the Triton caches stay behind: a resumed round that compiles
#       again is marked so in its table)
#
# Needs .flaggems/v5.3.4 (FLAGGEMS_DIR overrides) and FlagGems' runtime wheels in .whl/
# (docs/flaggems.md, "GPU session"); flag_gems comes from the checkout's src/.
# Knobs: LIB_SAMPLE (40), LIB_SEED (22), LIB_BUDGET_S (540: each campaign is stopped with SIGINT
# when the budget is spent, and resumed by the next call), LIB_POINT_LIMIT (60 s per point),
# LIB_COMPILE_LIMIT (120 s more for a point's first FlagGems call), LIB_MAX_SHAPES (3 smallest
# built-in shapes per op), LIB_ROUNDS (3 screening rounds), LIB_MAX_ROUNDS (6), LIB_RUN_ARGS
# ("--warmup-ms 10 --rep-ms 40"), LIB_RELEASE_OPS (929: the ops of the release extrapolated to),
# LIB_OPS ("mm addmm softmax": these ops instead of the sample), LIB_ORDER (aa,ab; or ab,aa).
set -uo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONUNBUFFERED=1 ZLF_NO_PROGRESS=1 NO_COLOR=1
FLAGGEMS_DIR="${FLAGGEMS_DIR:-$ROOT/.flaggems/v5.3.4}"
[ -f "$FLAGGEMS_DIR/benchmark/base.py" ] || { echo "no FlagGems checkout in $FLAGGEMS_DIR" >&2; exit 2; }
t0=$SECONDS
BUDGET="${LIB_BUDGET_S:-540}"

echo "== setup"
ls "$ROOT"/.whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps "$ROOT"/.whl/*.whl 2>&1 | grep -v WARNING | tail -3
python3 -m pip install -q --no-deps --no-build-isolation -e "$ROOT" \
  -e "$ROOT/extensions/flaggems" -e "$ROOT/extensions/timing_cudagraph" -e "$ROOT/extensions/timing_cupti" \
  -e "$ROOT/extensions/seed" -e "$ROOT/extensions/autotune_replay" 2>&1 | grep -v WARNING | tail -3
(cd "$FLAGGEMS_DIR/src" && python3 -c "import flag_gems, triton, torch; print('flag_gems', flag_gems.__version__, '| triton', triton.__version__, '| torch', torch.__version__, '|', torch.cuda.get_device_name())") 2>&1 | tail -2
EXTS=(--ext flaggems --ext cudagraph --ext seed --ext autotune_replay)
if python3 -c "from cupti import cupti" 2>/dev/null; then EXTS+=(--ext cupti); else echo "no cupti-python: runs without --ext cupti"; fi
echo "setup took $((SECONDS - t0)) s"

STATE="$OUT/state"
if [ -n "${LIB_STATE:-}" ]; then rm -rf "$STATE"; cp -r "$LIB_STATE" "$STATE"; fi
mkdir -p "$STATE/config"
export XDG_CONFIG_HOME="$STATE/config"   # the campaign key travels with the campaigns: --resume verifies them
TRITON="${LIB_TRITON_CACHE:-$ROOT/.cache/library_ab_triton}"  # A/A's side A and the A/B's side A share kernels
read -r -a RUN_ARGS <<< "${LIB_RUN_ARGS:---warmup-ms 10 --rep-ms 40}"
# LIB_OPS: these ops of the checkout instead of a sample
if [ -n "${LIB_OPS:-}" ]; then read -r -a PICK <<< "$LIB_OPS"; else PICK=(--sample "${LIB_SAMPLE:-40}" --sample-seed "${LIB_SEED:-22}"); fi
COMMON=(--library flaggems --flaggems-dir "$FLAGGEMS_DIR" "${PICK[@]}"
        --flaggems-max-shapes "${LIB_MAX_SHAPES:-3}" --time-limit "${LIB_POINT_LIMIT:-60}"
        --flaggems-compile-time-limit "${LIB_COMPILE_LIMIT:-120}" --rounds "${LIB_ROUNDS:-3}"
        --max-rounds "${LIB_MAX_ROUNDS:-6}" --triton-cache "$TRITON" --out "$STATE" "${EXTS[@]}" "${RUN_ARGS[@]}")

# one campaign: created, or resumed where a call left it, until the budget is spent
campaign() {
  local name="$1"; shift
  local dir; dir="$(ls -d "$STATE"/ab_"$name"_* 2>/dev/null | head -1)"
  local left=$((BUDGET - (SECONDS - t0)))
  if [ -n "$dir" ] && grep -q '"status": "complete"' "$dir/campaign.json" 2>/dev/null; then
    echo "== $name: finished in an earlier call"; return 0
  fi
  if [ "$left" -lt 60 ]; then
    echo "== $name: ${left} s of the budget left; call again with LIB_STATE=<this call's DIR/state>"; return 1
  fi
  if [ -n "$dir" ]; then
    echo "== $name: zlf ab --resume $dir (budget ${left} s)"
    timeout -s INT -k 60 "$left" zlf ab --resume "$dir" > "$OUT/$name.txt" 2> "$OUT/${name}_progress.txt"
  else
    echo "== $name: zlf ab $* ${COMMON[*]} --name $name (budget ${left} s)"
    timeout -s INT -k 60 "$left" zlf ab "$@" "${COMMON[@]}" --name "$name" > "$OUT/$name.txt" 2> "$OUT/${name}_progress.txt"
  fi
  local rc=$?
  tail -4 "$OUT/${name}_progress.txt"
  # 0 done, 1 done with an op failing on B only; 124/130: the budget ran out (resumable)
  case $rc in 0|1) return 0 ;; 124|130) echo "$name: budget spent; call again with LIB_STATE=<DIR/state>"; return 1 ;;
    *) echo "$name: exit $rc"; tail -20 "$OUT/${name}_progress.txt"; return 1 ;; esac
}

# LIB_ORDER=ab,aa runs the A/B first (both share side A's kernels: the second pays one side's compiles)
if [ "${LIB_ORDER:-aa,ab}" = "ab,aa" ]; then
  campaign ab --switch DISABLE_MMA_V3 && campaign aa --aa --a-env DISABLE_MMA_V3=0
else
  campaign aa --aa --a-env DISABLE_MMA_V3=0 && campaign ab --switch DISABLE_MMA_V3
fi

for name in aa ab; do
  dir="$(ls -d "$STATE"/ab_"$name"_* 2>/dev/null | head -1)"
  [ -n "$dir" ] || continue
  echo "== $name: the library table ($dir)"
  zlf ab --status "$dir" 2>&1
done

echo "== cost per op, measuring share, extrapolated to the release"
python3 - "$STATE" "${LIB_RELEASE_OPS:-929}" <<'PY'
import json, sys
from pathlib import Path

state, release = Path(sys.argv[1]), int(sys.argv[2])
FIXED = ("start", "imports")
for name in ("aa", "ab"):
    dirs = sorted(state.glob(f"ab_{name}_*"))
    if not dirs:
        continue
    c = json.loads((dirs[0] / "campaign.json").read_text())
    lib = c.get("library") or {}
    n = len([o for o in c["ops"] if o["name"] not in (c["statistics"].get("canary_ops") or ())])
    procs = c.get("processes") or {}
    wall = sum(p.get("seconds") or 0.0 for p in procs.values())
    split = {}
    for p in procs.values():
        for k, v in (p.get("split") or {}).items():
            split[k] = split.get(k, 0.0) + v
    shared = [p for k, p in procs.items() if k.startswith("_shared/")]
    # per-process cost (start, imports, and the unaccounted rest) is paid once per process
    # whatever the number of ops; everything else grows with the ops (alone restarts included)
    fixed = sum((p.get("split") or {}).get(k, 0.0) for p in shared for k in FIXED)
    fixed += sum(max(0.0, (p.get("seconds") or 0.0) - sum(v for k, v in (p.get("split") or {}).items()
                                                           if k not in ("compiled", "cache_hits"))) for p in shared)
    per_op = (wall - fixed) / max(1, n)
    # the driver's own work between processes (filing, splitting, looks): one driver for all GPUs
    driver = max(0.0, float(c.get("driver_s") or 0.0) - wall) / max(1, n)
    one = fixed + (per_op + driver) * release
    eight = fixed + per_op * release / 8.0 + driver * release  # a chunk of every round per GPU
    status = c.get("status")
    print(f"{name}: {status}; {n} ops ({lib.get('source')}, sample {lib.get('sample')} seed {lib.get('seed')}), "
          f"{len(procs)} processes, {wall:.0f} s of process wall time")
    if wall:
        print("  where the time went: " + ", ".join(f"{k} {split.get(k, 0.0):.0f} s ({100 * split.get(k, 0.0) / wall:.0f} %)"
                                             for k in ("start", "imports", "planning", "inputs", "compile", "measuring")))
        print(f"  measuring share of wall time: {100 * split.get('measuring', 0.0) / wall:.1f} % (target >= 50 %)")
        elapsed = float(c.get("driver_s") or 0.0)
        if elapsed:
            print(f"  measuring share of the campaign's elapsed {elapsed:.0f} s: "
                  f"{100 * split.get('measuring', 0.0) / elapsed:.1f} %")
        print(f"  cost per op: {(elapsed or wall) / max(1, n):.1f} s (fixed per process {fixed / max(1, len(shared)):.1f} s x "
              f"{len(shared)} shared processes, {per_op:.2f} s per op in processes, {driver:.2f} s in the driver)")
        print(f"  extrapolated to {release} ops: 1 GPU {one / 3600:.2f} h (target <= 3 h), 8 GPUs {eight / 3600:.2f} h")
    later = [(k, p) for k, p in procs.items() if (p.get("round") or 1) > 1 and (p.get("split") or {}).get("compiled")]
    for k, p in later:
        print(f"  !!! {k} compiled {p['split']['compiled']} kernel(s) in round {p['round']}")
PY

tar czf "$OUT/library_result.tgz" -C "$OUT" aa.txt ab.txt aa_progress.txt ab_progress.txt \
  $(cd "$OUT" && ls -d state/ab_*/campaign.json state/ab_*/library.* state/ab_*/summary.log 2>/dev/null) 2>/dev/null \
  && echo "packed $OUT/library_result.tgz"
echo "total $((SECONDS - t0)) s"
