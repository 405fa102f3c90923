"""Shared test fixtures: the real nsys, the project's Python, the recorded H200 capture."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import CPU_STEPS, capture_cpu, sleepy_steps
from shared_runs import SHARED, forget_what_a_failed_test_read, once_per_run, run_folder

from nsight_core import find_nsys
from nsight_core.nsys import Nsys


def _one_polars_thread() -> None:
    """Polars computes on one thread in the test workers: `make test` runs 4 of them on 2 cores, where each one's
    own pool only adds threads that wait on each other, and CPU the other workers need. Polars sizes its
    pool from POLARS_MAX_THREADS as it is imported (nothing above imports it); the setting is then taken back, so the
    commands the tests start (the CLI, a Flyte task, a plain script) run with Polars' default, as users' do."""
    if "polars" in sys.modules:  # a plugin imported it first: its default stays
        return
    before = os.environ.get("POLARS_MAX_THREADS")
    os.environ["POLARS_MAX_THREADS"] = "1"
    import polars

    polars.thread_pool_size()
    if before is None:
        del os.environ["POLARS_MAX_THREADS"]
    else:
        os.environ["POLARS_MAX_THREADS"] = before


if os.environ.get("PYTEST_XDIST_WORKER"):
    _one_polars_thread()

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "tests" / "fixtures" / "h200-torch-mlp"


@pytest.fixture(scope="session", autouse=True)
def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where :func:`shared_runs.computed_once` keeps what this run's workers share."""
    SHARED[:] = [run_folder(tmp_path_factory)]


@pytest.fixture(scope="session")
def nsys() -> Nsys:
    """The real nsys. `make test` installs it; a missing nsys is a failed setup, not a skip."""
    return find_nsys()


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def h200() -> Path:
    if not H200.is_dir():
        pytest.fail(f"the recorded H200 capture is missing: {H200}")
    return H200


@pytest.fixture
def h200_copy(h200: Path, tmp_path: Path) -> Path:
    """A writable copy of the H200 fixture (exports land beside the .nsys-rep; the fixture is read-only).

    Only the recorded files: exports or stats a checkout made of the fixture itself (a writable clone)
    would otherwise be reused by the copy, and a test of the export would see none happen."""
    target = tmp_path / "h200"
    shutil.copytree(h200, target, ignore=shutil.ignore_patterns("*.arrowdir", "*.sqlite", "*.stats", ".*"))
    for path in target.iterdir():
        path.chmod(0o644)
    return target


@pytest.fixture
def cpu_steps(tmp_path_factory: pytest.TempPathFactory, nsys: Nsys) -> Path:
    """A real nsys CPU capture (NVTX + OS runtime, region `work`) of sleepy_steps(*CPU_STEPS), recorded once per
    test run (tests/shared_runs.py) and read by the CPU cases of the report, the step view, the budget and osrt_sum,
    which would each record a loop otherwise. Summarising it is safe (an export is renamed into
    place beside it); a test that writes anything else beside it works on a copy."""
    return once_per_run(tmp_path_factory, "cpu-steps", lambda folder: capture_cpu(folder, sleepy_steps(*CPU_STEPS)))


