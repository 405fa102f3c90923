# The two commands of the README: `make demo` and `make test`. Both create the environment with uv
# (installing uv with pip when it is missing) and install nsys with scripts/install-nsys.sh when no
# usable nsys is found (the same lookup nsight-core uses: $NSIGHT_NSYS, PATH, the installer's folder).
SHELL := /bin/bash
UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
PY := .venv/bin/python
# Bytecode is compiled at install time: without .pyc files every import of the task's first run
# (and of each test process) compiles polars/pydantic/flyte from source, over a second more.
export UV_COMPILE_BYTECODE := 1
# Test processes: 4 on 2 cores. The suite is CPU-bound (nsys, Python start-ups, Chromium), but its tests also
# wait (on nsys' own processes, signals, timeouts, a region's 7 s wait): with 3 the cores idled ~10 % of the
# time, with 4 ~2 % (vmstat), and 4 ended a run in 5:56 where 3 took ~6:30 (issue 21). nsys 2023.4.4 loses
# its agent now and then at that density: nsight retries what it safely can (docs/reliability.md) and a test
# that drives nsys gets one more try (tests/conftest.py). Work stealing keeps a long test from ending the run alone
# (its workers ended within 3-6 s of each other in every run of 2026-12-04). With 5 the cores idled no less (~1 %),
# make test took 4:17 where 4 took 4:02-4:12, and a gate test of tests/analysis/test_diff.py failed twice (issue 21).
# On a quiet machine (load 0.4 at the start, nothing else running) make test took 3:21 at 09dc00c, and 3:44 and
# 3:33 (775 tests) at fc7bf53, 3:32 (808 tests) at 23999ad; the runs above of 4:02-4:12 shared the cores with other work.
# With the fault matrix's start/stop/trace faults in two shared `a0` runs, a0_shim's controller loaded only where the
# action runs, one shared CPU capture and installs without bytecode in tests/packaging (issue 21), pytest -n 4 used
# 384-411 CPU-s in 3 runs where the tests of 0c5968f used 419-445 (/proc/stat, UV_COMPILE_BYTECODE=1 as here), and make
# test took 3:35 (811 tests); on a quiet machine at 63cc433, 3:18, and a fresh clone's .ci/run 3:57 in all (environment
# included; pytest 3:38). Most of a run's CPU is outside pytest's own processes (nsys' agents,
# Chromium, the re-exec'd a0): /proc/stat counted 28.6 CPU-s for tests/flyte/test_profiled_tasks.py, pytest's tree 8.8.
WORKERS ?= 4

.PHONY: help env nsys test lint demo bench clean

help:
	@echo "make demo   profile a small real workload and print where its trace, stats and report are"
	@echo "make test   lint and run the whole test suite against real nsys and the real Flyte runtime"
	@echo "make bench  time nsight stats/report against nsys stats on large real captures; numbers go to docs/benchmarks.md"

env:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv
	@$(UV) sync --locked --inexact --quiet

nsys: env
	@$(PY) -c "import nsight_core; nsight_core.find_nsys()" 2>/dev/null || bash scripts/install-nsys.sh
	@$(PY) -c "import nsight_core; n = nsight_core.find_nsys(); print(f'nsys {n.version}: {n.path}')"

lint: env
	@.venv/bin/ruff check .
	@.venv/bin/mypy -p nsight_core -p flyteplugins.nsight

# Lint runs beside the tests (mypy without a cache takes a core for ~15 s); either failing fails.
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE=1, as on the project's
# machines): else every test process rewrites the asserts of all ~100 test modules (pytest caches them as .pyc)
# and every nsight/a0 process compiles the workspace's changed modules again; collection took 3.4 s a worker
# without the cache, 1.8 s with it (issue 21).
test: export PYTHONDONTWRITEBYTECODE :=
test: nsys
	@bash scripts/install-chromium.sh
	@bash scripts/install-torch-cpu.sh
	@$(MAKE) --no-print-directory lint & lint=$$!; \
	  $(PY) -m pytest -n $(WORKERS) --dist worksteal; tests=$$?; \
	  wait $$lint; linted=$$?; \
	  [ $$linted -eq 0 ] || echo "make test: lint failed (see above)" >&2; \
	  exit $$(( tests ? tests : linted ))

demo: nsys
	@bash scripts/demo.sh

# First the slow tests (a 10 M-range capture's `nsight stats` in bounded memory), then the timings.
# BENCH_ARGS: e.g. --trace PATH.nsys-rep (a large GPU capture recorded elsewhere), or --quick.
bench: nsys
	$(PY) -m pytest -m slow -q -p no:cacheprovider tests/core/test_large_capture.py
	$(PY) bench/bench.py $(BENCH_ARGS)

clean:
	rm -rf nsight-runs tests/artifacts .pytest_cache

# `make gpu-check`: on a machine with an NVIDIA GPU, torch with CUDA in .venv and nsys: every Flyte
# example through `a0` (profiled and not, our costs timed), the diagnosis recording, and `nsight stats`
# against `nsys stats` on each trace (scripts/gpu-check.sh; results in docs/gpu-verification.md).
.PHONY: gpu-check
gpu-check: nsys
	PATH="$(CURDIR)/.venv/bin:$$PATH" PYTHON=$(PY) bash scripts/gpu-check.sh nsight-runs/gpu-check
