"""Finding nsys, and every nsys command line this project runs.

This is the only module that starts an nsys process. Each call has a timeout, and failures become
:class:`~nsight_core.errors.NsysCommandError` with nsys' own words in the message, because an nsys
exit code alone proves little (``nsys start`` on a missing session exits 0, ``nsys stats`` exits 0
for an unknown report).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_core.errors import (
    PERMISSION_REMEDIES,
    NsysCommandError,
    NsysNotFoundError,
    NsysPermissionError,
    is_permission_failure,
)

ENV_NSYS = "NSIGHT_NSYS"
INSTALL_PREFIX_ENV = "NSIGHT_NSYS_PREFIX"

# Seconds. Stops and exports write the whole trace and can take minutes on a long GPU capture.
QUICK_TIMEOUT = 30.0
STOP_TIMEOUT = 900.0
EXPORT_TIMEOUT = 1800.0

_BUSY_MARKERS = ("not allowed in this state",)


def installer_prefix() -> Path:
    """Where scripts/install-nsys.sh puts nsys (the same default as the script)."""
    if prefix := os.environ.get(INSTALL_PREFIX_ENV):
        return Path(prefix)
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "nsight" / "nsys"


def _candidates() -> list[tuple[str, str | None]]:
    found = shutil.which("nsys")
    return [
        (f"${ENV_NSYS}", os.environ.get(ENV_NSYS)),
        ("nsys on PATH", found),
        ("the project's installer location", str(installer_prefix() / "bin" / "nsys")),
    ]


def _version_of(path: str) -> str | None:
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=QUICK_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", result.stdout)
    return match.group(1) if result.returncode == 0 and match else None


@functools.cache
def _find(env_value: str | None, path_value: str | None, prefix: str) -> Nsys:
    tried: list[str] = []
    for label, candidate in _candidates():
        if not candidate:
            tried.append(f"{label}: not set" if label.startswith("$") else f"{label}: not found")
            continue
        version = _version_of(candidate)
        if version:
            return Nsys(path=Path(candidate), version=version)
        tried.append(f"{label}: {candidate} does not run (`{candidate} --version` failed)")
    raise NsysNotFoundError(
        "No usable nsys (NVIDIA Nsight Systems CLI) was found. Looked at, in order: "
        + "; ".join(tried)
        + ". Install it with scripts/install-nsys.sh (or NVIDIA's installer), put it on PATH, "
        f"or set {ENV_NSYS} to the nsys binary."
    )


def nsys_at(path: str) -> Nsys | None:
    """The nsys at PATH when it runs, else None."""
    version = _version_of(path)
    return Nsys(path=Path(path), version=version) if version else None


def find_nsys() -> Nsys:
    """The nsys to use: $NSIGHT_NSYS, then `nsys` on PATH, then the installer's location."""
    return _find(os.environ.get(ENV_NSYS), os.environ.get("PATH"), str(installer_prefix()))


@dataclass(frozen=True)
class NsysResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return (self.stdout + "\n" + self.stderr).strip()


