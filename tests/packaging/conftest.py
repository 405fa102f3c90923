"""The packaging tests' shared input: the two wheels, built once per test run."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging_helpers import build_wheels
from shared_runs import once_per_run


@pytest.fixture
def wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Both wheels (build_wheels), built once per test run and only read by the tests: the same build each
    time, which four tests made again (1.3 s of CPU each)."""
    return once_per_run(tmp_path_factory, "wheels", lambda folder: build_wheels(folder / "dist"))

