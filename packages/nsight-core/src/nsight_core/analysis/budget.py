"""The step budget: parts that add up to the steps' wall time (on the CPU's clock analysis/cpu_budget.py, on the
GPU's analysis/gpu_budget.py), what bounds the steps, and the budget summed over the steps."""

from __future__ import annotations

from typing import Literal, get_args

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.steps import Bound

TOP_ACTIVITIES = 8
SYNC_API = r"^cu(da)?(DeviceSynchronize|StreamSynchronize|EventSynchronize|CtxSynchronize|Memcpy|Memset)"
"""Calls that block the CPU until the GPU catches up (Memcpy/Memset only without 'Async')."""
Part = Literal["compute", "exposed_comm", "exposed_copy", "sync_wait", "launch_gap", "gpu_idle", "stream_wait",
               "profiler_overhead"]
PARTS: tuple[Part, ...] = get_args(Part)
"""``stream_wait`` (the GPU waited on queued work's dependency) is measured on the GPU's clock only (:mod:`gpu_budget`);
``profiler_overhead`` (nsys' tracing) comes out of the steady steps' launch gaps and idle time (:mod:`overhead`)."""
CpuKind = Literal["cuda_api", "osrt", "nvtx", "untraced", "dispatch", "other_threads"]
DEVICE_BOUND_BUSY = 0.9
"""Steps whose GPU windows are at least this busy are device-bound: the host kept the GPU fed."""
PAGEABLE = (pl.col("src_kind") == "Pageable") | (pl.col("dst_kind") == "Pageable")
"""A copy to or from pageable host memory (:func:`every_budget.sync_calls`)."""


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
    kind: CpuKind = Field(description="In a CUDA API call, an OS-runtime call, only an NVTX range, nothing traced, "
                          "dispatch: the framework's time on its way to the CUDA call NAME (and a launch's latency), "
                          "or other_threads: nothing traced while another thread of the process made the call NAME "
                          "that launched the work the GPU waited for (autograd's backward pass)")
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


def bound_by(budget: StepBudget) -> Bound:
    """Which clock bounds the loop: device when the GPU was busy through DEVICE_BOUND_BUSY of its steps, else host."""
    if not budget.wall_ns:
        return "unknown"
    busy = sum(budget.part(part).total_ns for part in ("compute", "exposed_comm", "exposed_copy"))
    return "device" if busy >= DEVICE_BOUND_BUSY * budget.wall_ns else "host"


def blocks(name: pl.Expr) -> pl.Expr:
    """Whether a CUDA call of this NAME blocks until the GPU catches up (:func:`every_budget.sync_calls`)."""
    return name.str.contains(SYNC_API) & ~name.str.contains("Async", literal=True)


def step_thread(nvtx_thread: int | None, cuda_api: pl.LazyFrame, osrt: pl.LazyFrame) -> int | None:
    """The steps' thread: the NVTX family's, else the one with most CUDA, else OS-runtime, calls (streamed counts)."""
    if nvtx_thread is not None:
        return nvtx_thread
    for calls in (cuda_api, osrt):
        most = (calls.group_by("thread").len().sort(["len", "thread"], descending=[True, False]).head(1)
                .collect(engine="streaming"))
        if most.height:
            return int(most["thread"][0])
    return None


def is_thread(thread: int | None) -> pl.Expr:
    """Events of THREAD; none when the thread is unknown (nothing to attribute, not everything)."""
    return pl.col("thread") == thread if thread is not None else pl.lit(False)


def per_step(totals: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step of TOTALS (:func:`cpu_budget.budget_totals`): step, wall_ns, and <part>_ns adding up to it."""
    total = pl.col("total_ns")
    parts = totals.group_by("step").agg(*(total.filter(pl.col("part") == part).sum().alias(f"{part}_ns")
                                          for part in PARTS))
    return (steps.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns"))
            .join(parts, on="step", how="left").fill_null(0).sort("step"))


def cpu_activities(totals: pl.DataFrame) -> pl.DataFrame:
    """What the CPU did while the GPU waited, summed over TOTALS' steps: part, cpu_kind, cpu_name, total_ns. Sums, so
    the sums of batches of steps summed again are those of all (analysis/every_budget.py)."""
    return (totals.filter(pl.col("cpu_kind").is_not_null()).group_by("part", "cpu_kind", "cpu_name")
            .agg(pl.col("total_ns").sum()))


def budget_of(rows: pl.DataFrame, activities: pl.DataFrame, thread: int | None) -> StepBudget:
    """The budget of the steps whose :func:`per_step` ROWS these are, their :func:`cpu_activities` ACTIVITIES."""
    wall = int(rows["wall_ns"].sum())
    count = max(rows.height, 1)
    shares = rows.select(*(pl.struct(total=pl.col(f"{part}_ns").sum(), p50=pl.col(f"{part}_ns").median())
                           .alias(part) for part in PARTS)).row(0, named=True) if rows.height else {}
    sums = {part: (int(shares[part]["total"] or 0), float(shares[part]["p50"] or 0.0)) if shares else (0, 0.0)
            for part in PARTS}
    parts = [BudgetPart(part=part, total_ns=total, per_step_p50_ns=p50, per_step_mean_ns=total / count,
                        fraction=total / wall if wall else 0.0) for part, (total, p50) in sums.items()]
    top = activities.group_by("part", "cpu_kind", "cpu_name").agg(pl.col("total_ns").sum()).sort(
        ["total_ns", "part", "cpu_kind", "cpu_name"], descending=[True, False, False, False]).head(TOP_ACTIVITIES)
    idle = [CpuActivity(part=row["part"], kind=row["cpu_kind"], name=row["cpu_name"], total_ns=row["total_ns"],
                        per_step_mean_ns=row["total_ns"] / count, fraction=row["total_ns"] / wall if wall else 0.0)
            for row in top.to_dicts()]
    return StepBudget(steps=rows.height, wall_ns=wall, parts=parts, idle_activities=idle, thread=thread)
