"""Typed rows and the per-capture statistics object.

These models are the boundary between parsing and everything after it (analysis, rendering, the JSON the CLI prints,
users' own tests), so field names are stable and unit-suffixed (ns or MB)."""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from nsight_core.stats.reports import table_of


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Kernel, API function, memory operation or NVTX range, exactly as nsys wrote it")
    instances: int = Field(description="Instances, calls or count, whichever the report counts")


class TimeRow(_Row):
    """One row of a time summary report (kernels, API calls, memory-op times, NVTX ranges)."""

    time_pct: float = Field(description="Share of the report's total time, in percent")
    total_time_ns: int
    avg_ns: float
    med_ns: float | None = Field(default=None, description="None where the nsys version reports no median")
    min_ns: int
    max_ns: int
    stddev_ns: float


class KernelRow(TimeRow):
    """A CUDA kernel (cuda_gpu_kern_sum / gpukernsum)."""


class ApiCallRow(TimeRow):
    """A CUDA runtime/driver API function (cuda_api_sum / cudaapisum)."""


class MemoryTimeRow(TimeRow):
    """A memory operation kind by time (cuda_gpu_mem_time_sum / gpumemtimesum)."""


class NvtxRangeRow(TimeRow):
    """An NVTX push/pop range (nvtx_pushpop_sum / nvtxppsum)."""

    style: str | None = Field(default=None, description="Range style, where the nsys version reports it")


class GraphRow(TimeRow):
    """The launches of one CUDA graph as the GPU ran them (nsys 2025's graph-level trace). Not an nsys report:
    the GPU work the kernel report lacks when graphs are traced whole, computed from the trace's ``graphs``."""

    graph_id: int = Field(description="nsys' graph id (CUPTI_ACTIVITY_KIND_GRAPH_TRACE.graphId)")


class MemorySizeRow(_Row):
    """A memory operation kind by size (cuda_gpu_mem_size_sum / gpumemsizesum)."""

    total_mb: float
    avg_mb: float
    med_mb: float | None = Field(default=None, description="None where the nsys version reports no median")
    min_mb: float
    max_mb: float
    stddev_mb: float


class ExportRead(BaseModel):
    """How a capture's events were read: the export nsight chose for it, and why (nsight_core.trace.export)."""

    kind: str = Field(description="The nsys export read: 'arrowdir', 'sqlite', 'sqlitedir' or 'parquetdir' (SQLite "
                      "or Parquet in slices of time exported side by side)")
    streamed: bool = Field(description="Its events were scanned from Parquet on disk (nsys' own, or its SQLite "
                           "export's tables copied there) in bounded memory; else the frames were read whole")
    reason: str = Field(description="'large': streamed, the trace is over stream_above_bytes; 'memory': streamed, "
                        "nsys' arrow export would not fit the memory allowed; 'small': the arrow export, read whole "
                        "(the faster); 'no_arrowdir': SQLite read whole, as this nsys has no arrow export")
    trace_bytes: int = Field(description="The .nsys-rep's size")
    stream_above_bytes: int = Field(description="The size above which a trace is streamed")
    slices: int = Field(1, description="How many slices of time its export was made in, side by side (SQLite: two "
                        "per core this process may use for a streamed trace of 8 MiB or more; Parquet: the fewest from "
                        "two per core and one per 16 MiB of trace whose exports fit the memory allowed; at most 8; "
                        "NSIGHT_EXPORT_SLICES sets it)")


class ProfileStats(BaseModel):
    """Everything `nsys stats` said about one capture: typed rows, other reports, skipped reports. Every requested
    report ends up in exactly one place: a typed list, ``other`` (any report this package has no model for, kept as rows
    of strings/numbers), or ``skipped`` with the reason."""

    kernels: list[KernelRow] = Field(default_factory=list)
    api_calls: list[ApiCallRow] = Field(default_factory=list)
    memory_time: list[MemoryTimeRow] = Field(default_factory=list)
    memory_size: list[MemorySizeRow] = Field(default_factory=list)
    nvtx_ranges: list[NvtxRangeRow] = Field(default_factory=list)
    graphs: list[GraphRow] = Field(default_factory=list, description="CUDA-graph launches per graph, from the events "
                                   "(with cuda_gpu_kern_sum): GPU work the kernel report does not show")
    other: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    skipped: dict[str, str] = Field(default_factory=dict, description="report name -> why it has no rows")
    notes: list[str] = Field(default_factory=list, description="What the export held in a schema nsight-core "
                             "cannot read, and what was left out for it")
    reports: list[str] = Field(default_factory=list, description="The requested report names, in order")
    export: ExportRead | None = Field(default=None, description="How the events were read, where nsight exported the "
                                      "capture itself; None for an export the user passed, or recorded CSVs")

    def frame(self, name: str) -> pl.DataFrame:
        """One table as a Polars frame (for analyses and users' own code). NAME is what `.reports` lists (an nsys report
        name such as `nvtx_pushpop_sum`, aliases included) or a typed table's name (`kernels`, `api_calls`,
        `memory_time`, `memory_size`, `nvtx_ranges`): users copy names from either place."""
        if name in self.other:
            return pl.DataFrame(self.other[name], infer_schema_length=None)
        table = name if name in TABLE_MODELS else table_of(name)
        if table is None:
            known = sorted({*TABLE_MODELS, *self.reports, *self.other})
            raise KeyError(f"no table or report named {name!r} in these stats; known: {', '.join(known)}")
        rows: list[Any] = getattr(self, table)
        model = TABLE_MODELS[table]
        if not rows:
            return pl.DataFrame(schema={name: _POLARS_TYPES[f.annotation] for name, f in model.model_fields.items()})
        return pl.DataFrame([row.model_dump() for row in rows])


TABLE_MODELS: dict[str, type[_Row]] = {  # each typed list's row model
    "kernels": KernelRow, "api_calls": ApiCallRow, "memory_time": MemoryTimeRow, "memory_size": MemorySizeRow,
    "nvtx_ranges": NvtxRangeRow, "graphs": GraphRow}
_POLARS_TYPES: dict[Any, Any] = {str: pl.String, int: pl.Int64, float: pl.Float64, str | None: pl.String,
                                 float | None: pl.Float64}
