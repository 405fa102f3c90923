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


@pytest.fixture(autouse=True)
def no_bytecode_at_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fresh environments here get no bytecode at install time, as a stranger's `uv pip install` gives none.
    `make test` exports UV_COMPILE_BYTECODE=1 for the workspace's own environment, whose processes start again and
    again; here it made every install compile all of flyte's dependency tree for the few imports that follow (this
    folder took twice the CPU with it)."""
    monkeypatch.delenv("UV_COMPILE_BYTECODE", raising=False)
