"""The fault matrix shares the Flyte tests' fixtures (the real `a0` entrypoint under real nsys)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "flyte"))

from flyte_harness import a0, run_action, without_nsys

__all__ = ["a0", "read_only", "run_action", "without_nsys"]


@pytest.fixture
def read_only(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A folder nobody can write, root included (a read-only tmpfs); chmod when not root."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("running as root without permission to mount a read-only tmpfs")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


