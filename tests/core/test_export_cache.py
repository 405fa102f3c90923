"""The export a capture is read from: made once, reused while current, redone whenever it cannot be trusted.

Every case goes through what a user runs (`load_trace`, `load_stats`, `nsight stats`) on a private copy
of the recorded H200 capture, and checks the numbers against the CSVs `nsys stats` wrote for it on the
H200 machine: a damaged, stale or interrupted export must lead to a new export and the right numbers,
never to "no data" or a traceback. A fake nsys stands in only for what the real one cannot be made to do
here (a process killed mid-export, an nsys without the arrowdir export type).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import nsight_here

from nsight_core import ProfileStats, load_stats, load_trace
from nsight_core.errors import NsysCommandError
from nsight_core.nsys import Nsys
from nsight_core.trace.export import export

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "h200-torch-mlp"
FRAMES = ("kernels", "memcpy", "memset", "cuda_api", "sync", "nvtx", "threads")
NUMBERS = {"kernels", "api_calls", "memory_time", "memory_size", "nvtx_ranges", "skipped"}

pytestmark = pytest.mark.nsys


@functools.cache
def recorded(region: str = "training") -> dict[str, Any]:
    """The five default reports as `nsys stats` wrote them for REGION on the H200 machine."""
    return load_stats(FIXTURE / region).model_dump(mode="json", exclude={"reports"})


def numbers(stats: ProfileStats | dict[str, Any]) -> dict[str, Any]:
    """The tables of STATS (or of its JSON); skipped reports by name only (the reasons are worded by
    nsys in the recorded CSVs and by nsight when computed from events)."""
    data = stats.model_dump(mode="json") if isinstance(stats, ProfileStats) else stats
    tables = {key: value for key, value in data.items() if key in NUMBERS}
    tables["skipped"] = sorted(tables["skipped"])
    return tables


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    """A private copy of the recorded training capture, alone in a writable folder."""
    folder = tmp_path / "capture"
    folder.mkdir()
    target = folder / "training.nsys-rep"
    shutil.copyfile(FIXTURE / "training.nsys-rep", target)
    return target


def arrow_export(report: Path) -> Path:
    return report.with_name(report.stem + ".arrowdir")


def snapshot(export: Path) -> dict[str, int]:
    """The export's directory identity and every file's modification time: equal when nothing was redone."""
    return {".": export.stat().st_ino, **{path.name: path.stat().st_mtime_ns for path in export.iterdir()}}


def record_of(export: Path) -> Path:
    """The record nsight writes into an arrow export (its only file that is not an .arrow table)."""
    [record] = [path for path in export.iterdir() if path.suffix != ".arrow"]
    return record


def nsight_env(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("NSIGHT_")}
    return {**env, **extra}


def nsight(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return nsight_here(*args, env=env or nsight_env())


def assert_right_numbers(done: subprocess.CompletedProcess[str], region: str = "training") -> None:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert numbers(json.loads(done.stdout)) == numbers(recorded(region))


def exported(done: subprocess.CompletedProcess[str]) -> bool:
    """The run exported the capture (nsight logs each export it makes)."""
    return "nsight: exporting" in done.stderr


def fake_nsys(folder: Path, real: Nsys, body: str) -> Path:
    """An nsys script running BODY with $REAL the real nsys: only for faults the real one cannot produce."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nsys"
    script.write_text(f'#!/bin/sh\nREAL="{real.path}"\n{body}\n')
    script.chmod(0o755)
    return script


# -- reuse --------------------------------------------------------------------------------------------


def test_second_load_reuses_the_export_and_gives_equal_frames(capture: Path, nsys: Nsys) -> None:
    first = load_trace(capture)
    frames = {name: getattr(first, name) for name in FRAMES}
    export = arrow_export(capture)
    assert first.source == export and first.report == capture
    before = snapshot(export)

    second = load_trace(capture)
    for name, frame in frames.items():
        assert getattr(second, name).equals(frame), name
    assert numbers(load_stats(capture)) == numbers(recorded())
    assert snapshot(export) == before, "the export must be reused, not redone"
    assert sorted(path.name for path in capture.parent.iterdir()) == ["training.arrowdir", "training.nsys-rep"]


def test_export_older_than_the_trace_is_redone_once(capture: Path, nsys: Nsys) -> None:
    load_trace(capture)
    export = arrow_export(capture)
    before = snapshot(export)
    newer = record_of(export).stat().st_mtime_ns + 60 * 10**9  # touched, a minute ahead of the export
    os.utime(capture, ns=(newer, newer))

    assert numbers(load_stats(capture)) == numbers(recorded())
    redone = snapshot(export)
    assert redone != before
    load_trace(capture)  # the trace is still "newer" than its new export by the clock: made once all the same
    assert snapshot(export) == redone


