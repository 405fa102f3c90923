"""nsys CSV output -> Polars frames -> typed rows.

nsys does not write RFC 4180 CSV: it wraps a field in double quotes only when it contains a comma and never escapes
quotes inside it. Names are the last column of every summary report, so a row is split on its first N-1 commas and the
remainder is the name, unwrapped once when nsys wrapped it: commas, quotes and spaces stay as the user wrote them. A
newline inside a name is written raw too, so a line with fewer fields than the header continues the name above it.

NVTX range names: nsys 2023.4 writes a default-domain range by its name (`step_0`), 2025.3 as `:step_0`; a report whose
every name carries the separator drops the leading ':', so both versions' CSVs give the names the events give."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import polars as pl

from nsight_core.errors import StatsError
from nsight_core.stats.models import TABLE_MODELS, ProfileStats
from nsight_core.stats.reports import NAME_HEADERS, header_field, table_of


def _split_row(line: str, columns: int, name_last: bool) -> list[str]:
    if name_last and len(fields := line.split(",", columns - 1)) == columns:
        name = fields[-1]
        if len(name) >= 2 and name[0] == name[-1] == '"' and "," in name:
            fields[-1] = name[1:-1]
        return fields
    return next(csv.reader([line]))


def read_frame(report: str, text: str) -> pl.DataFrame:
    """The CSV text nsys wrote for REPORT as a frame of strings, headers as nsys wrote them."""
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    # The last line is whole only when the text ends with a newline (nsys ends every line with one).
    cut = None if text.endswith("\n") else len(lines)
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip("\r")]
    if not numbered:
        return pl.DataFrame()
    header = next(csv.reader([numbered[0][1]]))
    name_last = "".join(header[-1].split()).lower() in NAME_HEADERS
    records: list[tuple[int, str]] = []
    for number, line in numbered[1:]:
        short = len(line.split(",", len(header) - 1)) < len(header)
        if name_last and records and short and number != cut:
            records[-1] = (records[-1][0], records[-1][1] + "\n" + line)
        else:
            records.append((number, line))
    rows = [_split_row(line, len(header), name_last) for _, line in records]
    for (number, line), fields in zip(records, rows, strict=True):
        if len(fields) != len(header):
            raise StatsError(f"report {report}: line {number} has {len(fields)} fields where the header has "
                             f"{len(header)}: {line[:200]!r}. The file is not an nsys stats CSV or was cut short.")
    return pl.DataFrame(rows, schema={name: pl.String for name in _unique_headers(header)}, orient="row")


def _unique_headers(header: list[str]) -> list[str]:
    """HEADER's names, a repeated one numbered from its second time on: 'Name', 'Name (2)'."""
    return [f"{name} ({before + 1})" if (before := header[:index].count(name)) else name
            for index, name in enumerate(header)]


def typed_frame(report: str, raw: pl.DataFrame) -> pl.DataFrame:
    """Rename nsys headers to model fields and cast numbers, with a clear error on bad values."""
    size_report = table_of(report) == "memory_size"
    exprs: list[pl.Expr] = []
    for header in raw.columns:
        if (mapped := header_field(header, size_report)) is None:
            continue
        field, integer, scale = mapped
        column = pl.col(header)
        if field in {"name", "style"}:
            exprs.append(column.alias(field))
            continue
        number = column.str.strip_chars().replace("", None).cast(pl.Float64, strict=False)
        bad = raw.filter(number.is_null() & column.str.strip_chars().ne("") & column.is_not_null())
        if bad.height:
            raise StatsError(f"report {report}: column {header!r} has a value that is not a number: "
                             f"{bad[header][0]!r}. The file is not an nsys stats CSV, or it is corrupt.")
        number = (number * scale).fill_null(0.0)
        exprs.append((number.round(0).cast(pl.Int64) if integer else number).alias(field))
    return raw.select(exprs)


def parse_report(report: str, text: str) -> tuple[str | None, list[Any]]:
    """Parse one report's CSV text into (table name, typed rows) or (None, generic dict rows)."""
    raw = read_frame(report, text)
    table = table_of(report)
    if table is None:
        return None, _generic_rows(raw)
    frame = typed_frame(report, raw)
    if table == "nvtx_ranges":
        frame = _default_domain_bare(frame)
    model = TABLE_MODELS[table]
    if missing := {f for f, info in model.model_fields.items() if info.is_required()} - set(frame.columns):
        raise StatsError(f"report {report}: columns for {sorted(missing)} are missing (headers: {raw.columns}). "
                         "This nsys version writes a layout nsight-core does not know; please report it.")
    return table, [model.model_validate(row) for row in frame.iter_rows(named=True)]


def _default_domain_bare(ranges: pl.DataFrame) -> pl.DataFrame:
    """RANGES (nvtx_pushpop_sum) with the default domain's ':' dropped where every name carries a domain (2025.3)."""
    name = pl.col("name")
    if not ranges.height or not ranges.select(name.str.contains(":", literal=True).all()).item():
        return ranges
    return ranges.with_columns(pl.when(name.str.starts_with(":")).then(name.str.slice(1)).otherwise(name).alias("name"))


def _generic_rows(raw: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows of a report without a model: numeric columns as numbers, the rest as exact strings."""
    columns: list[pl.Series] = []
    for series in raw.iter_columns():
        stripped = series.str.strip_chars()
        non_empty = stripped.ne("").sum()
        casts = (stripped.cast(dtype, strict=False) for dtype in (pl.Int64, pl.Float64))
        columns.append(next((cast for cast in casts if non_empty and cast.is_not_null().sum() == non_empty), series))
    return pl.DataFrame(columns).to_dicts() if columns else []


def add_report(stats: ProfileStats, report: str, text: str) -> None:
    """Parse REPORT's CSV text into STATS; an empty file is a skipped report, not an error."""
    if not text.strip():
        stats.skipped.setdefault(report, "no data: nsys wrote an empty report (nothing of this kind was traced)")
        return
    table, rows = parse_report(report, text)
    if table is None:
        stats.other[report] = rows
    else:
        getattr(stats, table).extend(rows)


def read_csv_text(path: Path) -> str:
    """Read a report file as text; nsys writes UTF-8, and a bad byte must not lose the whole file."""
    return path.read_bytes().decode("utf-8", errors="replace")
