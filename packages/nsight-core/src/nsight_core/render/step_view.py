"""The step view's data and words: what render/step_view.js draws of a capture's drawn steps (analysis/step_drawing.py).
The page carries each step as columns (one number each per event, names once in a table), to keep its JSON small; times
are nanoseconds since the step's drawn start. Every word a person reads on the view is made here."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from nsight_core.analysis.finding_model import Where
from nsight_core.analysis.kernels import short_name
from nsight_core.analysis.step_drawing import DrawnStep, StepDrawing
from nsight_core.analysis.steps import KernelPeriodSteps, NvtxCpuSteps, NvtxGpuSteps
from nsight_core.render.findings import CPU_LABELS, PART_LABELS
from nsight_core.trace.schema import os_tid
from nsight_core.units import duration, size

PART_COLORS = {"compute": "#76b900", "exposed_comm": "#e8710a", "exposed_copy": "#4c78a8", "sync_wait": "#d93025",
               "launch_gap": "#f9ab00", "gpu_idle": "#9aa5b1", "stream_wait": "#9334e6",
               "profiler_overhead": "#d0d0d0"}
"""One color per budget part, the same in the step view and the budget bars."""
KIND_COLORS = {"kernel": "#76b900", "graph": "#2a9d8f", "memcpy": "#4c78a8", "memset": "#9f86c0",
               "cuda_api": "#f2a541", "nvtx": "#5b8def"}
"""An event's color by kind (an NVTX range's by its name instead: nested ranges must differ)."""
KIND_LABELS = {"kernel": "kernel", "graph": "CUDA graph launch", "memcpy": "copy", "memset": "memset",
               "cuda_api": "CUDA call", "nvtx": "NVTX range"}
ROLE_TITLES = {"median": "Median step", "slowest": "Slowest step", "evidence": "Step"}
_CLOCKS = {NvtxGpuSteps: "its GPU window", KernelPeriodSteps: "its kernel period", NvtxCpuSteps: "its NVTX range"}
"""What a step's time spans, by how the steps were found."""
TOP_IDLE = 6
"""Idle stretches listed under a panel (longest first); the canvas draws them all."""


def step_view_data(drawing: StepDrawing) -> dict[str, Any]:
    """The JSON the script draws: per step its rows, events as columns and idle stretches, names and words once."""
    names: dict[str, int] = {}
    labels: dict[str, int] = {}
    steps = [_step(step, drawing, names, labels) for step in drawing.steps]
    return {"clock": drawing.stats.clock, "steps": steps, "names": list(names),
            "short": [short_name(name) for name in names], "labels": list(labels), "kinds": list(KIND_LABELS),
            "kind_labels": list(KIND_LABELS.values()), "kind_colors": [KIND_COLORS[kind] for kind in KIND_LABELS],
            "parts": {part: {"label": PART_LABELS[part], "color": color} for part, color in PART_COLORS.items()}}


def step_panels(drawing: StepDrawing) -> list[dict[str, Any]]:
    """What the template writes around each step's canvas: title, whether hidden (evidence steps until clicked), the
    GPU's idle time by cause, most first, each with its longest stretch (a click zooms to it), and what was left out."""
    panels, clock = [], _CLOCKS[type(drawing.stats)]
    for index, step in enumerate(drawing.steps):
        roles = " and ".join(ROLE_TITLES[role].lower() if i else ROLE_TITLES[role] for i, role in enumerate(step.roles))
        idle = step.idle.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d"), _idle_label())
        causes = (idle.sort("d", descending=True).group_by("label", maintain_order=True)
                  .agg(pl.len().alias("n"), pl.col("d").sum().alias("total"), pl.col("d").first().alias("longest"),
                       pl.col("start_ns").first().alias("at")).sort("total", descending=True).head(TOP_IDLE))
        panels.append({
            "title": f"{roles}: step {step.step}, {duration(step.wall_ns)} ({clock})",
            "hidden": step.roles == ["evidence"],
            "idle": [{"text": f"{row['label']}: {duration(row['total'])}"
                              + (f" in {row['n']:,} stretches, the longest {duration(row['longest'])}"
                                 if row["n"] > 1 else "")
                              + f" at {duration(row['at'] - step.start_ns)}",
                      "at": f"{index} {row['at'] - step.start_ns} {row['longest']}"}
                     for row in causes.iter_rows(named=True)],
            "idle_total": f"GPU idle in all: {idle.height:,} stretches, {duration(int(idle['d'].sum()))}"
            if idle.height else None,
            "left_out": f"The {step.left_out:,} shortest of its events are left out (a step draws at most "
                        f"{step.events.height:,})." if step.left_out else None,
        })
    return panels


def where_json(where: Where | None) -> str | None:
    """A finding's evidence place as the view's script finds it, the JSON of a data attribute (the template escapes
    it); None: nothing to show. A call counted per step ('cudaStreamSynchronize in step_{n}') is found by its name."""
    if where is None or where.kind == "capture":
        return None
    return json.dumps({"kind": where.kind, "name": where.name.split(" in ")[0], "step": where.step,
                       "start": where.start_ns}, ensure_ascii=False)


