"""The per-step budget of real captures: parts add up to the step, and each part holds what it says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from capture_helpers import CPU_STEPS

import nsight_core
from nsight_core.analysis.budget import PARTS, SYNC_API
from nsight_core.analysis.intervals import busy_ns
from nsight_core.analysis.steps import FamilySteps, find_steps
from nsight_core.trace.model import Window
from nsight_core.trace.schema import (
    API_COLUMNS,
    KERNEL_COLUMNS,
    MARK_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    OSRT_COLUMNS,
)

CAPTURES = ["h200-torch-mlp/training.nsys-rep", "h200-torch-mlp/evaluation.nsys-rep",
            "h200-two-streams/two_streams.nsys-rep"]




@pytest.mark.parametrize("capture", CAPTURES)
def test_parts_add_up_to_each_steps_wall_time(load: Callable[[str], Any], capture: str) -> None:
    rows = nsight_core.step_budgets(load(capture))
    assert rows.height > 0
    summed = rows.select(pl.sum_horizontal([f"{part}_ns" for part in PARTS]).alias("parts"), "wall_ns")
    assert summed["parts"].to_list() == summed["wall_ns"].to_list()
    assert rows.select(pl.all().min()).row(0, named=True)["compute_ns"] >= 0


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_summary_adds_up_and_matches_the_steps(load: Callable[[str], Any], capture: str) -> None:
    analysis = nsight_core.analyze(load(capture))
    budget = analysis.budget
    assert sum(part.total_ns for part in budget.parts) == budget.wall_ns
    assert sum(part.fraction for part in budget.parts) == pytest.approx(1.0)
    assert isinstance(analysis.steps, FamilySteps)
    assert budget.steps == analysis.steps.family.count - (1 if analysis.steps.warmup else 0)


def test_compute_is_the_union_of_kernels_not_their_sum(load: Callable[[str], Any]) -> None:
    """Two streams overlap: compute in the steps never exceeds the kernels' union (3.89 ms), summed 6.98 ms."""
    trace = load("h200-two-streams/two_streams.nsys-rep")
    rows = nsight_core.step_budgets(trace)
    union = busy_ns(trace.kernels)
    assert union == pytest.approx(3.89e6, rel=0.01)
    assert rows["compute_ns"].sum() <= union
    assert (rows["compute_ns"] <= rows["wall_ns"]).all()


@pytest.mark.nsys
def test_cpu_time_during_gpu_idle_names_the_call_and_the_range(cpu_steps: Path) -> None:
    """A CPU-only loop (the shared capture, tests/conftest.py): the sleep shows as clock_nanosleep per step, the spin
    as the `compute` range."""
    _, sleep_s, busy_s = CPU_STEPS
    analysis = nsight_core.analyze(nsight_core.load_trace(cpu_steps))
    budget = analysis.budget
    assert budget.part("gpu_idle").total_ns == budget.wall_ns
    by_name = {(a.kind, a.name): a for a in budget.idle_activities}
    sleeping = by_name[("osrt", "clock_nanosleep")]
    spinning = by_name[("nvtx", "compute")]
    counted = budget.steps
    assert sleeping.total_ns >= 0.95 * counted * sleep_s * 1e9  # a busy machine only makes them longer
    assert spinning.total_ns >= 0.95 * counted * busy_s * 1e9
    assert sleeping.total_ns + spinning.total_ns <= budget.wall_ns
    assert not [f for f in analysis.findings if f.severity != "info"], "a CPU-only capture has no GPU to fix"


@pytest.mark.parametrize("calls", [True, False], ids=["calls-and-ranges", "ranges-only"])
def test_steps_the_gpu_never_ran_in_are_budgeted_alike_beside_steps_it_ran_in(load: Callable[[str], Any],
                                                                              calls: bool) -> None:
    """Without GPU work or a waiting call, each step is one idle run: the budget takes its part from the run's
    length without cutting at the GPU's edges (nor at any edge when the thread has only ranges, which do not
    overlap; a range inside one step is then its self time there, uncut), and gives what the cut gives when
    another step had a kernel."""
    trace = load("h200-torch-mlp/training.nsys-rep")
    api = trace.cuda_api.filter(~pl.col("name").str.contains(SYNC_API)) if calls else trace.cuda_api.clear()
    frames = {"kernels": trace.kernels.clear(), "memcpy": trace.memcpy.clear(), "memset": trace.memset.clear(),
              "cuda_api": api, "nvtx": trace.nvtx, "nvtx_marks": trace.nvtx_marks, "osrt": trace.osrt,
              "window": trace.window}
    cpu_only = SimpleNamespace(**frames)
    _, steps = find_steps(trace.nvtx, trace.kernels)
    warmup_start = int(steps["start_ns"][0])
    kernel = trace.kernels.head(1).with_columns(pl.lit(warmup_start, pl.Int64).alias("start_ns"),
                                                pl.lit(warmup_start + 1_000, pl.Int64).alias("end_ns"))
    one_kernel = SimpleNamespace(**{**frames, "kernels": kernel})

    idle, cut = nsight_core.analyze(cpu_only), nsight_core.analyze(one_kernel)
    assert idle.steps.warmup and cut.steps.warmup, "the kernel's step is left out of the budget"
    assert idle.budget == cut.budget
    assert idle.budget.part("gpu_idle").total_ns + idle.budget.part("launch_gap").total_ns == idle.budget.wall_ns
    assert {a.kind for a in idle.budget.idle_activities} == ({"cuda_api", "nvtx"} if calls else {"nvtx"})
    steady = pl.col("step") > 0
    assert nsight_core.step_budgets(cpu_only).filter(steady).equals(nsight_core.step_budgets(one_kernel).filter(steady))


