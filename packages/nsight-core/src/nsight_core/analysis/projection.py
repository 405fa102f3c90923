"""NVTX projected onto the GPU: which GPU work each CPU range launched, and each step on the GPU's clock.

PyTorch launches asynchronously, so a step's range on the CPU can end long before the GPU has done its work. Every
piece of GPU work carries the correlation id of the call that launched it: a range's GPU work is the work whose launch
call lies inside it, and a step's GPU window runs from its first GPU work to the next step's. Both clocks are kept; the
loop is device-bound when the GPU's windows are busy (the host ran ahead), host-bound when they are not."""

from __future__ import annotations

import polars as pl

GPU_WORK_COLUMNS = {"start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64, "kind": pl.String,
                    "comm": pl.Boolean, "stream": pl.Int64}
NCCL = r"(?i)nccl"
MIN_PROJECTED = 2
"""NVTX steps are read on the GPU's clock when at least this many launched GPU work."""


def launched(work: pl.DataFrame, cuda_api: pl.DataFrame) -> pl.DataFrame:
    """WORK with each piece's launching call: launch_ns, launch_end_ns, launch_name, thread (null: no call matched)."""
    calls = cuda_api.select("correlation_id", pl.col("start_ns").alias("launch_ns"),
                            pl.col("end_ns").alias("launch_end_ns"), pl.col("name").alias("launch_name"), "thread")
    ids = calls["correlation_id"]
    if calls.height and calls.select((pl.col("correlation_id").diff() > 0).all()).item():
        work_ids = work["correlation_id"]
        if not work_ids.null_count() and work_ids.is_sorted():
            # The work ran in the order of its calls too (one stream, or streams in launch order): one merge by id.
            return work.join_asof(calls, on="correlation_id", strategy="backward", tolerance=0,
                                  check_sortedness=False)
        # nsys numbers one process's calls in order: a binary search finds each work's call, no hash join.
        position = pl.lit(ids).search_sorted(pl.col("correlation_id"), side="left").clip(upper_bound=ids.len() - 1)
        located = work.with_columns(position.alias("_at")).with_columns(
            (pl.lit(ids).gather(pl.col("_at")) == pl.col("correlation_id")).alias("_found"))
        return located.select(pl.exclude("_at", "_found"), *(pl.when(pl.col("_found")).then(
            pl.lit(calls[name]).gather(pl.col("_at"))).alias(name) for name in calls.columns[1:]))
    joined = work.join(calls, on="correlation_id", how="left", maintain_order="left")
    if joined.height == work.height:
        return joined
    # Two processes reused a correlation id: each piece of work keeps the first call that has it.
    return work.join(calls.unique("correlation_id", keep="first"), on="correlation_id", how="left",
                     maintain_order="left")


def step_of_launch(launches: pl.DataFrame, steps: pl.DataFrame) -> pl.Series:
    """The step each launch call lies in, in time on any thread (PyTorch's backward pass launches from the autograd
    engine's thread while the step's range is open on the loop's), or null. STEPS: step, start_ns, end_ns, by start."""
    if not steps.height:
        return pl.Series("step", [None] * launches.height, pl.Int64)
    launch = launches["launch_ns"]
    if not launch.null_count() and launch.is_sorted():
        # Launches in call order (one stream, or streams in launch order): one merge with the steps, the fastest.
        located = launches.select("launch_ns").join_asof(
            steps.select(pl.col("start_ns").alias("launch_ns"), pl.col("end_ns").alias("_end"), "step"),
            on="launch_ns", strategy="backward", check_sortedness=False)
        return located.select(pl.when(pl.col("launch_ns") < pl.col("_end")).then(pl.col("step")).alias("step"))["step"]
    starts, ends, numbers = steps["start_ns"], steps["end_ns"], steps["step"]
    # Else a binary search in the step starts, not a join: the launches stay in their order.
    position = pl.lit(starts).search_sorted(pl.col("launch_ns"), side="right").cast(pl.Int64) - 1
    inside = (position >= 0) & (pl.col("launch_ns") < pl.lit(ends).gather(position.clip(lower_bound=0)))
    return launches.select(pl.when(inside).then(pl.lit(numbers).gather(position.clip(lower_bound=0)))
                           .alias("step"))["step"]


