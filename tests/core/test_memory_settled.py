"""How much of a large capture its analysis may read whole is what the process may take once the memory it freed
just before is handed back: the same command gives the same part, whatever its allocator still held a moment ago."""

from __future__ import annotations

import os
import subprocess
import sys

from nsight_core.cli import ANALYSIS_ALLOCATOR
from nsight_core.memory import SUMMARY_BYTES_PER_STORED_BYTE

FREED = 400 << 20
# In a fresh process, as nsight's CLI runs (its allocator setting made before Polars loads): what the analysis may
# read, before and right after FREED bytes of frames were made and dropped.
AFFORDABLE_AROUND_A_FREED_FRAME = f"""
import os
os.environ["_RJEM_MALLOC_CONF"] = {ANALYSIS_ALLOCATOR!r}
import polars as pl
from nsight_core.memory import affordable_event_bytes
before = affordable_event_bytes()
frame = pl.DataFrame({{"x": pl.arange(0, {FREED // 8}, eager=True)}})
del frame
print(before, affordable_event_bytes())
"""


def test_memory_freed_just_before_is_not_counted_as_held() -> None:
    env = {**os.environ, "NSIGHT_SUMMARY_MEMORY": "2G"}
    done = subprocess.run([sys.executable, "-c", AFFORDABLE_AROUND_A_FREED_FRAME], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    # Counted as held, the freed frame would take FREED / 7 (57 MB) from what the analysis reads.
    assert abs(before - after) * SUMMARY_BYTES_PER_STORED_BYTE < FREED // 8
