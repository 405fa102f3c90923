#!/bin/bash
# small_copies' fixed twin alone in its process under nsys 2025.3, on a GPU machine: nsys' defaults and CPU sampling off,
# each with torch's intra-op threads as they are and with OMP_NUM_THREADS=1; timed unprofiled too. Needs .gpu/nsys2025
# (../shared/tools/gpu-nsys-2025.sh), pydantic from .gpu/mini and this tree's nsight-core in .gpu/snap (git archive).
# usage: OUT=DIR bash bench/gpu/small_copies_alone.sh        (writes OUT/exp.tar.xz and the truth JSONs)
set -u
. .gpu/nsys2025/env.sh >/dev/null || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/mini/*.whl 2>/dev/null
export PYTHONPATH=$PWD/.gpu/snap/packages/nsight-core/src:/tmp/site PYTHONUNBUFFERED=1
C=small_copies
nproc
python3 -c "import torch; print('intra-op threads', torch.get_num_threads())"
for omp in 0 1; do
  [ $omp = 1 ] && export OMP_NUM_THREADS=1
  echo "== OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
  python3 bench/gpu/fix_pairs.py $OUT/plain$omp.json --cases $C --variants fixed --time-only | grep fix_pairs
  for s in default none; do
    opt=(); [ $s = none ] && opt=(--sample none)
    echo "-- profiled, sample $s"
    python3 -m nsight_core.cli run --capture manual --trace cuda,nvtx "${opt[@]}" -o $OUT/$s$omp -- python3 bench/gpu/fix_pairs.py $OUT/$s$omp.json --cases $C --variants fixed 2>&1 | grep "fix_pairs: small"
    for r in $OUT/$s$omp/*.nsys-rep; do nsys export --type sqlite --force-overwrite=true -o ${r%.nsys-rep}.sqlite $r >/dev/null 2>&1; rm $r; done
  done
done
cd $OUT && tar cJf exp.tar.xz default0 none0 default1 none1 *.json && rm -rf default0 none0 default1 none1
