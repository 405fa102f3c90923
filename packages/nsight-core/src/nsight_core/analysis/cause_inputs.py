"""Known causes' inputs (:class:`causes.CauseInputs`), summed over batches of steady steps: the same for any windows."""

from __future__ import annotations

import polars as pl

from nsight_core.analysis import causes
from nsight_core.analysis.windows import in_steps, start_cuts, step_batches
from nsight_core.trace.schema import pid_of
from nsight_core.trace.streamed import WINDOW_ROWS, Events

CALL_COLUMNS = {"name": pl.String, "calls": pl.Int64, "total_ns": pl.Int64}
COPY_COLUMNS = {"direction": pl.String, "small": pl.Boolean, "copies": pl.Int64, "bytes": pl.Int64, "ns": pl.Int64}
LOOP_COLUMNS = {"name": pl.String, "launches": pl.Int64, "kept": pl.Int64, "timed": pl.Int64, "host_ns": pl.Int64}
READ_COLUMNS = {"select": pl.Boolean, "reads": pl.Int64}
LINE_COLUMNS = {"name": pl.String, "place": pl.String, "function": pl.String, "calls": pl.Int64}
SAMPLE_COLUMNS = {"place": pl.String, "function": pl.String, "host_ns": pl.Float64}
OTHER_COLUMNS = {"name": pl.String, "calls": pl.Int64}
_SCHEMAS: dict[str, dict[str, type[pl.DataType]]] = {"calls": CALL_COLUMNS, "copies": COPY_COLUMNS,
                                                     "loops": LOOP_COLUMNS, "reads": READ_COLUMNS,
                                                     "lines": LINE_COLUMNS, "samples": SAMPLE_COLUMNS,
                                                     "others": OTHER_COLUMNS}


def cause_inputs(frames: Events, steps: pl.DataFrame, thread: int | None, activities: pl.DataFrame | None,
                 per_call_ns: float, window_rows: int | None = WINDOW_ROWS) -> causes.CauseInputs:
    """The inputs of :mod:`causes` over STEPS (the steady steps: step, start_ns, end_ns on the GPU's clock,
    cpu_start_ns, cpu_end_ns, by start) of the capture FRAMES holds, on the steps' THREAD; ACTIVITIES: the budget's
    CPU activities of their idle time (every_budget.Budgets.activities); PER_CALL_NS: what tracing added to a call."""
    found: dict[str, list[pl.DataFrame]] = {key: [] for key in _SCHEMAS}
    after_bulk = others_ns = 0
    if steps.height and thread is not None:
        calls = frames.cuda_api.filter(pl.col("thread") == thread).select("start_ns", "end_ns", "name",
                                                                          "correlation_id")
        process = (pid_of(pl.col("thread")) == pid_of(pl.lit(thread))) & (pl.col("thread") != thread)
        others = frames.cuda_api.filter(process).select("start_ns", "end_ns", "name")
        stacks = frames.python_lines.filter(pl.col("thread") == thread).select(
            "start_ns", pl.format("{}:{}", "file", "line").alias("place"), "function", "sample_ns")
        lines, samples = stacks.filter(pl.col("sample_ns") == 0), stacks.filter(pl.col("sample_ns") > 0)
        inner = frames.nvtx.filter(pl.col("thread") == thread).select("start_ns", "end_ns")
        for first, end in step_batches(steps["cpu_start_ns"], start_cuts(calls, window_rows)):
            batch = steps.slice(first, end - first)
            lo, hi = batch.select(pl.min_horizontal(pl.col("start_ns").min(), pl.col("cpu_start_ns").min()),
                                  pl.max_horizontal(pl.col("end_ns").max(), pl.col("cpu_end_ns").max())).row(0)
            meets = (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)
            ranges = batch.select("step", start_ns=pl.col("cpu_start_ns"), end_ns=pl.col("cpu_end_ns"))
            batch_calls = calls.filter(meets).collect(engine="streaming")
            found["calls"].append(_calls_in(batch_calls, ranges))
            named, span = _others_in(others.filter(meets).collect(engine="streaming"), ranges)
            found["others"].append(named)
            others_ns += span
            if lines.height:
                found["lines"].append(in_steps(batch_calls.join(lines.drop("sample_ns"), on="start_ns"), ranges)
                                      .group_by("name", "place", "function").agg(pl.len().alias("calls")))
            if samples.height:
                found["samples"].append(_untraced_samples(samples, batch_calls, inner.filter(meets), ranges))
            copies, kernels = pl.collect_all(
                [frames.memcpy.filter(meets).select("start_ns", "end_ns", "stream", "bytes", "direction",
                                                    "correlation_id"),
                 frames.kernels.filter(meets).select("start_ns", "end_ns", "stream", "name", "correlation_id")],
                engine="streaming")
            windows = batch.select("step", "start_ns", "end_ns")
            found["copies"].append(_copies_in(copies, windows))
            found["loops"].append(loops_in(kernels, windows, batch_calls))
            found["reads"].append(_reads_in(copies, kernels, windows))
            after_bulk += _idle_after_bulk(copies, kernels, batch_calls, windows)
    return causes.CauseInputs(steps=steps.height, activities=activities if activities is not None else pl.DataFrame(
        schema={"part": pl.String, "cpu_kind": pl.String, "cpu_name": pl.String, "total_ns": pl.Int64}),
        after_bulk_ns=float(after_bulk), others_ns=float(others_ns), per_call_ns=per_call_ns,
        **{key: _summed(parts, _SCHEMAS[key]) for key, parts in found.items()})


