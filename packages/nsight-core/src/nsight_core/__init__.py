"""nsight-core: run code under NVIDIA Nsight Systems and find out where the GPU time went.

The public API: :class:`Session` (run a command under nsys; open regions inside it), :func:`range` (a region; a no-op
outside a session), :func:`load_trace`, :func:`load_stats`, :func:`analyze`, :func:`diff`, :data:`DEFAULT_REPORTS`, the
types these return and the :class:`NsightError` family; :mod:`nsight_core.report` makes the reports.

Every name but the errors, ``find_nsys`` and ``DEFAULT_REPORTS`` loads on first use: a training script that only opens
regions should not pay for Polars, and `nsight stats`/`report` start a capture's export before they load pydantic."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nsight_core import lineage  # noqa: F401  (first: it records which process imported nsight-core)
from nsight_core.errors import (
    CommandNotExecutableError,
    CommandNotFoundError,
    ExportDiskFullError,
    NotEnoughMemoryError,
    NsightError,
    NsysCommandError,
    NsysNotFoundError,
    NsysPermissionError,
    ReportTooNewError,
    StatsError,
)
from nsight_core.nsys import (
    DEFAULT_TRACE,
    ENV_PYTHON_BACKTRACE,
    Nsys,
    find_nsys,
    validate_cuda_graph_trace,
    validate_python_backtrace,
)
from nsight_core.stats.reports import DEFAULT_REPORTS

if TYPE_CHECKING:
    from nsight_core.analysis.analyze import analyze, step_budgets
    from nsight_core.analysis.diff import TraceDiff
    from nsight_core.analysis.result import Analysis
    from nsight_core.capture import Capture
    from nsight_core.compare import diff
    from nsight_core.region import Region, range
    from nsight_core.report import CaptureProfile, PerfettoExport
    from nsight_core.session import RunResult, Session
    from nsight_core.settings import validate_trace
    from nsight_core.stats.load import load_stats
    from nsight_core.stats.models import ProfileStats
    from nsight_core.trace import Trace, Window, load_trace
    from nsight_core.trace.tables import DamagedExportError, SchemaMismatch

_LAZY = {"Capture": "nsight_core.capture", "Region": "nsight_core.region", "RunResult": "nsight_core.session",
         "Session": "nsight_core.session", "range": "nsight_core.region",
         "load_stats": "nsight_core.stats.load", "ProfileStats": "nsight_core.stats.models",
         "analyze": "nsight_core.analysis.analyze", "step_budgets": "nsight_core.analysis.analyze",
         "Analysis": "nsight_core.analysis.result", "diff": "nsight_core.compare",
         "load_trace": "nsight_core.trace", "Trace": "nsight_core.trace", "Window": "nsight_core.trace",
         "validate_trace": "nsight_core.settings", "TraceDiff": "nsight_core.analysis.diff",
         "CaptureProfile": "nsight_core.report", "PerfettoExport": "nsight_core.report",
         "DamagedExportError": "nsight_core.trace.tables", "SchemaMismatch": "nsight_core.trace.tables"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # found once: `nsight_core.range` in a loop costs a plain lookup after
        return value
    raise AttributeError(f"module 'nsight_core' has no attribute {name!r}")


__all__ = ["DEFAULT_REPORTS", "DEFAULT_TRACE", "ENV_PYTHON_BACKTRACE", "Analysis", "Capture", "CaptureProfile",
           "CommandNotExecutableError", "CommandNotFoundError", "DamagedExportError", "ExportDiskFullError",
           "NotEnoughMemoryError", "NsightError", "Nsys", "NsysCommandError", "NsysNotFoundError",
           "NsysPermissionError", "PerfettoExport", "ProfileStats", "Region", "ReportTooNewError", "RunResult",
           "SchemaMismatch", "Session", "StatsError", "Trace", "TraceDiff", "Window", "analyze", "diff", "find_nsys",
           "load_stats", "load_trace", "range", "step_budgets", "validate_cuda_graph_trace",
           "validate_python_backtrace", "validate_trace"]