def _us(*spans: tuple[int, int]) -> dict[str, list[int]]:
    return {"start_ns": [start * 1_000 for start, _ in spans], "end_ns": [end * 1_000 for _, end in spans]}


def test_the_idle_time_a_sync_causes_is_sync_wait_and_only_that() -> None:
    """Three 1 ms steps built by hand (µs below): GPU idle while the thread sits in cudaStreamSynchronize is
    sync_wait, and so is the refill after it when the GPU runs again within 100 µs of the sync's end (the
    relaunch after the drained queue); idle time after a sync the GPU waits longer behind is not the sync's."""
    thread = 7
    kernels = [(0, 100), (400, 500), (900, 950),  # step 0: sync 100-350, then the GPU runs at 400: all sync_wait
               (1000, 1100), (1900, 1950),        # step 1: sync 1100-1150, the GPU idles 750 µs more: gpu_idle
               (2000, 2100), (2600, 2700)]        # step 2: syncs 2100-2150 and 2300-2550; only the second refills
    syncs = [(100, 350), (1100, 1150), (2100, 2150), (2300, 2550)]
    frames = {name: pl.DataFrame(schema=schema) for name, schema in (
        ("memcpy", MEMCPY_COLUMNS), ("memset", MEMSET_COLUMNS), ("nvtx_marks", MARK_COLUMNS), ("osrt", OSRT_COLUMNS))}
    frames["kernels"] = pl.DataFrame({**_us(*kernels), "device": 0, "stream": 7, "name": "gemm", "short_name": "gemm",
                                      "correlation_id": range(len(kernels)), "pid": 1}, schema=KERNEL_COLUMNS)
    frames["cuda_api"] = pl.DataFrame({**_us(*syncs), "name": "cudaStreamSynchronize", "thread": thread,
                                       "correlation_id": range(100, 100 + len(syncs)), "name_id": 1},
                                      schema=API_COLUMNS)
    frames["nvtx"] = pl.DataFrame({**_us((0, 1000), (1000, 2000), (2000, 3000)), "name": ["step_0", "step_1", "step_2"],
                                   "domain": "", "thread": thread, "depth": 0, "kind": "push_pop", "closed": True},
                                  schema=NVTX_COLUMNS)
    trace = SimpleNamespace(**frames, window=Window(0, 3_000_000))

    rows = nsight_core.step_budgets(trace).select("step", *(pl.col(f"{part}_ns") // 1_000 for part in PARTS
                                                            if part != "profiler_overhead"))
    assert rows.rows() == [
        # step, compute, exposed_comm, exposed_copy, sync_wait, launch_gap, gpu_idle, stream_wait (µs)
        (0, 250, 0, 0, 300, 50, 400, 0),
        (1, 150, 0, 0, 50, 50, 750, 0),
        (2, 200, 0, 0, 350, 0, 450, 0),
    ]
    assert nsight_core.analyze(trace).budget.part("sync_wait").total_ns == 700_000


def test_frames_built_by_hand_with_unnamed_ranges_are_analysed(load: Callable[[str], Any]) -> None:
    """A user's own frames (analyze takes any object with the Trace's frames) may leave a range's name and
    domain null where the loader writes '': the analysis still runs, and they are the family ''."""
    trace = load("h200-torch-mlp/training.nsys-rep")
    unnamed = pl.int_range(pl.len()) % 7 == 3
    nvtx = trace.nvtx.with_columns(pl.when(unnamed).then(None).otherwise(pl.col(column)).alias(column)
                                   for column in ("name", "domain"))
    frames = {name: getattr(trace, name) for name in ("kernels", "memcpy", "memset", "cuda_api", "nvtx_marks",
                                                      "osrt", "window")}
    analysis = nsight_core.analyze(SimpleNamespace(**frames, nvtx=nvtx))
    families = {family.pattern: family for family in analysis.ranges}
    assert families[""].count == nvtx.filter(unnamed).height > 0
    assert sum(family.count for family in families.values()) == nvtx.height
