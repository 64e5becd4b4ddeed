#!/usr/bin/env bash
# Triage on one GPU: a DISABLE_MMA_V3 campaign over the built-in matmul (fp16, 3 rounds) with
# --triage, its triage.md, the IR change and counters of each SLOWER point, zlf profile of one
# point, ncu's kernel time against zlf's median, a FlagGems mm point through zlf profile (when a
# checkout is in .flaggems/v5.3.4 or FLAGGEMS_DIR), and the wall time triage added per point.
#
#   bash benchmarks/triage_gpu.sh OUT_DIR        (or --out OUT_DIR; ~3 minutes on an H200)
#   TRIAGE_PARTS=4 bash benchmarks/triage_gpu.sh OUT_DIR    (the FlagGems mm part alone)
set -euo pipefail

[ "${1:-}" = "--out" ] || set -- --out "$@"
source "$(dirname "$0")/out_dir.sh" "$@"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export ZLF_NO_PROGRESS=1
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }

if ! zlf plugins --json 2>/dev/null | python3 -c 'import json,sys; sys.exit(0 if any(e["name"]=="profile" for e in json.load(sys.stdin)) else 1)'; then
  exts=(); for e in "$ROOT"/extensions/*/; do [[ "$(basename "$e")" == _* ]] || exts+=(-e "$e"); done
  python3 -m pip install -q --no-deps --no-build-isolation -e "$ROOT" "${exts[@]}" 2>&1 | tail -3
fi
say "== ncu: $(command -v ncu || echo 'NOT FOUND') $(ncu --version 2>/dev/null | tail -1 || true)"

EXTS=(--ext seed --ext cudagraph --ext ir_dump --ext autotune_replay --ext profile)
PARTS=" ${TRIAGE_PARTS:-1 2 3 4} "   # 1-3 share the campaign; 4 (FlagGems mm) stands alone
if [[ "$PARTS" == *" 1 "* ]]; then
say "== 1/3 zlf ab --switch DISABLE_MMA_V3 --rounds 3 matmul --dtype float16 ${EXTS[*]} --triage"
t0=$(date +%s)
set +e
timeout 480 zlf ab --switch DISABLE_MMA_V3 --rounds 3 matmul --dtype float16 "${EXTS[@]}" --triage \
  --out "$OUT/runs" > "$OUT/ab.txt" 2> "$OUT/ab_progress.txt"
rc=$?
set -e
say "zlf ab exit code $rc after $(( $(date +%s) - t0 )) s (campaign + triage)"
C="$(grep '^campaign dir: ' "$OUT/ab.txt" | tail -1 | sed 's/^campaign dir: //')"
[ -n "$C" ] || { say "no campaign dir; see $OUT/ab.txt and $OUT/ab_progress.txt"; tail -5 "$OUT/ab_progress.txt"; exit 1; }
sed -n '/^point /,/^verdicts:/p' "$OUT/ab.txt" | tee -a "$S"
if ! ls "$C"/triage/*/bundle.json >/dev/null 2>&1; then
  say "== no point decided: zlf triage of the largest point anyway"
  zlf triage "$C" matmul/4096x4096x4096/float16 "${EXTS[@]}" > "$OUT/triage.txt" 2>&1 || tail -3 "$OUT/triage.txt"
fi
say "== triage.md"
cat "$C/triage/triage.md" | tee -a "$S"

say "== per SLOWER point: IR op-count change and counters (A -> B)"
python3 - "$C" <<'PY' | tee -a "$S"
import json, sys
from pathlib import Path
camp = Path(sys.argv[1])
for f in sorted((camp / "triage").glob("*/bundle.json")):
    b = json.loads(f.read_text())
    print(f"{b['point']}  {b.get('verdict')}  {b.get('delta_pct', 0):+.1f} %  triage {b.get('seconds')} s")
    print(f"  IR: {'; '.join(r[3] for r in b.get('ir_rows', []) if r[3]) or 'no change'}")
    print(f"  key IR change: {b.get('ir_key_change') or '-'}")
    print(f"  counters: {b.get('counters')}  summary: {b.get('summary')}")
PY

say "== ncu kernel time vs zlf median (same point, same side)"
python3 - "$C" <<'PY' | tee -a "$S"
import json, sys
from pathlib import Path
from tabulate import tabulate
camp = Path(sys.argv[1])
rows = []
for f in sorted((camp / "triage").glob("*/bundle.json")):
    b = json.loads(f.read_text())
    for side, med in (("A", b.get("a_ms")), ("B", b.get("b_ms"))):
        m = f.parent / f"profile_{side}" / "metrics.json"
        if not m.is_file() or med is None:
            continue
        p = json.loads(m.read_text())
        if not p.get("ok"):
            rows.append([b["point"], side, "-", f"{med * 1e3:.4g}", p.get("why", "")[:60]])
            continue
        ncu_us = sum(k["mean"].get("duration_us") or 0 for k in p["kernels"])
        rows.append([b["point"], side, f"{ncu_us:.4g}", f"{med * 1e3:.4g}", f"{ncu_us / (med * 1e3):.3f}"])
