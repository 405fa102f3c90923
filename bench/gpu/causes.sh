#!/usr/bin/env bash
# The cause pairs of tests/fixtures/h200-causes* with both nsys versions, then captures of their problems with
# Python backtraces (`nsight run --python-backtrace`), on a GPU machine with torch and without a network.
# usage: bench/gpu/causes.sh OUT        (in the project root; writes OUT/causes.tar.xz, split when larger than 15 MiB)
# Needs: /opt/nsys/bin/nsys (2023.4.4: the slim bundle, .gpu/nsys-slim.tar.xz, unpacked into /opt) and
# .gpu/nsys2025/env.sh (the image's 2025.3; ../shared/tools/gpu-nsys-2025.sh); pydantic from .gpu/mini.
# nsight-core runs from this checkout's source (PYTHONPATH), so the options under test are this tree's.
# CASES (default alloc_churn,mask_tail,item_if) and BT_CASES (the problems recorded with backtraces; empty: none)
# pick cases;
# VERSIONS (default "2023 2025") the nsys versions; PREFIX (default h200) names the folders by the GPU; PAIRS_S
# (default 200) caps the seconds of each version's pairs; PAIRS_ARGS adds options of fix_pairs.py (e.g. --probe).
# Each version's stages stop once BUDGET_S seconds (default 420) have passed, so that the packing always happens.
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd); BENCH=$ROOT/bench/gpu
CASES=${CASES:-alloc_churn,mask_tail,item_if}; BT_CASES=${BT_CASES-alloc_churn,mask_tail,item_if}
BUDGET_S=${BUDGET_S:-420}; DEADLINE=$((SECONDS + BUDGET_S / 2)); NSYS2023=${NSYS2023:-/opt/nsys/bin/nsys}
left() { echo $((DEADLINE - SECONDS)); }
limit() { local n=$(( $(left) < $1 ? $(left) : $1 )); echo $(( n < 5 ? 5 : n )); }  # seconds, at most $1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  $(ls "$ROOT"/.gpu/mini/*.whl | grep -v nsight_core) || exit 1
export PYTHONPATH=$ROOT/packages/nsight-core/src:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -m nsight_core.cli "$@"\n' > /tmp/bin/nsight && chmod +x /tmp/bin/nsight
export PATH=/tmp/bin:$PATH

record() {  # VERSION DEST: the pairs, then the problems with Python backtraces, with the nsys in NSIGHT_NSYS
  local version=$1 dest=$2
  mkdir -p "$dest"; { nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -V; "$NSIGHT_NSYS" --version; } \
    > "$dest/device.txt" 2>&1; cat "$dest/device.txt"
  echo "== $version: pairs ($(left) s left)"
  timeout "$(limit "${PAIRS_S:-200}")" nsight run --capture manual --trace cuda,nvtx -o "$dest" -- \
    python3 "$BENCH/fix_pairs.py" "$dest/truth.json" --cases "$CASES" ${PAIRS_ARGS:-} > "$dest/run.txt" 2> "$dest/stderr.txt"
  echo "nsight run exited $?"; cat "$dest/run.txt"; grep -E "fix_pairs|Error|error" "$dest/stderr.txt" | tail -5
  if [ -n "$BT_CASES" ] && [ "$(left)" -gt 60 ]; then
    echo "== $version: problems with Python backtraces ($(left) s left)"
    local bt=$dest/python-backtrace; mkdir -p "$bt"
    timeout "$(limit 150)" nsight run --capture manual --trace cuda,nvtx --python-backtrace \
      -o "$bt" -- python3 "$BENCH/fix_pairs.py" "$bt/truth.json" --cases "$BT_CASES" --variants problem \
      > "$bt/run.txt" 2> "$bt/stderr.txt"
    echo "nsight run --python-backtrace exited $?"; cat "$bt/run.txt"; grep -E "fix_pairs|Error|error" "$bt/stderr.txt" | tail -5
  fi
  return 0  # the exports after it run whatever the greps found
}

export_all() {  # the SQLite export of every report under DEST (nsys 2025.3's: the machine that reads them has 2023.4.4),
  # with the NVTX payloads that hold the Python backtraces of CUDA calls
  find "$1" -name '*.nsys-rep' | xargs -r -P 8 -I{} sh -c \
    '"$NSIGHT_NSYS" export --type sqlite --include-blobs=true --force-overwrite=true -o "${1%.nsys-rep}.sqlite" "$1" >/dev/null 2>&1 || echo "export failed: $1"' _ {}
}

VERSIONS=${VERSIONS:-2023 2025}; PREFIX=${PREFIX:-h200}
[ "$VERSIONS" = 2025 ] && DEADLINE=$((SECONDS + BUDGET_S))
case " $VERSIONS " in *" 2023 "*)
  ( export NSIGHT_NSYS=$NSYS2023; record 2023.4.4 "$OUT/work/$PREFIX-causes" )
  DEADLINE=$((SECONDS + BUDGET_S / 2)) ;;  # the second version gets its own half
esac
case " $VERSIONS " in *" 2025 "*)
( . "$ROOT/.gpu/nsys2025/env.sh" >/dev/null && record 2025.3 "$OUT/work/$PREFIX-causes-2025" \
  && "$NSIGHT_NSYS" export --help > "$OUT/work/$PREFIX-causes-2025/export-help.txt" 2>&1 \
  && echo "== 2025.3: SQLite exports" && export_all "$OUT/work/$PREFIX-causes-2025" \
  && for rep in "$OUT"/work/$PREFIX-causes-2025/python-backtrace/*.nsys-rep; do  # where the Python frames may be
    "$NSIGHT_NSYS" export --type json --force-overwrite=true -o "${rep%.nsys-rep}.json" "$rep" >/dev/null 2>&1 \
      || echo "json export failed: $rep"
    if grep -q -- "--include-blobs" "$OUT/work/$PREFIX-causes-2025/export-help.txt"; then
      "$NSIGHT_NSYS" export --type sqlite --include-blobs=true --force-overwrite=true -o "${rep%.nsys-rep}-blobs.sqlite" \
        "$rep" >/dev/null 2>&1 || echo "sqlite export with blobs failed: $rep"
    fi
  done ) ;;
esac

echo "== packing"
find "$OUT/work" -name '*.qdstrm' -delete
du -ah "$OUT/work" | sort -h | tail -12
tar cf - -C "$OUT/work" . | xz -T0 -6 > "$OUT/causes.tar.xz"
size=$(stat -c %s "$OUT/causes.tar.xz"); echo "packed: $size bytes"
if [ "$size" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d -a 1 "$OUT/causes.tar.xz" "$OUT/causes.tar.xz.part" && rm "$OUT/causes.tar.xz"
fi
rm -rf "$OUT/work"; ls -la "$OUT"
