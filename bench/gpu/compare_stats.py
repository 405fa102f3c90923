"""`nsight stats --json` against `nsys stats` run directly on the same .nsys-rep: names, instances, totals.

    python bench/gpu/compare_stats.py REP [REP ...]

For each REP it expects what scripts/gpu-check.sh writes beside it: `<stem>_<report>.csv` from
`nsys stats -r ... -f csv -o <stem> REP` and `<stem>.nsight.json` from `nsight stats --json REP`.
Every row must match by name (NVTX push/pop names without nsys' leading ':'), with equal instance
counts and equal totals (ns exactly; MB within nsys' 3 printed decimals). nsight leaves out a region's
calibration burst, which nsys counts: each of nsys' `nsight: calibration` ranges takes BURST_CALLS off
its calls and BURST_KERNELS off its kernels, and a row the burst touched is compared by instances alone.
Prints one line per report and every difference; exits 1 when any report differs.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from nsight_core.calibration import BURSTS, CHUNK, LAUNCHES
from nsight_core.marks import CALIBRATION_RANGE

# report -> (nsight JSON table, total field, tolerance of the total)
REPORTS = {
    "cuda_gpu_kern_sum": ("kernels", "total_time_ns", 0.0),
    "cuda_api_sum": ("api_calls", "total_time_ns", 0.0),
    "nvtx_pushpop_sum": ("nvtx_ranges", "total_time_ns", 0.0),
    "cuda_gpu_mem_time_sum": ("memory_time", "total_time_ns", 0.0),
    "cuda_gpu_mem_size_sum": ("memory_size", "total_mb", 0.0005),
}
BURST_CALLS = {"cudaLaunchKernel": BURSTS * LAUNCHES, "cuKernelGetName": BURSTS * LAUNCHES,
               "cudaDeviceSynchronize": BURSTS * (LAUNCHES // CHUNK) + 1}
"""A calibration burst's CUDA calls: its launches, the name nsys asks of each, a synchronise per chunk and one last."""
BURST_KERNELS = {"at::cuda::(anonymous namespace)::spin_kernel(long)": BURSTS * LAUNCHES,
                 "at::cuda::<unnamed>::spin_kernel(long)": BURSTS * LAUNCHES}
"""Its kernels (torch.cuda._sleep's), as nsys 2023.4.4 and 2025.3 demangle the name."""
NAME_COLUMNS = ("Name", "Range", "Operation")
Rows = dict[str, tuple[int, float]]
"""name -> (instances, total)"""
COUNT_COLUMNS = ("Instances", "Num Calls", "Count")
TOTAL_COLUMNS = ("Total Time (ns)", "Total (MB)")


def _pick(row: dict[str, str], columns: tuple[str, ...]) -> str:
    return next(row[c] for c in columns if c in row)


def _name(name: str) -> str:
    return name.lstrip(":")


def nsys_rows(csv_path: Path) -> dict[str, tuple[int, float]]:
    """name -> (instances, total) from a CSV nsys wrote (empty: nsys skipped the report)."""
    if not csv_path.exists() or not csv_path.read_text().strip():
        return {}
    with csv_path.open(newline="") as handle:
        return {_name(_pick(r, NAME_COLUMNS)): (int(_pick(r, COUNT_COLUMNS)), float(_pick(r, TOTAL_COLUMNS)))
                for r in csv.DictReader(handle)}


def nsight_rows(stats: dict[str, list[dict[str, object]]], table: str, total: str) -> dict[str, tuple[int, float]]:
    return {_name(str(r["name"])): (int(str(r["instances"])), float(str(r[total]))) for r in stats.get(table, [])}


def less_calibration(direct: Rows, report: str, bursts: int) -> tuple[Rows, set[str]]:
    """nsys' rows of REPORT less BURSTS calibration bursts, and the names whose totals held burst time."""
    taken = {"cuda_api_sum": BURST_CALLS, "cuda_gpu_kern_sum": BURST_KERNELS,
             "nvtx_pushpop_sum": {CALIBRATION_RANGE: 1}}.get(report, {}) if bursts else {}
    left = {name: (count - bursts * taken.get(name, 0), total) for name, (count, total) in direct.items()}
    return {name: row for name, row in left.items() if row[0] > 0}, set(taken) & set(direct)


def compare(rep: Path) -> list[str]:
    """One line per report ('ok' or what differs) for REP; lines of differences start with '  '."""
    stats = json.loads(rep.with_name(rep.stem + ".nsight.json").read_text())
    bursts = nsys_rows(rep.with_name(f"{rep.stem}_nvtx_pushpop_sum.csv")).get(CALIBRATION_RANGE, (0, 0.0))[0]
    lines: list[str] = []
    for report, (table, total, tolerance) in REPORTS.items():
        direct, touched = less_calibration(nsys_rows(rep.with_name(f"{rep.stem}_{report}.csv")), report, bursts)
        ours = nsight_rows(stats, table, total)
        problems = [f"  only in nsys stats: {n!r}" for n in sorted(direct.keys() - ours.keys())]
        problems += [f"  only in nsight stats: {n!r}" for n in sorted(ours.keys() - direct.keys())]
        for name in sorted(direct.keys() & ours.keys()):
            (n_count, n_total), (o_count, o_total) = direct[name], ours[name]
            if n_count != o_count:
                problems.append(f"  {name!r}: instances {n_count} (nsys) vs {o_count} (nsight)")
            if abs(n_total - o_total) > tolerance and name not in touched:
                problems.append(f"  {name!r}: total {n_total:g} (nsys) vs {o_total:g} (nsight)")
        lines.append(f"{rep} {report}: {len(direct)} names, "
                     + (f"{len(problems)} differences" if problems else "equal"))
        lines += problems
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    lines = [line for rep in argv for line in compare(Path(rep))]
    print("\n".join(lines))
    return 1 if any(line.startswith("  ") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
