"""What the profiled path pays before and after the task body, piece by piece (seconds, best of 3).

    python bench/gpu/launch_cost.py

The re-exec of a profiled action goes `a0` → `nsight launch` (Python start, nsight_core import,
`nsys --version`) → `nsys launch` → `a0` again; the first finalize
imports the analysis and rendering stack. Each piece is timed on its own here, so the overhead
(docs/troubleshooting.md) can say which part is ours.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

PIECES = {
    "python start": [sys.executable, "-c", "pass"],
    "import flyte": [sys.executable, "-c", "import flyte"],
    "import nsight_core.cli": [sys.executable, "-c", "import nsight_core.cli"],
    "import the analysis/render stack": [sys.executable, "-c",
                                         "import nsight_core.profile, nsight_core.render.html"],
    "nsys --version": ["nsys", "--version"],
    "nsys launch ... true (a bare launch)": ["nsys", "launch", "--session-new=cost-{id}",
                                             "--trace=cuda,nvtx", "--wait=primary", "true"],
    "nsight launch -- true (all of it)": ["nsight", "launch", "--session", "cost-{id}", "--trace", "cuda,nvtx",
                                          "--", "true"],
    "the same without the CLI's report imports": [
        sys.executable, "-c", "from nsight_core.launch import exec_launch; "
        "exec_launch(['true'], name='cost-{id}', trace=('cuda', 'nvtx'))"],
}


def best_of(argv: list[str], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        words = [w.replace("{id}", uuid.uuid4().hex[:6]) for w in argv]
        started = time.perf_counter()
        subprocess.run(words, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    if shutil.which("nsys") is None or shutil.which("nsight") is None:
        print("launch_cost: needs nsys and nsight on PATH", file=sys.stderr)
        return 2
    print("| piece | seconds (best of 3) |\n| --- | --- |")
    for name, argv in PIECES.items():
        print(f"| {name} | {best_of(argv):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
