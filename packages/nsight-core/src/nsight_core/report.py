"""The public report API: build a capture's profile, render it (page, tab fragment, terminal text, JSON), export its
whole timeline. The CLI and the Flyte adapter call these names and nothing deeper:

>>> profile = build_profile("training.nsys-rep")
>>> Path("report.html").write_text(render_page([profile]))
>>> print(stats_text(profile))
>>> export_perfetto("training.nsys-rep", "training.json.gz")"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.completeness import CaptureFacts, capture_facts
from nsight_core.errors import NsightError, StatsError
from nsight_core.memory import check_summary_memory
from nsight_core.profile import build_profile, capture_paths
from nsight_core.render.findings import finding_json, render_analysis, render_completeness
from nsight_core.render.html import GrowingFragment, prepare, render_fragment, render_page
from nsight_core.render.perfetto import write_perfetto
from nsight_core.render.text import DEFAULT_LIMIT, render_text
from nsight_core.trace.export import is_event_source
from nsight_core.trace.load import load_trace

PERFETTO_SUFFIX = ".perfetto.json.gz"


def stats_text(profile: CaptureProfile, limit: int | None = DEFAULT_LIMIT) -> str:
    """What `nsight stats` prints: an incomplete trace's warning, What to fix, then the tables (:func:`render_text`)."""
    text = render_completeness(profile.completeness) if profile.completeness is not None else ""
    if profile.analysis is not None:
        text += render_analysis(profile.analysis) + "\n"
    return text + render_text(profile.stats, limit)


def stats_json(profile: CaptureProfile) -> dict[str, Any]:
    """What `nsight stats --json` prints, numbers only: durations in ns (``*_ns``), sizes in bytes or as nsys reports
    them (``*_mb``: decimal MB)."""
    payload = profile.stats.model_dump(mode="json", exclude={"reports"})
    if profile.analysis is not None:
        fields = {"window", "steps", "budget", "budget_scope", "coverage", "overhead", "ranges", "savings_withheld"}
        payload.update(profile.analysis.model_dump(mode="json", include=fields))
        payload["findings"] = [finding_json(finding) for finding in profile.analysis.findings]
    if profile.completeness is not None:
        payload["completeness"] = profile.completeness.model_dump(mode="json")
    return payload


def write_page(profiles: list[CaptureProfile], output: str | Path, title: str = "GPU Profile") -> Path:
    output = Path(output)
    try:
        output.write_text(render_page(profiles, title=title), encoding="utf-8")
    except OSError as exc:
        raise NsightError(f"cannot write the report to {output}: {exc.strerror or exc}") from exc
    return output


class PerfettoExport(BaseModel):
    """A written Perfetto (Chrome Trace Event JSON) file and how many events of each category it holds."""

    path: Path
    events: dict[str, int] = Field(description="Events per category (kernel, graph, memcpy, memset, cuda_api, nvtx, "
                                   "osrt, nvtx_mark), and the naming metadata under __metadata")


def perfetto_path(capture: str | Path) -> Path:
    """Where a capture's Perfetto file goes by default: beside it, ``<name>.perfetto.json.gz``."""
    capture = Path(capture)
    return capture.with_name(capture.with_suffix("").name + PERFETTO_SUFFIX)


def export_perfetto(capture: str | Path, output: str | Path | None = None) -> PerfettoExport:
    """Write CAPTURE's whole timeline (:mod:`~nsight_core.render.perfetto`) to OUTPUT, by default :func:`perfetto_path`,
    gzip-compressed where it ends in ``.gz``; a slice at a time, so its memory is the trace's frames and one slice."""
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


__all__ = ["DEFAULT_LIMIT", "CaptureFacts", "CaptureProfile", "GrowingFragment", "PerfettoExport", "build_profile",
           "capture_facts", "capture_paths", "export_perfetto", "perfetto_path", "prepare", "render_fragment",
           "render_page", "stats_json", "stats_text", "write_page"]
