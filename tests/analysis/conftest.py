"""Fixtures of the analysis tests: the H200 recordings as traces.

Each trace is loaded from a private copy (exports land beside the .nsys-rep), so tests in parallel
never share an export.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analysis_helpers import FIXTURES, copy_capture

import nsight_core


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """Load fixture REL (e.g. 'h200-torch-mlp/training.nsys-rep') as a Trace, from a private copy."""
    loaded: dict[str, Any] = {}

    def _load(rel: str) -> Any:
        if rel not in loaded:
            folder = tmp_path_factory.mktemp(Path(rel).stem)
            loaded[rel] = nsight_core.load_trace(copy_capture(FIXTURES / rel, folder))
        return loaded[rel]

    return _load
