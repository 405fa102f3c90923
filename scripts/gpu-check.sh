#!/usr/bin/env bash
# `make gpu-check`: the project on a real GPU, through the real Flyte entrypoint. Needs an NVIDIA GPU,
# torch with CUDA, nsys, and this project's packages in the Python that runs (`nsight` and `a0` on
# PATH). docs/development.md lists what it verified.
#
# usage: scripts/gpu-check.sh [OUT=nsight-runs/gpu-check] [STEPS=versions,costs,examples,diagnosis,fixpairs,stats,completeness]
#   versions   driver, CUDA, torch, nsys             -> OUT/versions.txt
#   costs      the profiled path's pieces timed alone (bench/gpu/launch_cost.py) -> OUT/costs.md
#   examples   every Flyte example through `a0`, profiled and unprofiled, with our costs timed
#              (bench/gpu/actions.py; GPU_CHECK_CASES=quick_start,regions,... picks some)
#                                                      -> OUT/actions/summary.json, the table on stdout
#   diagnosis  bench/gpu/diagnosis.py under `nsight run --capture manual` -> OUT/diagnosis/
#   fixpairs   every fix pair of bench/gpu/fix_pairs.py: timed unprofiled, then recorded as regions, with nsys'
#              own stats CSVs (bench/gpu/fix_pairs.sh; EXPORT=sqlite adds SQLite exports) -> OUT/fixpairs/
#   stats      `nsys stats` directly and `nsight stats --json` on every .nsys-rep under OUT, then
#              bench/gpu/compare_stats.py: names, instances and totals must be equal -> OUT/compare.txt
#   completeness  every .nsys-rep's incomplete-trace verdict (bench/gpu/completeness_report.py)
#              -> OUT/completeness.jsonl
# Environment: PYTHON (default python3), NSIGHT_NSYS (default: nsys on PATH, then the installer's),
#   GPU_CHECK_CASES, GPU_CHECK_TIMEOUT (seconds per action, default 300), GPU_CHECK_ENV=NAME=VALUE (one
#   extra variable for the actions, e.g. NSIGHT_NSYS=/opt/nsys24/bin/nsys to profile with another nsys).
# Exit status: 0 when every step passed, 1 otherwise (each step still runs); 2 when a prerequisite is missing.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-nsight-runs/gpu-check}" && cd "${1:-nsight-runs/gpu-check}" && pwd)
STEPS=",${2:-versions,costs,examples,diagnosis,fixpairs,stats,completeness},"
PYTHON=${PYTHON:-python3}
REPORTS=cuda_gpu_kern_sum,cuda_api_sum,nvtx_pushpop_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum
NSYS=${NSIGHT_NSYS:-$(command -v nsys || echo "${XDG_DATA_HOME:-$HOME/.local/share}/nsight/nsys/bin/nsys")}
failed=0
step() { [[ $STEPS == *",$1,"* ]]; }
fail() { echo "gpu-check: FAILED: $*" >&2; failed=1; }

for tool in nsight a0; do command -v $tool >/dev/null || { echo "gpu-check: '$tool' is not on PATH: install this project's packages (uv sync, or scripts' wheels)" >&2; exit 2; }; done
"$NSYS" --version >/dev/null 2>&1 || { echo "gpu-check: no usable nsys at $NSYS: run scripts/install-nsys.sh or set NSIGHT_NSYS" >&2; exit 2; }
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
  || { echo "gpu-check: $PYTHON has no torch with a usable CUDA GPU: this check needs one (set PYTHON=...)" >&2; exit 2; }

if step versions; then
  { date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvidia-smi | grep -o 'CUDA Version: [0-9.]*'
    "$NSYS" --version
    "$PYTHON" -c 'import sys, torch, flyte; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("flyte", flyte.__version__)'
    nsight --version
  } > "$OUT/versions.txt" 2>&1
  cat "$OUT/versions.txt"
fi

if step costs; then
  "$PYTHON" "$ROOT/bench/gpu/launch_cost.py" | tee "$OUT/costs.md" || fail "timing the profiled path's pieces"
fi

if step examples; then
  "$PYTHON" "$ROOT/bench/gpu/actions.py" "$OUT/actions" ${GPU_CHECK_CASES:+--cases "$GPU_CHECK_CASES"} \
    --timeout "${GPU_CHECK_TIMEOUT:-300}" ${GPU_CHECK_ENV:+--env "$GPU_CHECK_ENV"} \
    || fail "an example through a0 failed (see $OUT/actions/*/log.txt)"
fi

if step diagnosis; then
  mkdir -p "$OUT/diagnosis"
  nsight run --capture manual --trace cuda,nvtx -o "$OUT/diagnosis" -- "$PYTHON" "$ROOT/bench/gpu/diagnosis.py" \
    > "$OUT/diagnosis/run.txt" 2> "$OUT/diagnosis/stderr.txt" || fail "the diagnosis fixture did not record"
  cat "$OUT/diagnosis/run.txt"
fi

if step fixpairs; then
  bash "$ROOT/bench/gpu/fix_pairs.sh" "$OUT/fixpairs" || fail "the fix pairs did not record"
fi

if step stats; then
  mapfile -t reps < <(find "$OUT" -name '*.nsys-rep' -not -path '*/raw/*' | sort)
  for rep in "${reps[@]}"; do
    prefix=${rep%.nsys-rep}
    "$NSYS" stats -r "$REPORTS" -f csv --force-export=true -o "$prefix" "$rep" > "$prefix.nsys-stats.txt" 2>&1 \
      || fail "nsys stats $rep"
    nsight stats --json "$rep" > "$prefix.nsight.json" 2> "$prefix.nsight-stats.txt" || fail "nsight stats $rep"
  done
  if [ ${#reps[@]} -gt 0 ]; then
    "$PYTHON" "$ROOT/bench/gpu/compare_stats.py" "${reps[@]}" | tee "$OUT/compare.txt" \
      || fail "nsight stats and nsys stats differ (see $OUT/compare.txt)"
  fi
fi
if step completeness; then
  mapfile -t reps < <(find "$OUT" -name '*.nsys-rep' -not -path '*/raw/*' | sort)
  if [ ${#reps[@]} -gt 0 ]; then
    "$PYTHON" "$ROOT/bench/gpu/completeness_report.py" "${reps[@]}" | tee "$OUT/completeness.jsonl" \
      || fail "the completeness check"
  fi
fi
exit $failed
