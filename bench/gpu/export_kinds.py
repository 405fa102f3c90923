"""Which of nsys' exports stays bounded as a GPU capture grows, and how fast each is: record
bench/gpu/many_kernels.py at each STEPS (CUDA-graph replays of 1,000 tiny kernels each), then one bare
`nsys export --type T` of each capture for T in sqlite, parquetdir and arrowdir, each command's time, its process
tree's peak (bench/bench.py ``tree_run``) and what it left on disk; and the tables and columns the parquetdir
export wrote (their Parquet schemas and row counts), to compare with the SQLite export nsight reads today.

    python bench/gpu/export_kinds.py DIR STEPS [STEPS ...]

Writes DIR/log, DIR/result.json and DIR/help.txt (`nsys export --help`), and DIR/done at the end (poll it: a long
run outlasts one device call).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from large_capture import progress_log, record_many_kernels  # noqa: E402  (this folder, as a script runs)

from bench import tree_run  # noqa: E402  (bench/ is no package: the sampler of make bench's tables)

KINDS = {"sqlite": "export.sqlite", "parquetdir": "export_pqtdir", "arrowdir": "export_arwdir"}


def disk_bytes(path: Path) -> int:
    """PATH's size, a folder's files summed."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def parquet_tables(folder: Path) -> dict[str, object]:
    """Each Parquet file of FOLDER: its rows and its columns with their types."""
    import polars as pl

    return {f.name: {"rows": pl.scan_parquet(f).select(pl.len()).collect().item(),
                     "columns": {k: str(v) for k, v in pl.read_parquet_schema(f).items()}}
            for f in sorted(folder.glob("*.parquet"))}


def main() -> None:
    folder, steps_list = Path(sys.argv[1]), [int(s) for s in sys.argv[2:]]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    nsys = shutil.which("nsys") or "nsys"
    result: dict[str, object] = {"cores": os.cpu_count()}
    log = progress_log(folder, result)

    result["version"] = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
    (folder / "help.txt").write_text(subprocess.run([nsys, "export", "--help"], capture_output=True,
                                                    text=True).stdout)
    log(str(result["version"]))
    for steps in steps_list:
        work = folder / str(steps)
        work.mkdir()
        capture = work / "many_kernels.nsys-rep"
        recorded = record_many_kernels(nsys, capture, steps)
        row: dict[str, object] = {"record_s": recorded.seconds, "trace_bytes": capture.stat().st_size}
        result[str(steps)] = row
        log(f"{steps} steps: recorded {capture.stat().st_size:,} bytes in {recorded.seconds:.0f} s")
        for kind, name in KINDS.items():
            out = work / name
            run = tree_run([nsys, "export", "--type", kind, "--force-overwrite=true", "--quiet=true", "-o", out,
                            capture], work)
            made = out if out.exists() else next(work.glob(name + "*"))
            row[kind] = {"seconds": run.seconds, "tree_mb": run.tree_mb, "largest_mb": run.largest_mb,
                         "disk_bytes": disk_bytes(made)}
            if kind == "parquetdir":
                row["parquet_tables"] = parquet_tables(made)
            shutil.rmtree(made) if made.is_dir() else made.unlink()
            log(f"  {kind}: {run.seconds:.1f} s, tree {run.tree_mb:.0f} MB, {row[kind]}")
        capture.unlink()
    (folder / "done").write_text("")


if __name__ == "__main__":
    main()
