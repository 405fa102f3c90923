"""Helpers of the analysis tests: private copies of the H200 recordings."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def copy_capture(source: Path, target_dir: Path) -> Path:
    """A writable copy of one .nsys-rep in TARGET_DIR."""
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / source.name
    shutil.copyfile(source, target)
    return target
