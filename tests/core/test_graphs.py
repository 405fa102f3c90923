"""CUDA graphs are GPU work: real H200 captures by nsys 2025.3 (tests/fixtures/README.md).

`graph-fixed` is a loop of 20 `CUDAGraph.replay()` steps traced at graph level (nsys' default): no kernel, one
CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per launch. `graph_node` is the same program under
`--cuda-graph-trace=node`: each node a kernel carrying its launch's correlation id, no graph rows.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import nsight_core
from nsight_core.analysis.intervals import busy_ns
from nsight_core.analysis.summary import summary_tiles
from nsight_core.analysis.trace_summary import summarize_trace
from nsight_core.stats.load import stats_of_trace
from nsight_core.trace.schema import GRAPH_COLUMNS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PAIRS = FIXTURES / "h200-fix-pairs-2025"
GRAPH_FIXED = PAIRS / "graph-fixed.sqlite"
GRAPH_NODE = FIXTURES / "h200-2025-graph-node" / "graph_node.sqlite"


def unprofiled_step_ns(variant: str) -> float:
    truth = json.loads((PAIRS / "truth.json").read_text(encoding="utf-8"))
    return float(truth["cases"]["graph"]["variants"][variant]["step_ms"]) * 1e6


def copy_of(export: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(export, folder / export.name))


def test_graph_launches_are_a_frame_of_their_own() -> None:
    trace = nsight_core.load_trace(GRAPH_FIXED)
    graphs = trace.graphs
    assert graphs.schema == pl.Schema(GRAPH_COLUMNS)
    assert trace.kernels.height == 0 and graphs.height == 20
    assert graphs["graph_id"].unique().to_list() == [1] and graphs["device"].unique().to_list() == [0]
    assert graphs["start_ns"].is_sorted() and (graphs["end_ns"] > graphs["start_ns"]).all()
    launches = trace.cuda_api.filter(pl.col("name").str.starts_with("cudaGraphLaunch"))
    assert sorted(graphs["correlation_id"]) == sorted(launches["correlation_id"])


def test_a_graph_launch_is_the_steps_gpu_work() -> None:
    """Each replay's graph ran 133 µs on the GPU, the step 153 µs unprofiled: the graph is the step's work
    (within 30 %), where the kernels' view had nothing."""
    graphs = nsight_core.load_trace(GRAPH_FIXED).graphs
    per_launch = float(graphs.select((pl.col("end_ns") - pl.col("start_ns")).median()).item())
    assert abs(per_launch - unprofiled_step_ns("fixed")) <= 0.3 * unprofiled_step_ns("fixed")


def test_nsight_stats_shows_graph_time_as_gpu_work() -> None:
    trace = nsight_core.load_trace(GRAPH_FIXED)
    stats = stats_of_trace(trace)
    [row] = stats.graphs
    durations = trace.graphs.select(pl.col("end_ns") - pl.col("start_ns")).to_series()
    assert (row.name, row.graph_id, row.instances, row.total_time_ns) == ("CUDA graph 1", 1, 20, durations.sum())
    assert (row.min_ns, row.max_ns, row.time_pct) == (durations.min(), durations.max(), 100.0)
    assert stats.kernels == [] and "CUDA graphs" in stats.skipped["cuda_gpu_kern_sum"]


def test_the_page_counts_graph_time_as_gpu_busy() -> None:
    """GPU busy, kernel time and the timeline of graph-fixed are the graph launches, not zero."""
    trace = nsight_core.load_trace(GRAPH_FIXED)
    summary = summarize_trace(trace)
    assert summary.graph_count == 20 and summary.kernel_count == 0
    assert summary.kernel_busy_ns == busy_ns(trace.graphs) > 20 * 100_000
    assert summary.busy_fraction is not None and summary.busy_fraction > 0
    assert sum(bucket.kernel_fraction for bucket in summary.timeline) > 0
    tiles = {tile.label: tile for tile in summary_tiles(stats_of_trace(trace), summary)}
    assert tiles["GPU kernel time"].number == summary.kernel_busy_ns
    assert tiles["GPU busy"].missing is None and tiles["CUDA-graph launches"].number == 20


@pytest.mark.parametrize("export", [PAIRS / "graph-problem.sqlite", PAIRS / "quick_start-as_is.sqlite"],
                         ids=lambda p: p.stem)
def test_eager_captures_have_no_graph_rows(export: Path) -> None:
    trace = nsight_core.load_trace(export)
    assert trace.graphs.height == 0 and trace.graphs.schema == pl.Schema(GRAPH_COLUMNS)
    assert summarize_trace(trace).kernel_busy_ns == busy_ns(trace.kernels)
    assert stats_of_trace(trace).graphs == []


@pytest.mark.nsys
def test_a_2023_export_has_an_empty_graphs_frame(h200_copy: Path) -> None:
    trace = nsight_core.load_trace(h200_copy / "training.nsys-rep")
    assert trace.graphs.height == 0 and trace.graphs.schema == pl.Schema(GRAPH_COLUMNS)
    assert trace.kernels.height > 0


def test_graph_nodes_recorded_as_kernels_count_once(tmp_path: Path) -> None:
    """--cuda-graph-trace=node: 85 graph launches as 3,825 node kernels with the launches' correlation ids and no
    graph rows. Given graph rows for the same launches too (as an nsys that writes both would), those rows are
    left out, so the GPU busy time is the kernels' alone; a graph row no kernel stands for stays."""
    original = nsight_core.load_trace(GRAPH_NODE)
    assert original.graphs.height == 0
    launches = original.cuda_api.filter(pl.col("name").str.starts_with("cudaGraphLaunch"))["correlation_id"]
    nodes = original.kernels.filter(pl.col("correlation_id").is_in(launches.implode()))
    assert (launches.len(), nodes.height) == (85, 3825)
    busy = summarize_trace(original).kernel_busy_ns

    both = copy_of(GRAPH_NODE, tmp_path)
    with sqlite3.connect(both) as connection:
        connection.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER,
            deviceId INTEGER, contextId INTEGER, greenContextId INTEGER, streamId INTEGER, correlationId INTEGER,
            globalPid INTEGER, graphId INTEGER, graphExecId INTEGER)""")
        connection.execute("""INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE
            SELECT MIN(start), MAX("end"), deviceId, contextId, 0, streamId, correlationId, globalPid, 1, 2
            FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL GROUP BY correlationId""")
        connection.execute("""INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE
            SELECT MAX("end") + 1000, MAX("end") + 5000, 0, 1, 0, 7, -1, 0, 9, 10 FROM CUPTI_ACTIVITY_KIND_KERNEL""")
    connection.close()
    trace = nsight_core.load_trace(both)
    assert trace.graphs["correlation_id"].to_list() == [-1]
    assert trace.kernels.height == original.kernels.height
    assert summarize_trace(trace).kernel_busy_ns == busy + 4000
    assert [(row.graph_id, row.instances) for row in stats_of_trace(trace).graphs] == [(9, 1)]
