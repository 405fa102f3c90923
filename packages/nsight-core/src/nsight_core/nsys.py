"""Finding nsys, and every nsys command line this project runs (:mod:`nsight_core.supervise` runs the long ones). Each
call has a timeout; failures become :class:`~nsight_core.errors.NsysCommandError` with nsys' own words, since its exit
code alone proves little (``nsys start`` on a missing session exits 0, ``nsys stats`` exits 0 for an unknown report)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nsight_core.errors import (
    PERMISSION_REMEDIES,
    ExportDiskFullError,
    NsysCommandError,
    NsysNotFoundError,
    NsysPermissionError,
    is_permission_failure,
)

ENV_NSYS = "NSIGHT_NSYS"
INSTALL_PREFIX_ENV = "NSIGHT_NSYS_PREFIX"

DEFAULT_TRACE: tuple[str, ...] = ("cuda", "nvtx")
CaptureMode = Literal["process", "manual"]
DEFAULT_CAPTURE: CaptureMode = "process"
"""One default for `nsight run` and `Session.run`: the whole run, like the Flyte decorator's 'task'."""


def _seconds(variable: str, default: float) -> float:
    """A timeout from the environment (a positive number of seconds), else DEFAULT."""
    try:
        value = float(os.environ.get(variable, ""))
    except ValueError:
        return default
    return value if value > 0 else default


_EXPORT_FAILED = re.compile(r"^(?:ERROR|Error):|Database file .* invalid", re.MULTILINE)
"""nsys export may exit 0 after an error it printed; its output then decides."""
_DISK_FULL = re.compile(r"disk is full|No space left on device|Error writing bytes to file")
"""What nsys export says when its disk fills: its SQLite export then exits 0 with an empty or partial file."""
# Seconds, each set per run by its variable (e.g. to fit a pod's grace period): stops and exports can take minutes.
QUICK_TIMEOUT = _seconds("NSIGHT_QUICK_TIMEOUT", 30.0)
STOP_TIMEOUT = _seconds("NSIGHT_STOP_TIMEOUT", 900.0)
EXPORT_TIMEOUT = _seconds("NSIGHT_EXPORT_TIMEOUT", 1800.0)
SLICED_EXPORT_VERSIONS = ("2023.4.", "2025.3.")
"""nsys versions whose SQLite exports in slices of time were checked equal to the one-file export on every fixture
(tests/core/test_sliced_export.py); any other exports one file."""

PARQUET_SLICED_VERSIONS = ("2023.4.",)
"""nsys versions whose Parquet exports in slices of time were checked to read as their SQLite export on every fixture
(tests/core/test_sliced_export.py); any other streams a large capture from SQLite. nsys 2025.3's Parquet leaves NVTX
binaryData out (the Python line of each CUDA call) and writes DIAGNOSTIC_EVENT's globalPid unsigned, above Int64."""


def installer_prefix() -> Path:
    """Where scripts/install-nsys.sh puts nsys (the same default as the script)."""
    if prefix := os.environ.get(INSTALL_PREFIX_ENV):
        return Path(prefix)
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "nsight" / "nsys"


# What nsys sets in the processes it profiles to inject its collectors into them (nsys 2023.4.4).
_INJECTION_VARIABLES = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "QUADD_INJECTION_PROXY",
                        "QUADD_INJECTION_CONFIG")
_INJECTION_LIBRARIES = ("libToolsInjection", "libLinuxKeyboardInterceptor")


def uninjected_env() -> dict[str, str]:
    """This environment without nsys' injection (the user's preloads stay), for nsys' own commands: a profiled process
    passes nsys' LD_PRELOAD on, and an injected `nsys` wrapper script's shell is a process `nsys stop` waits for."""
    env = {name: value for name, value in os.environ.items() if name not in _INJECTION_VARIABLES}
    preload = [entry for entry in env.pop("LD_PRELOAD", "").split(":")
               if entry and not Path(entry).name.startswith(_INJECTION_LIBRARIES)]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


CUDA_GRAPH_TRACES = ("graph", "node")
"""nsys --cuda-graph-trace values: ``graph`` records each graph launch whole (nsys' default), ``node`` each kernel."""


def validate_cuda_graph_trace(value: str | None) -> str | None:
    """VALUE (None: nsys' default), checked before any process starts: nsys' own error comes after a launch."""
    if value is not None and value not in CUDA_GRAPH_TRACES:
        raise ValueError(f"cuda_graph_trace={value!r} is not an nsys --cuda-graph-trace value: use 'graph' (each "
                         "launch whole) or 'node' (each kernel of the graph), or leave it out for nsys' default.")
    return value