@dataclass(frozen=True)
class Nsys:
    """One nsys installation. Methods map one-to-one onto nsys command lines."""

    path: Path
    version: str

    def _run(self, args: Sequence[str], timeout: float, what: str) -> NsysResult:
        argv = [str(self.path), *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, errors="replace")
        except subprocess.TimeoutExpired as exc:
            raise NsysCommandError(
                f"{what}: `{' '.join(argv)}` did not finish within {timeout:.0f} s and was stopped. "
                "A very large trace can take this long; record a shorter region (capture='manual')."
            ) from exc
        except OSError as exc:
            raise NsysCommandError(f"{what}: could not run {self.path}: {exc}") from exc
        result = NsysResult(done.returncode, done.stdout, done.stderr)
        if is_permission_failure(result.output):
            raise NsysPermissionError(f"{what} failed: {result.output[-2000:]}\n{PERMISSION_REMEDIES}")
        return result

    # -- command lines for processes we do not run ourselves ------------------------------------
    def launch_argv(self, session: str, trace: Sequence[str], command: Sequence[str]) -> list[str]:
        """`nsys launch`: start COMMAND in a session that records nothing until `nsys start`."""
        return [str(self.path), "launch", f"--session-new={session}", f"--trace={','.join(trace)}",
                "--wait=primary", *command]

    def profile_argv(self, output: Path, trace: Sequence[str], sample: str | None,
                     command: Sequence[str]) -> list[str]:
        """`nsys profile`: record COMMAND from start to exit into OUTPUT.nsys-rep."""
        argv = [str(self.path), "profile", f"--trace={','.join(trace)}", "-o", str(output),
                "--force-overwrite=true", "--wait=primary"]
        if sample is not None:
            argv.append(f"--sample={sample}")
        return [*argv, *command]

    def check_launch(self, session: str, trace: Sequence[str]) -> None:
        """Launch `true` with these settings: nsys rejects bad trace domains or a broken install only
        once it runs, and a wrapper that execs into a failing `nsys launch` would take the job with it."""
        result = self._run([*self.launch_argv(f"{session}-check", trace, ["true"])[1:]], QUICK_TIMEOUT,
                           "nsys launch check")
        if result.returncode != 0:
            raise NsysCommandError(f"nsys cannot launch with trace={','.join(trace)}: {result.output[-600:]}")

    # -- session control, from inside a launched process ---------------------------------------
    def sessions(self) -> str:
        return self._run(["sessions", "list"], QUICK_TIMEOUT, "nsys sessions list").stdout

    def start(self, session: str, output: Path, sample: str | None) -> NsysResult:
        args = ["start", f"--session={session}", "-o", str(output), "--force-overwrite=false"]
        if sample is not None:
            args.append(f"--sample={sample}")
        return self._run(args, QUICK_TIMEOUT, "nsys start")

    def stop(self, session: str) -> NsysResult:
        return self._run(["stop", f"--session={session}"], STOP_TIMEOUT, "nsys stop")

    @staticmethod
    def is_busy(result: NsysResult) -> bool:
        """True when nsys refused because a collection is already running in the session."""
        return any(marker in result.output for marker in _BUSY_MARKERS)

    # -- post-processing -----------------------------------------------------------------------
    def export_sqlite(self, report: Path, output: Path) -> None:
        result = self._run(["export", "--type", "sqlite", "--force-overwrite=true", "-o", str(output),
                            str(report)], EXPORT_TIMEOUT, "nsys export")
        if result.returncode != 0 or not output.exists():
            raise NsysCommandError(
                f"nsys export of {report} failed (exit {result.returncode}): {result.output[-2000:]}. "
                "Check that the file is a complete .nsys-rep (a collection that was killed leaves none)."
            )

    def stats(self, sqlite: Path, reports: Sequence[str], prefix: Path) -> NsysResult:
        """One `nsys stats` call writing PREFIX_<report>.csv for every report."""
        args = ["stats", "-r", ",".join(reports), "-f", "csv", "-o", str(prefix), str(sqlite)]
        return self._run(args, EXPORT_TIMEOUT, "nsys stats")

    @functools.cached_property
    def available_reports(self) -> frozenset[str]:
        """Report names this nsys knows: its --help-reports list and the scripts in its reports dir."""
        names: set[str] = set()
        listing = self._run(["stats", "--help-reports"], QUICK_TIMEOUT, "nsys stats --help-reports")
        for line in listing.output.splitlines():
            match = re.match(r"\s+([A-Za-z0-9_]+)(?:\[.*?\])*\s+--\s", line)
            if match:
                names.add(match.group(1))
        for reports_dir in self.path.resolve().parent.parent.glob("host-*/reports"):
            names.update(p.stem for p in reports_dir.glob("*.py"))
        return frozenset(names)


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None,
                timeout: float | None = None) -> int:
    """Run a user's command (already wrapped in an nsys command line) with its own stdio."""
    try:
        return subprocess.run(list(argv), env=dict(env) if env is not None else None, timeout=timeout).returncode
    except subprocess.TimeoutExpired as exc:
        raise NsysCommandError(f"`{' '.join(argv)}` did not finish within {timeout} s and was stopped.") from exc