@pytest.mark.parametrize("when", ["newer", "older"])
def test_capture_recorded_again_at_the_same_path_is_exported_anew(capture: Path, nsys: Nsys, when: str) -> None:
    """`nsys profile -o training --force-overwrite` again, or an older capture copied over it (cp -p)."""
    assert numbers(load_stats(capture)) == numbers(recorded("training"))
    shutil.copyfile(FIXTURE / "evaluation.nsys-rep", capture)
    stamp = record_of(arrow_export(capture)).stat().st_mtime_ns + (60 if when == "newer" else -3600) * 10**9
    os.utime(capture, ns=(stamp, stamp))
    assert numbers(load_stats(capture)) == numbers(recorded("evaluation"))


# -- damaged exports ------------------------------------------------------------------------------------


def _truncate_a_table(export: Path) -> None:
    table = export / "CUPTI_ACTIVITY_KIND_KERNEL.arrow"
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])


def _delete_a_table(export: Path) -> None:
    (export / "NVTX_EVENTS.arrow").unlink()


def _delete_the_record(export: Path) -> None:
    record_of(export).unlink()


def _garble_the_record(export: Path) -> None:
    record_of(export).write_text('{"report": {"bytes": 1')


DAMAGE = {
    "truncated .arrow file": _truncate_a_table,
    "deleted .arrow file": _delete_a_table,
    "missing record": _delete_the_record,
    "garbled record": _garble_the_record,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_export_is_redone(capture: Path, nsys: Nsys, damage: str) -> None:
    load_trace(capture)
    DAMAGE[damage](arrow_export(capture))

    done = nsight("stats", capture, "--json")
    assert_right_numbers(done)
    assert exported(done), "a damaged export must be made again"
    again = nsight("stats", capture, "--json")
    assert_right_numbers(again)
    assert not exported(again), "the new export is complete and reused"


def test_empty_directory_named_like_the_export_is_replaced(capture: Path, nsys: Nsys) -> None:
    arrow_export(capture).mkdir()
    done = nsight("stats", capture, "--json")
    assert_right_numbers(done)
    assert exported(done)
    assert (arrow_export(capture) / "CUPTI_ACTIVITY_KIND_KERNEL.arrow").is_file()


def test_interrupted_export_is_redone_and_its_leftovers_removed(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    """nsight killed (SIGKILL, out of memory) while nsys exports: the half-made export must not be used."""
    killer = fake_nsys(tmp_path / "killer", nsys,
                       'if [ "$1" = export ] && [ "$2" = --type ]; then\n'
                       '  "$REAL" "$@" >/dev/null 2>&1\n'
                       '  kill -9 "$PPID"\n'  # the nsight process that started this export
                       '  exit 0\n'
                       'fi\n'
                       'exec "$REAL" "$@"')
    killed = subprocess.run([sys.executable, "-m", "nsight_core.cli", "stats", capture, "--json"],
                            capture_output=True, text=True, timeout=240, env=nsight_env(NSIGHT_NSYS=str(killer)))
    assert killed.returncode == -9
    left = sorted(path.name for path in capture.parent.iterdir())
    assert "training.arrowdir" not in left and len(left) == 2, left  # the trace and a temporary export

    done = nsight("stats", capture, "--json")
    assert_right_numbers(done)
    assert exported(done)
    assert sorted(path.name for path in capture.parent.iterdir()) == ["training.arrowdir", "training.nsys-rep"]


def test_an_export_finished_meanwhile_by_another_process_is_kept(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    """Two nsight processes on one capture (a page and a stats call, two ranks' tests): the one that finishes its
    export second keeps the first one's, which the other may be reading, and drops its own."""
    kept = tmp_path / "kept-inode"
    racer = fake_nsys(tmp_path / "racer", nsys,
                      'if [ "$1" = export ] && [ "$2" = --type ]; then\n'
                      f'  NSIGHT_NSYS="$REAL" "{sys.executable}" -m nsight_core.cli stats "{capture}" --json'
                      ' >/dev/null 2>&1\n'
                      f'  stat -c %i "{arrow_export(capture)}" > "{kept}"\n'
                      'fi\n'
                      'exec "$REAL" "$@"')
    done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "stats", capture, "--json"],
                          capture_output=True, text=True, timeout=240, env=nsight_env(NSIGHT_NSYS=str(racer)))
    assert_right_numbers(done)
    assert kept.read_text().strip() == str(arrow_export(capture).stat().st_ino), "the first export was replaced"
    assert sorted(path.name for path in capture.parent.iterdir()) == ["training.arrowdir", "training.nsys-rep"]
    assert "nsight: exporting" not in nsight("stats", capture, "--json").stderr, "the kept export is current"


# -- SQLite ---------------------------------------------------------------------------------------------


def _garbage(path: Path, newer_than: Path | None = None) -> None:
    path.write_bytes(b"not an nsys export " * 500)
    if newer_than is not None:
        stamp = newer_than.stat().st_mtime_ns + 60 * 10**9
        os.utime(path, ns=(stamp, stamp))


def test_damaged_sqlite_beside_the_trace_is_not_used(capture: Path, nsys: Nsys) -> None:
    sqlite = capture.with_suffix(".sqlite")
    _garbage(sqlite, newer_than=capture)

    assert_right_numbers(nsight("stats", capture, "--json"))  # the default reports read no SQLite

    done = nsight("stats", capture, "--reports", "cuda_gpu_kern_sum,cuda_gpu_sum", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["skipped"] == {}, "a report beyond the default five must be computed, not 'no data'"
    assert stats["kernels"] == recorded()["kernels"]
    totals = {category: sum(row["Total Time (ns)"] for row in stats["other"]["cuda_gpu_sum"]
                            if row["Category"] == category) for category in ("CUDA_KERNEL", "MEMORY_OPER")}
    assert totals == {"CUDA_KERNEL": sum(row["total_time_ns"] for row in recorded()["kernels"]),
                      "MEMORY_OPER": sum(row["total_time_ns"] for row in recorded()["memory_time"])}
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as db:  # exported anew in its place
        assert db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone() == (361,)


def test_sqlite_export_a_tool_indexed_reads_as_the_arrow_export(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    """An index that covers one of the queries (here on the ranges' text, as a user's or a tool's own query might
    add) must not reorder that column against the others: the frames are those of the arrow export."""
    sqlite = tmp_path / "indexed.sqlite"
    nsys.export(capture, sqlite, "sqlite")
    with sqlite3.connect(sqlite) as db:
        db.execute("CREATE INDEX by_text ON NVTX_EVENTS(text)")
        texts = [text for (text,) in db.execute("SELECT text FROM NVTX_EVENTS")]  # the index's order
    db.close()
    assert texts == sorted(texts) and len(set(texts)) == 20, "the index gives the ranges' texts in its order"
    indexed, arrow = load_trace(sqlite), load_trace(capture)
    for name in FRAMES:
        assert getattr(indexed, name).equals(getattr(arrow, name)), name
    assert indexed.nvtx["name"].to_list()[:3] == ["step_0", "step_1", "step_2"]


@pytest.mark.parametrize(("command", "beside"), [("stats", True), ("report", False)])
def test_damaged_sqlite_given_as_input_is_a_clear_error(capture: Path, command: str, beside: bool) -> None:
    sqlite = capture.with_suffix(".sqlite")
    _garbage(sqlite)
    if not beside:
        capture.unlink()
    args = ("stats", sqlite) if command == "stats" else ("report", sqlite, "-o", capture.parent / "page.html")

    done = nsight(*args)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("nsight: error:")]
    assert len(errors) == 1 and done.stderr.rstrip("\n").endswith(errors[0]), done.stderr
    assert str(sqlite) in errors[0] and "not a readable SQLite export" in errors[0]
    remedy = f"Pass {capture} instead" if beside else "nsys export --type sqlite"
    assert remedy in errors[0]
    assert not (capture.parent / "page.html").exists()


# -- where exports go, and which kind -------------------------------------------------------------------


@pytest.fixture
def read_only_capture(tmp_path: Path) -> Iterator[Path]:
    """The training capture in a folder nobody can write to, root included (a read-only tmpfs)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        shutil.copyfile(FIXTURE / "training.nsys-rep", folder / "training.nsys-rep")
        folder.chmod(0o555)
        yield folder / "training.nsys-rep"
        folder.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("running as root without permission to mount a tmpfs")
    try:
        shutil.copyfile(FIXTURE / "training.nsys-rep", folder / "training.nsys-rep")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True)
        yield folder / "training.nsys-rep"
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_read_only_folder_exports_into_the_cache(read_only_capture: Path, tmp_path: Path, nsys: Nsys) -> None:
    cache = tmp_path / "cache"
    env = nsight_env(XDG_CACHE_HOME=str(cache))

    done = nsight("stats", read_only_capture, "--json", env=env)
    assert_right_numbers(done)
    assert exported(done)
    assert [path.name for path in read_only_capture.parent.iterdir()] == ["training.nsys-rep"]
    [export] = cache.glob("nsight/*/training.arrowdir")

    again = nsight("stats", read_only_capture, "--json", env=env)
    assert_right_numbers(again)
    assert not exported(again), "the cached export is reused"

    other = nsight("stats", read_only_capture, "--reports", "cuda_gpu_sum", "--json", env=env)
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["skipped"] == {} and len(json.loads(other.stdout)["other"]["cuda_gpu_sum"]) == 18
    assert [path.name for path in export.parent.glob("training.sqlite")] == ["training.sqlite"]


def test_nsys_without_arrowdir_falls_back_to_sqlite(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    """An nsys older than the arrowdir export type (its `export --help` does not list it)."""
    older = fake_nsys(tmp_path / "older", nsys,
                      'case " $* " in *" arrowdir "*|*=arrowdir*)\n'
                      '  echo "Illegal --type argument: arrowdir" >&2; exit 1;;\n'
                      'esac\n'
                      'if [ "$1" = export ] && [ "$2" = --help ]; then\n'
                      '  "$REAL" export --help |\n'
                      '    sed -e "s/ARROWDIR, //" -e "s/arrowdir, //" -e "/arrowdir (/,/single file/d"\n'
                      '  exit 0\n'
                      'fi\n'
                      'exec "$REAL" "$@"')
    env = nsight_env(NSIGHT_NSYS=str(older))
    listing = subprocess.run([older, "export", "--help"], capture_output=True, text=True).stdout
    assert "sqlite" in listing and "arrowdir" not in listing.lower()

    done = nsight("stats", capture, "--json", env=env)
    assert_right_numbers(done)
    names = {path.name for path in capture.parent.iterdir()}
    assert "training.sqlite" in names and "training.arrowdir" not in names
    again = nsight("stats", capture, "--json", env=env)
    assert_right_numbers(again)
    assert not exported(again)


# -- a full disk ----------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """A tmpfs of a given size holding a copy of a 274 KiB capture (its SQLite export takes 716 KiB)."""
    mounted = []

    def of(size: str) -> Path:
        folder = tmp_path / f"small-{size}"
        folder.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]).returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        mounted.append(folder)
        shutil.copyfile(FIXTURE.parent / "h200-fix-pairs" / "host_load-problem.nsys-rep",
                        folder / "host_load-problem.nsys-rep")
        return folder

    yield of
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.parametrize(("kind", "slices"), [("arrowdir", 1), ("sqlite", 1), ("sqlitedir", 2)])
def test_an_export_that_fills_the_disk_says_so_and_leaves_nothing(small_disk: Callable[[str], Path], nsys: Nsys,
                                                                  kind: str, slices: int) -> None:
    """624 KiB free: more than the least an export takes (twice the trace), less than it does. nsys' SQLite export
    exits 0 when the disk fills, with an empty file ("database or disk is full" on stderr): it was taken for an export.
    Each kind now fails with the folder and what to do, and nothing is left beside the capture."""
    folder = small_disk("900k")
    capture = folder / "host_load-problem.nsys-rep"
    with pytest.raises(NsysCommandError, match=rf"ran out of disk space in {folder}: free some space there"):
        export(capture, kind, nsys, slices)
    assert [path.name for path in folder.iterdir()] == [capture.name]
    if kind == "arrowdir":  # what a user sees: one line, exit 1
        done = nsight("stats", capture)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert f"ran out of disk space in {folder}: free some space there" in done.stderr
        assert [path.name for path in folder.iterdir()] == [capture.name]


def test_a_folder_with_less_free_than_any_export_takes_is_refused_before_nsys_starts(
        small_disk: Callable[[str], Path], nsys: Nsys) -> None:
    """324 KiB free for a 274 KiB trace: no export takes less than twice the trace, so none starts (a large capture's
    takes minutes to fail otherwise)."""
    folder = small_disk("600k")
    capture = folder / "host_load-problem.nsys-rep"
    done = nsight("stats", capture)
    assert done.returncode == 1 and "Traceback" not in done.stderr and not exported(done)
    assert re.search(rf"exporting host_load-problem.nsys-rep takes at least 546.88 KiB in {re.escape(str(folder))} "
                     r"\(2.5-10x the .nsys-rep's 273.44 KiB\) and it has 3\d\d.\d\d KiB free: free some space there",
                     done.stderr), done.stderr
    assert [path.name for path in folder.iterdir()] == [capture.name]
