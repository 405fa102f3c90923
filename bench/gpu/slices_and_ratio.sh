#!/usr/bin/env bash
# nsight stats against a bare SQLite export on the GPU machine (docs/development.md), one job in three parts, each writing to
# /tmp/res: (1) tests/core/test_sliced_export.py with NSIGHT_NSYS set to the image's nsys 2025.3 (its slices against
# its one-file export, on the fixtures of both versions); (2) bench/gpu/large_capture.py STEPS: a capture of STEPS x
# 1,000 kernels recorded by the nsys on PATH, `nsight stats` of it fresh (its export included) against one bare SQLite
# export; (3) bench/gpu/sliced_export.py under nsys 2025.3 on its fixtures and that capture. Longer than one device
# call: start it in the background from the project root, after the wheels (../shared/tools/gpu-wheels.sh, with
# adbc-driver-sqlite for the sqlite-arrow extra) and `.gpu/nsys2025` (../shared/tools/gpu-nsys-2025.sh) are unpacked,
# and poll /tmp/res/alldone:
#   (setsid nohup bash bench/gpu/slices_and_ratio.sh 10000 > /tmp/go.out 2>&1 < /dev/null &)
#   timeout 560 bash -c 'until [ -e /tmp/res/alldone ]; do sleep 5; done'; tar czf $OUT/res.tgz -C /tmp res
STEPS=${1:-10000}
cd "$(dirname "$0")/../.."
R=/tmp/res; mkdir -p $R
. /tmp/site/env.sh
export PYTHONPATH=$PWD/packages/nsight-core/src:$PWD/tests:$PYTHONPATH PYTHONUNBUFFERED=1
date > $R/start
( . .gpu/nsys2025/env.sh > $R/nsys2025.version 2>&1
  timeout 420 python3 -m pytest -p no:cacheprovider -o addopts="" -q tests/core/test_sliced_export.py -n 8 > $R/pytest2025.log 2>&1
  echo "rc=$?" >> $R/pytest2025.log )
date >> $R/start
python3 bench/gpu/large_capture.py "$STEPS" /tmp/large > $R/large.out 2>&1
cp /tmp/large/log /tmp/large/result.json /tmp/large/stats.err /tmp/large/report.err $R/ 2>/dev/null
date >> $R/start
( . .gpu/nsys2025/env.sh >/dev/null 2>&1
  timeout 900 python3 bench/gpu/sliced_export.py /tmp/sl tests/fixtures/h200-fix-pairs-2025/*.nsys-rep /tmp/large/many_kernels.nsys-rep > $R/sliced.out 2>&1
  cp /tmp/sl/log $R/sliced.log; cp /tmp/sl/result.json $R/sliced.json )
date >> $R/start
touch $R/alldone
