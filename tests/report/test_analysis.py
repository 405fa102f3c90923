"""The report's numbers from known intervals and names: no nsys needed, every value worked out by hand."""

from __future__ import annotations

import polars as pl
import pytest

from nsight_core.analysis.intervals import bucket_edges, busy_ns, busy_over, union_intervals
from nsight_core.analysis.kernels import nccl_share, short_name, unique_short_names
from nsight_core.analysis.trace_summary import nvtx_instances
from nsight_core.trace.depth import with_depth


def events(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"device": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")


def test_overlapping_kernels_on_two_streams_count_once() -> None:
    # Stream A runs [0, 100), stream B [50, 150): busy 150 ns, not the 200 ns a sum gives.
    kernels = events([(0, 0, 100), (0, 50, 150), (0, 200, 250), (0, 210, 220)])
    assert busy_ns(kernels) == 200
    assert int((kernels["end_ns"] - kernels["start_ns"]).sum()) == 260
    assert union_intervals(kernels).select("start_ns", "end_ns").rows() == [(0, 150), (200, 250)]


def test_each_gpu_is_busy_on_its_own() -> None:
    kernels = events([(0, 0, 100), (1, 0, 100), (1, 50, 80)])
    assert busy_ns(kernels) == 200
    assert union_intervals(kernels).rows() == [(0, 0, 100), (1, 0, 100)]


def test_busy_fraction_per_bucket() -> None:
    # [0, 400) in 4 buckets; one kernel covers the first bucket and half the second, two overlap in the 4th.
    kernels = events([(0, 0, 150), (0, 300, 400), (0, 320, 360)])
    edges = bucket_edges(0, 400, 4)
    assert edges == [0, 100, 200, 300, 400]
    assert busy_over([kernels], edges).fractions == [1.0, 0.5, 0.0, 1.0]


def test_busy_fraction_is_per_gpu() -> None:
    kernels = events([(0, 0, 100), (1, 0, 50)])
    assert busy_over([kernels], bucket_edges(0, 100, 1)).fractions == [0.75]


def test_empty_span_has_no_buckets() -> None:
    assert bucket_edges(10, 10, 5) == []


@pytest.mark.parametrize(("name", "short"), [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char *, 1>>(int, T2, T3)", "vectorized_elementwise_kernel"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, "
     "std::plus<float>, float>(T1, T2, T3...)", "multi_tensor_apply_kernel"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(T1::Params)", "Kernel2"),
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
])
def test_short_kernel_names(name: str, short: str) -> None:
    assert short_name(name) == short


def test_short_names_stay_distinct() -> None:
    names = ["void k<float>(T1)", "void k<double>(T1)", "void other(int)", "void k<int>(T1)"]
    assert unique_short_names(names) == ["k", "k #2", "other", "k #3"]


def test_very_long_names_are_cut() -> None:
    assert len(short_name("x" * 500)) == 60
    assert short_name("x" * 500).endswith("…")


def test_nccl_share_of_kernel_time() -> None:
    kernels = pl.DataFrame({
        "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "void gemm<float>(T1)", "ncclKernel_Broadcast"],
        "total_time_ns": [300, 600, 100],
    })
    share = nccl_share(kernels)
    assert (share.nccl_time_ns, share.kernel_time_ns, share.nccl_kernels) == (400, 1000, 2)
    assert share.share == pytest.approx(0.4)
    assert nccl_share(kernels.head(0)).share == 0.0


def test_nested_nvtx_ranges_get_depths_per_thread() -> None:
    nvtx = pl.DataFrame(
        [(100, 200, "epoch", 1), (110, 150, "step", 1), (120, 130, "forward", 1), (160, 190, "step", 1),
         (105, 115, "loader", 2)],
        schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "name": pl.String, "thread": pl.Int64}, orient="row",
    )
    found = [(i.name, i.start_ns, i.depth) for i in nvtx_instances(with_depth(nvtx), origin_ns=100)]
    assert found == [("epoch", 0, 0), ("loader", 5, 0), ("step", 10, 1), ("forward", 20, 2), ("step", 60, 1)]
    assert [i.name for i in nvtx_instances(with_depth(nvtx), origin_ns=100, limit=2)] == ["epoch", "step"]


def test_the_timeline_keeps_the_first_of_equally_long_ranges() -> None:
    # 300 ranges of 10 ns and one of 50 ns, in no order: the limit cuts through the equal ones.
    starts = [(index * 7919) % 300 * 20 for index in range(300)]
    nvtx = pl.DataFrame({"start_ns": [*starts, 9000], "end_ns": [start + 10 for start in starts] + [9050],
                         "name": [f"op_{start}" for start in starts] + ["long"], "thread": 1})
    kept = nvtx_instances(with_depth(nvtx), origin_ns=0, limit=4)
    assert [(i.name, i.start_ns) for i in kept] == [("op_0", 0), ("op_20", 20), ("op_40", 40), ("long", 9000)]


def test_depth_counts_enclosing_ranges_of_the_thread_only() -> None:
    """Ranges that start together nest outer-first; one that starts where another ends is not inside it."""
    nvtx = pl.DataFrame(
        [(0, 100, 1), (0, 50, 1), (50, 80, 1), (80, 80, 1), (100, 120, 1), (10, 20, 2)],
        schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "thread": pl.Int64}, orient="row",
    )
    depths = with_depth(nvtx).sort("thread", "start_ns", pl.col("end_ns"), descending=[False, False, True])
    assert depths["depth"].to_list() == [0, 1, 1, 1, 0, 0]
