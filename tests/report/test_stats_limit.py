"""`nsight stats` text caps each table (--limit N, default 50) and says how many rows it cut; --json keeps all."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from report_helpers import write_recorded

from nsight_core import cli

KERNELS = 120


def stats(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(["stats", *args])
        except SystemExit as exit_:  # argparse's usage errors
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """Recorded CSVs of KERNELS kernels, the longest (kernel_119) first as nsys writes them, and 3 NVTX ranges."""
    return write_recorded(tmp_path, "long", kernels=[(f"kernel_{i}", 1000 + i, 1) for i in reversed(range(KERNELS))],
                          nvtx=[(f"range_{i}", 100 + i, 2) for i in range(3)])


def kernel_rows(text: str) -> list[str]:
    return re.findall(r"kernel_\d+", text)


def test_default_cap_keeps_the_biggest_fifty_and_says_what_was_cut(many: Path) -> None:
    code, text, _ = stats(str(many))
    assert code == 0
    rows = kernel_rows(text)
    assert len(rows) == 50 and rows[0] == "kernel_119" and rows[-1] == "kernel_70"
    assert f"== CUDA GPU kernels ({KERNELS} rows)" in text
    assert f"... 70 more rows not shown (the first 50 of {KERNELS}" in text
    assert text.count("more row") == 1  # the 3 NVTX ranges fit


def test_limit_n_and_zero(many: Path) -> None:
    assert len(kernel_rows(stats("--limit", "5", str(many))[1])) == 5
    assert "... 1 more row not shown (the first 2 of 3" in stats("--limit", "2", str(many))[1]
    _, everything, _ = stats("--limit", "0", str(many))
    assert len(kernel_rows(everything)) == KERNELS and "not shown" not in everything


def test_json_has_every_row(many: Path) -> None:
    code, text, _ = stats("--json", str(many))
    assert code == 0 and len(json.loads(text)["kernels"]) == KERNELS


@pytest.mark.parametrize("value", ["-1", "x", "2.5"])
def test_a_bad_limit_is_a_usage_error(many: Path, value: str) -> None:
    code, _, err = stats("--limit", value, str(many))
    assert code == 2 and "not a number of rows" in err
