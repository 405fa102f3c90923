"""Parsing nsys stats CSVs: the recorded H200 capture, version variants, hostile names, bad files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from capture_helpers import nsight_here

from nsight_core import DEFAULT_REPORTS, StatsError, load_stats
from nsight_core.stats.load import recorded_captures

HEADER_NEW = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
HEADER_OLD = "Time(%),Total Time (ns),Instances,Average,Median,Minimum,Maximum,StdDev,Name\n"


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_h200_kernels_equal_the_recorded_csv(h200: Path) -> None:
    stats = load_stats(h200 / "training")
    expected = _csv_rows(h200 / "training_cuda_gpu_kern_sum.csv")
    assert [k.name for k in stats.kernels] == [row["Name"] for row in expected]
    assert [k.instances for k in stats.kernels] == [int(row["Instances"]) for row in expected]
    assert [k.total_time_ns for k in stats.kernels] == [int(row["Total Time (ns)"]) for row in expected]
    assert stats.kernels[1].name == "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(T1::Params)"
    assert sum(k.instances for k in stats.kernels) == 361


def test_h200_every_table(h200: Path) -> None:
    stats = load_stats(h200 / "training")
    assert [r.name for r in stats.nvtx_ranges].count("step_0") == 1
    assert len(stats.nvtx_ranges) == 20 and all(r.instances == 1 for r in stats.nvtx_ranges)
    sizes = {r.name: r for r in stats.memory_size}
    assert sizes["[CUDA memcpy Device-to-Host]"].total_mb == pytest.approx(67.109)
    assert sizes["[CUDA memcpy Device-to-Device]"].instances == 20
    times = {r.name: r for r in stats.memory_time}
    assert times["[CUDA memcpy Device-to-Host]"].total_time_ns == 42629915
    api = {r.name: r for r in stats.api_calls}
    assert api["cudaLaunchKernel"].instances == 261
    assert api["cudaMemcpyAsync"].stddev_ns == pytest.approx(12343551.8)
    assert stats.skipped == {}


def test_every_listed_report_name_gives_its_frame(h200: Path) -> None:
    """Users copy names from `.reports`: each one, and each typed table's name, gives the same frame."""
    stats = load_stats(h200 / "training")
    assert stats.reports == list(DEFAULT_REPORTS)
    for report, table in zip(stats.reports, ["kernels", "memory_time", "memory_size", "api_calls", "nvtx_ranges"],
                             strict=True):
        assert stats.frame(report).equals(stats.frame(table)), report
    nvtx = stats.frame("nvtx_pushpop_sum")
    assert nvtx.height == 20 and nvtx["name"].to_list() == [r.name for r in stats.nvtx_ranges]
    assert stats.frame("gpukernsum")["instances"].sum() == 361  # an older nsys' name for the kernel report
    with pytest.raises(KeyError, match=r"no table or report named .nvtx_sum.*nvtx_pushpop_sum"):
        stats.frame("nvtx_sum")


def test_empty_recorded_file_is_skipped_with_reason(h200: Path) -> None:
    stats = load_stats(h200 / "evaluation")
    assert set(stats.skipped) == {"cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"}
    assert all(reason.startswith("no data") for reason in stats.skipped.values())
    assert [(r.name, r.instances) for r in stats.nvtx_ranges] == [("eval", 5)]


def test_directory_with_two_captures_asks_for_one(h200: Path) -> None:
    with pytest.raises(StatsError, match="evaluation, training"):
        load_stats(h200)
    assert sorted(recorded_captures(h200)) == ["evaluation", "training"]


