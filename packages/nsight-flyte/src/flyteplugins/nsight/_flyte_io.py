"""Everything this plugin reads from or writes to Flyte: the report tab, traced steps, raw data.

One finished capture goes through the same steps in sync and async task bodies: attach the trace
first (so the tab can name where a reader finds it), then summarise and re-render the tab. Only the
Flyte calls that block differ (report flush, traced step), so :func:`publish_sync` and
:func:`publish` are thin tails over one shared :func:`_summarize`. Every step is best-effort: a task
never fails because its profile could not be summarised, rendered or uploaded, and each failure is
one warning line naming the cause.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import flyte
from flyte.io import File

from nsight_core.errors import one_line

if TYPE_CHECKING:
    from nsight_core import Capture, Session
    from nsight_core.report import CaptureProfile, GrowingFragment

log = logging.getLogger("flyteplugins.nsight")

TAB = "GPU Profile"


@dataclass
class Profiling:
    """What one profiled task run knows: its settings and every capture rendered so far.

    The tab is re-rendered with all sections on each new capture (the fragment carries its script
    once), so regions accumulate in one tab instead of being appended piecemeal; each capture's section
    is rendered once.
    """

    session: Session
    reports: tuple[str, ...]
    attach_report: bool
    clustered: bool
    sections: GrowingFragment | None = None
    """The tab's sections so far; made at the first capture (the renderer loads Polars and Altair)."""
    notes: list[str] = field(default_factory=list)
    context: contextvars.Context | None = None
    """The task's context (flyte's included), for regions in threads the task body started."""
    perfetto: bool = False
    """Also write each capture's whole timeline as Perfetto JSON and attach it beside its trace."""


active: contextvars.ContextVar[Profiling | None] = contextvars.ContextVar("nsight_profiling", default=None)
task_state: Profiling | None = None
"""The profiled task of this process. Context variables do not follow a `threading.Thread` the body
starts, so a region there finds the task here and publishes inside a copy of the task's context."""


def in_task_context(state: Profiling, function: Callable[..., None], *args: object) -> None:
    """Run FUNCTION in a copy of the task's context: flyte's calls need it, a user's thread lacks it."""
    if state.context is None:
        function(*args)
    else:
        state.context.copy().run(function, *args)


def _raw_data_destination(path: Path) -> str:
    """A fresh location under the task's raw data path, so the trace outlives the pod."""
    return flyte.ctx().raw_data_path.get_random_remote_path(path.name)


@flyte.trace
async def capture_report_file(report_path: str) -> File:
    """The .nsys-rep of one capture as a traced step's output: download it, open it in nsys-ui."""
    path = Path(report_path)
    return await File.from_local(path, remote_destination=_raw_data_destination(path))


@flyte.trace
def capture_report_file_sync(report_path: str) -> File:
    """`capture_report_file` for a `with nsys.range(...)` block in a def task (no event loop there)."""
    path = Path(report_path)
    return File.from_local_sync(path, remote_destination=_raw_data_destination(path))


def _summarize(state: Profiling, capture: Capture, title: str, source: str, timeline: bool = False) -> Path | None:
    """Profile the capture and re-render the tab with every capture so far; with TIMELINE, also write its Perfetto
    timeline beside the trace and return where (None when it was not written).

    SOURCE is where a reader of the tab finds the trace (a traced step's output, a raw-data location),
    never a path inside the pod. The profile and renderer modules load polars and altair, so they are
    imported here, by profiled runs only, not by every import of the plugin.
    """
    from nsight_core.report import GrowingFragment

    if state.sections is None:
        state.sections = GrowingFragment()
    written = None
    try:
        profile, written = _profile(capture, state.reports, title, timeline)
        state.sections.add(profile.model_copy(update={"source": source}))
    except Exception as exc:
        log.warning("could not summarise the trace of %r, so the GPU Profile tab leaves it out (%s); "
                    "open the trace in nsys-ui instead: %s", capture.region, one_line(exc), source)
        state.notes.append(f"{title}: not summarised ({one_line(exc)}); its trace: {source}")
    if capture.overlapped:
        others = ", ".join(repr(name) for name in capture.overlapped)
        state.notes.append(f"{title}: its trace also holds the activity of {others}, which ran while it "
                           "recorded (nsys records one collection at a time) and has no section of its own.")
    _render(state)
    return written


def _render(state: Profiling) -> None:
    """Replace the tab with every section and note so far."""
    if state.sections is not None and (state.sections or state.notes):
        import flyte.report  # here, not at the top: ~10 ms of every import of the plugin, needed once a trace is in

        flyte.report.get_tab(TAB).replace(state.sections.render(state.notes))


def _profile(capture: Capture, reports: tuple[str, ...], title: str,
             timeline: bool) -> tuple[CaptureProfile, Path | None]:
    """The profile of CAPTURE (and with TIMELINE its Perfetto timeline, beside the trace), made from a link to its
    trace in a folder of its own that is deleted afterwards: the exports and stats files of regions in a loop would
    otherwise pile up in the pod's ephemeral storage (and get it evicted). The trace itself is kept."""
    from nsight_core.report import build_profile, capture_facts

    scratch = Path(tempfile.mkdtemp(prefix=".nsight-profile-", dir=capture.path.parent))
    try:
        linked = scratch / capture.path.name
        try:
            os.link(capture.path, linked)
        except OSError:
            linked.symlink_to(capture.path.resolve())
        # The facts come from the trace where it lies (a leftover .qdstrm beside it) and from nsys' stop output.
        profile = build_profile(linked, reports, title, facts=capture_facts(capture.path, capture.nsys_output))
        return profile, _timeline(capture, linked) if timeline else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _timeline(capture: Capture, linked: Path) -> Path | None:
    """CAPTURE's Perfetto timeline beside its trace, from LINKED's export (made for the profile); None, with a
    warning, when it cannot be written: the tab and the trace do not depend on it."""
    from nsight_core.report import export_perfetto, perfetto_path

    try:
        return export_perfetto(linked, perfetto_path(capture.path)).path
    except Exception as exc:
        log.warning("could not write the Perfetto timeline of %r (%s); the tab and the trace are unaffected",
                    capture.region, one_line(exc))
        return None


