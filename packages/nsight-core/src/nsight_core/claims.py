"""Report names reserved across processes, temp folders that say whether their owner lives, and the raw streams of
traces that never became reports.

A region reserves ``<name>.nsys-rep`` with ``<name>.claim``, an exclusive ``flock`` held while its collection records
and stops: the kernel frees it however its holder dies, so a killed process never leaves a name taken and a reused pid
never fakes an owner. A run's temp folders are claimed alike (:func:`owned_folder`) for the next run to clear."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from nsight_core.tempspace import nsys_temp_dir

REPORT_SUFFIXES = (".nsys-rep", ".qdstrm", ".qdrep")
"""The files a collection leaves under its name: a name with any of them is taken."""
CLAIM = ".claim"


def take_claim(base: Path) -> int | None:
    """Reserve BASE for this process: an exclusive `flock` on BASE.claim; its descriptor, or None when another
    process holds it (a killed one's is free: no name shifts to `x.1`). OSError where the folder is not writable."""
    claim = base.with_name(base.name + CLAIM)
    while True:
        fd = os.open(claim, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(claim)):
                return fd
        os.close(fd)  # its holder deleted the file between our open and our lock: a new one


def release_claim(base: Path, fd: int | None) -> None:
    """Delete BASE's claim, then let go of it (in this order: a waiter then finds no file to lock)."""
    if fd is not None:
        base.with_name(base.name + CLAIM).unlink(missing_ok=True)
        os.close(fd)


def clear_claim(base: Path) -> None:
    """Delete BASE's claim unless a live process holds it (after a run: those of its killed processes)."""
    with contextlib.suppress(OSError):
        release_claim(base, take_claim(base))


OWNER = "owner"
"""The lock file of an :func:`owned_folder`: it holds the folder's note."""


@contextlib.contextmanager
def owned_folder(prefix: str, note: str = "") -> Iterator[Path]:
    """A new temp folder (``$TMPDIR/PREFIX…``), deleted after the block, that says whether its owner lives: OWNER holds
    NOTE (what a killed owner leaves) and a ``flock``, named only once locked, so a lockable one is a dead process's."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    fd = os.open(folder / f".{OWNER}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, note.encode())
        os.rename(folder / f".{OWNER}", folder / OWNER)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def dead_folders(prefix: str) -> Iterator[tuple[Path, str]]:
    """The :func:`owned_folder` folders of PREFIX in $TMPDIR whose owner has died, each with its note; each is
    deleted once the caller has handled it (folders without an OWNER are not such folders: left alone)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            fd = os.open(folder / OWNER, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            yield folder, os.read(fd, 4096).decode(errors="replace")
            shutil.rmtree(folder, ignore_errors=True)
        except BlockingIOError:  # its owner lives
            continue
        finally:
            os.close(fd)


def abandoned(folder: Path, pattern: str) -> Iterator[Path]:
    """The files and folders in FOLDER named by PATTERN (its first group the id of the process that made them) whose
    process is gone: they would stay for good. A live process's, another user's too, may be in use."""
    for leftover in folder.iterdir():
        if (match := re.fullmatch(pattern, leftover.name)) is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            yield leftover
        except OSError:  # the process exists (another user's)
            continue


def remove_raw_streams(base: Path, nsys_output: str) -> None:
    """After a stop that wrote no report: delete the raw .qdstrm beside BASE and those nsys' output names (with the
    disk full they never become reports, and in a pod fill ephemeral storage); another session's stream is live."""
    for stream in (base.with_name(base.name + ".qdstrm"), *named_raw_streams(nsys_output)):
        with contextlib.suppress(OSError):
            stream.unlink()


RAW_STREAM_HEAD = 1024**2
"""How much of a raw stream's start is searched for its header, the profiled command's environment (large in a pod)."""


def remove_raw_streams_of(folder: Path) -> None:
    """Delete the raw streams a killed run left in nsys' temp folder (never reports): those whose header, the recorded
    environment, names FOLDER, the run's dead :func:`owned_folder`; another session's live stream stays."""
    needle = f"={folder}{os.sep}".encode()
    for stream in nsys_temp_dir().glob("nsys-report-*.qdstrm"):
        with contextlib.suppress(OSError), stream.open("rb") as head:
            if needle in head.read(RAW_STREAM_HEAD):
                stream.unlink()


_QDSTRM = re.compile(r"""['"]?(/[^'"\n]*?\.qdstrm)['"]?""")


def named_raw_streams(nsys_output: str) -> list[Path]:
    """The .qdstrm files nsys' messages name ("Generating '/tmp/nsys-report-1a2b.qdstrm'")."""
    return sorted({Path(found) for found in _QDSTRM.findall(nsys_output)})
