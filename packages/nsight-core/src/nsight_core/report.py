"""The public report API: what a capture's report is made of and the files it is written to.

The CLI (`nsight stats`, `report`, `export`) and the Flyte adapter call these names and nothing deeper, so the
modules behind them (profile, render, trace) can change without breaking either.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from nsight_core.errors import NsightError, StatsError
from nsight_core.memory import check_summary_memory
from nsight_core.render.perfetto import write_perfetto
from nsight_core.trace.export import is_event_source
from nsight_core.trace.load import load_trace

PERFETTO_SUFFIX = ".perfetto.json.gz"


class PerfettoExport(BaseModel):
    """A written Perfetto (Chrome Trace Event JSON) file and how many events of each category it holds."""

    path: Path
    events: dict[str, int] = Field(description="Events per category (kernel, memcpy, memset, cuda_api, nvtx, osrt, "
                                   "nvtx_mark), and the naming metadata under __metadata")


def perfetto_path(capture: str | Path) -> Path:
    """Where a capture's Perfetto file goes by default: beside it, ``<name>.perfetto.json.gz``."""
    capture = Path(capture)
    return capture.with_name(capture.with_suffix("").name + PERFETTO_SUFFIX)


def export_perfetto(capture: str | Path, output: str | Path | None = None) -> PerfettoExport:
    """Write CAPTURE's whole timeline (a .nsys-rep, or its .sqlite or arrow export) as Chrome Trace Event JSON, which
    ui.perfetto.dev and chrome://tracing open: gzip-compressed when OUTPUT ends in ``.gz`` (by default
    :func:`perfetto_path`). Written a slice of events at a time, so its memory is the trace's frames and one slice.
    """
    capture = Path(capture)
    target = Path(output) if output is not None else perfetto_path(capture)
    if capture.exists() and not is_event_source(capture):
        raise StatsError(f"{capture} holds no events (recorded CSVs have totals only): pass the .nsys-rep, or its "
                         ".sqlite or arrow-directory export.")
    if not target.parent.is_dir():
        raise NsightError(f"cannot write {target}: the folder {target.parent} does not exist.")
    trace = load_trace(capture)
    check_summary_memory(trace.event_bytes, capture.name)  # before any event is read, as for a summary
    try:
        return PerfettoExport(path=target, events=write_perfetto(trace, target))
    except OSError as exc:
        raise NsightError(f"cannot write {target}: {exc.strerror or exc}; choose another file with -o/output.") from exc
