"""One expensive run (nsys, the Flyte entrypoint) made once per test run and read by several cases."""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """MAKE(folder) run once in the whole test run, in a folder of its own; its result shared (pickled).

    A module-scoped fixture alone is made again by every xdist worker that runs one of its cases, and
    again whenever a worker comes back to the module after other modules' tests (work stealing
    interleaves them): the shared `nsight run` of test_process_faults was made 4 times in one run of
    the fault matrix. The first worker to ask makes it, under a lock, in the folder this run's workers
    share; one whose MAKE failed leaves nothing, so the next asks again (a rerun, after an nsys hiccup).
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's workers' common folder
    folder, made = shared / f"once-{name}", shared / f"once-{name}.pickle"
    with (shared / f"once-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if made.exists():
            shared_value: T = pickle.loads(made.read_bytes())
            return shared_value
        shutil.rmtree(folder, ignore_errors=True)  # what a MAKE that failed left
        folder.mkdir()
        value = make(folder)
        made.write_bytes(pickle.dumps(value))
        return value


NEVER_STARTED = "nsys ended without starting it"
"""What `nsight run` says when nsys failed before the command started, every retry included."""


def started(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """DONE, an `nsight run` a shared run made; an error where nsys never started the command, so that
    :func:`once_per_run` keeps nothing and the retry makes the run anew. Kept, such a run failed every case that
    reads it on both tries (nsys 2023.4.4 refusing its agent's connection under load, 2026-12-04)."""
    if NEVER_STARTED in done.stderr:
        raise RuntimeError(f"nsys never started the shared run's command (made again on the retry): {done.stderr}")
    return done
