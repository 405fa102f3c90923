"""A long capture of CUDA-graph replays made on a machine without a GPU, shaped like bench/gpu/many_kernels.py's (the
H200's 1 GB capture): N steps `step_{n}`, each one `cudaGraphLaunch` whose 1,000 node kernels (1 µs each, 0.2 µs
apart) all carry its correlation id, as nsys records a graph traced as nodes. Written into a copy of an H200 fixture's
SQLite export (its strings, GPU and threads), for the streamed analysis's cost where kernels far outnumber calls
(the analysis windows of analysis/intervals.py WINDOW_ROWS):

    python bench/graph_replays.py /tmp/graphs.sqlite 20000
    NSIGHT_SUMMARY_MEMORY=2G nsight stats /tmp/graphs.sqlite --json
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200-2025-graph-node" / "graph_node.sqlite"
EMPTIED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
           "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUDA_GRAPH_NODE_EVENTS")
KERNELS_PER_STEP = 1000
START_NS, STEP_NS, KERNEL_NS, KERNEL_EVERY_NS = 4_000_000_000, 1_300_000, 1_000, 1_200


def main() -> None:
    target, steps = sys.argv[1], int(sys.argv[2])
    shutil.copyfile(FIXTURE, target)
    db = sqlite3.connect(target)
    columns = [row[1] for row in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    template = dict(zip(columns, db.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone(),
                        strict=True))
    thread, launch_name = db.execute(
        "SELECT r.globalTid, r.nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaGraphLaunch%' LIMIT 1").fetchone()
    for table in EMPTIED:
        db.execute(f"DELETE FROM {table}")
    db.execute("CREATE TEMP TABLE s (i INTEGER PRIMARY KEY)")
    db.executemany("INSERT INTO s VALUES (?)", [(i,) for i in range(steps)])
    db.execute("CREATE TEMP TABLE k (j INTEGER PRIMARY KEY)")
    db.executemany("INSERT INTO k VALUES (?)", [(j,) for j in range(KERNELS_PER_STEP)])
    step = f"{START_NS} + i * {STEP_NS}"
    db.execute(f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
               f"SELECT {step}, {step} + {STEP_NS - 1000}, 59, 'step_' || i, {thread}, 0 FROM s")
    db.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
               f"returnValue) SELECT {step} + 1000, {step} + 11000, 1, {thread}, i + 1, {launch_name}, 0 FROM s")
    kernel_start = f"{step} + 20000 + j * {KERNEL_EVERY_NS}"
    values = {**{name: "NULL" if value is None else repr(value) for name, value in template.items()},
              "start": kernel_start, "end": f"{kernel_start} + {KERNEL_NS}", "correlationId": "i + 1",
              "gridId": f"i * {KERNELS_PER_STEP} + j", "graphNodeId": "j"}
    db.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(columns)}) "
               f"SELECT {', '.join(values[name] for name in columns)} FROM s, k")
    # The collection window ([0, duration]) holds every step: the fixture's is its own capture's, shorter than many.
    db.execute("UPDATE ANALYSIS_DETAILS SET duration = MAX(duration, ?), stopTime = startTime + MAX(duration, ?)",
               (START_NS + steps * STEP_NS + 1_000_000,) * 2)
    db.commit()
    print(f"{target}: {steps:,} steps, {steps * KERNELS_PER_STEP:,} kernels")


if __name__ == "__main__":
    main()