def _idle_label() -> pl.Expr:
    """An idle stretch's words, 'sync waits: in range log' (the part, then what the CPU was doing where known)."""
    return pl.format("{}{}", pl.col("part").replace_strict(PART_LABELS),
                     pl.when(pl.col("cpu_kind").is_null()).then(pl.lit(""))
                     .otherwise(pl.format(": {}", cpu_words()))).alias("label")


def cpu_words() -> pl.Expr:
    """What the CPU was doing in an idle stretch (cpu_kind, cpu_name), in words: 'in range log'; null where unknown."""
    return pl.format("{} {}", pl.col("cpu_kind").replace_strict(CPU_LABELS, default=""),
                     pl.col("cpu_name").fill_null("")).str.strip_chars_end()


def _rows(events: pl.DataFrame, drawing: StepDrawing) -> tuple[pl.DataFrame, list[dict[str, str]], int]:
    """EVENTS with their row index; the rows (GPU streams by device and stream, then per thread its NVTX levels
    and its CUDA calls, the busiest thread first); how many rows are the GPU's."""
    gpu = events.filter(pl.col("lane") == "gpu").select("device", "stream").unique().sort("device", "stream")
    cpu = events.filter(pl.col("lane") == "cpu")
    order = cpu.group_by("thread").len().sort("len", "thread", descending=[True, False])["thread"].to_list()
    rows = [{"label": f"GPU {device} · stream {stream}", "lane": "gpu", "key": f"g{device}.{stream}"}
            for device, stream in gpu.iter_rows()]
    for thread in order:
        label = f"{drawing.thread_names.get(thread) or 'thread'} ({os_tid(thread)})"
        mine = cpu.filter(pl.col("thread") == thread)
        levels = mine.filter(pl.col("kind") == "nvtx").select((pl.col("depth").max() + 1).fill_null(0)).item()
        rows += [{"label": f"{label} NVTX" if not level else f"  NVTX level {level + 1}", "lane": "cpu",
                  "key": f"t{thread}.n{level}"} for level in range(levels)]
        if mine.filter(pl.col("kind") == "cuda_api").height:
            rows.append({"label": f"{label} CUDA calls", "lane": "cpu", "key": f"t{thread}.api"})
    index = {row["key"]: position for position, row in enumerate(rows)}
    key = (pl.when(pl.col("lane") == "gpu").then(pl.format("g{}.{}", "device", "stream"))
           .when(pl.col("kind") == "nvtx").then(pl.format("t{}.n{}", "thread", "depth"))
           .otherwise(pl.format("t{}.api", "thread")))
    placed = events.with_columns(key.replace_strict(index, return_dtype=pl.Int64).alias("row"))
    return placed, [{"label": row["label"], "lane": row["lane"]} for row in rows], gpu.height


def _step(step: DrawnStep, drawing: StepDrawing, names: dict[str, int], labels: dict[str, int]) -> dict[str, Any]:
    events, rows, gpu_rows = _rows(step.events, drawing)
    kinds = {kind: index for index, kind in enumerate(KIND_LABELS)}
    shown = events.with_columns(
        pl.when(pl.col("kind") == "graph").then(pl.format("CUDA graph {}", "name"))
        .when(pl.col("kind") == "memset").then(pl.lit("memset"))
        .otherwise("name").alias("name"))
    for name in shown["name"].unique(maintain_order=True).to_list():
        names.setdefault(name, len(names))
    origin = step.start_ns
    times = [(pl.col("start_ns") - origin).alias("s"), (pl.col("end_ns") - pl.col("start_ns")).alias("d")]
    stretches = step.idle.with_columns(_idle_label())
    for label in stretches["label"].unique(maintain_order=True).to_list():
        labels.setdefault(label, len(labels))
    idle = stretches.select(*times, "part", pl.col("label").replace_strict(labels, return_dtype=pl.Int64))
    columns = shown.select(pl.col("row").alias("r"), *times, pl.col("name").replace_strict(names, return_dtype=pl.Int64)
                           .alias("n"), pl.col("kind").replace_strict(kinds, return_dtype=pl.Int64).alias("k"), "bytes")
    sizes = [size(value) if value is not None else None for value in columns["bytes"].to_list()]
    return {"step": step.step, "hidden": step.roles == ["evidence"], "t0": origin, "span": step.end_ns - origin,
            "gpu": [step.gpu_start_ns - origin, step.gpu_end_ns - origin],
            "cpu": [step.cpu_start_ns - origin, step.cpu_end_ns - origin],
            "rows": rows, "gpu_rows": gpu_rows, "idle": idle.rows(),
            "ev": {**{name: columns[name].to_list() for name in ("r", "s", "d", "n", "k")},
                   "b": sizes if any(value is not None for value in sizes) else None}}
