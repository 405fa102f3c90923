"""The `sqlite-arrow` extra on a GPU capture: record bench/gpu/many_kernels.py (STEPS CUDA-graph replays of 1,000
tiny kernels each), then `nsight stats --json` in a task allowed 2 GiB, first on the fresh capture (its SQLite export
made, read through ADBC's driver), then with the export reused through ADBC and through the standard library's sqlite3
(``NSIGHT_SQLITE_READER=sqlite3``), and last one bare `nsys export --type sqlite`. Each command's peak is its process
tree's (bench/bench.py ``tree_run``). The statistics of the two readers are compared, report by report.

    python bench/gpu/sqlite_readers.py [STEPS] [DIR]      (needs adbc-driver-sqlite; DIR default /tmp/readers)

Writes DIR/log and DIR/result.json, and DIR/done at the end (poll it: a long run outlasts one device call).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from large_capture import finish_with_bare_export, progress_log, record_many_kernels  # noqa: E402  (this folder, as a script runs)

from bench import PY, tree_run  # noqa: E402  (bench/ is no package: the sampler of make bench's tables)

STATISTICS = ("kernels", "api_calls", "memory_time", "memory_size", "nvtx_ranges")


def main() -> None:
    import adbc_driver_sqlite  # noqa: F401  (else both runs would read with sqlite3)

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    folder = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/readers")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    nsys = shutil.which("nsys") or "nsys"
    result: dict[str, object] = {"steps": steps, "cores": os.cpu_count()}
    log = progress_log(folder, result)

    log(subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip())
    capture = folder / "many_kernels.nsys-rep"
    recorded = record_many_kernels(nsys, capture, steps)
    result["record"] = {"seconds": recorded.seconds, "trace_bytes": capture.stat().st_size}
    log(f"recorded {capture.stat().st_size:,} bytes in {recorded.seconds:.0f} s")

    payloads = {}
    for label, reader in (("fresh, adbc", None), ("reused, adbc", None), ("reused, sqlite3", "sqlite3")):
        env = {**os.environ, "NSIGHT_SUMMARY_MEMORY": "2G"}
        env.pop("NSIGHT_SQLITE_READER", None)
        if reader:
            env["NSIGHT_SQLITE_READER"] = reader
        run = tree_run([PY, "-m", "nsight_core.cli", "stats", capture, "--json"], folder, env)
        payloads[label] = json.loads(run.stdout)
        result[label] = {"seconds": run.seconds, "tree_mb": run.tree_mb,
                         "kernels": sum(row["instances"] for row in payloads[label]["kernels"]),
                         "export": payloads[label].get("export")}
        log(f"nsight stats {label}: {run.seconds:.1f} s, tree {run.tree_mb:.0f} MB")
    result["same_statistics"] = {name: payloads["reused, adbc"][name] == payloads["reused, sqlite3"][name]
                                 for name in STATISTICS}
    finish_with_bare_export(nsys, capture, result, log, folder, f"; same statistics: {result['same_statistics']}")


if __name__ == "__main__":
    main()
