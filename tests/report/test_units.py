"""One set of units in every output: the HTML page (text and chart labels), `nsight stats` text, `nsight diff`
text and the memory guard's message write sizes in binary units and microseconds as ``µs``, nowhere else.

Each output is made from the recorded H200 captures by the real code path a user runs, then searched for a
decimal size unit (``MB``, ``kB``, ``GB``: the numbers behind them are counted in 1024s) and for a second
spelling of microseconds (``us``, ``usec``, Greek ``μs``); each must also hold ``µs`` or ``MiB`` somewhere, so
a check cannot pass on an output that shows no such number at all.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from nsight_core import NotEnoughMemoryError, cli
from nsight_core.compare import diff
from nsight_core.memory import check_summary_memory
from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile
from nsight_core.render.charts import capture_charts
from nsight_core.render.diff import render_diff
from nsight_core.render.html import render_page
from nsight_core.units import duration, for_stream, nsys_megabytes, quantity, rate, size

DECIMAL_SIZE = re.compile(r"\d\s*(?:kB|KB|MB|GB|TB)\b(?!/s)")
"""A size in decimal units (rates in GB/s are decimal by convention and left to the findings)."""
OTHER_MICROSECONDS = re.compile(r"\d\s*(?:us|usec|μs)\b")


def offenders(text: str) -> list[str]:
    return [match.group(0) for pattern in (DECIMAL_SIZE, OTHER_MICROSECONDS) for match in pattern.finditer(text)]


def test_the_formatter_reads_one_way() -> None:
    assert size(64 << 20) == "64.00 MiB" and size(1536) == "1.50 KiB" and size(512) == "512 B"
    assert size(3 << 30) == "3.00 GiB" and nsys_megabytes(67.109) == "64.00 MiB"
    assert duration(1500) == "1.50 µs" and duration(38_200_000) == "38.20 ms" and duration(512) == "512 ns"
    assert duration(-2_500_000, signed=True) == "-2.50 ms" and duration(2_500, signed=True) == "+2.50 µs"
    assert rate(1.5 * (1 << 30)) == "1.50 GiB/s" and quantity(0.613, "fraction") == "61.3%"
    assert quantity(1 << 20, "bytes") == "1.00 MiB" and quantity(1200, "ns") == "1.20 µs"
    assert duration(None) == size(None) == "-"


def test_a_stream_that_cannot_encode_micro_gets_us_and_no_other() -> None:
    text = "step p50 1.50 µs ≈ 64.00 MiB"
    assert for_stream(text, io.TextIOWrapper(io.BytesIO(), encoding="utf-8")) == text
    assert for_stream(text, io.TextIOWrapper(io.BytesIO(), encoding="ascii")) == "step p50 1.50 us ? 64.00 MiB"
    assert for_stream(text, io.TextIOWrapper(io.BytesIO(), encoding="latin-1")) == "step p50 1.50 µs ? 64.00 MiB"


def _strings(spec: Any) -> Iterator[str]:
    """Every string of a chart spec but its data rows: titles, axis and tooltip labels."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key not in {"datasets", "data"}:
                yield from _strings(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from _strings(value)
    elif isinstance(spec, str):
        yield spec


def test_page_and_chart_labels(h200_copy: Path, nsys: Nsys) -> None:
    profile = build_profile(h200_copy / "training.nsys-rep")
    page = render_page([profile])
    visible = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.DOTALL)
    labels = "\n".join(text for chart in capture_charts(profile) if chart.spec for text in _strings(chart.spec))
    assert offenders(visible) == [] and offenders(labels) == []
    assert "64.00 MiB" in visible and "µs" in visible  # the 64 MiB copy tile and the table's durations
    assert "Total (MiB)" in labels and "Average (µs)" in labels
    # The chart draws the same MiB its label says: the 64 MiB Device-to-Host copy is a bar of 64.
    memory = next(chart.spec for chart in capture_charts(profile) if chart.title == "Memory operations")
    assert memory is not None
    sizes = {row["name"]: row["value"] for row in memory["datasets"]["sizes"]}
    assert sizes["[CUDA memcpy Device-to-Host]"] == pytest.approx(64, rel=1e-4)


def test_stats_text(h200_copy: Path, nsys: Nsys) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["stats", str(h200_copy / "training.nsys-rep")]) == 0
    text = out.getvalue()
    assert offenders(text) == [] and "µs" in text and "64.00 MiB" in text


def test_stats_json_labels_stay_numbers(h200_copy: Path, nsys: Nsys) -> None:
    """`nsight stats --json` carries numbers with their unit in the key (``_ns``, nsys' ``_mb``), never words."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["stats", "--json", str(h200_copy / "training.nsys-rep")]) == 0
    payload = json.loads(out.getvalue())
    assert offenders(out.getvalue()) == []
    assert all(isinstance(row["total_mb"], float) for row in payload["memory_size"])


def test_diff_text(h200_copy: Path, nsys: Nsys) -> None:
    text = render_diff(diff(h200_copy / "training.nsys-rep", h200_copy / "evaluation.nsys-rep"))
    assert offenders(text) == [] and re.search(r"\d ms|\d µs", text)


def test_memory_guard_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "1M")
    with pytest.raises(NotEnoughMemoryError) as refused:
        check_summary_memory(3 << 20, "a.nsys-rep")
    message = str(refused.value)
    assert offenders(message) == []
    assert "its events take 3.00 MiB in the export" in message and "allows 1.00 MiB" in message
