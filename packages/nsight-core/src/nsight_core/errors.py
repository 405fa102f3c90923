"""The one exception family of nsight-core: every failure a user can hit derives from :class:`NsightError`, so a caller
(the Flyte adapter, a script, the CLI) can catch profiling problems without catching its own bugs. Messages say what
failed and what to do about it."""

from __future__ import annotations

from pathlib import Path

PERMISSION_REMEDIES = (
    "nsys was denied the access it needs. Remedies: (1) for the osrt trace domain, give the container CAP_SYS_ADMIN "
    "and an unconfined AppArmor profile (in Flyte: pod_template=flyte.PodTemplate().allow_nested_sandboxing(), which "
    "needs the kubernetes package), or drop 'osrt' from trace; (2) for ERR_NVGPUCTRPERM, a cluster administrator sets "
    "the NVIDIA driver option NVreg_RestrictProfilingToAdminUsers=0 on the GPU nodes. The cuda, nvtx, cudnn and "
    "cublas domains need no extra permissions."
)

_PERMISSION_MARKERS = ("ERR_NVGPUCTRPERM", "insufficient privileges", "permission denied")


class NsightError(Exception):
    """Base class of every error nsight-core raises on purpose."""


class NsysNotFoundError(NsightError):
    """No usable nsys binary was found."""


class NsysCommandError(NsightError):
    """An nsys command failed, timed out, or did not do what it reported."""


class ReportTooNewError(NsysCommandError):
    """A .nsys-rep from a newer nsys than the installed one, which cannot read it; the message gives the ways out."""


class ExportDiskFullError(NsysCommandError):
    """`nsys export` ran out of disk space in FOLDER (its SQLite export then exits 0 with an empty file)."""

    def __init__(self, report: Path, folder: Path) -> None:
        super().__init__(
            f"nsys export of {report} ran out of disk space in {folder}: free some space there (an export takes "
            f"4-10x the .nsys-rep, and a large capture's is also copied to Parquet beside it), or pass a copy of the "
            "capture in a folder with more room.")
        self.folder = folder


class NsysPermissionError(NsysCommandError):
    """nsys ran but was refused the privileges it needs; the message carries the remedies."""


class StatsError(NsightError):
    """A report file or export could not be read."""


class NotEnoughMemoryError(NsightError):
    """An export or summary would take more memory than allowed (:mod:`nsight_core.memory`); the trace is kept."""


def is_permission_failure(text: str) -> bool:
    """True when nsys output names one of the known permission failures."""
    lowered = text.lower()
    return any(marker.lower() in lowered for marker in _PERMISSION_MARKERS)


class CommandNotFoundError(NsightError):
    """The command to profile does not exist; nothing was run."""


class CommandNotExecutableError(CommandNotFoundError):
    """The command to profile is a file that cannot be executed (a shell's 126); nothing was run."""


def one_line(error: BaseException | str) -> str:
    """ERROR as one log line: nsys' multi-line messages folded, so each warning stays one line."""
    return " ".join(str(error).split())
