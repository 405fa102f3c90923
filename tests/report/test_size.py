"""A capture with 10,000 distinct kernels still gives a usable page: tables cut with a note, < 5 MB."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_helpers import write_recorded

from nsight_core.profile import build_profile
from nsight_core.render.html import MAX_TABLE_ROWS, render_page

KERNELS = 10_000
MAX_PAGE_BYTES = 5 * 1024 * 1024


def many_kernels(directory: Path) -> Path:
    kernels = [(f"void ns::kernel_{i}<float, {i % 7}>(T1, T2, T3 *, const int, float)", 10_000 + i, 1 + i % 5)
               for i in range(KERNELS)]
    nvtx = [(f"range_{i}", 1000 + i, 1 + i % 3) for i in range(2000)]
    return write_recorded(directory, "big", kernels=sorted(kernels, key=lambda k: -k[1]), nvtx=nvtx)


@pytest.fixture(scope="module")
def big_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = many_kernels(tmp_path_factory.mktemp("big"))
    return render_page([build_profile(path, reports=["cuda_gpu_kern_sum", "nvtx_pushpop_sum"])])


def test_page_stays_small(big_page: str) -> None:
    assert len(big_page.encode()) < MAX_PAGE_BYTES


def test_long_tables_are_cut_with_a_note(big_page: str) -> None:
    assert f"Showing the first {MAX_TABLE_ROWS} of 10,000 rows" in big_page
    assert f"Showing the first {MAX_TABLE_ROWS} of 2,000 rows" in big_page
    bodies = re.findall(r"<tbody>(.*?)</tbody>", big_page)
    assert [body.count("<tr>") for body in bodies] == [MAX_TABLE_ROWS, MAX_TABLE_ROWS]
    # The kernel table keeps the biggest kernels: the first row is kernel_9999 (largest total).
    first_row = re.search(r"<tbody><tr>(.*?)</tr>", big_page)
    assert first_row is not None and "kernel_9999" in first_row.group(1)


def test_distinct_kernel_tile_counts_all_of_them(big_page: str) -> None:
    assert re.search(r"Distinct kernels</div><div class=\"nsr-tile-value\">10,000<", big_page)


def test_top_kernel_chart_draws_twenty(big_page: str) -> None:
    blocks = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', big_page)
    kernel_chart = json.loads(next(block for block in blocks if '"title": "Launches"' in block))
    assert len(kernel_chart["datasets"][kernel_chart["data"]["name"]]) == 20
