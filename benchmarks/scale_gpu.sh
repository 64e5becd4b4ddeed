#!/usr/bin/env bash
# Scale-out on real GPUs (docs/scale.md; issue 11 "must show"):
#   1. one GPU: `zlf run --gpus 0` against the plain path -- same files, same points
#   2. one GPU: `zlf ab --gpus 0` against the plain `zlf ab` -- same layout, same verdicts
#   3. all GPUs (when more than one): the same campaign with --gpus 0,...,N-1 -- wall time against
#      step 2's plain campaign (target: near N x faster) and verdicts equal to it
#   4. all GPUs: a killed worker mid-campaign is recovered (--retries 1), the campaign completes
#   5. (when ray is installed) the campaign of step 3 on a local Ray instance with the real GPUs
#
#   bash benchmarks/scale_gpu.sh --out DIR          OPS="add softmax matmul" ROUNDS=6 by default
#   ROUNDS=2 OPS=add bash benchmarks/scale_gpu.sh --out DIR      (a quick smoke test)
#   SIDES="--aa" ...                                              (an A/A instead of DISABLE_MMA_V3)
#   EXTS="--ext seed" ...                                         (extensions of every run; default seed + autotune_replay)
set -uo pipefail

source "$(dirname "$0")/out_dir.sh" "$@"
export ZLF_NO_PROGRESS=1 NO_COLOR=1
ROUNDS="${ROUNDS:-6}"
read -r -a OPS <<< "${OPS:-add softmax matmul}"
# a switch with a known effect on H100/H200 (matmul SLOWER with it on), so "same verdicts" means something
read -r -a SIDES <<< "${SIDES:---switch DISABLE_MMA_V3}"
# autotune_replay: every run after round 1's A must replay its record, also through --gpus workers
read -r -a EXTS <<< "${EXTS:---ext seed --ext autotune_replay}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "$NGPU" -ge 1 ] || { say "no GPU visible (nvidia-smi -L): nothing to do"; exit 1; }
ALL=$(seq -s, 0 $((NGPU - 1)))
say "GPUs: $NGPU ($ALL); ops: ${OPS[*]}; rounds: $ROUNDS"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader | tee -a "$SUMMARY"
FAIL=0

files() { (cd "$1" && find . -type f | sort); }
verdicts() {  # point -> verdict of a finished campaign
  python3 -c 'import json,sys; [print(p["point"], p["verdict"]) for p in json.load(open(sys.argv[1]+"/summary.json"))["points"]]' "$1" | sort
}
campaign() {  # campaign <label> <zlf ab args...>: the campaign; wall seconds in <label>.s, exit code in <label>.rc
  local label="$1"; shift
  local t0=$(date +%s.%N)
  zlf ab "${SIDES[@]}" "${OPS[@]}" --rounds "$ROUNDS" "${EXTS[@]}" --out "$OUT/$label" "$@" > "$OUT/$label.out" 2> "$OUT/$label.err"
  local rc=$?
  python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))" > "$OUT/$label.s"
  echo "$rc" > "$OUT/$label.rc"
}
dir_of() { ls -d "$OUT/$1"/ab_* | tail -1; }

