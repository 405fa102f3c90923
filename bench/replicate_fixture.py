"""A long GPU capture made on a machine without a GPU: an H200 fixture's SQLite export with its events repeated K times
along time (each copy shifted by the capture's span, its correlation ids by their largest), for the streamed
analysis's cost and exactness at a size no fixture has (docs/large-captures.md):

    python bench/replicate_fixture.py tests/fixtures/h200-fix-pairs-2025/host_load-problem.sqlite /tmp/long.sqlite 8000
    NSIGHT_SUMMARY_MEMORY=2G nsight stats /tmp/long.sqlite --json

The host-load pair's 20 steps 8,000 times: 160,000 steps, 4.6 M kernels, 13 M CUDA calls, a 1.03 GB export. The
names, threads and strings are the fixture's, so the steps are one family of the same pattern.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys

EVENT_TABLES = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API")


def main() -> None:
    source, target, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
    shutil.copyfile(source, target)
    db = sqlite3.connect(target)
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    columns = {table: [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')] for table in tables}
    timed = [table for table in tables if "start" in columns[table]]
    first = min(db.execute(f'SELECT min("start") FROM "{table}"').fetchone()[0] or 0 for table in timed)
    last = max(db.execute(f'SELECT max(coalesce("end", "start")) FROM "{table}"').fetchone()[0] or 0 for table in timed)
    ids = max(db.execute(f'SELECT max("correlationId") FROM "{table}"').fetchone()[0] or 0
              for table in tables if "correlationId" in columns[table])
    period = last - first + 1000
    db.execute("CREATE TEMP TABLE copies (k INTEGER)")
    db.executemany("INSERT INTO copies VALUES (?)", [(k,) for k in range(1, copies)])
    for table in (table for table in EVENT_TABLES if table in tables):
        keys = {row[1] for row in db.execute(f'PRAGMA table_info("{table}")') if row[5]}
        kept = [column for column in columns[table] if column not in keys]
        shifted = {"start": f'"start" + copies.k * {period}', "end": f'"end" + copies.k * {period}',
                   "correlationId": f'"correlationId" + copies.k * {ids + 1}'}
        db.execute(f'CREATE TEMP TABLE "original_{table}" AS SELECT * FROM "{table}"')
        names = ", ".join(f'"{column}"' for column in kept)
        values = ", ".join(shifted.get(column, f'"{column}"') for column in kept)
        db.execute(f'INSERT INTO "{table}" ({names}) SELECT {values} '
                   f'FROM "original_{table}", copies ORDER BY copies.k, "original_{table}".rowid')
        print(table, db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0], file=sys.stderr)
    if "ANALYSIS_DETAILS" in tables:
        db.execute('UPDATE ANALYSIS_DETAILS SET "duration" = "duration" + ?', ((copies - 1) * period,))
    db.commit()


if __name__ == "__main__":
    main()
