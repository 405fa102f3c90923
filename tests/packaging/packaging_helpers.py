"""Helpers of the packaging tests: uv as `make` finds it, the two wheels, a fresh virtual environment.

A module of its own (not conftest.py) so that test files import it by a name no other test folder uses.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("nsight-core", "flyteplugins-nsight")


def uv() -> list[str]:
    """The uv command the Makefile uses: `uv` on PATH, else `python3 -m uv` (make installs one of them)."""
    found = shutil.which("uv")
    return [found] if found else ["python3", "-m", "uv"]


def build_wheels(dist: Path) -> list[Path]:
    """Both wheels built from the repository into DIST (what a user builds: `uv build --all-packages`)."""
    for package in PACKAGES:
        subprocess.run([*uv(), "build", "--quiet", "--wheel", "--package", package, "-o", str(dist)],
                       cwd=REPO, check=True, capture_output=True, timeout=120)
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == len(PACKAGES), wheels
    return wheels


def fresh_venv(path: Path, seed: bool = False) -> Path:
    """An empty virtual environment of the base interpreter (with pip when SEED): nothing of this workspace."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([*uv(), "venv", "--quiet", *(["--seed"] if seed else []), "--python", base, str(path)],
                   check=True, capture_output=True)
    return path
