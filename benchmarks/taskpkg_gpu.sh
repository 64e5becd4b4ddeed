#!/usr/bin/env bash
# Judge the paged-KV decode example's three candidates (naive Triton, split-K Triton, CUDA C++)
# on one NVIDIA GPU: verdict, candidate ms, baseline ms and speedup per case, then one table
# side by side. About 2-3 minutes on an H200 (12 cases x 3 candidates, one worker per candidate).
#
#   bash benchmarks/taskpkg_gpu.sh                 # core's direct timer (CUDA events, L2 flushed)
#   ZLF_TASK_EXT="--ext task --ext cudagraph" bash benchmarks/taskpkg_gpu.sh   # graph timer too
#   CASES=1,12 bash benchmarks/taskpkg_gpu.sh      # a subset
set -uo pipefail
cd "$(dirname "$0")/.."
export ZLF_NO_PROGRESS=1 NO_COLOR=1
PKG=examples/tasks/paged_kv_decode
OUT=${OUT:-runs/taskpkg_gpu_$(date +%Y%m%d-%H%M%S)}
EXT=${ZLF_TASK_EXT:---ext task}
CASES=${CASES:-1-12}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
$PY -c "import zlf_taskpkg" 2>/dev/null || $PY -m pip install -q --no-deps --no-build-isolation -e extensions/taskpkg

dirs=()
for cand in naive_triton.py better_triton.py paged_decode.cu; do
  echo "=== $cand"
  # shellcheck disable=SC2086
  $PY -m zlf task "$PKG" --candidate "$PKG/candidates/$cand" --backend cuda --cases "$CASES" \
      --reuse-worker --out "$OUT" --name "${cand%.*}" $EXT 2>&1 | tee "$OUT/${cand%.*}.txt"
  dirs+=("$(sed -n 's/^run dir: //p' "$OUT/${cand%.*}.txt" | tail -1)")
done

echo "=== side by side (speedup = baseline ms / candidate ms)"
$PY - "${dirs[@]}" <<'PY'
import json, sys
from pathlib import Path
from tabulate import tabulate

runs = [(Path(d).name.rsplit("_", 1)[0] if d else "?", d) for d in sys.argv[1:]]
table = {}
for name, d in runs:
    if not d or not (Path(d) / "results.jsonl").is_file():
        print(f"{name}: no run directory (see its output above)")
        continue
    for line in (Path(d) / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        row = table.setdefault(r["extra"]["case"], {"shape": "x".join(map(str, r["shape"]))})
        row.setdefault("baseline", r["extra"].get("baseline_ms"))
        sp = r["extra"].get("speedup")
        ms = r.get("median_ms")
        row[name] = (f"{ms:.4f} ms {sp:.2f}x" if ms and sp else r["extra"]["verdict"])
names = [n for n, _ in runs]
rows = [[c, v["shape"], f"{v['baseline']:.4f}" if v.get("baseline") else "", *[v.get(n, "") for n in names]]
        for c, v in sorted(table.items())]
print(tabulate(rows, headers=["case", "largest arg (k_cache)", "baseline ms", *names]))
PY
echo "run dirs: ${dirs[*]}"
