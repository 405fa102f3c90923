#!/usr/bin/env bash
# One nsys version's whole set of tests/fixtures/h200-fix-pairs-v2*: the fix pairs, the API-overhead
# calibration and the Python-backtrace captures, with the nsys first on PATH / in NSIGHT_NSYS and the project's
# `nsight` on PATH. Packs WORK into DEST/fixtures.tar.xz (split into 15 MiB parts when larger).
# usage: bench/gpu/fix_pairs_v2.sh WORK DEST        (EXPORT=sqlite: SQLite exports of every capture too)
#   WORK/                    the pairs: <case>-<variant>.nsys-rep, their CSVs, truth.json, run.txt (fix_pairs.sh)
#   WORK/api_overhead.json   bench/gpu/api_overhead.py, once with nsys' default sampling, once with --sample none
#   WORK/api-overhead*/      the two calibration captures (region api_overhead) and their CSVs
#   WORK/python-backtrace/   small_step's problem under `nsys profile --capture-range=cudaProfilerApi`, once per
#                            PY_VARIANTS (default all): plain; backtrace: --python-backtrace=cuda; backtrace-sampling:
#                            that and --python-sampling=true; cudabacktrace: --cudabacktrace=all:0 (a native backtrace
#                            on every CUDA API call); cudabacktrace-python: that, --python-backtrace=cuda and
#                            --python-sampling=true (nsys takes a CUDA call's Python backtrace with its native one:
#                            without --cudabacktrace, --python-backtrace=cuda records no frames). Each with its
#                            truth-<variant>.json, CSVs and SQLite export; the sampled ones also as JSON (where the
#                            sampled frames are); truth-unprofiled.json from a run without nsys; export-help.txt
# STAGES (default "pairs api python") picks the stages. Each stage has a time limit, and stages are skipped once
# BUDGET_S seconds (default 500) have passed, so that the packing always happens.
set -uo pipefail
WORK=$(mkdir -p "$1" && cd "$1" && pwd); DEST=$(mkdir -p "$2" && cd "$2" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd); BENCH=$ROOT/bench/gpu
NSYS=${NSIGHT_NSYS:-$(command -v nsys)}; BUDGET_S=${BUDGET_S:-500}
REPORTS=cuda_gpu_kern_sum,cuda_api_sum,nvtx_pushpop_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum
CASES=${CASES:-small_step,per_param,prefetch,bf16,small_copies,checkpoint,mask_sync,list_tensor,graph,tf32,sync_log,pageable}
STAGES=${STAGES:-pairs api python}
PY_VARIANTS=${PY_VARIANTS:-plain backtrace backtrace-sampling cudabacktrace cudabacktrace-python}
left() { echo $((BUDGET_S - SECONDS)); }
stage() { case " $STAGES " in *" $1 "*) return 0 ;; *) echo "skipped: stage $1"; return 1 ;; esac; }
stats() {  # the CSVs (and, with EXPORT=sqlite, the SQLite export) of each report given
  for rep in "$@"; do
    prefix=${rep%.nsys-rep}
    "$NSYS" stats -r "$REPORTS" -f csv --force-export=true -o "$prefix" "$rep" > /dev/null 2>&1 || echo "stats failed: $rep"
    [ "${EXPORT:-}" = sqlite ] || rm -f "$prefix.sqlite"
  done
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -V; "$NSYS" --version; } > "$WORK/device.txt" 2>&1
cat "$WORK/device.txt"

if stage pairs; then
  echo "== fix pairs ($(left) s left)"
  timeout 330 bash "$BENCH/fix_pairs.sh" "$WORK" "$CASES"
fi

stage api && for sample in default none; do
  [ "$(left)" -gt 60 ] || { echo "skipped: api_overhead ($sample)"; continue; }
  echo "== api_overhead, sampling $sample ($(left) s left)"
  dir=$WORK/api-overhead; opt=(); [ $sample = none ] && { dir=$WORK/api-overhead-sample-none; opt=(--sample none); }
  timeout 90 nsight run --capture manual --trace cuda,nvtx "${opt[@]}" -o "$dir" -- \
    python3 "$BENCH/api_overhead.py" "$WORK/api_overhead.json" --label "sampling: $sample" 2>&1 | grep -v '^\[' | tail -12
  stats "$dir"/*.nsys-rep
done

PY=$WORK/python-backtrace
stage python && mkdir -p "$PY" && "$NSYS" export --help > "$PY/export-help.txt" 2>&1
if stage python && [ "$(left)" -gt 40 ]; then
  echo "== small_step problem without nsys ($(left) s left)"
  timeout 60 python3 "$BENCH/fix_pairs.py" "$PY/truth-unprofiled.json" --cases small_step --variants problem --time-only
fi
stage python && for flags in $PY_VARIANTS; do
  [ "$(left)" -gt 45 ] || { echo "skipped: python backtrace ($flags)"; continue; }
  echo "== nsys profile, $flags ($(left) s left)"
  case $flags in
    plain) opt=() ;;
    backtrace) opt=(--python-backtrace=cuda) ;;
    backtrace-sampling) opt=(--python-backtrace=cuda --python-sampling=true) ;;
    cudabacktrace) opt=(--cudabacktrace=all:0) ;;
    cudabacktrace-python) opt=(--cudabacktrace=all:0 --python-backtrace=cuda --python-sampling=true) ;;
    *) echo "unknown variant $flags"; continue ;;
  esac
  timeout 120 "$NSYS" profile --trace=cuda,nvtx "${opt[@]}" --capture-range=cudaProfilerApi --capture-range-end=stop \
    -o "$PY/small_step-$flags" --force-overwrite=true \
    python3 "$BENCH/fix_pairs.py" "$PY/truth-$flags.json" --cases small_step --variants problem --region cuda-profiler \
    > "$PY/run-$flags.txt" 2>&1
  echo "nsys profile exited $?"; grep -v '^\[' "$PY/run-$flags.txt" | tail -8
  EXPORT=sqlite stats "$PY/small_step-$flags.nsys-rep"
  if [[ $flags == *sampling || $flags == cudabacktrace-python ]]; then
    "$NSYS" export --type json --force-overwrite=true -o "$PY/small_step-$flags.json" "$PY/small_step-$flags.nsys-rep" \
      > /dev/null 2>&1 || echo "json export failed"
    if grep -q -- "--include-blobs" "$PY/export-help.txt"; then  # NVTX payloads (the sampled frames) in SQLite
      "$NSYS" export --type sqlite --include-blobs=true --force-overwrite=true -o "$PY/small_step-$flags-blobs.sqlite" \
        "$PY/small_step-$flags.nsys-rep" > /dev/null 2>&1 || echo "sqlite export with blobs failed"
    fi
  fi
done

echo "== packing ($(left) s left)"
find "$WORK" -name '*.qdstrm' -delete
du -ah "$WORK" | sort -h | tail -15
tar cf - -C "$WORK" . | xz -T0 -6 > "$DEST/fixtures.tar.xz"
size=$(stat -c %s "$DEST/fixtures.tar.xz"); echo "packed: $size bytes"
if [ "$size" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d -a 1 "$DEST/fixtures.tar.xz" "$DEST/fixtures.tar.xz.part" && rm "$DEST/fixtures.tar.xz"
fi
ls -la "$DEST"
