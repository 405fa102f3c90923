# The two commands of the README: `make demo` and `make test`. Both create the environment with uv
# (installing uv with pip when it is missing) and install nsys with scripts/install-nsys.sh when no
# usable nsys is found (the same lookup nsight-core uses: $NSIGHT_NSYS, PATH, the installer's folder).
SHELL := /bin/bash
UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
PY := .venv/bin/python
# 4 test processes on 2 cores: the tests also wait (on nsys, signals, timeouts); with 3 the cores idled.
WORKERS ?= 4

.PHONY: help env nsys test test-all lint demo bench clean

help:
	@echo "make demo      profile a small real workload and print where its trace, stats and report are"
	@echo "make test      lint and run the test suite against real nsys, the real Flyte runtime and Chromium"
	@echo "make test-all  the same, with the exhaustive tests (every fixture through real nsys)"
	@echo "make bench     time nsight against nsys on large real captures; rewrites docs/performance.md"

env:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv
	@$(UV) sync --locked --inexact --quiet

nsys: env
	@$(PY) -c "import nsight_core; nsight_core.find_nsys()" 2>/dev/null || bash scripts/install-nsys.sh
	@$(PY) -c "import nsight_core; n = nsight_core.find_nsys(); print(f'nsys {n.version}: {n.path}')"

lint: env
	@.venv/bin/ruff check .
	@.venv/bin/mypy -p nsight_core -p flyteplugins.nsight
	@$(PY) scripts/check-words.py
	@out=$$(.venv/bin/lint-imports --no-cache 2>&1) || { echo "$$out"; exit 1; }  # the layers of pyproject.toml

# Lint runs beside the tests; either failing fails. Bytecode is written even where the environment says not to
# (else every test process compiles flyte and polars, and rewrites the asserts of every test module, again), and the
# tests' dependencies are imported once before the workers start, so that four of them do not compile the same
# modules at once (compiling all of site-packages at install is slower: a third of it is kubernetes, unused).
# PYTEST_ARGS: e.g. -m 'not slow' (what make test-all passes: the exhaustive tests too), or a test file.
WARM := flyte._bin.runtime, flyte.io, polars, altair, jinja2, pydantic, pytest, xdist, flyteplugins.nsight, \
  nsight_core.cli, nsight_core.report, nsight_core.profile
test: export PYTHONDONTWRITEBYTECODE :=
test: nsys
	@bash scripts/install-chromium.sh
	@bash scripts/install-torch-cpu.sh
	@$(MAKE) --no-print-directory lint & lint=$$!; \
	  $(PY) -c "import $(WARM)"; \
	  $(PY) -m pytest -n $(WORKERS) --dist worksteal $(PYTEST_ARGS); tests=$$?; \
	  wait $$lint; linted=$$?; \
	  [ $$linted -eq 0 ] || echo "make test: lint failed (see above)" >&2; \
	  exit $$(( tests ? tests : linted ))

test-all: PYTEST_ARGS := -m 'not slow'
test-all: test

demo: nsys
	@bash scripts/demo.sh

# First the slow tests (a large capture summarised in bounded memory), then the timings.
# BENCH_ARGS: e.g. --trace PATH.nsys-rep (a large GPU capture recorded elsewhere), or --quick.
bench: nsys
	$(PY) -m pytest -m slow -q -p no:cacheprovider tests/core/test_large_capture.py
	$(PY) bench/bench.py $(BENCH_ARGS)

clean:
	rm -rf nsight-runs tests/artifacts .pytest_cache

# `make gpu-check`: on a machine with an NVIDIA GPU, torch with CUDA in .venv and nsys: every Flyte
# example through `a0` (profiled and not, our costs timed), the diagnosis recording, and `nsight stats`
# against `nsys stats` on each trace (scripts/gpu-check.sh; docs/development.md lists what it verified).
.PHONY: gpu-check
gpu-check: nsys
	PATH="$(CURDIR)/.venv/bin:$$PATH" PYTHON=$(PY) bash scripts/gpu-check.sh nsight-runs/gpu-check
