"""One expensive run (nsys, the Flyte entrypoint) made once per test run and read by several cases."""

from __future__ import annotations

import fcntl
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

_READ: set[Path] = set()
"""The shared values the running test read (their pickles): see :func:`forget_what_a_failed_test_read`."""


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """MAKE(folder) run once in the whole test run, in a folder of its own; its result shared (pickled).

    A module-scoped fixture alone is made again by every xdist worker that runs one of its cases, and
    again whenever a worker comes back to the module after other modules' tests (work stealing
    interleaves them): the shared `nsight run` of test_process_faults was made 4 times in one run of
    the fault matrix. The first worker to ask makes it, under a lock, in the folder this run's workers
    share; one whose MAKE failed leaves nothing, so the next asks again (a rerun, after an nsys hiccup). Call
    it from a function-scoped fixture: a test that read it and failed drops it, and its retry makes it anew.
    """
    shared = run_folder(tmp_path_factory)
    return _once(shared, name, lambda: make(Path(tempfile.mkdtemp(prefix=f"once-{name}-", dir=shared))))


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder this test run's workers share (pytest keeps the last few runs' and removes older ones)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


SHARED: list[Path] = []
"""The run's shared folder (:func:`run_folder`), set by tests/conftest.py as the session starts."""


def computed_once(name: str, make: Callable[[], T]) -> T:
    """MAKE() computed once in the whole test run and shared by its workers, as :func:`once_per_run`, for values
    that need no folder: the analysis of a recorded capture, read by a few hundred cases, was computed again by
    every worker."""
    return _once(SHARED[0], name, make)


def _once(shared: Path, name: str, make: Callable[[], T]) -> T:
    made = shared / f"once-{name}.pickle"
    with (shared / f"once-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _READ.add(made)
        if made.exists():
            shared_value: T = pickle.loads(made.read_bytes())
            return shared_value
        # A new folder each time (MAKE's own): a test of another worker may still read the one a failed test dropped.
        value = make()
        made.write_bytes(pickle.dumps(value))
        return value


def forget_what_a_failed_test_read(failed: bool) -> None:
    """At the end of a test: where it FAILED, drop the shared values it read, so that its retry (and any later
    reader) makes them again. A run that met an nsys hiccup, kept, failed every case that reads it on both
    tries (an importer failure in the shared `hostile_nvtx` run); a real defect fails the retry
    as well."""
    if failed:
        for made in _READ:
            made.unlink(missing_ok=True)
    _READ.clear()
