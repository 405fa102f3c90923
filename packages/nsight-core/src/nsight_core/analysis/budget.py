"""Where each step's wall time went: a partition of the step, so the parts add up to it.

The step is cut at every boundary of GPU work (kernels, copies, memsets) and of what its CPU thread
was doing (CUDA API calls, OS-runtime calls, NVTX ranges). Each piece then belongs to exactly one
part, first match wins:

1. ``compute``: a kernel other than NCCL ran (kernels on several streams or GPUs count once);
2. ``exposed_comm``: only NCCL kernels ran (communication no compute hides);
3. ``exposed_copy``: only copies or memsets ran;
4. the GPU idled. Idle time while the CPU thread sat in a synchronising call
   (``cudaStreamSynchronize``, ``.item()``'s copy, a pageable ``cudaMemcpyAsync`` ...) is
   ``sync_wait``, and so is the refill after it when the GPU gets work again within LAUNCH_GAP_NS
   (the sync drained the queue; the GPU waits for the relaunch). When the CPU goes on to do other
   work instead (sleep, load data), that idle time is not the sync's. Other idle stretches shorter
   than LAUNCH_GAP_NS are ``launch_gap`` (launch overhead, what CUDA graphs remove); longer ones
   are ``gpu_idle``, with what the CPU thread did meanwhile.

Idle time keeps what the step's CPU thread was in: the CUDA API or OS-runtime call, else the
innermost NVTX range (by family: `step_{n}`), else nothing traced (Python between calls).
"""

from __future__ import annotations

from typing import Literal

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.ranges import self_intervals
from nsight_core.analysis.steps import family_pattern

LAUNCH_GAP_NS = 100_000
"""GPU idle stretches shorter than this (100 µs) are launch overhead between queued work."""
TOP_ACTIVITIES = 8
SYNC_API = r"^cu(da)?(DeviceSynchronize|StreamSynchronize|EventSynchronize|CtxSynchronize|Memcpy|Memset)"
"""Calls that block the CPU until the GPU catches up (Memcpy/Memset only without 'Async')."""
Part = Literal["compute", "exposed_comm", "exposed_copy", "sync_wait", "launch_gap", "gpu_idle"]
PARTS: tuple[Part, ...] = ("compute", "exposed_comm", "exposed_copy", "sync_wait", "launch_gap", "gpu_idle")
CpuKind = Literal["cuda_api", "osrt", "nvtx", "untraced"]

_LAYERS = ("compute", "comm", "copy", "in_step")


class BudgetPart(BaseModel):
    """One part of the step time, over all steps."""

    part: Part
    total_ns: int = Field(description="Summed over all steps")
    per_step_p50_ns: float
    per_step_mean_ns: float
    fraction: float = Field(description="total_ns / summed step wall time (0..1)")


class CpuActivity(BaseModel):
    """What the step's CPU thread was doing while the GPU idled (sync waits and gaps)."""

    part: Part = Field(description="The idle part this time belongs to")
    kind: CpuKind = Field(description="In a CUDA API call, an OS-runtime call, only an NVTX range, or nothing traced")
    name: str = Field(description="The call or innermost range name; '' when untraced")
    total_ns: int
    per_step_mean_ns: float
    fraction: float = Field(description="total_ns / summed step wall time (0..1)")


class StepBudget(BaseModel):
    """The per-step time budget: parts that add up to the steps' wall time."""

    steps: int
    wall_ns: int = Field(description="Summed step wall time; equals the sum of parts' total_ns")
    parts: list[BudgetPart] = Field(description="In PARTS order; every part present, zero when absent")
    idle_activities: list[CpuActivity] = Field(description=f"Top {TOP_ACTIVITIES} CPU activities during GPU idle")
    thread: int | None = Field(description="The CPU thread whose activity is attributed; None when unknown")

    def part(self, name: Part) -> BudgetPart:
        """The part called NAME."""
        return next(part for part in self.parts if part.part == name)


def sync_calls(cuda_api: pl.DataFrame, memcpy: pl.DataFrame) -> pl.DataFrame:
    """CUDA API calls that block until the GPU catches up: sync calls, sync copies, pageable async copies.

    A cudaMemcpyAsync to or from pageable host memory is synchronous in effect (the driver stages it
    through a pinned buffer); the correlation id ties the call to its copy.
    """
    pageable = memcpy.filter((pl.col("src_kind") == "Pageable") | (pl.col("dst_kind") == "Pageable"))
    blocking = pl.col("name").str.contains(SYNC_API) & ~pl.col("name").str.contains("Async", literal=True)
    return cuda_api.filter(blocking | pl.col("correlation_id").is_in(pageable["correlation_id"].implode()))


