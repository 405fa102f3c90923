"""``@nsys_profile``: run a Flyte task under Nsight Systems without touching its signature or body.

Two halves, because a Flyte task runs twice over: where it is defined (``flyte run`` / ``flyte
deploy`` read the task's container environment) and in its container (the runtime imports the
module again and calls ``execute``).

* Stamping: the task's env vars get ``_F_EXEC_WRAPPER`` (and ``_F_EXEC_WRAPPER_CLUSTERED`` for a
  clustered task), which makes the runtime re-exec the action under ``nsight launch``. The wrapper
  starts with ``/bin/sh``, not ``nsight``: the runtime execvp's its first word, so a console script
  missing from the image's PATH would kill the task before its body. The script finds nsight-core
  (PATH, beside the entrypoint, the entrypoint's interpreter) or runs the action unprofiled with
  one warning, and ``nsight launch`` does the same when the image has no usable nsys.
* Executing: ``execute`` is wrapped to record the body (``capture="task"``) or to let ``nsys.range``
  blocks record (``capture="manual"``), then render the GPU Profile tab and attach the trace.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast, get_args, overload

from flyte import AsyncFunctionTaskTemplate
from flyte.models import is_clustered_worker_env

from flyteplugins.nsight import _flyte_io
from flyteplugins.nsight.nsys import ProfiledRange
from nsight_core import (
    DEFAULT_REPORTS,
    DEFAULT_TRACE,
    ENV_PYTHON_BACKTRACE,
    Session,
    validate_cuda_graph_trace,
    validate_python_backtrace,
    validate_trace,
)
from nsight_core.launch import exec_wrapper

log = logging.getLogger("flyteplugins.nsight")

CaptureMode = Literal["task", "manual"]
T = TypeVar("T", bound=AsyncFunctionTaskTemplate)

EXEC_WRAPPER = "_F_EXEC_WRAPPER"
EXEC_WRAPPER_CLUSTERED = "_F_EXEC_WRAPPER_CLUSTERED"
# Expanded by the runtime in the container, so every action of every run gets its own session.
SESSION_TEMPLATE = "nsight-${RUN_NAME}-${ACTION_NAME}"
_WORD = re.compile(r"^[A-Za-z0-9_.:=-]+$")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The decorator's arguments, checked: bad values fail when the module is imported."""

    trace: tuple[str, ...]
    sample: str | None
    capture: CaptureMode
    reports: tuple[str, ...]
    attach_report: bool
    perfetto: bool = False
    cuda_graph_trace: str | None = None
    python_backtrace: bool = False

    @classmethod
    def of(cls, trace: Sequence[str] | str, sample: str | None, capture: str,
           reports: Sequence[str] | str, attach_report: bool, perfetto: bool = False,
           cuda_graph_trace: str | None = None, python_backtrace: bool = False) -> Settings:
        if capture not in get_args(CaptureMode):
            raise ValueError(f"capture={capture!r} is not a capture mode: use 'task' (the whole task body) "
                             "or 'manual' (only nsys.range blocks).")
        if sample is not None and (not isinstance(sample, str) or not _WORD.match(sample)):
            raise ValueError(f"sample={sample!r} is not an nsys --sample value: use e.g. 'cpu' or 'none', "
                             "or leave it out for nsys' default.")
        names = (reports,) if isinstance(reports, str) else tuple(reports)
        for name in names:
            if not isinstance(name, str) or not _WORD.match(name):
                raise TypeError(f"report {name!r} is not a report name: reports must be nsys stats report "
                                f"names (strings) such as {', '.join(DEFAULT_REPORTS)}.")
        return cls(validate_trace(trace), sample, cast(CaptureMode, capture), names, bool(attach_report),
                   bool(perfetto), validate_cuda_graph_trace(cuda_graph_trace),
                   validate_python_backtrace(python_backtrace, sample))

    def container_env(self, clustered: bool) -> dict[str, str]:
        """The env vars that make the runtime re-exec the action under `nsight launch`."""
        wrapper = exec_wrapper(SESSION_TEMPLATE, self.trace, self.sample, self.cuda_graph_trace)
        env = {EXEC_WRAPPER: shlex.join(wrapper)}
        if self.python_backtrace:  # read by `nsight launch` under the wrapper, whose words stay the same
            env[ENV_PYTHON_BACKTRACE] = "1"
        if clustered:
            # The runtime then wraps only global rank 0; every other rank runs as if undecorated.
            env[EXEC_WRAPPER_CLUSTERED] = "1"
        return env


def _is_clustered(task: AsyncFunctionTaskTemplate) -> bool:
    """Whether TASK is a clustered (torchrun) task.

    flyte.clustered is not imported for this: with flyte.extend under it, it costs ~30 ms, more than
    the whole plugin, in every process that imports the plugin. A clustered task's class comes from
    that module, so where it was never imported no task can be one.
    """
    module = sys.modules.get("flyte.clustered")
    return module is not None and isinstance(task, module.ClusteredTaskTemplate)


