#!/usr/bin/env bash
# zlf ab on one GPU (an H200): the four campaigns issue 7 asks to show, in < 12 minutes.
#   1. A/A over the built-in suite (22 points) x 6 rounds: expect 0 FASTER/SLOWER; run-to-run noise,
#      MDE and rounds needed per point
#   2. --switch DISABLE_MMA_V3 x 6 rounds over matmul (4 shapes x 2 dtypes), add, softmax, with the
#      A/A's variance pooled in: expect every matmul point SLOWER, add/softmax SAME or UNSURE, IR guard
#      "IR differs" for matmul (when ir_dump is installed)
#   3. the same with --until-confident --max-rounds 12 on matmul: rounds used (first look after 3)
#   4. a null switch (a variable nothing reads) on add x 2 rounds: the source guard warns
#
#   bash benchmarks/ab_gpu.sh --out DIR     (summaries, reports and plots are copied to DIR)
#   ROUNDS=2 MAX_ROUNDS=3 bash benchmarks/ab_gpu.sh --out DIR    (a quicker smoke test, e.g. on CPU)
set -uo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
export ZLF_NO_PROGRESS=1 NO_COLOR=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

active() {  # is extension $1 installed and loadable?
  zlf plugins --json | python3 -c 'import json,sys; sys.exit(0 if any(e["name"]==sys.argv[1] and e["status"]=="active" for e in json.load(sys.stdin)) else 1)' "$1"
}
EXTS=(--ext seed)
for e in autotune_replay cudagraph; do
  if active "$e"; then EXTS+=(--ext "$e"); fi
done
IR=()
if active ir_dump; then IR=(--ext ir_dump); fi
say "== extensions: ${EXTS[*]} ${IR[*]} (missing autotune_replay: runs tune for themselves; missing cudagraph: direct timer)"

# Small per-point budgets; one Triton cache per side definition shared by all campaigns (zlf ab
# keys it by side letter + interpreter + environment, so sharing never crosses a compiler change).
COMMON=(--out "$OUT/campaigns" --triton-cache "$OUT/triton_cache" --warmup-ms 10 --rep-ms 20)
ROUNDS="${ROUNDS:-6}"
MAX_ROUNDS="${MAX_ROUNDS:-12}"
T0=$SECONDS

campaign() {  # campaign NAME ZLF_AB_ARGS...: run, copy summary/report/plot to $OUT/NAME.*
  local name="$1"; shift
  local t=$SECONDS
  say "== $name: zlf ab $*"
  zlf ab "$@" > "$OUT/$name.txt" 2> "$OUT/$name.progress.txt"
  local rc=$?
  local dir
  dir="$(grep '^campaign dir: ' "$OUT/$name.txt" | tail -1 | sed 's/^campaign dir: //')"
  say "   exit code $rc, $((SECONDS - t)) s, campaign dir ${dir:-(none)}"
  if [ -n "$dir" ]; then
    cp "$dir/summary.log" "$OUT/$name.summary.log"
    cp "$dir/summary.json" "$OUT/$name.summary.json"
    cp "$dir/report.md" "$OUT/$name.report.md"
    [ -f "$dir/delta_intervals.png" ] && cp "$dir/delta_intervals.png" "$OUT/$name.delta_intervals.png"
    echo "$dir" > "$OUT/$name.dir"
    cat "$dir/summary.log" >> "$SUMMARY"
  else
    tail -20 "$OUT/$name.progress.txt" | tee -a "$SUMMARY"
  fi
}

# AB_CAMPAIGNS picks a subset (default all four: aa mma_v3 mma_v3_adaptive null_switch)
CAMPAIGNS=" ${AB_CAMPAIGNS:-aa mma_v3 mma_v3_adaptive null_switch} "
want() { [[ "$CAMPAIGNS" == *" $1 "* ]]; }

