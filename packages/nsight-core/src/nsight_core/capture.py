"""A finished capture: the .nsys-rep a stop wrote and what is known about how it was made."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class Capture(BaseModel):
    """One collection, from `nsys start` (or process start) to `nsys stop` (or process exit)."""

    model_config = ConfigDict(frozen=True)

    region: str
    """The region name as the user wrote it (the file name is a sanitised form of it)."""
    path: Path
    """The .nsys-rep file."""
    session: str | None = None
    """The nsys session it was recorded in; None for a whole-process `nsys profile`."""
    duration_s: float | None = None
    """Wall time between start and stop, as seen by the profiled process."""
    nsys_output: str = ""
    """What `nsys stop` printed while writing it: importer errors there mean the trace lost events."""
    overlapped: tuple[str, ...] = ()
    """Regions that could not record while this one did (nested or concurrent ones): nsys records the
    whole process, so their activity is in this trace too. A report must say so, not hide it."""
