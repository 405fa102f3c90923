"""Fixtures of the GPU Profile report tests: the artifacts folder (headless Chromium: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_helpers import ARTIFACTS


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