def _summed(parts: list[pl.DataFrame], schema: dict[str, type[pl.DataType]]) -> pl.DataFrame:
    """The batches' PARTS (keys, then counts) summed per key, by key: the same whatever the batches."""
    if not parts:
        return pl.DataFrame(schema=schema)
    keys = [name for name, dtype in schema.items() if dtype in (pl.String, pl.Boolean)]
    values = [name for name in schema if name not in keys]
    return (pl.concat([part.cast(schema) for part in parts]).group_by(keys)  # type: ignore[arg-type]
            .agg(pl.col(values).sum()).sort(keys))


def _untraced_samples(samples: pl.DataFrame, calls: pl.DataFrame, nvtx: pl.LazyFrame, steps: pl.DataFrame
                      ) -> pl.DataFrame:
    """The host time of the Python SAMPLES in the STEPS' ranges (step, start_ns, end_ns) outside every CUDA call
    (CALLS) and every NVTX range inside a step (NVTX: those that are not a step's own), by line (SAMPLE_COLUMNS)."""
    own = steps.select("start_ns", "end_ns")
    spans = pl.concat([calls.select("start_ns", "end_ns"),
                       nvtx.join(own.lazy(), on=["start_ns", "end_ns"], how="anti").collect(engine="streaming")])
    # A sample is inside a span where the furthest end of the spans that started before it lies after it.
    reach = spans.sort("start_ns").select("start_ns", pl.col("end_ns").cum_max().alias("_reach"))
    inside = in_steps(samples, steps).sort("start_ns").join_asof(reach, on="start_ns", strategy="backward")
    return (inside.filter(pl.col("_reach").is_null() | (pl.col("_reach") <= pl.col("start_ns")))
            .group_by("place", "function").agg(pl.col("sample_ns").sum().alias("host_ns")))