def step_thread(nvtx_thread: int | None, cuda_api: pl.DataFrame, osrt: pl.DataFrame) -> int | None:
    """The CPU thread of the steps: the NVTX family's, else the one with the most CUDA, else OS-runtime, calls."""
    if nvtx_thread is not None:
        return nvtx_thread
    calls = cuda_api if cuda_api.height else osrt
    if not calls.height:
        return None
    return int(calls.group_by("thread").len().sort(["len", "thread"], descending=[True, False])["thread"][0])


def budget_segments(
    steps: pl.DataFrame,
    kernels: pl.DataFrame,
    copies: pl.DataFrame,
    cuda_api: pl.DataFrame,
    osrt: pl.DataFrame,
    nvtx: pl.DataFrame,
    sync: pl.DataFrame,
    thread: int | None,
) -> pl.DataFrame:
    """The steps cut into pieces, one part each: step, start_ns, end_ns, part, cpu_kind, cpu_name.

    STEPS: step, start_ns, end_ns (not overlapping). COPIES: memcpy and memset intervals. SYNC:
    the blocking calls (:func:`sync_calls`). CUDA_API, OSRT and NVTX: all threads; only THREAD's
    calls and ranges are attributed.
    """
    lo, hi = steps.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)

    def inside(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi))

    def on_thread(frame: pl.DataFrame) -> pl.DataFrame:
        return inside(frame.filter(is_thread(thread))).select("start_ns", "end_ns", "name")

    is_nccl = pl.col("name").str.to_lowercase().str.contains("nccl", literal=True)
    layers = {
        "compute": inside(kernels.filter(~is_nccl)),
        "comm": inside(kernels.filter(is_nccl)),
        "copy": inside(copies),
        "in_step": steps,
    }
    api, calls, ranges = on_thread(cuda_api), on_thread(osrt), self_intervals(_nvtx_on_thread(nvtx, thread, lo, hi))
    blocking = on_thread(sync)
    cuts = pl.concat([frame.select("start_ns", "end_ns") for frame in (api, calls, ranges, blocking)])
    def edges(frame: pl.DataFrame, layer: str | None) -> list[pl.DataFrame]:
        """Start (+1) and end (-1) of each interval as a change of LAYER's coverage (None: only a cut)."""
        return [frame.select(pl.col(edge).clip(lo, hi).alias("t"),
                             *(pl.lit(sign if name == layer else 0, pl.Int32).alias(name) for name in _LAYERS))
                for edge, sign in (("start_ns", 1), ("end_ns", -1))]

    events = pl.concat([*(e for layer, frame in layers.items() for e in edges(frame, layer)), *edges(cuts, None)])
    coverage = (
        events.group_by("t").sum().sort("t")
        .with_columns(*(pl.col(layer).cum_sum() for layer in _LAYERS))
        .with_columns(pl.col("t").alias("start_ns"), pl.col("t").shift(-1).alias("end_ns"))
        .filter((pl.col("in_step") > 0) & (pl.col("end_ns") > pl.col("start_ns")))
    )
    segments = coverage.join_asof(steps.select("step", pl.col("start_ns").alias("step_start")).sort("step_start"),
                                  left_on="start_ns", right_on="step_start", strategy="backward")
    segments = _lookup(segments, api, "api")
    segments = _lookup(segments, calls, "osrt")
    segments = _lookup(segments, ranges.select("start_ns", "end_ns", "name"), "nvtx")
    segments = _lookup(segments, blocking, "sync")
    gpu = (pl.when(pl.col("compute") > 0).then(pl.lit("compute"))
           .when(pl.col("comm") > 0).then(pl.lit("exposed_comm"))
           .when(pl.col("copy") > 0).then(pl.lit("exposed_copy")))
    segments = segments.sort("start_ns").with_columns(gpu.alias("gpu"))
    idle = pl.col("gpu").is_null()
    first = ((idle != idle.shift(1)) | (pl.col("step") != pl.col("step").shift(1))).fill_null(True)
    last = first.shift(-1).fill_null(True)
    in_sync = pl.col("sync").is_not_null()
    # Per idle run (consecutive idle pieces of one step), with fills instead of per-run groups: its
    # start and end, and the end of the latest sync before each piece (reset, as -1, at the run start).
    segments = segments.with_columns(
        pl.when(first).then(pl.col("start_ns")).forward_fill().alias("run_start"),
        pl.when(last).then(pl.col("end_ns")).backward_fill().alias("run_end"),
        pl.when(in_sync).then(pl.col("end_ns")).when(first).then(-1).forward_fill().alias("sync_end"),
    ).with_columns(pl.when(pl.col("sync_end") >= 0).then(pl.col("sync_end")).alias("sync_end"),
                   (pl.col("run_end") - pl.col("run_start")).alias("run_ns"))
    refill = (pl.col("start_ns") >= pl.col("sync_end")) & (pl.col("run_end") - pl.col("sync_end") < LAUNCH_GAP_NS)
    part = (pl.when(~idle).then(pl.col("gpu"))
            .when(in_sync | refill.fill_null(False)).then(pl.lit("sync_wait"))
            .when(pl.col("run_ns") < LAUNCH_GAP_NS).then(pl.lit("launch_gap"))
            .otherwise(pl.lit("gpu_idle")))
    kind = (pl.when(pl.col("api").is_not_null()).then(pl.lit("cuda_api"))
            .when(pl.col("osrt").is_not_null()).then(pl.lit("osrt"))
            .when(pl.col("nvtx").is_not_null()).then(pl.lit("nvtx"))
            .otherwise(pl.lit("untraced")))
    return segments.select(
        "step", "start_ns", "end_ns", part.alias("part"),
        pl.when(idle).then(kind).alias("cpu_kind"),
        pl.when(idle).then(pl.coalesce("api", "osrt", family_pattern(pl.col("nvtx")), pl.lit(""))).alias("cpu_name"),
    )


