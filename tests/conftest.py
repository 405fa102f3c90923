"""Shared test fixtures: the real nsys, the project's Python, the recorded H200 capture."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from nsight_core import find_nsys
from nsight_core.nsys import Nsys

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "tests" / "fixtures" / "h200-torch-mlp"


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
    """A writable copy of the H200 fixture (exports land beside the .nsys-rep; the fixture is read-only)."""
    target = tmp_path / "h200"
    shutil.copytree(h200, target)
    for path in target.iterdir():
        path.chmod(0o644)
    return target


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No inherited nsight session variables, so a test decides itself whether it runs in a session."""
    for name in list(os.environ):
        if name.startswith("NSIGHT_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def chromium() -> Any:
    """Debian's chromium (scripts/install-chromium.sh installs it; NSIGHT_CHROMIUM overrides).

    Here, not in tests/report, because the adapter's end-to-end tests load the pages they make too.
    """
    sys.path.insert(0, str(REPO / "tests" / "report"))
    from report_helpers import Chromium

    for candidate in (os.environ.get("NSIGHT_CHROMIUM"), "chromium", "chromium-browser"):
        found = shutil.which(candidate) if candidate else None
        if found:
            return Chromium(found)
    pytest.skip("no chromium binary found: run scripts/install-chromium.sh (or set NSIGHT_CHROMIUM)")
