"""The timeline's NVTX rows: one per thread (and nesting level) with the range names in a legend; a capture of more
ranges than the timeline draws one by one is drawn per slice (each thread's outermost ranges), not as thousands of
invisible slivers. Recorded with the real nsys: two threads pushing ranges."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from capture_helpers import capture_cpu

from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.trace_summary import MAX_TIMELINE_RANGES, TIMELINE_BUCKETS
from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile
from nsight_core.render.charts import timeline_chart

pytestmark = pytest.mark.nsys

TWO_THREADS = """
import threading
def work(tag, count):
    for i in range(count):
        with nvtx.annotate(f"{{tag}}_{{i % 3}}"):
            with nvtx.annotate("inner"):
                time.sleep(0.0001 if tag == "load" else 0)
worker = threading.Thread(target=work, args=("load", {count}))
worker.start()
work("step", {count})
worker.join()
"""


def two_threads(folder: Path, count: int) -> CaptureProfile:
    return build_profile(capture_cpu(folder, TWO_THREADS.format(count=count)))


def ranges_of(profile: CaptureProfile) -> pl.DataFrame:
    assert profile.trace is not None
    chart = timeline_chart(profile.trace)
    assert chart.spec is not None
    return pl.DataFrame(chart.spec["datasets"]["ranges"])


def test_each_thread_has_its_rows(tmp_path: Path, nsys: Nsys) -> None:
    profile = two_threads(tmp_path, 40)
    rows = ranges_of(profile)
    threads = rows.filter(~pl.col("row").str.contains(" level "))["row"].unique().to_list()
    assert len(threads) == 2  # the main thread and the loader, each its own row
    assert rows.filter(pl.col("row").str.contains(" level 2"))["name"].unique().to_list() == ["inner"]
    assert set(rows["legend"]) == {"step_0", "step_1", "step_2", "load_0", "load_1", "load_2", "inner"}
    assert profile.trace is not None and not profile.trace.nvtx_buckets


def test_long_captures_are_drawn_per_slice(tmp_path: Path, nsys: Nsys) -> None:
    profile = two_threads(tmp_path, 3000)
    assert profile.trace is not None and profile.trace.nvtx_total == 12_000 > MAX_TIMELINE_RANGES
    rows = ranges_of(profile)
    assert rows.height <= 2 * TIMELINE_BUCKETS  # a slice per thread at most, not 12,000 marks
    assert rows["row"].n_unique() == 2
    assert ((rows["fraction"] > 0) & (rows["fraction"] <= 1)).all()
    # The outermost ranges name each slice: the nested `inner` ranges are inside them.
    assert "inner" not in set(rows["name"]) and {"step_0", "load_0"} <= set(rows["name"])