def _nvtx_on_thread(nvtx: pl.DataFrame, thread: int | None, lo: int, hi: int) -> pl.DataFrame:
    """THREAD's NVTX ranges overlapping [LO, HI), keeping the depth the nesting lookup needs."""
    return nvtx.filter(is_thread(thread) & (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi))


def is_thread(thread: int | None) -> pl.Expr:
    """Events of THREAD; none when the thread is unknown (nothing to attribute, not everything)."""
    return pl.col("thread") == thread if thread is not None else pl.lit(False)


def _lookup(segments: pl.DataFrame, intervals: pl.DataFrame, column: str) -> pl.DataFrame:
    """Add COLUMN: the name of the (disjoint) interval containing each segment, null if none."""
    found = intervals.select(pl.col("start_ns").alias("_start"), pl.col("end_ns").alias("_end"),
                             pl.col("name").alias(column)).sort("_start")
    joined = segments.sort("start_ns").join_asof(found, left_on="start_ns", right_on="_start", strategy="backward")
    return joined.with_columns(pl.when(pl.col("_end") > pl.col("start_ns")).then(pl.col(column)).alias(column)
                               ).drop("_start", "_end")


def per_step(segments: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step: step, wall_ns and one <part>_ns column per part (they add up to wall_ns)."""
    length = pl.col("end_ns") - pl.col("start_ns")
    parts = segments.group_by("step").agg(
        *(length.filter(pl.col("part") == part).sum().alias(f"{part}_ns") for part in PARTS))
    return (steps.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns"))
            .join(parts, on="step", how="left").fill_null(0).sort("step"))


def summarize_budget(segments: pl.DataFrame, steps: pl.DataFrame, thread: int | None) -> StepBudget:
    """The budget over all steps: each part's total, per-step median and mean, share of step time."""
    rows = per_step(segments, steps)
    wall = int(rows["wall_ns"].sum())
    count = max(rows.height, 1)
    shares = rows.select(*(pl.struct(total=pl.col(f"{part}_ns").sum(), p50=pl.col(f"{part}_ns").median())
                           .alias(part) for part in PARTS)).row(0, named=True) if rows.height else {}
    parts = [
        BudgetPart(part=part, total_ns=int(shares[part]["total"] or 0) if shares else 0,
                   per_step_p50_ns=float(shares[part]["p50"] or 0.0) if shares else 0.0,
                   per_step_mean_ns=(shares[part]["total"] or 0) / count if shares else 0.0,
                   fraction=(shares[part]["total"] or 0) / wall if wall else 0.0)
        for part in PARTS
    ]
    activities = (
        segments.filter(pl.col("cpu_kind").is_not_null())
        .group_by("part", "cpu_kind", "cpu_name")
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("total_ns"))
        .sort(["total_ns", "part", "cpu_kind", "cpu_name"], descending=[True, False, False, False])
        .head(TOP_ACTIVITIES)
    )
    idle = [
        CpuActivity(part=row["part"], kind=row["cpu_kind"], name=row["cpu_name"], total_ns=row["total_ns"],
                    per_step_mean_ns=row["total_ns"] / count, fraction=row["total_ns"] / wall if wall else 0.0)
        for row in activities.to_dicts()
    ]
    return StepBudget(steps=rows.height, wall_ns=wall, parts=parts, idle_activities=idle, thread=thread)
