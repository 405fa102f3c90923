"""Fixtures of the GPU Profile report tests: headless Chromium and the artifacts folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from report_helpers import ARTIFACTS, Chromium


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    """Debian's chromium (scripts/install-chromium.sh installs it; NSIGHT_CHROMIUM overrides)."""
    for candidate in (os.environ.get("NSIGHT_CHROMIUM"), "chromium", "chromium-browser"):
        found = shutil.which(candidate) if candidate else None
        if found:
            return Chromium(found)
    pytest.skip("no chromium binary found: run scripts/install-chromium.sh (or set NSIGHT_CHROMIUM)")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
