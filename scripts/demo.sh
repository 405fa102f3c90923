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
echo; echo "== nsight report: the GPU Profile page, for this capture and for a recorded H200 one"
mkdir -p "$OUT/h200" && cp tests/fixtures/h200-torch-mlp/*.nsys-rep "$OUT/h200/"
.venv/bin/nsight report "${REPORTS[@]}" -o "$OUT/report.html" \
  --reports nvtx_pushpop_sum,osrt_sum,cuda_gpu_kern_sum,cuda_api_sum --title "GPU Profile: examples/script_regions.py"
.venv/bin/nsight report "$OUT/h200/training.nsys-rep" "$OUT/h200/evaluation.nsys-rep" \
  -o "$OUT/report-h200.html" --title "GPU Profile: H200 torch MLP (recorded)"
echo
echo "Traces:      ${REPORTS[*]}"
echo "Exports:     beside each trace, made once (read again without nsys: nsight stats ${REPORTS[0]})"
echo "Report:      $OUT/report.html"
echo "H200 report: $OUT/report-h200.html"
