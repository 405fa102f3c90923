#!/usr/bin/env bash
# `make demo`: profile a small real CPU workload (NVTX + OS runtime) region by region, summarise it,
# and print where everything is. `nsight run` prints the report paths on stdout after the program's
# own output, so the paths are the lines ending in .nsys-rep.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=nsight-runs/demo
rm -rf "$OUT"
echo "== Profiling examples/script_regions.py (two regions: training, evaluation) under nsys"
mapfile -t REPORTS < <(.venv/bin/nsight run --capture manual --trace nvtx,osrt --sample none -o "$OUT" \
  -- .venv/bin/python examples/script_regions.py | grep '\.nsys-rep$')
for rep in "${REPORTS[@]}"; do
  echo; echo "== nsight stats $rep"
  .venv/bin/nsight stats "$rep" --reports nvtx_pushpop_sum,osrt_sum,cuda_gpu_kern_sum
done
echo
echo "Traces:    ${REPORTS[*]}"
echo "Stats CSV: $OUT/*_<report>.csv (re-read without nsys: nsight stats $OUT/training)"