def _profile(task: T, settings: Settings) -> T:
    """Stamp TASK in place and wrap its execute; `override` copies get the same treatment.

    In place, so the environment's task registry (what `flyte deploy` serialises) holds the profiled
    task. `task.override(env_vars=...)` replaces the env dict and builds a fresh copy without our
    execute, so the override is wrapped to stamp and wrap that copy too.
    """
    clustered = _is_clustered(task)
    task.env_vars = {**(task.env_vars or {}), **settings.container_env(clustered)}
    task.report = True
    execute = task.execute
    override = task.override
    name = task.short_name or task.name

    async def profiled_execute(*args: Any, **kwargs: Any) -> Any:
        session = Session.current()
        if session is None:
            log.debug("%s is not running under nsys launch (a local run, or nsys is missing); it runs "
                      "unprofiled", name)
            return await execute(*args, **kwargs)
        state = _flyte_io.Profiling(session, settings.reports, settings.attach_report,
                                    clustered=is_clustered_worker_env(os.environ), perfetto=settings.perfetto)
        token = _flyte_io.active.set(state)
        state.context = contextvars.copy_context()
        _flyte_io.task_state = state
        try:
            if settings.capture == "manual":
                return await execute(*args, **kwargs)
            async with ProfiledRange(name, f"Nsight task: {name}"):
                return await execute(*args, **kwargs)
        finally:
            _flyte_io.task_state = None
            _flyte_io.active.reset(token)

    def profiled_override(**kwargs: Any) -> T:
        return _profile(cast(T, override(**kwargs)), settings)

    task.execute = profiled_execute  # type: ignore[method-assign]
    task.override = profiled_override  # type: ignore[method-assign]
    return task


@overload
def nsys_profile(task: T, /) -> T: ...


@overload
def nsys_profile(*, trace: Sequence[str] | str = ..., sample: str | None = ..., capture: CaptureMode = ...,
                 reports: Sequence[str] | str = ..., attach_report: bool = ...,
                 enabled: bool = ..., perfetto: bool = ...,
                 cuda_graph_trace: Literal["graph", "node"] | None = ...,
                 python_backtrace: bool = ...) -> Callable[[T], T]: ...


def nsys_profile(task: T | None = None, /, *, trace: Sequence[str] | str = DEFAULT_TRACE,
                 sample: str | None = None, capture: CaptureMode = "task",
                 reports: Sequence[str] | str = DEFAULT_REPORTS, attach_report: bool = True,
                 enabled: bool = True, perfetto: bool = False,
                 cuda_graph_trace: Literal["graph", "node"] | None = None,
                 python_backtrace: bool = False) -> T | Callable[[T], T]:
    """Profile a Flyte task with NVIDIA Nsight Systems; place it above ``@env.task``.

    Args:
        trace: nsys trace domains, passed through (``osrt`` needs extra pod permissions).
        sample: CPU sampling, passed to ``nsys --sample``; None keeps nsys' default.
        capture: ``"task"`` records the whole body; ``"manual"`` records only ``nsys.range`` blocks.
        reports: the nsys stats reports the GPU Profile tab shows.
        attach_report: also attach the .nsys-rep (as the output of a ``capture_report_file`` step).
        enabled: False returns the task unchanged, so profiling can be switched off per run.
        perfetto: also attach each capture's whole timeline as Perfetto JSON (``<name>.perfetto.json.gz``, for
            ui.perfetto.dev or chrome://tracing) beside its .nsys-rep; needs ``attach_report``. Off by default:
            it costs about 3 s and 9-13 MB (gzip) per million events.
        cuda_graph_trace: passed to ``nsys --cuda-graph-trace``: ``"graph"`` records each CUDA graph launch whole
            (nsys 2025 records it on the GPU as one piece of work), ``"node"`` each kernel of the graph, by name
            (more events). None keeps nsys' default (graph where the CUDA driver is 11.7 or newer).
        python_backtrace: record the Python call stack of each CUDA call of 10 µs or longer (allocations, frees,
            copies, synchronisations) and sample it 1,000 times a second, so that findings can name the line of code
            that caused them. Off by default: it costs host time. Needs nsys' CPU sampling (not ``sample="none"``).

    Arguments are checked even when ``enabled`` is False: a typo should fail on the first import,
    not on the first profiled run.
    """
    settings = Settings.of(trace, sample, capture, reports, attach_report, perfetto, cuda_graph_trace,
                           python_backtrace)

    def decorate(target: T) -> T:
        if not isinstance(target, AsyncFunctionTaskTemplate):
            raise TypeError(f"@nsys_profile got {target!r}, not a Flyte task: place @nsys_profile above "
                            "@env.task (it must be the outermost decorator).")
        return _profile(target, settings) if enabled else target

    return decorate(task) if task is not None else decorate
