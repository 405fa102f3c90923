"""A session's settings, handed to its processes through their environment, and nsys' words when it writes no trace:
what both the parent (:mod:`nsight_core.session`) and child (:mod:`nsight_core.collection`) side read."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_core.errors import one_line
from nsight_core.nsys import DEFAULT_TRACE, ENV_NSYS

ENV_SESSION = "NSIGHT_SESSION"
ENV_OUTPUT_DIR = "NSIGHT_OUTPUT_DIR"
ENV_SAMPLE = "NSIGHT_SAMPLE"
ENV_TRACE = "NSIGHT_TRACE"
ENV_CLAIMS = "NSIGHT_CLAIMS"
RUNS_DIR = "nsight-runs"
LATEST = "latest"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize(name: str, fallback: str = "nsight", max_length: int = 96) -> str:
    """A name safe as an nsys session name and a file name: only [A-Za-z0-9._-], no leading dot/dash."""
    return _SAFE.sub("_", name).strip("._-")[:max_length].strip("._-") or fallback


def validate_trace(trace: Sequence[str] | str) -> tuple[str, ...]:
    """Check trace domains early: nsys' own error for a bad list arrives only after a process start."""
    domains = (trace,) if isinstance(trace, str) else tuple(trace)
    if not domains:
        raise ValueError("trace is empty: give at least one nsys trace domain, e.g. ('cuda', 'nvtx').")
    for domain in domains:
        if not isinstance(domain, str) or not domain or re.search(r"[\s,]", domain):
            raise ValueError(f"trace domain {domain!r} is not valid: each domain is one word such as 'cuda', 'nvtx', "
                             "'osrt' (pass several as a list, not one comma-separated string).")
    return domains


@dataclass(frozen=True)
class Settings:
    """One session as every process in it sees it: put into the command's environment by the parent (:meth:`to_env`),
    read back by each process nsys starts (:meth:`from_env`). Paths are absolute: the program may change directory."""

    name: str
    trace: tuple[str, ...]
    output_dir: Path
    sample: str | None = None
    nsys: Path | None = None
    """The nsys the parent found: the processes in the session use the same one."""
    claims: Path | None = None
    """A file each region appends the report base it claimed to (`Session.run` reads it: its reports)."""

    def to_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """BASE (this process's environment by default) with this session in it, and nothing stale."""
        values = {ENV_SESSION: self.name, ENV_OUTPUT_DIR: str(self.output_dir), ENV_TRACE: ",".join(self.trace),
                  ENV_SAMPLE: self.sample, ENV_NSYS: str(self.nsys.absolute()) if self.nsys else None,
                  ENV_CLAIMS: str(self.claims) if self.claims else None}
        env = {name: value for name, value in (os.environ if base is None else base).items() if name not in values}
        return env | {name: value for name, value in values.items() if value is not None}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings | None:
        """The session ENVIRON (this process's by default) was launched into; None outside one."""
        env = os.environ if environ is None else environ
        if not (name := env.get(ENV_SESSION)):
            return None
        output_dir = Path(env.get(ENV_OUTPUT_DIR) or default_output_dir(sanitize(name)))
        return cls(name=sanitize(name), trace=validate_trace(env.get(ENV_TRACE, ",".join(DEFAULT_TRACE)).split(",")),
                   output_dir=output_dir.absolute(), sample=env.get(ENV_SAMPLE),
                   nsys=Path(path) if (path := env.get(ENV_NSYS)) else None,
                   claims=Path(claims) if (claims := env.get(ENV_CLAIMS)) else None)


def default_output_dir(session_name: str) -> Path:
    """Where a launched session writes its reports when nobody said: a temp folder per session."""
    return Path(tempfile.gettempdir()) / "nsight" / session_name


_DISK_FULL = re.compile(r"no space left on device|disk quota exceeded|ENOSPC", re.IGNORECASE)
_NSYS_ERROR = re.compile(r"^.*(?:error|illegal|invalid|unknown|unrecognized|failed|cannot|not found).*$",
                         re.IGNORECASE | re.MULTILINE)


def diagnose(nsys_output: str, where: Path) -> str | None:
    """The cause nsys gave for not writing a trace, as one sentence with a remedy; None when it gave none."""
    if match := _DISK_FULL.search(nsys_output):
        line = one_line(nsys_output[nsys_output.rfind("\n", 0, match.start()) + 1:].splitlines()[0])
        return (f"the disk filled up while nsys wrote the trace ({line}): free space where {where} and "
                "$TMPDIR are, or write the trace to a larger disk")
    if match := _NSYS_ERROR.search(nsys_output):
        return f"nsys refused or failed: {one_line(match.group(0))}"
    return None
