"""Everything this plugin reads from or writes to Flyte: the report tab, traced steps, raw data.

One finished capture goes through the same steps in sync and async task bodies; only the Flyte calls
that block differ (report flush, traced step), so :func:`publish_sync` and :func:`publish` are thin
tails over one shared :func:`_summarize`. Every step is best-effort: a task never fails because its
profile could not be summarised, rendered or uploaded.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import flyte
import flyte.report
from flyte.io import File

if TYPE_CHECKING:
    from nsight_core import Capture, Session
    from nsight_core.profile import CaptureProfile

log = logging.getLogger("flyteplugins.nsight")

TAB = "GPU Profile"


@dataclass
class Profiling:
    """What one profiled task run knows: its settings and every capture rendered so far.

    The tab is re-rendered from all profiles on each new capture (the fragment carries its script
    once), so regions accumulate in one tab instead of being appended piecemeal.
    """

    session: Session
    reports: tuple[str, ...]
    attach_report: bool
    clustered: bool
    profiles: list[CaptureProfile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


active: contextvars.ContextVar[Profiling | None] = contextvars.ContextVar("nsight_profiling", default=None)


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


def _summarize(state: Profiling, capture: Capture, title: str) -> None:
    """Upload (clustered workers only), profile the capture and re-render the tab with every capture so far.

    A clustered worker has no controller, so no traced step: its trace goes straight to raw data
    and the tab says where. The profile and renderer modules load polars and altair, so they are
    imported here, by profiled runs only, not by every import of the plugin.
    """
    from nsight_core.profile import build_profile
    from nsight_core.render.html import render_fragment

    if state.clustered and state.attach_report:
        try:
            uploaded = File.from_local_sync(capture.path, remote_destination=_raw_data_destination(capture.path))
            state.notes.append(f"{title}: trace (.nsys-rep) uploaded to {uploaded.path}")
        except Exception:
            log.warning("could not upload the trace %s to the raw data path", capture.path, exc_info=True)
    try:
        state.profiles.append(build_profile(capture.path, state.reports, title))
    except Exception:
        log.warning("could not summarise the trace %s; the GPU Profile tab leaves it out", capture.path,
                    exc_info=True)
    if state.profiles or state.notes:
        flyte.report.get_tab(TAB).replace(render_fragment(state.profiles, state.notes))


def _attaches(state: Profiling) -> bool:
    return state.attach_report and not state.clustered


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def publish_sync(state: Profiling, capture: Capture, title: str) -> None:
    """Report and attach CAPTURE from synchronous code (a `with nsys.range` block in a def task).

    A plain `with` inside an async def task lands here on the task's event loop, where flyte's
    blocking flush and sync traced step would deadlock: the tab is still updated (flyte writes it
    when the task ends) but the trace is left unattached, with a warning saying how to fix it.
    """
    try:
        _summarize(state, capture, title)
        if _on_event_loop():
            log.warning("nsys.range(%r) ran as a plain `with` in an async def task, so its trace is not "
                        "attached: write `async with nsys.range(...)` there", capture.region)
            return
        flyte.report.flush()
        if _attaches(state):
            capture_report_file_sync(str(capture.path))
    except Exception:
        log.warning("publishing the profile of %r failed", capture.region, exc_info=True)


async def publish(state: Profiling, capture: Capture, title: str) -> None:
    """Report and attach CAPTURE from an async task body (nsys stats runs off the event loop)."""
    try:
        await asyncio.to_thread(_summarize, state, capture, title)
        await flyte.report.flush.aio()
        if _attaches(state):
            await capture_report_file(str(capture.path))
    except Exception:
        log.warning("publishing the profile of %r failed", capture.region, exc_info=True)