say "== 1. zlf run --gpus 0 against the plain path"
zlf run "${OPS[@]}" "${EXTS[@]}" --out "$OUT/run_plain" > "$OUT/run_plain.out" 2>&1
zlf run "${OPS[@]}" "${EXTS[@]}" --out "$OUT/run_gpus0" --gpus 0 > "$OUT/run_gpus0.out" 2>&1
P=$(ls -d "$OUT"/run_plain/*_* | tail -1); G=$(ls -d "$OUT"/run_gpus0/*_* | tail -1)
if diff <(files "$P") <(files "$G") > /dev/null && diff <(cut -d'"' -f4 "$P/results.jsonl") <(cut -d'"' -f4 "$G/results.jsonl") > /dev/null; then
  say "same layout and points: $(basename "$P") / $(basename "$G")"
else
  say "DIFFERENT layout or points: $P vs $G"; FAIL=1
fi

say "== 2. zlf ab plain vs --gpus 0 (one GPU)"
campaign ab_plain
campaign ab_gpus0 --gpus 0
A=$(dir_of ab_plain); B=$(dir_of ab_gpus0)
diff <(cd "$A" && find . -path ./triton_cache -prune -o -type d -print | sort) \
     <(cd "$B" && find . -path ./triton_cache -prune -o -type d -print | sort) > /dev/null \
  && say "same layout" || { say "DIFFERENT layout"; FAIL=1; }
diff <(verdicts "$A") <(verdicts "$B") > "$OUT/verdicts_1gpu.diff" \
  && say "same verdicts ($(verdicts "$A" | wc -l) points)" || say "verdicts differ on $(grep -c '^<' "$OUT/verdicts_1gpu.diff") point(s) (see verdicts_1gpu.diff; UNSURE<->SAME moves are noise)"
say "wall: plain $(cat "$OUT/ab_plain.s")s, --gpus 0 $(cat "$OUT/ab_gpus0.s")s"

if [ "$NGPU" -gt 1 ]; then
  say "== 3. zlf ab --gpus $ALL"
  campaign ab_all --gpus "$ALL"
  C=$(dir_of ab_all)
  say "wall: 1 GPU $(cat "$OUT/ab_gpus0.s")s, $NGPU GPUs $(cat "$OUT/ab_all.s")s (speedup $(python3 -c "print(round($(cat "$OUT/ab_gpus0.s")/$(cat "$OUT/ab_all.s"),2))")x, ideal ${NGPU}x)"
  diff <(verdicts "$B") <(verdicts "$C") > "$OUT/verdicts_ngpu.diff" \
    && say "same verdicts as one GPU" || say "verdicts differ on $(grep -c '^<' "$OUT/verdicts_ngpu.diff") point(s) (see verdicts_ngpu.diff)"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]+"/campaign.json"))
bad=[r["dir"] for r in d["runs"] if r["side"]=="A" and any(o["round"]==r["round"] and o["op"]==r["op"] and o["side"]=="B" and o.get("device_id")!=r.get("device_id") for o in d["runs"])]
print("pairs split across GPUs:", bad or "none")' "$C" | tee -a "$SUMMARY"
  grep -A$((NGPU + 2)) "per worker" "$OUT/ab_all.out" | tee -a "$SUMMARY"

  say "== 4. a killed worker"
  zlf ab "${SIDES[@]}" "${OPS[@]}" --rounds "$ROUNDS" "${EXTS[@]}" --out "$OUT/ab_kill" --gpus "$ALL" --retries 1 \
    > "$OUT/ab_kill.out" 2> "$OUT/ab_kill.err" &
  DRIVER=$!
  for _ in $(seq 1 600); do
    PID=$(python3 -c 'import glob,json; f=glob.glob(__import__("sys").argv[1]+"/ab_*/campaign.json")
r=[x for x in json.load(open(f[0]))["runs"] if x["status"]=="running" and x.get("worker_pid")] if f else []
print(r[0]["worker_pid"] if r else "")' "$OUT/ab_kill" 2>/dev/null)
    [ -n "$PID" ] && break; sleep 0.5
  done
  if [ -n "$PID" ]; then kill -9 "$PID"; say "killed worker $PID"; fi
  wait "$DRIVER"; say "campaign exit code $? (expect 0); $(grep -c 'died' "$OUT/ab_kill.err") loss line(s)"
  grep -A$((NGPU + 2)) "per worker" "$OUT/ab_kill.out" | tee -a "$SUMMARY"

  if python3 -c "import ray" 2>/dev/null; then
    say "== 5. local Ray with the real GPUs"
    campaign ab_ray --executor ray --gpus "$ALL"
    say "wall: ray $(cat "$OUT/ab_ray.s")s, exit $(cat "$OUT/ab_ray.rc")"
    diff <(verdicts "$B") <(verdicts "$(dir_of ab_ray)") > /dev/null && say "same verdicts as one GPU" || say "verdicts differ (see the summaries)"
  fi
else
  say "== 3-5 need more than one GPU: not run"
fi
exit $FAIL