def test_old_report_names_and_header_variants(tmp_path: Path) -> None:
    (tmp_path / "cap_gpukernsum.csv").write_text(HEADER_OLD + "75.0,300,3,100.0,100.0,90,110,10.0,kernA\n")
    (tmp_path / "cap_cuda_api_sum.csv").write_text(
        "Time(%),Total Time (ns),Num Calls,Average,Minimum,Maximum,StdDev,Name\n60.0,600,6,100.0,1,200,5.5,cudaMalloc\n"
    )
    (tmp_path / "cap_gpumemsizesum.csv").write_text(
        "Total,Operations,Average,Minimum,Maximum,StdDev,Operation\n"
        "2.000,2,1.000,1.000,1.000,0.000,[CUDA memcpy HtoD]\n"
    )
    stats = load_stats(tmp_path / "cap", ["gpukernsum", "cuda_api_sum", "gpumemsizesum", "nvtxppsum"])
    assert stats.kernels[0].model_dump() == {
        "name": "kernA", "instances": 3, "time_pct": 75.0, "total_time_ns": 300, "avg_ns": 100.0,
        "med_ns": 100.0, "min_ns": 90, "max_ns": 110, "stddev_ns": 10.0,
    }
    assert stats.api_calls[0].instances == 6 and stats.api_calls[0].med_ns is None
    assert stats.memory_size[0].total_mb == 2.0 and stats.memory_size[0].instances == 2
    assert stats.skipped["nvtxppsum"].startswith("not recorded")


HOSTILE = ['"q"', " lead ", 'a"b', "x,y", "uni ü→", '"x,y"', "<script>alert(1)</script>",
           "void f<int, (int)4>(T1::Params)"]


def _nsys_line(name: str) -> str:
    written = f'"{name}"' if "," in name else name
    return f"10.0,100,1,100.0,100.0,100,100,0.0,{written}\n"


def test_hostile_names_survive_exactly(tmp_path: Path) -> None:
    """nsys quotes a name only when it has a comma and never escapes inner quotes."""
    text = HEADER_NEW.replace("Name", "Range") + "".join(_nsys_line(n) for n in HOSTILE)
    (tmp_path / "cap_nvtx_pushpop_sum.csv").write_text(text, encoding="utf-8")
    stats = load_stats(tmp_path / "cap", ["nvtx_pushpop_sum"])
    assert [r.name for r in stats.nvtx_ranges] == HOSTILE


def test_generic_report_kept_as_rows(tmp_path: Path) -> None:
    (tmp_path / "cap_osrt_sum.csv").write_text(
        "Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
        "99.0,1000,2,500.0,500.0,400,600,141.4,poll\n"
    )
    stats = load_stats(tmp_path / "cap", ["osrt_sum"])
    assert stats.other["osrt_sum"] == [{
        "Time (%)": 99.0, "Total Time (ns)": 1000, "Num Calls": 2, "Avg (ns)": 500.0, "Med (ns)": 500.0,
        "Min (ns)": 400, "Max (ns)": 600, "StdDev (ns)": 141.4, "Name": "poll",
    }]


@pytest.mark.parametrize("body", [
    HEADER_NEW + "10.0,abc,1,1,1,1,1,0.0,k\n",
    HEADER_NEW + "10.0,100\n",
    HEADER_NEW + "10.0,100,1,100.0,100.0,100,100,0.0,k\n10.0,100",  # cut short, not a name's second line
    "garbage without the columns\n1,2\n",
])
def test_corrupt_file_is_a_clear_error(tmp_path: Path, body: str) -> None:
    (tmp_path / "cap_cuda_gpu_kern_sum.csv").write_text(body)
    with pytest.raises(StatsError, match="cuda_gpu_kern_sum"):
        load_stats(tmp_path / "cap", ["cuda_gpu_kern_sum"])


def test_cli_corrupt_file_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "cap_cuda_gpu_kern_sum.csv").write_text(HEADER_NEW + "10.0,abc,1,1,1,1,1,0.0,k\n")
    done = nsight_here("stats", tmp_path / "cap")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "not a number: 'abc'" in done.stderr


def test_cli_json_shape_on_h200(h200: Path) -> None:
    done = nsight_here("stats", h200 / "training", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"kernels", "api_calls", "memory_time", "memory_size", "nvtx_ranges", "other", "skipped",
                         "notes", "graphs", "export"}
    assert data["notes"] == [] and data["graphs"] == []
    first = data["kernels"][0]
    assert first["instances"] == 40 and first["total_time_ns"] == 14487570 and first["time_pct"] == 36.7
    assert set(data["memory_size"][0]) >= {"name", "instances", "total_mb", "avg_mb", "med_mb", "min_mb", "max_mb",
                                           "stddev_mb"}


def test_default_reports_are_the_new_names() -> None:
    assert DEFAULT_REPORTS == ("cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                               "cuda_api_sum", "nvtx_pushpop_sum")
