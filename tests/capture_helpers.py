"""CPU captures made with real nsys for the tests: a Python body inside `nsight_core.range`, NVTX + OS runtime."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nsight_core import cli, find_nsys


def run_captured(argv: Sequence[str | Path], *, timeout: float, **options: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run(ARGV, capture_output=True, text=True), through files: only ARGV's end is awaited.

    A helper nsys leaves behind (its agent, after "Connection to Agent lost" on a loaded machine)
    inherits the command's stdout and stderr and can hold a pipe open for minutes after everything
    the test started has ended; a file has no reader to block.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(list(argv), stdout=out, stderr=err, text=True, timeout=timeout, **options)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(done.args, done.returncode, out.read(), err.read())


def nsight_here(*args: str | Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`nsight ARGS` run by the CLI's own ``main`` in the test's process, with ENV (None: this process') as the whole
    environment: the exit code, stdout and stderr (its log lines too) that the command prints, without a fresh
    interpreter importing Polars for each call. For tests of what `stats`, `report`, `export` and `diff` answer;
    what only a process shows (streams, signals, its exit status) keeps subprocesses."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level, environ = root.handlers[:], root.level, dict(os.environ)
    root.handlers = []  # main's logging.basicConfig then writes to the redirected stderr, as the command's does
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main([str(arg) for arg in args])
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        root.handlers = handlers
        root.setLevel(level)
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess(["nsight", *map(str, args)], code, out.getvalue(), err.getvalue())


def capture_cpu(folder: Path, body: str, region: str = "work") -> Path:
    """Run BODY (Python, inside `with nsight_core.range(REGION):`) under real nsys, CPU only; its .nsys-rep."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "script.py"
    script.write_text("import time, nvtx, nsight_core\n"
                      f"with nsight_core.range({region!r}):\n" + textwrap.indent(textwrap.dedent(body), "    "))
    done = run_captured(
        [sys.executable, "-m", "nsight_core.cli", "run", "--capture", "manual", "--trace", "nvtx,osrt",
         "--sample", "none", "-o", str(folder / "out"), "--", sys.executable, str(script)], timeout=240)
    assert done.returncode == 0, done.stderr
    reports = sorted((folder / "out").glob("*.nsys-rep"))
    assert len(reports) == 1, (done.stdout, done.stderr)
    return reports[0]


CPU_STEPS = (6, 0.01, 0.002)
"""The loop of the CPU capture the tests share (`cpu_steps`, tests/conftest.py): steps, each step's sleep (data) and
spin (compute), in seconds."""


def sleepy_steps(steps: int, sleep_s: float, busy_s: float, name: str = "step") -> str:
    """A training-loop shape on the CPU: each <NAME>_<i> loads data (a sleep), then computes (a spin)."""
    return f"""
        for i in range({steps}):
            with nvtx.annotate(f"{name}_{{i}}"):
                with nvtx.annotate("data"):
                    time.sleep({sleep_s})
                with nvtx.annotate("compute"):
                    t = time.perf_counter()
                    while time.perf_counter() - t < {busy_s}:
                        pass
    """


def stand_in_nsys(folder: Path, script: str, real: Path | None = None) -> Path:
    """A stand-in nsys, FOLDER/stand-in/bin/nsys, that runs SCRIPT (sh, $REAL the real nsys or REAL, "$@" its
    arguments), laid out as an installation: beside its folder are REAL's ``host-*`` folders. nsight finds nsys'
    importer there, as it does beside any nsys, and imports once more a raw stream nsys' own import failed on
    (2023.4.4 under load); a stand-in without it keeps that stream, which then fails the case that checks nothing is
    left."""
    real = real or find_nsys().path
    root = folder / "stand-in"
    (root / "bin").mkdir(parents=True)
    for host in real.resolve().parent.parent.glob("host-*"):
        (root / host.name).symlink_to(host)
    fake = root / "bin" / "nsys"
    fake.write_text(f"#!/bin/sh\nREAL={real}\n{script}")
    fake.chmod(0o755)
    return fake


def nsys_whose_importer_fails_once(folder: Path, status: int = 2, times: int = 1) -> tuple[dict[str, str], Path]:
    """The real nsys, installed anew under FOLDER (links to the real files), whose QdstrmImporter fails its
    first import as 2023.4.4's did under load: with STATUS 2 it writes nothing ("Importer error status:
    Importation failed"), with 3 it writes the report and ends as "Importation succeeded with non-fatal
    errors". Every later import (after TIMES) is the real importer's. The environment that selects it, and the
    file that logs each import.

    nsys runs its importer from ``host-<platform>/`` beside the folder of the binary it runs as, so the binary
    is a hard link (a copy across filesystems) and everything else a symbolic link."""
    binary = find_nsys().path.resolve()
    real = binary.parent.parent
    root, imports = folder / "nsys", folder / "imports.log"
    for part in real.iterdir():
        if part.name.startswith(("host-", "target-")):
            (root / part.name).mkdir(parents=True)
            for item in part.iterdir():
                (root / part.name / item.name).symlink_to(item)
        else:
            (root / part.name).symlink_to(part)
    copy = root / binary.relative_to(real)
    copy.unlink()
    try:
        os.link(binary, copy)
    except OSError:
        shutil.copy2(binary, copy)
    [importer] = root.glob("host-*/QdstrmImporter")
    real_importer = importer.resolve()
    importer.unlink()
    first_import = f'{real_importer} "$@"; ' if status == 3 else ""  # non-fatal: the report is written
    importer.write_text(f"""#!/bin/sh
[ "$1" = --version ] && exec {real_importer} "$@"
echo "$*" >> {imports}
[ "$(wc -l < {imports})" -gt {times} ] || {{ {first_import}exit {status}; }}
exec {real_importer} "$@"
""")
    importer.chmod(0o755)
    return {"NSIGHT_NSYS": str(copy)}, imports