def _calls_in(calls: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """The CALLS that start inside the steps' RANGES, counted and timed per name (CALL_COLUMNS)."""
    duration = (pl.col("end_ns") - pl.col("start_ns")).sum().alias("total_ns")
    return in_steps(calls, ranges).group_by("name").agg(pl.len().alias("calls"), duration)


def _others_in(calls: pl.DataFrame, ranges: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The CALLS (other threads' of the steps' process) that start inside the steps' RANGES, counted per name
    (OTHER_COLUMNS), and the time from each step's first of them to its last (at most the step's end), summed."""
    located = in_steps(calls, ranges).join(ranges.select("step", _end="end_ns"), on="step")
    span = located.group_by("step").agg(pl.min_horizontal(pl.col("end_ns").max(), pl.col("_end").first())
                                        - pl.col("start_ns").min()).to_series(1).sum()
    return located.group_by("name").agg(pl.len().alias("calls")), int(span)


def _copies_in(copies: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The COPIES that start inside the steps' GPU WINDOWS per direction, small or not (COPY_COLUMNS)."""
    return in_steps(copies, windows).group_by(
        "direction", (pl.col("bytes") <= causes.SMALL_COPY_MAX_BYTES).alias("small")).agg(
        pl.len().alias("copies"), pl.col("bytes").sum(), (pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"))


def loops_in(kernels: pl.DataFrame, windows: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """The loops of small kernels in the steps' GPU WINDOWS, per kernel name (LOOP_COLUMNS; kept: one launch per
    TENSORS_PER_LAUNCH). A loop is a run of a step's consecutive kernels, none large (BIG_KERNEL, BIG_KERNEL_NS), of at
    least LOOP_MIN_LAUNCHES launches, each kernel repeated LOOP_MIN_REPEATS times on average. host_ns: the host's time
    issuing each loop that a multi-tensor kernel removes: its launches with a call there (timed; CALLS: the steps'
    thread's) at the loop's median interval between launch calls, at most the loop's span from its first call's start
    to its last's end shared among its kernels by those launches. Longer intervals hold the loop's other host work per
    tensor (a CPU step counter, Python bookkeeping), which a multi-tensor optimizer keeps."""
    located = in_steps(kernels, windows)
    duration = pl.col("end_ns") - pl.col("start_ns")
    big = pl.col("name").str.contains(causes.BIG_KERNEL) | (duration >= causes.BIG_KERNEL_NS)
    runs = located.with_columns(big.alias("_big")).with_columns(pl.col("_big").cum_sum().over("step").alias("_run"))
    issued = calls.select("correlation_id", _call_start="start_ns", _call_end="end_ns")
    small = runs.filter(~pl.col("_big")).join(issued, on="correlation_id", how="left")
    run = ("step", "_run")
    spans = small.group_by(run).agg((pl.col("_call_end").max() - pl.col("_call_start").min()).alias("_span"),
                                    pl.col("_call_start").sort().diff().median().alias("_interval"))
    counted = pl.len().alias("launches"), pl.col("_call_start").count().alias("timed")
    per_name = (small.group_by(*run, "name").agg(*counted).join(spans, on=list(run))
                .with_columns(pl.col("launches").sum().over(run).alias("_in_run"), pl.len().over(run).alias("_names"),
                              pl.col("timed").sum().over(run).alias("_timed_in_run")))
    loops = per_name.filter((pl.col("_in_run") >= causes.LOOP_MIN_LAUNCHES)
                            & (pl.col("_in_run") >= causes.LOOP_MIN_REPEATS * pl.col("_names")))
    kept = (pl.col("launches") + causes.TENSORS_PER_LAUNCH - 1) // causes.TENSORS_PER_LAUNCH
    host = pl.min_horizontal(pl.col("_span").fill_null(0) * pl.col("timed") / pl.max_horizontal("_timed_in_run", 1),
                             pl.col("_interval").fill_null(0) * pl.col("timed")).round()
    return loops.group_by("name").agg(pl.col("launches").sum(), kept.sum().alias("kept"), pl.col("timed").sum(),
                                      host.sum().cast(pl.Int64).alias("host_ns"))


def _idle_after_bulk(copies: pl.DataFrame, kernels: pl.DataFrame, calls: pl.DataFrame, windows: pl.DataFrame) -> int:
    """The GPU's idle time after each device-to-host copy above SMALL_COPY_MAX_BYTES in the steps' GPU WINDOWS, from
    the copy's end (or its call's return in CALLS, where later) to the next kernel's start or its step's end. The sum
    can hold a stretch twice: the findings take at most the host's untraced time."""
    bulk = in_steps(copies.filter((pl.col("direction") == "Device-to-Host")
                                  & (pl.col("bytes") > causes.SMALL_COPY_MAX_BYTES)), windows)
    bulk = bulk.join(calls.select("correlation_id", pl.col("end_ns").alias("_returned")), on="correlation_id",
                     how="left").with_columns(pl.max_horizontal("end_ns", "_returned").alias("end_ns"))
    if not bulk.height:
        return 0
    starts = kernels["start_ns"].sort()
    ends = bulk.join(windows.select("step", pl.col("end_ns").alias("_step_end")), on="step")
    at = pl.lit(starts).search_sorted(pl.col("end_ns"), side="right")
    following = pl.when(at < starts.len()).then(pl.lit(starts).gather(at.clip(upper_bound=starts.len() - 1))) \
        if starts.len() else pl.lit(None, pl.Int64)
    gaps = ends.select((pl.min_horizontal(following.fill_null(pl.col("_step_end")), "_step_end") - pl.col("end_ns"))
                       .clip(lower_bound=0))
    return int(gaps.to_series().sum())


def _reads_in(copies: pl.DataFrame, kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The small device-to-host reads (at most SMALL_READ_BYTES) in the steps' GPU WINDOWS, counted by whether the
    kernel that ended last before each on its stream selects (SELECT_KERNEL) or not (READ_COLUMNS)."""
    small = (pl.col("direction") == "Device-to-Host") & (pl.col("bytes") <= causes.SMALL_READ_BYTES)
    reads = in_steps(copies.filter(small), windows).sort("start_ns")
    before = kernels.select(pl.col("end_ns").alias("_end"), "stream", pl.col("name").alias("_kernel")).sort("_end")
    named = reads.join_asof(before, left_on="start_ns", right_on="_end", by="stream", strategy="backward",
                            check_sortedness=False)
    return named.group_by(pl.col("_kernel").str.contains(causes.SELECT_KERNEL).fill_null(False).alias("select")).agg(
        pl.len().alias("reads"))
