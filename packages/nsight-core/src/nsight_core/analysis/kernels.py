"""Kernel names and kernel-level findings. Demangled CUDA kernel names run to hundreds of characters; a chart axis
needs the function's own name, with the full name kept for hover."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from pydantic import BaseModel, Field

MAX_SHORT_NAME = 60


def short_name(name: str) -> str:
    """The kernel's own function name, no return type, namespaces, template arguments or parameters (``void
    at::native::<unnamed>::kernel<float, 4>(T1)`` -> ``kernel``), cut to MAX_SHORT_NAME characters."""
    depth = 0
    outer: list[str] = []
    for char in name.strip():
        if char in "<(":
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
        elif depth == 0:
            outer.append(char)
    words = "".join(outer).split()
    last = words[-1].split("::")[-1] if words else ""
    short = last or name.strip() or name
    return short if len(short) <= MAX_SHORT_NAME else short[: MAX_SHORT_NAME - 1] + "…"


def unique_short_names(names: Sequence[str]) -> list[str]:
    """Short names, made distinct with ' #2', ' #3'... where different kernels shorten alike."""
    seen: dict[str, int] = {}
    result = []
    for name in names:
        short = short_name(name)
        seen[short] = seen.get(short, 0) + 1
        result.append(short if seen[short] == 1 else f"{short} #{seen[short]}")
    return result


class NcclShare(BaseModel):
    """How much of the GPU kernel time went to NCCL collectives (communication, not compute)."""

    nccl_time_ns: int
    kernel_time_ns: int
    nccl_kernels: int = Field(description="Distinct kernel names containing 'nccl'")
    share: float = Field(description="0..1 of summed kernel time; 0 when no kernel ran")


def nccl_share(kernels: pl.DataFrame) -> NcclShare:
    """NCCL share of kernel time, from a frame with columns name and total_time_ns (a kernel summary)."""
    is_nccl = pl.col("name").str.to_lowercase().str.contains("nccl", literal=True)
    totals = kernels.select(pl.col("total_time_ns").filter(is_nccl).sum().alias("nccl"),
                            pl.col("total_time_ns").sum().alias("all"), is_nccl.sum().alias("count")).row(0)
    nccl, total, count = (int(value or 0) for value in totals)
    return NcclShare(nccl_time_ns=nccl, kernel_time_ns=total, nccl_kernels=count, share=nccl / total if total else 0.0)