def _timeline_attached(state: Profiling, title: str, where: str) -> None:
    state.notes.append(f"{title}: whole timeline for ui.perfetto.dev or chrome://tracing: {where}")
    _render(state)


def _timeline_place(state: Profiling, uploaded: str, step: str) -> str:
    """Where an attached timeline went: the raw data on a clustered worker, else the output of traced step STEP."""
    if state.clustered:
        return f"{uploaded} (in the task's raw data)"
    return f"{uploaded} (the output of traced step {step})"


def _attach_timeline_sync(state: Profiling, path: Path, title: str) -> None:
    """Attach the Perfetto file at PATH as the trace was: a traced step's output, or raw data on a clustered worker."""
    try:
        uploaded = _raw_upload(path) if state.clustered else capture_report_file_sync(str(path)).path
        where = _timeline_place(state, str(uploaded), "capture_report_file_sync")
    except Exception as exc:
        where = f"not uploaded ({one_line(exc)})"
    _timeline_attached(state, title, where)


async def _attach_timeline(state: Profiling, path: Path, title: str) -> None:
    """:func:`_attach_timeline_sync` from an async task body."""
    try:
        uploaded = (await asyncio.to_thread(_raw_upload, path) if state.clustered
                    else (await capture_report_file(str(path))).path)
        where = _timeline_place(state, str(uploaded), "capture_report_file")
    except Exception as exc:
        where = f"not uploaded ({one_line(exc)})"
    _timeline_attached(state, title, where)


NOT_ATTACHED = "not attached (attach_report=False): the trace stayed in the task's container"


def _upload(state: Profiling, capture: Capture, title: str) -> str:
    """A clustered worker has no controller, so no traced step: its trace goes straight to raw data
    and the tab says where."""
    uploaded = _raw_upload(capture.path)
    state.notes.append(f"{title}: trace (.nsys-rep) uploaded to {uploaded}")
    return f"{uploaded} (in the task's raw data)"


def _raw_upload(path: Path) -> str:
    """PATH uploaded to a fresh location under the task's raw data; where it went."""
    return str(File.from_local_sync(path, remote_destination=_raw_data_destination(path)).path)


def _not_uploaded(capture: Capture, error: Exception) -> str:
    log.warning("could not upload the trace of %r (%s); it stays in the task's container at %s, and the "
                "task is unaffected: check the raw data path's storage and credentials", capture.region,
                one_line(error), capture.path)
    return f"not uploaded ({one_line(error)}): the trace stayed in the task's container"


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def publish_sync(state: Profiling, capture: Capture, title: str) -> None:
    """Attach and report CAPTURE from synchronous code (a `with nsys.range` block in a def task).

    A plain `with` inside an async def task lands here on the task's event loop, where flyte's
    blocking flush and sync traced step would deadlock: the tab is still updated (flyte writes it
    when the task ends) but the trace is left unattached, with a warning saying how to fix it.
    """
    try:
        on_loop = _on_event_loop()
        attached = False
        if not state.attach_report:
            source = NOT_ATTACHED
        elif on_loop and not state.clustered:
            log.warning("nsys.range(%r) ran as a plain `with` in an async def task, so its trace is not "
                        "attached: write `async with nsys.range(...)` there", capture.region)
            source = "not attached: write `async with nsys.range(...)` in an async def task"
        else:
            try:
                source = (_upload(state, capture, title) if state.clustered else
                          f"{capture_report_file_sync(str(capture.path)).path} (the output of traced step "
                          "capture_report_file_sync)")
                attached = True
            except Exception as exc:
                source = _not_uploaded(capture, exc)
        timeline = _summarize(state, capture, title, source, state.perfetto and attached)
        if timeline is not None:
            _attach_timeline_sync(state, timeline, title)
        if not on_loop:
            import flyte.report

            flyte.report.flush()
    except Exception as exc:
        log.warning("publishing the profile of %r failed: %s", capture.region, one_line(exc))


async def publish(state: Profiling, capture: Capture, title: str) -> None:
    """Attach and report CAPTURE from an async task body (nsys stats runs off the event loop)."""
    try:
        attached = False
        if not state.attach_report:
            source = NOT_ATTACHED
        else:
            try:
                source = (await asyncio.to_thread(_upload, state, capture, title) if state.clustered else
                          f"{(await capture_report_file(str(capture.path))).path} (the output of traced step "
                          "capture_report_file)")
                attached = True
            except Exception as exc:
                source = _not_uploaded(capture, exc)
        timeline = await asyncio.to_thread(_summarize, state, capture, title, source, state.perfetto and attached)
        if timeline is not None:
            await _attach_timeline(state, timeline, title)
        import flyte.report

        await flyte.report.flush.aio()
    except Exception as exc:
        log.warning("publishing the profile of %r failed: %s", capture.region, one_line(exc))