ENV_PYTHON_BACKTRACE = "NSIGHT_PYTHON_BACKTRACE"
"""Set to 1, `nsight run` and `nsight launch` record Python backtraces without --python-backtrace (as the Flyte
decorator's python_backtrace does)."""
PYTHON_BACKTRACE_THRESHOLD_NS = 10_000
"""Only CUDA calls at least this long get a Python stack, bounding the cost: allocations, frees, copies, syncs."""
PYTHON_BACKTRACE_FLAGS = ("--python-backtrace=cuda", f"--cudabacktrace=all:{PYTHON_BACKTRACE_THRESHOLD_NS}",
                          "--python-sampling=true")
"""The `launch`/`profile` flags that record CUDA calls' Python call stacks and sample the host's Python stack at 1 kHz
(what it did between CUDA calls). nsys takes a call's Python stack with its native one: ``--cudabacktrace`` must name
the calls (one value: nsys 2023.4.4 keeps a list's last kind only, refusing the flag twice) and CPU sampling be on."""


def validate_python_backtrace(python_backtrace: bool, sample: str | None) -> bool:
    """PYTHON_BACKTRACE, checked against SAMPLE before any process starts: nsys takes the stacks with CPU samples."""
    if python_backtrace and sample == "none":
        raise ValueError("python_backtrace needs nsys' CPU sampling, which sample='none' turns off: leave sample out "
                         "(nsys' default) or set it to 'process-tree'.")
    return bool(python_backtrace)


def _recording_options(cuda_graph_trace: str | None, python_backtrace: bool) -> list[str]:
    """The `nsys launch` and `nsys profile` options (`nsys start` has none) of graph tracing and backtraces."""
    graphs = [] if cuda_graph_trace is None else [f"--cuda-graph-trace={validate_cuda_graph_trace(cuda_graph_trace)}"]
    return [*graphs, *(PYTHON_BACKTRACE_FLAGS if python_backtrace else ())]


def _sampling(sample: str | None) -> list[str]:
    """nsys' --sample option of SAMPLE (`nsys start` and `profile`); none for nsys' default."""
    return [] if sample is None else [f"--sample={sample}"]


@functools.cache
def _find(env_value: str | None, path_value: str | None, prefix: str) -> Nsys:
    tried: list[str] = []
    for label, candidate in ((f"${ENV_NSYS}", os.environ.get(ENV_NSYS)), ("nsys on PATH", shutil.which("nsys")),
                             ("the project's installer location", str(installer_prefix() / "bin" / "nsys"))):
        if not candidate:
            tried.append(f"{label}: not set" if label.startswith("$") else f"{label}: not found")
            continue
        if found := nsys_at(candidate):
            return found
        tried.append(f"{label}: {candidate} does not run (`{candidate} --version` failed)")
    raise NsysNotFoundError(f"No usable nsys (NVIDIA Nsight Systems CLI) was found. Looked at, in order: "
                            f"{'; '.join(tried)}. Install it with scripts/install-nsys.sh (or NVIDIA's installer), put "
                            f"it on PATH, or set {ENV_NSYS} to the nsys binary.")


def nsys_at(path: str) -> Nsys | None:
    """The nsys at PATH when it runs, else None."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=QUICK_TIMEOUT,
                                env=uninjected_env())
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", result.stdout)
    return Nsys(path=Path(path), version=match.group(1)) if result.returncode == 0 and match else None


def find_nsys() -> Nsys:
    """The nsys to use: $NSIGHT_NSYS, then `nsys` on PATH, then the installer's location."""
    return _find(os.environ.get(ENV_NSYS), os.environ.get("PATH"), str(installer_prefix()))


