"""Helpers of the Flyte tests: where things are, and reading what an action left behind.

Kept out of conftest.py so test modules import them by a name no other conftest shares.
"""

from __future__ import annotations

import html
import importlib
import re
import socket
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples"
BIN = Path(sys.executable).parent

def load_module(directory: Path, module: str) -> Any:
    """Import MODULE from DIRECTORY, as the runtime will (and as `flyte run` does, at decoration time)."""
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    return importlib.import_module(module)


class _Tables(HTMLParser):
    """Every <table> of a page as (heading before it, header cells, rows of cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[str], list[list[str]]]] = []
        self.headings: list[str] = []
        self._text: list[str] | None = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("h2", "h3", "th", "td"):
            self._text = []
        elif tag == "table":
            self.tables.append((self.headings[-1] if self.headings else "", [], []))
        elif tag == "tr":
            self._row = []

    def handle_endtag(self, tag: str) -> None:
        text = "".join(self._text or []).strip()
        if tag in ("h2", "h3"):
            self.headings.append(text)
        elif tag == "th":
            self.tables[-1][1].append(text)
        elif tag == "td" and self._row is not None:
            self._row.append(text)
        elif tag == "tr" and self._row:
            self.tables[-1][2].append(self._row)
            self._row = None
        if tag in ("h2", "h3", "th", "td"):
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def parse_report(page: str) -> _Tables:
    parser = _Tables()
    parser.feed(page)
    return parser


def nvtx_counts(page: str) -> list[dict[str, int]]:
    """Per capture section, in order: NVTX range name -> instances, from the nvtx_pushpop_sum tables."""
    counts = []
    for heading, header, rows in parse_report(page).tables:
        if heading != "nvtx_pushpop_sum":
            continue
        name_col = next(i for i, h in enumerate(header) if h.lower() in ("name", "range"))
        count_col = next(i for i, h in enumerate(header) if h.lower() in ("instances", "count", "num_calls"))
        counts.append({row[name_col].lstrip(":"): int(row[count_col].replace(",", "")) for row in rows})
    return counts


def report_tabs(page: str) -> list[str]:
    """The tab names of a Flyte report.html, in order."""
    return [html.unescape(name) for name in re.findall(r'<li onclick="handleLinkClick\(this\)">(.*?)</li>', page)]


def torchrun(nproc: int) -> list[str]:
    """What flyte's `clustered` launcher execs for one node, minus the JobSet DNS lookup."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [str(BIN / "torchrun"), "--nnodes=1", f"--nproc-per-node={nproc}", "--node-rank=0",
            "--rdzv-backend=static", f"--rdzv-id=nsight-{port}", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--no-python", "--"]


def executable(source: Path, directory: Path) -> Path:
    """SOURCE as an executable script run by this venv's Python (what a console script would be)."""
    script = directory / source.stem.removesuffix("_shim")
    script.write_text(f"#!{sys.executable}\n" + source.read_text())
    script.chmod(0o755)
    return script
