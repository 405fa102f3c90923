"""Run Flyte tasks the way a Flyte pod does: the real `a0` entrypoint, real nsys, no backend.

`run_action` writes the task's inputs.pb, starts the `a0` shim (see a0_shim.py) with the container
environment the decorator stamped on the task, and collects what a pod leaves behind: outputs or
error.pb, report.html, the traced steps, and the process's stderr. The fixtures live in
flyte_harness.py, so tests/reliability shares them.
"""

from flyte_harness import a0, run_action, without_nsys

__all__ = ["a0", "run_action", "without_nsys"]