def project_spans(steps: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """STEPS' GPU windows (start_ns, end_ns: from its first GPU work to the next step's; their ranges as cpu_start_ns,
    cpu_end_ns) from each step's GPU SPANS (step, gpu_start_ns, gpu_end_ns: analysis/every_step.py)."""
    projected = (steps.join(spans, on="step", how="inner").sort("step")
                 .rename({"start_ns": "cpu_start_ns", "end_ns": "cpu_end_ns"}))
    start = pl.col("gpu_start_ns")
    return projected.select("step", start.alias("start_ns"),
                            start.shift(-1).fill_null(pl.col("gpu_end_ns").last()).alias("end_ns"), "cpu_start_ns",
                            "cpu_end_ns", "name", "thread")


def range_gpu_spans(nvtx: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Each NVTX range's GPU span: the NVTX frame with gpu_start_ns, gpu_end_ns and gpu_ops (0 and nulls when it
    launched nothing). LAUNCHES: :func:`launched` GPU work. A launch belongs to every range open on its thread at its
    call: ranges of one depth on one thread do not overlap, so one as-of join per nesting depth finds them."""
    calls = launches.filter(pl.col("launch_ns").is_not_null()).select("launch_ns", "thread", "start_ns", "end_ns")
    calls = calls.sort("launch_ns")
    indexed = nvtx.with_row_index("_range")
    found = []
    for depth in indexed["depth"].unique().sort():
        level = indexed.filter(pl.col("depth") == depth).select("_range", "thread", pl.col("start_ns").alias("_s"),
                                                                pl.col("end_ns").alias("_e")).sort("_s")
        hit = calls.join_asof(level, left_on="launch_ns", right_on="_s", by="thread", strategy="backward",
                              check_sortedness=False)
        found.append(hit.filter(pl.col("launch_ns") < pl.col("_e")).select("_range", "start_ns", "end_ns"))
    spans = (pl.concat(found).group_by("_range").agg(pl.col("start_ns").min().alias("gpu_start_ns"),
                                                    pl.col("end_ns").max().alias("gpu_end_ns"),
                                                    pl.len().cast(pl.Int64).alias("gpu_ops"))
             if found else pl.DataFrame(schema={"_range": pl.UInt32, "gpu_start_ns": pl.Int64, "gpu_end_ns": pl.Int64,
                                                "gpu_ops": pl.Int64}))
    return (indexed.join(spans, on="_range", how="left", maintain_order="left")
            .with_columns(pl.col("gpu_ops").fill_null(0)).drop("_range"))


def innermost_range(calls: pl.DataFrame, nvtx: pl.DataFrame) -> pl.Series:
    """The name of the innermost NVTX range open on each of CALLS' threads at its start ('' where none): the range a
    call came from. One as-of join per nesting depth, the deepest hit kept."""
    found = pl.Series("range", [""] * calls.height, pl.String)
    if not calls.height:
        return found
    # Only the ranges a call can be in (on a call's thread, begun by the last call): not every range copied per depth.
    nvtx = nvtx.filter(pl.col("thread").is_in(calls["thread"].unique().implode(), nulls_equal=True)
                       & (pl.col("start_ns") <= calls["start_ns"].max()))
    order = calls.select(pl.int_range(pl.len()).alias("_row"), "start_ns", "thread").sort("start_ns")
    for depth in nvtx["depth"].unique().sort():
        level = nvtx.filter(pl.col("depth") == depth).select(
            "thread", pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"), pl.col("name").alias("_n"))
        hit = order.join_asof(level.sort("_s"), left_on="start_ns", right_on="_s", by="thread", strategy="backward",
                              check_sortedness=False)
        inside = pl.when(pl.col("start_ns") < pl.col("_e")).then(pl.col("_n")).alias("_n")
        named = hit.select("_row", inside).sort("_row")
        found = pl.select(pl.when(pl.lit(named["_n"]).is_not_null()).then(pl.lit(named["_n"]))
                          .otherwise(pl.lit(found))).to_series().alias("range")
    return found
