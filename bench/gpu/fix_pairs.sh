#!/usr/bin/env bash
# Record the fix pairs (bench/gpu/fix_pairs.py) with the nsys first on PATH / in NSIGHT_NSYS, and give
# every region its `nsys stats` CSVs (the five default reports) and, with EXPORT=sqlite, its SQLite export
# (what a machine with an older nsys needs to read a newer nsys' report). JOBS reports at a time (default 8).
# usage: bench/gpu/fix_pairs.sh OUT [CASES]        (CASES: comma-separated, default all)
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd); CASES=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NSYS=${NSIGHT_NSYS:-$(command -v nsys)}
REPORTS=cuda_gpu_kern_sum,cuda_api_sum,nvtx_pushpop_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum
"$NSYS" --version > "$OUT/nsys-version.txt"
nsight run --capture manual --trace cuda,nvtx -o "$OUT" -- python3 "$ROOT/bench/gpu/fix_pairs.py" \
  "$OUT/truth.json" ${CASES:+--cases "$CASES"} > "$OUT/run.txt" 2> "$OUT/stderr.txt"
rc=$?; echo "fix_pairs.sh: nsight run exited $rc"; cat "$OUT/run.txt"; grep fix_pairs "$OUT/stderr.txt"
# the reports' CSVs (and exports) in parallel: each report is its own job
one() {
  rep=$1; prefix=${rep%.nsys-rep}
  "$NSYS" stats -r "$REPORTS" -f csv --force-export=true -o "$prefix" "$rep" > /dev/null 2>&1 || echo "stats failed: $rep"
  rm -f "$prefix.sqlite"
  if [ "${EXPORT:-}" = sqlite ]; then
    "$NSYS" export --type sqlite --force-overwrite=true -o "$prefix.sqlite" "$rep" > /dev/null 2>&1 || echo "export failed: $rep"
  fi
}
export -f one; export NSYS REPORTS EXPORT
find "$OUT" -name '*.nsys-rep' | sort | xargs -r -P "${JOBS:-8}" -I{} bash -c 'one "$1"' _ {}
du -sh "$OUT"
exit $rc