print(tabulate(rows, headers=["point", "side", "ncu µs (per call)", "zlf median µs", "ncu / zlf"]))
PY

say "== 2/3 zlf profile of one point (the campaign's r1_A run, its autotune record replayed)"
A1="$C/matmul/r1_A"
t1=$(date +%s)
set +e
timeout 240 zlf profile "$A1" matmul/4096x4096x4096/float16 "${EXTS[@]}" --out "$OUT/profile_one" --ncu-rep 2>&1 | tee "$OUT/profile_one.txt" | tee -a "$S"
say "zlf profile exit code ${PIPESTATUS[0]} after $(( $(date +%s) - t1 )) s"
set -e
cat "$OUT"/profile_one/profile/*/metrics.md 2>/dev/null | grep -E "ratio|launches|replayed" | tee -a "$S" || true

say "== 3/3 the same point profiled from the op alone (no run: it tunes for itself)"
set +e
timeout 240 zlf profile matmul matmul/4096x4096x4096/float16 "${EXTS[@]}" --out "$OUT/profile_op" 2>&1 | tail -16 | tee -a "$S"
set -e

fi

if [[ "$PARTS" == *" 4 "* ]]; then
say "== 4/4 a FlagGems mm point through zlf profile (checkout: \$FLAGGEMS_DIR or .flaggems/v5.3.4)"
FG="${FLAGGEMS_DIR:-$ROOT/.flaggems/v5.3.4}"
if [ -d "$FG/src/flag_gems" ] || [ -d "$FG/flag_gems" ]; then
  export FLAGGEMS_DIR="$FG"
  if [ -f "$FG/benchmark/base.py" ]; then MM=mm:mm::test_mm; else MM=mm:blas_perf::test_blas_benchmark; fi
  printf 'BlasBenchmark:\n  shapes:\n    - [1, 4096, 4096, 4096]\n  shape_desc: "B, M, N, K"\n' > "$OUT/mm_shapes.yaml"
  FGX=(--ext flaggems --ext cudagraph --ext shapes --ext seed --ext profile)
  set +e
  timeout 300 zlf run "$MM" "${FGX[@]}" --shapes "$OUT/mm_shapes.yaml" --dtype float16 --flaggems-level core \
    --out "$OUT/fg_runs" --name fg_mm > "$OUT/fg_run.txt" 2>&1
  say "zlf run $MM exit code $?"
  set -e
  R="$(ls -d "$OUT"/fg_runs/*/ 2>/dev/null | head -1)"
  P="$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; ok=[x for x in r if x.get("status")=="ok"]; print(ok[0]["point"] if ok else "")' "$R/results.jsonl" 2>/dev/null || true)"
  if [ -n "$P" ]; then
    t2=$(date +%s)
    set +e
    timeout 300 zlf profile "$R" "$P" "${FGX[@]}" --out "$OUT/fg_profile" 2>&1 | tee "$OUT/fg_profile.txt" | tail -20 | tee -a "$S"
    say "zlf profile (FlagGems $P) exit code ${PIPESTATUS[0]} after $(( $(date +%s) - t2 )) s"
    set -e
    python3 - "$R" "$P" "$OUT/fg_profile" <<'PY' | tee -a "$S"
import json, sys
from pathlib import Path
run, point, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
rec = next(json.loads(l) for l in (run / "results.jsonl").read_text().splitlines() if l.strip() and json.loads(l)["point"] == point)
med_us = (rec.get("median_ms") or (rec.get("timing") or {}).get("value_ms") or float("nan")) * 1e3
for m in sorted(out.glob("profile/*/metrics.json")):
    p = json.loads(m.read_text())
    if not p.get("ok"):
        print(f"{point}: ncu did not profile: {p.get('why')}")
        continue
    ncu_us = sum(k["mean"].get("duration_us") or 0 for k in p["kernels"])
    names = ", ".join(sorted({k.get("name", "?")[:50] for k in p["kernels"]}))
    print(f"{point}: kernels {names}; ncu {ncu_us:.4g} us per call, zlf median {med_us:.4g} us, ncu / zlf {ncu_us / med_us:.3f}")
PY
  else
    say "no ok FlagGems mm point; see $OUT/fg_run.txt"; tail -5 "$OUT/fg_run.txt" | tee -a "$S"
  fi
else
  say "no FlagGems checkout at $FG: part 4 skipped"
fi

fi
if [[ "$PARTS" == *" 1 "* ]]; then
say "== wall time triage added (per point, from triage.md and bundle.json)"
grep -h "per point" "$C/triage/triage.md" | tee -a "$S" || true
fi
echo "everything is under $OUT (summary.txt first; the campaign in $C)"
