"""The fault matrix shares the Flyte tests' fixtures (the real `a0` entrypoint under real nsys)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "flyte"))

from flyte_harness import a0, run_action, without_nsys

__all__ = ["a0", "run_action", "without_nsys"]
