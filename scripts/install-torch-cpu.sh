#!/usr/bin/env bash
# Put a CPU build of torch into .venv for the tests that need one (clustered torchrun, nvtx fallback).
#
# torch is the user's, not ours: it stays out of uv.lock (from the index uv would fetch a ~3 GB CUDA
# build). The project's machines keep a CPU wheel in /opt/wheels; elsewhere set TORCH_WHEEL to one.
# Without a wheel nothing is installed and the torch tests say why they skip.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=$(command -v uv || echo "python3 -m uv")
# Found, not imported: importing torch would take 1.5 s of every `make test`.
if .venv/bin/python -c "import importlib.util as u; exit(not (u.find_spec('torch') and u.find_spec('numpy')))"; then
  exit 0
fi
tag=$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info.major}{sys.version_info.minor}")')
wheel=${TORCH_WHEEL:-$(ls /opt/wheels/torch-*+cpu-"$tag"-*.whl 2>/dev/null | sort -V | tail -n 1 || true)}
if [ -z "$wheel" ]; then
  echo "install-torch-cpu: no CPU torch wheel for $tag in /opt/wheels (set TORCH_WHEEL); torch tests will skip"
  exit 0
fi
# Without bytecode: compiling all of torch at install takes ~15 s; the tests import a few modules of it, which are
# compiled on their first import instead.
UV_COMPILE_BYTECODE=0 $UV pip install --quiet --python .venv/bin/python "$wheel" numpy
echo "install-torch-cpu: $(basename "$wheel")"