def kill_group(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group PROCESS leads (started in a session of its own), whatever of it still runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


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

    def _run(self, args: Sequence[str], timeout: float, what: str, again_if_lost: bool = False) -> NsysResult:
        """Run one nsys command (:meth:`_run_once`) within TIMEOUT; AGAIN_IF_LOST: once more, in what is left of
        TIMEOUT, where it failed because nsys lost its agent (it did nothing)."""
        deadline = time.monotonic() + timeout
        result = self._run_once(args, timeout, what)
        if again_if_lost and result.returncode != 0 and lost_its_agent(result.output):
            time.sleep(0.5)
            result = self._run_once(args, max(deadline - time.monotonic(), 1.0), what)
        return result

    def _run_once(self, args: Sequence[str], timeout: float, what: str, program: Path | None = None) -> NsysResult:
        """PROGRAM (nsys unless given: one of its helpers) with ARGS in a process group of its own, killed whole after
        TIMEOUT; a permission marker counts only when it failed (nsys prints such words)."""
        argv = [str(program or self.path), *args]
        try:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       stdin=subprocess.DEVNULL, errors="replace", start_new_session=True,
                                       env=uninjected_env())
        except OSError as exc:
            raise NsysCommandError(f"{what}: could not run {self.path}: {exc}") from exc
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException as exc:  # also KeyboardInterrupt, a signal handler's exit: never orphan nsys
            kill_group(process)
            if not isinstance(exc, subprocess.TimeoutExpired):
                process.wait()
                raise
            process.communicate()
            raise NsysCommandError(
                f"{what}: `{' '.join(argv)}` did not finish within {timeout:.0f} s and was stopped. "
                "A very large trace can take this long; record a shorter region (capture='manual').") from exc
        result = NsysResult(process.returncode, stdout, stderr)
        if result.returncode != 0 and is_permission_failure(result.output):
            raise NsysPermissionError(f"{what} failed: {result.output[-2000:]}\n{PERMISSION_REMEDIES}")
        return result

    def launch_argv(self, session: str, trace: Sequence[str], command: Sequence[str],
                    cuda_graph_trace: str | None = None, python_backtrace: bool = False) -> list[str]:
        """`nsys launch`: start COMMAND in a session that records nothing until `nsys start`."""
        return [str(self.path), "launch", f"--session-new={session}", f"--trace={','.join(trace)}",
                *_recording_options(cuda_graph_trace, python_backtrace), "--wait=primary", *command]

    def profile_argv(self, session: str, output: Path, trace: Sequence[str], sample: str | None,
                     command: Sequence[str], cuda_graph_trace: str | None = None,
                     python_backtrace: bool = False) -> list[str]:
        """`nsys profile`: record COMMAND from start to exit into OUTPUT.nsys-rep, in nsys session SESSION (named, so
        that `nsys stop` can end the collection early, keeping the trace so far, while COMMAND runs on)."""
        return [str(self.path), "profile", f"--session-new={session}", f"--trace={','.join(trace)}",
                *_recording_options(cuda_graph_trace, python_backtrace), "-o", str(output), "--force-overwrite=true",
                "--wait=primary", *_sampling(sample), *command]

    def sessions(self) -> str:
        return self._run(["sessions", "list"], QUICK_TIMEOUT, "nsys sessions list", again_if_lost=True).stdout

    def start(self, session: str, output: Path, sample: str | None) -> NsysResult:
        return self._run(["start", f"--session={session}", "-o", str(output), "--force-overwrite=false",
                          *_sampling(sample)], QUICK_TIMEOUT, "nsys start", again_if_lost=True)

    def stop(self, session: str, timeout: float = STOP_TIMEOUT) -> NsysResult:
        """`nsys stop`, once more where it lost its agent: the collection would record on, its trace never written
        (a stop that did stop is refused as not allowed then, and the trace it wrote decides)."""
        return self._run(["stop", f"--session={session}"], timeout, "nsys stop", again_if_lost=True)

    @staticmethod
    def is_busy(result: NsysResult) -> bool:
        """True when nsys refused because a collection is already running in the session."""
        return "not allowed in this state" in result.output

    @functools.cached_property
    def importer(self) -> Path | None:
        """nsys' QdstrmImporter (raw stream to report) in its installation's ``host-*/``; None for a stand-in nsys."""
        return next(iter(sorted(self.path.resolve().parent.parent.glob("host-*/QdstrmImporter"))), None)

    def import_kept_stream(self, base: Path, timeout: float = STOP_TIMEOUT) -> NsysResult | None:
        """Import BASE.qdstrm, the raw stream nsys kept (its import failed, or "succeeded with non-fatal errors": a
        clean one replaces that report), again within TIMEOUT; the result where it wrote BASE.nsys-rep, else None."""
        stream, report = (base.with_name(base.name + suffix) for suffix in (".qdstrm", ".nsys-rep"))
        if not stream.is_file() or self.importer is None:
            return None
        beside = report.exists()
        target = base.with_name(base.name + ".import.nsys-rep") if beside else report
        args = ["--input-file", str(stream), "--output-file", str(target), "--force-overwrite"]
        result = self._run_once(args, timeout, "QdstrmImporter", program=self.importer)
        if beside:
            stream.unlink(missing_ok=True)
            if result.returncode != 0 or not target.exists():
                target.unlink(missing_ok=True)
                return None
            os.replace(target, report)
        elif result.returncode in _IMPORTED:
            stream.unlink(missing_ok=True)
        else:  # whatever a failed import left is no report
            report.unlink(missing_ok=True)
        said = [line for line in re.split(r"[\r\n]+", result.stdout) if line.strip() and "Processing [" not in line]
        if result.returncode != 0:  # in nsys' words, which the completeness check reads
            said.append(f"Importer error status: QdstrmImporter exited {result.returncode}"
                        f"{' (importation succeeded with non-fatal errors)' if result.returncode == 3 else ''}.")
        return NsysResult(result.returncode, "\n".join(said), result.stderr)

    def export(self, report: Path, output: Path, kind: str, times: str | None = None,
               tables: str | None = None) -> None:
        """`nsys export --type KIND` of REPORT to OUTPUT (a file, or a directory for arrowdir); only the events of the
        time range TIMES (``--times``, nsys' syntax) and the tables matching TABLES (``--tables``) where given."""
        only = [*(["--times", times] if times else []), *(["--tables", tables] if tables else [])]
        # NVTX binary payloads (the Python backtraces of CUDA calls) are NULL in an SQLite export without it.
        blobs = ["--include-blobs=true"] if kind == "sqlite" and "--include-blobs" in self._export_help else []
        result = self._run(["export", "--type", kind, "--force-overwrite=true", "--quiet=true", *only, *blobs,
                            "-o", str(output), str(report)], EXPORT_TIMEOUT, "nsys export")
        if _DISK_FULL.search(result.output):
            raise ExportDiskFullError(report, output.parent.resolve())
        if result.returncode != 0 or not output.exists() or _EXPORT_FAILED.search(result.output):
            raise NsysCommandError(f"nsys export of {report} failed (exit {result.returncode}): "
                                   f"{result.output[-2000:].strip()}. Check that the file is a complete .nsys-rep (a "
                                   "collection that was killed leaves none).")

    @functools.cached_property
    def _export_help(self) -> str:
        return self._run(["export", "--help"], QUICK_TIMEOUT, "nsys export --help").output

    @property
    def export_types(self) -> frozenset[str]:
        """The export types this nsys knows (`nsys export --help`: sqlite, arrowdir, ...)."""
        match = re.search(r"Possible values are:\s*([a-z, \n\t]+?)\.", self._export_help)
        return frozenset(re.findall(r"[a-z]+", match.group(1)) if match else ()) - {"and"}

    @property
    def exports_time_slices(self) -> bool:
        """Whether a capture's SQLite export may be made in slices of time side by side (trace/export.py): this nsys'
        export takes ``--times`` and ``--tables``, documents "non-strict" ranges, and is of SLICED_EXPORT_VERSIONS."""
        return self.version.startswith(SLICED_EXPORT_VERSIONS) and all(
            word in self._export_help for word in ("--times", "--tables", "non-strict"))

    @property
    def exports_parquet_slices(self) -> bool:
        """Whether a streamed capture may be exported to Parquet in slices of time and scanned as nsys wrote it
        (trace/parquet.py): this nsys slices exports, has the parquetdir export, and is of PARQUET_SLICED_VERSIONS."""
        return (self.exports_time_slices and "parquetdir" in self.export_types
                and self.version.startswith(PARQUET_SLICED_VERSIONS))

    def stats(self, sqlite: Path, reports: Sequence[str], prefix: Path) -> NsysResult:
        """One `nsys stats` call writing PREFIX_<report>.csv for every report."""
        args = ["stats", "-r", ",".join(reports), "-f", "csv", "-o", str(prefix), str(sqlite)]
        return self._run(args, EXPORT_TIMEOUT, "nsys stats")

    @functools.cached_property
    def available_reports(self) -> frozenset[str]:
        """Report names this nsys knows: its --help-reports list and the scripts in its reports dir."""
        listing = self._run(["stats", "--help-reports"], QUICK_TIMEOUT, "nsys stats --help-reports").output
        names = {match.group(1) for line in listing.splitlines()
                 if (match := re.match(r"\s+([A-Za-z0-9_]+)(?:\[.*?\])*\s+--\s", line))}
        for reports_dir in self.path.resolve().parent.parent.glob("host-*/reports"):
            names.update(p.stem for p in reports_dir.glob("*.py"))
        return frozenset(names)


_IMPORTED = (0, 3)
"""QdstrmImporter's exit codes when it wrote the report (3: "Importation succeeded with non-fatal errors"; 2 failed)."""

_LOST_AGENT = re.compile(r"Connection to Agent lost|Local Endpoint is not available|^\s*End of file\.?\s*$"
                         r"|^\s*Connection refused\.?\s*$", re.MULTILINE)
"""What nsys 2023.4.4 says when it loses its agent under load (a command that failed so did nothing); a bare
"Connection refused" ends a launch before the command starts."""


def lost_its_agent(nsys_output: str) -> bool:
    """Whether nsys says it lost its agent (a transient failure of 2023.4.4 under load, not a setting)."""
    return bool(_LOST_AGENT.search(nsys_output))
