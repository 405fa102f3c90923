"""Which recorded captures `make test` sends through real nsys, and which only `make test-all` does.

A test that runs nsys on every fixture proves nothing more, per fixture, than on a few that differ in what they
hold: the default run drives nsys on REPRESENTATIVE captures (GPU NVTX steps and copies, CUDA graph launches, a
whole-task capture, and with nsys 2025.3 a whole process) and compares the rest with the `nsys stats` CSVs recorded
beside them; the tests marked ``exhaustive`` fan every fixture out through nsys (``make test-all``).
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPRESENTATIVE = frozenset({  # folder/stem: the .nsys-rep, or the export read in its place
    "h200-torch-mlp/training",  # GPU NVTX steps, copies both ways (nsys 2023.4.4)
    "h200-fix-pairs/graph-fixed",  # CUDA graph launches (2023.4.4: the CPU side only)
    "h200-quick-start-cuda13-incomplete/train",  # a whole task, CUDA 13 under an older nsys
    "h200-2025-process/nsight-0013a405",  # nsys 2025.3: a whole process, graphs traced whole
    "h200-2025-graph-node/graph_node",  # nsys 2025.3: graphs traced as nodes
    "h200-fix-pairs-2025/host_load-problem",  # nsys 2025.3: GPU NVTX steps and a host range
})


def unpacked(archive: str) -> Path:
    """The folder FIXTURES/ARCHIVE.tar.xz holds, unpacked once per machine into the temp folder: a recording kept
    packed (SQLite exports shrink about 8x), since the tree travels whole to the GPU machine, which takes 64 MiB."""
    source = FIXTURES / f"{archive}.tar.xz"
    target = Path(tempfile.gettempdir()) / f"nsight-fixture-{hashlib.sha256(source.read_bytes()).hexdigest()[:16]}"
    if not (target / archive).is_dir():
        scratch = Path(tempfile.mkdtemp(prefix="nsight-fixture-"))
        with tarfile.open(source) as tar:
            tar.extractall(scratch, filter="data")
        try:
            scratch.rename(target)  # whole or not at all: test workers unpack it at once
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)  # another worker's came first
    return target / archive


def exports_2025() -> list[Path]:
    """nsys 2025.3's SQLite exports of the H200 captures, with nsys 2025.3's own `nsys stats` CSVs beside most of them:
    the folders' and the packed second fix-pair set's."""
    return sorted([*FIXTURES.glob("h200-*2025*/*.sqlite"), *unpacked("h200-fix-pairs-v2-2025").glob("*.sqlite")])


def name(path: Path) -> str:
    return path.relative_to(FIXTURES).as_posix()


def fanned(paths: Iterable[Path]) -> list[Any]:
    """PATHS as test parameters: the representative ones plain, the others marked ``exhaustive``."""
    return [pytest.param(path, id=name(path), marks=() if name(path.with_suffix("")) in REPRESENTATIVE
                         else pytest.mark.exhaustive) for path in paths]
