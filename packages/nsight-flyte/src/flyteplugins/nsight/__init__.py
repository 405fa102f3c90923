"""flyteplugins.nsight: profile Flyte 2 tasks with NVIDIA Nsight Systems.

``@nsys_profile`` above ``@env.task`` runs the task under nsys and adds a "GPU Profile" report tab;
``nsys.range`` records part of a task (``capture="manual"``); ``nvtx.range`` / ``nvtx.mark`` label
code on the timeline. The work (nsys command lines, stats, rendering) is nsight-core's; this package
only connects it to Flyte.
"""

from flyteplugins.nsight import nsys, nvtx
from flyteplugins.nsight._decorator import nsys_profile
from flyteplugins.nsight._flyte_io import capture_report_file, capture_report_file_sync
from nsight_core import DEFAULT_REPORTS

__all__ = [
    "DEFAULT_REPORTS",
    "capture_report_file",
    "capture_report_file_sync",
    "nsys",
    "nsys_profile",
    "nvtx",
]
