#!/bin/bash
# Whether an nsys version's Parquet export in slices of time reads as its SQLite export (what must hold before the
# version joins nsys.py PARQUET_SLICED_VERSIONS). On the GPU machine, with the nsys to check first on PATH
# (nsys 2025.3: `. .gpu/nsys2025/env.sh`): records a short torch loop with the Python backtraces nsight asks for, then
# exports it and a few fixtures as SQLite (with blobs) and as nsight's Parquet layout (<name>.parquetdir: capture.sqlite
# probe, part-000..002), and tars them into $OUT. Here, compare SlicedParquetTables with SqliteTables table by table,
# and load_trace / stats_of_trace / analyze of both: every frame, NVTX binaryData included, must be equal.
#
#     bash bench/gpu/parquet_slices.sh REPORT...
set -u
work=$(mktemp -d); repo=$PWD
cat > "$work/bt.py" <<'PY'
import torch
x = torch.randn(512, 512, device="cuda")
for i in range(30):
    torch.cuda.nvtx.range_push(f"step_{i}")
    y = (x @ x).relu()
    s = y.sum().item()
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY
cd "$work" || exit 1
nsys profile -t cuda,nvtx,osrt --python-backtrace=cuda --cudabacktrace=all:10000 --python-sampling=true -o bt \
  --force-overwrite=true python3 bt.py > bt.log 2>&1
names=(bt)
blobs=$(nsys export --help | grep -q -- --include-blobs && echo --include-blobs=true)  # as nsys.py exports
for report in "$@"; do
  name=$(basename "$(dirname "$report")")-$(basename "$report" .nsys-rep); cp "$repo/$report" "$name.nsys-rep"
  names+=("$name")
done
for s in "${names[@]}"; do
  [ -f "$s.nsys-rep" ] || continue  # no GPU: no backtrace capture
  nsys export --type sqlite --force-overwrite=true --quiet=true $blobs -o "$s.sqlite" "$s.nsys-rep"
  mkdir -p "$s.parquetdir"
  nsys export --type sqlite --force-overwrite=true --quiet=true \
    --tables '^ANALYSIS_DETAILS$,^META_DATA_CAPTURE$,^StringIds$' -o "$s.parquetdir/capture.sqlite" "$s.nsys-rep"
  d=$(python3 -c "import sqlite3; print(sqlite3.connect('$s.parquetdir/capture.sqlite').execute('select duration from ANALYSIS_DETAILS').fetchone()[0])")
  a=$((d / 3)); b=$((2 * d / 3)); i=0
  for window in "/$((a - 1)):" "$a/$((b - 1)):" "$b/:"; do
    nsys export --type parquetdir --force-overwrite=true --quiet=true --times "$window" -o "$s.parquetdir/part-00$i" \
      "$s.nsys-rep"
    i=$((i + 1))
  done
done
nsys --version
tar cJf "$OUT/parquet-slices.tar.xz" bt.log ./*.nsys-rep ./*.sqlite ./*.parquetdir