@pytest.fixture
def loops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real nsys CPU captures of one loop: steps of 6 ms, the same with a 100 ms wait (load stretches the 6 ms steps
    several times over, never to a wait that long), and that renamed `iter_*`. Made
    once per test run (the comparisons of tests/analysis/test_diff.py read them);
    a test that fails on them has its retry record them anew (a stalled step under load)."""
    return once_per_run(tmp_path_factory, "loops", lambda root: {
        "fast": capture_cpu(root / "fast", sleepy_steps(6, 0.004, 0.002)),
        "slow": capture_cpu(root / "slow", sleepy_steps(6, 0.1, 0.002)),
        "renamed": capture_cpu(root / "renamed", sleepy_steps(6, 0.1, 0.002, name="iter"))})


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No inherited nsight session variables, so a test decides itself whether it runs in a session."""
    for name in list(os.environ):
        if name.startswith("NSIGHT_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def chromium() -> Any:
    """Debian's chromium-headless-shell (scripts/install-chromium.sh installs it), else a full chromium;
    NSIGHT_CHROMIUM overrides.

    Here, not in tests/report, because the adapter's end-to-end tests load the pages they make too.
    """
    sys.path.insert(0, str(REPO / "tests" / "report"))
    from report_helpers import Chromium

    for candidate in (os.environ.get("NSIGHT_CHROMIUM"), "chromium-headless-shell", "chromium", "chromium-browser"):
        found = shutil.which(candidate) if candidate else None
        if found:
            return Chromium(found)
    pytest.skip("no chromium binary found: run scripts/install-chromium.sh (or set NSIGHT_CHROMIUM)")


# nsys 2023.4.4 fails at random under load in ways no code of ours can prevent: it loses its agent
# ("Connection to Agent lost", "Local Endpoint is not available"), its importer fails ("Importation
# failed") or a launch hangs (docs/troubleshooting.md). The product retries what is safe to retry; a test
# that drives the real nsys gets one more try, so one such hiccup does not fail the run. A test that
# fails twice fails; tests of our own code alone get no second try.
REAL_NSYS_MARKERS = ("nsys", "flyte", "reliability")


# The modules whose tests take longest (seconds to tens of seconds each, mostly waiting on real processes), longest
# first. Their tests share nothing a worker would make again (what they share is made once per run: shared_runs.py).
LONG_FIRST = ("tests/flyte/test_clustered_launcher.py", "tests/packaging/", "tests/reliability/test_faults.py",
              "tests/reliability/test_cli_faults.py", "tests/reliability/test_process_faults.py",
              "tests/flyte/test_profiled_tasks.py", "tests/analysis/test_budget_batches.py",
              "tests/flyte/test_perfetto_attach.py")


def _long(item: pytest.Item) -> int | None:
    """ITEM's place in LONG_FIRST; None for the others."""
    return next((rank for rank, path in enumerate(LONG_FIRST) if item.nodeid.startswith(path)), None)


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: the order is that of the tests that run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in REAL_NSYS_MARKERS) or "nsys" in getattr(
                item, "fixturenames", ()):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=1))
    items[:] = _long_first(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _long_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """ITEMS ordered so that each of WORKERS xdist workers starts with its share of the LONG_FIRST tests.

    `--dist worksteal` gives each worker one contiguous slice of the collection, and the others later steal only the
    end of a slice: long tests all at the front of the collection ran one after another on the first worker. Each
    long module is cut into WORKERS runs of neighbouring tests instead, one at the front of each slice, so every
    worker starts on long tests, neighbours that read one shared run (shared_runs.py) mostly read it on one worker
    (another would wait for it), and what is stolen at the end is short. The other tests keep their order, so a
    module's tests stay together (module fixtures made once)."""
    runs: list[list[list[pytest.Item]]] = [[] for _ in range(workers)]
    turn = 0  # whose front gets a module's first run: modules of fewer tests than workers take turns
    for rank in range(len(LONG_FIRST)):
        module = [item for item in items if _long(item) == rank]
        cuts = [-(-len(module) * run // workers) for run in range(workers + 1)]  # the first runs take the odd tests
        for run in range(workers):
            runs[(turn + run) % workers].append(module[cuts[run]:cuts[run + 1]])
        turn = (turn + len(module)) % workers
    # Worker k first runs its share of modules k, k + WORKERS, ..., then the others in order: the workers start on
    # different modules, so they do not all wait on one module's processes (the fault matrix's hangs) at once.
    fronts = [[item for run in mine[worker::workers] + [r for k, r in enumerate(mine) if k % workers != worker]
               for item in run] for worker, mine in enumerate(runs)]
    rest = [item for item in items if _long(item) is None]
    ordered: list[pytest.Item] = []
    left = len(items)
    for worker, front in enumerate(fronts):  # slices as xdist's worksteal cuts them: what is left, split evenly
        size = left // (workers - worker)
        take = max(size - len(front), 0)
        ordered += front + rest[:take]
        del rest[:take]
        left -= size
    return ordered + rest


_FIRST_TRIES: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A test that failed drops the shared runs it read (tests/shared_runs.py), so its retry and later readers do not
    read a run that met an nsys hiccup again; at its teardown the list of what it read starts anew."""
    report = (yield).get_result()
    if report.failed or call.when == "teardown":
        forget_what_a_failed_test_read(report.failed)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep why a test's first try failed: the rerun summary names the test, not the nsys fault."""
    if report.outcome == "rerun":
        crash = getattr(report.longrepr, "reprcrash", None)
        why = crash.message if crash is not None else str(report.longrepr)
        _FIRST_TRIES.append(f"{report.nodeid}: {' '.join(why.split())[:400]}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIRST_TRIES:
        terminalreporter.section("first tries that failed (each passed or failed on its second try)")
        for line in _FIRST_TRIES:
            terminalreporter.write_line(line)