want aa && campaign aa --aa --rounds "$ROUNDS" add softmax matmul "${EXTS[@]}" "${COMMON[@]}"
AA_DIR="$(cat "$OUT/aa.dir" 2>/dev/null || true)"
NOISE=()
if [ -n "$AA_DIR" ]; then NOISE=(--noise-from "$AA_DIR"); fi

want mma_v3 && campaign mma_v3 --switch DISABLE_MMA_V3 --rounds "$ROUNDS" matmul add softmax "${NOISE[@]}" "${EXTS[@]}" "${IR[@]}" "${COMMON[@]}"
# Adaptive rounds on matmul alone (the ops whose verdict can settle early); add/softmax above.
want mma_v3_adaptive && campaign mma_v3_adaptive --switch DISABLE_MMA_V3 --until-confident --max-rounds "$MAX_ROUNDS" matmul \
  "${NOISE[@]}" "${EXTS[@]}" "${COMMON[@]}"
want null_switch && campaign null_switch --switch ZLF_AB_NULL_SWITCH_NOBODY_READS --rounds 2 add "${EXTS[@]}" "${COMMON[@]}"

say ""
say "== what issue 7 asks to show ($((SECONDS - T0)) s in all)"
python3 - "$OUT" <<'PY' | tee -a "$SUMMARY"
import collections, json, pathlib, sys

out = pathlib.Path(sys.argv[1])


def load(name):
    p = out / f"{name}.summary.json"
    return json.loads(p.read_text()) if p.is_file() else None


def by_op(doc):
    table = collections.defaultdict(collections.Counter)
    for p in doc["points"]:
        table[p["point"].split("/")[0]][p["verdict"]] += 1
    return {op: dict(c) for op, c in sorted(table.items())}


def pc(x):
    return "-" if x is None else (f"{x:.3g}%" if abs(x) >= 1000 else f"{x:.2f}%")


aa = load("aa")
if aa:
    # older summaries kept an interval bound ("aa_floor_pct"); newer ones the run-to-run spread
    key = "noise_pct" if any("noise_pct" in p for p in aa["points"]) else "aa_floor_pct"
    spreads = sorted(p[key] for p in aa["points"] if p.get(key) is not None)
    print(f"A/A: {len(aa['points'])} points x {aa['rounds']} rounds; FASTER+SLOWER = "
          f"{aa['counts']['FASTER'] + aa['counts']['SLOWER']} (target 0); verdicts {aa['counts']}; "
          f"estimate {aa.get('pairing', '-')}")
    if spreads:
        print(f"A/A run-to-run noise per point: median {pc(spreads[len(spreads) // 2])}, max {pc(spreads[-1])}")
    for p in aa["points"]:
        print(f"   {p['point']:<28} noise {pc(p.get(key))}  noise A/B {pc(p['noise_a_pct'])} / {pc(p['noise_b_pct'])}"
              f"  MDE {pc(p.get('mde_pct'))}  rounds for delta {p.get('rounds_needed') or '-'}  verdict {p['verdict']}")
for name in ("mma_v3", "mma_v3_adaptive"):
    doc = load(name)
    if not doc:
        print(f"{name}: no summary")
        continue
    ops = by_op(doc)
    mm = ops.get("matmul", {})
    ok = bool(mm) and set(mm) == {"SLOWER"} and all(set(ops.get(o, {})) <= {"SAME", "UNSURE"} for o in ("add", "softmax"))
    print(f"{name}: rounds used {doc['rounds']}; estimate {doc.get('pairing', '-')}; verdicts by op {ops}; failed ops {doc['failed_ops'] or 'none'}; "
          f"expectation (matmul all SLOWER, add/softmax SAME|UNSURE) {'MET' if ok else 'NOT MET'}")
    for g in doc["guards"]:
        print(f"   guard: {g}")
null = load("null_switch")
if null:
    warned = any("is not referenced" in g for g in null["guards"])
    print(f"null switch: source guard {'WARNED' if warned else 'did NOT warn'}; verdicts {null['counts']}")
PY
say "== done in $((SECONDS - T0)) s; everything under $OUT"
