"""The exec wrapper: what a container runtime re-execs an action into, so it runs under `nsys launch`. Public (the Flyte
adapter stamps :func:`exec_wrapper` into a task's environment). A missing nsys, a bad setting or too little temp space
costs the profile, never the job: every failure execs the command unprofiled, warned once."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from nsight_core import tempspace
from nsight_core.errors import NsightError, one_line
from nsight_core.nsys import DEFAULT_TRACE, validate_cuda_graph_trace
from nsight_core.session import Session
from nsight_core.settings import default_output_dir, sanitize, validate_trace
from nsight_core.supervise import never_started

__all__ = ["exec_launch", "exec_wrapper"]


def exec_launch(argv: Sequence[str], *, name: str, trace: Sequence[str] | str = DEFAULT_TRACE,
                sample: str | None = None, output_dir: str | Path | None = None,
                cuda_graph_trace: str | None = None, python_backtrace: bool = False) -> NoReturn:
    """Run ARGV under `nsys launch` and exit as it did (128+N after a forwarded SIGTERM/SIGINT: nsys exits 0 when
    signalled), or exec ARGV alone. A random suffix keeps a retry off the last attempt's session and paths."""
    if not argv:
        raise ValueError("no command to launch: give the program and its arguments after --.")
    own: Path | None = None  # the temp folder this launch makes (no OUTPUT_DIR): removed where nothing was written
    try:
        unique = f"{sanitize(name)[:80]}-{uuid.uuid4().hex[:6]}"
        own = None if output_dir else default_output_dir(unique)
        session = Session(unique, trace=trace, sample=sample, output_dir=output_dir or own,
                          cuda_graph_trace=cuda_graph_trace, python_backtrace=python_backtrace)
        session._prepare_output_dir()
        session._nsys_argv("manual")  # finds nsys: without one the command runs unprofiled
    except (NsightError, ValueError, OSError) as exc:
        _exec_unprofiled(argv, one_line(exc), own)
    if why := tempspace.shortfall():
        _exec_unprofiled(argv, why, own)
    finished, _ = session._record(argv, "manual")
    if not finished.started:
        _exec_unprofiled(argv, never_started(finished.nsys_output), own)
    _remove_if_empty(own)
    sys.exit(finished.returncode)


def _exec_unprofiled(argv: Sequence[str], why: str, own: Path | None) -> NoReturn:
    _remove_if_empty(own)
    print(f"nsight: WARNING: profiling is off for this run, {argv[0]} runs unprofiled: {why}",
          file=sys.stderr, flush=True)
    os.execvp(argv[0], list(argv))


def _remove_if_empty(folder: Path | None) -> None:
    """Remove FOLDER if empty (no region recorded): else a launch per task leaves one in the temp folder each time."""
    if folder is not None:
        with contextlib.suppress(OSError):  # not empty, or already gone
            folder.rmdir()


# The exec wrapper for container runtimes (Flyte's _F_EXEC_WRAPPER), POSIX sh: the runtime execvp's its first word, and
# a missing `nsight` would kill the job. `nsight` on PATH, else beside the entrypoint (an unactivated venv), else the
# entrypoint's #! interpreter's `-m nsight_core.cli` (a --target install), else unprofiled after one warning.
# $1 session, $2 trace, $3 sample, $4 graph trace ('': nsys' default), then the command; no $NAME: runtimes expand it.
_WRAPPER = """__nsight_s=$1 __nsight_t=$2 __nsight_m=$3 __nsight_g=$4; shift 4
for __nsight_c in "$(command -v nsight)" "${1%/*}/nsight"; do
  if [ -f "$__nsight_c" ] && [ -x "$__nsight_c" ]; then
    exec "$__nsight_c" launch --session "$__nsight_s" --trace "$__nsight_t" \
      ${__nsight_m:+--sample "$__nsight_m"} ${__nsight_g:+--cuda-graph-trace "$__nsight_g"} -- "$@"
  fi
done
__nsight_p=$(sed -n '1s/^#![[:space:]]*//p;q' "$1" 2>/dev/null)
if [ -n "$__nsight_p" ] && $__nsight_p -c 'import nsight_core.cli' 2>/dev/null; then
  exec $__nsight_p -m nsight_core.cli launch --session "$__nsight_s" --trace "$__nsight_t" \
    ${__nsight_m:+--sample "$__nsight_m"} ${__nsight_g:+--cuda-graph-trace "$__nsight_g"} -- "$@"
fi
echo "nsight: WARNING: profiling is off for this run, $1 runs unprofiled: the nsight command is neither on" \
  "PATH nor beside $1, and ${__nsight_p:-its interpreter} cannot import nsight_core; install nsight-core" \
  "into the task image's Python environment" >&2
exec "$@"
"""


def exec_wrapper(session: str, trace: Sequence[str], sample: str | None,
                 cuda_graph_trace: str | None = None) -> list[str]:
    """The words of an exec wrapper that runs the command it is given under `nsight launch`."""
    return ["/bin/sh", "-c", _WRAPPER, "nsight-wrapper", session, ",".join(validate_trace(trace)), sample or "",
            validate_cuda_graph_trace(cuda_graph_trace) or ""]
