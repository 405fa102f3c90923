"""Helpers for the GPU Profile report tests: recorded CSVs built in tmp, and headless Chromium.

A module of its own (not conftest.py) so that test files import it by a name no other test folder uses.

The browser checks what a person would: the page loads with nothing on the console, every chart
container holds an SVG with drawn marks, and a screenshot is saved to tests/artifacts/.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
KERNEL_HEADER = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name"
NVTX_HEADER = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Range"
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--virtual-time-budget=15000",
)


def csv_name(name: str) -> str:
    """A name as nsys writes it in a CSV: wrapped in quotes when it holds a comma."""
    return f'"{name}"' if "," in name else name


def write_recorded(directory: Path, prefix: str, kernels: Iterable[tuple[str, int, int]] = (),
                   nvtx: Iterable[tuple[str, int, int]] = ()) -> Path:
    """Recorded CSVs DIRECTORY/PREFIX_<report>.csv from (name, total_ns, instances) rows; returns DIRECTORY/PREFIX."""
    directory.mkdir(parents=True, exist_ok=True)
    for report, header, rows in (("cuda_gpu_kern_sum", KERNEL_HEADER, list(kernels)),
                                 ("nvtx_pushpop_sum", NVTX_HEADER, list(nvtx))):
        total = sum(row[1] for row in rows) or 1
        lines = [header] + [
            f"{100 * t / total:.1f},{t},{n},{t / n:.1f},{t / n:.1f},{t // n},{t // n},0.0,{csv_name(name)}"
            for name, t, n in rows
        ]
        (directory / f"{prefix}_{report}.csv").write_text("\n".join(lines) + "\n" if rows else "")
    return directory / prefix


class _Marks(HTMLParser):
    """Per chart container (div.nsr-vega): how many drawn mark elements its SVG holds."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, int] = {}
        self.failed: list[str] = []
        self._stack: list[tuple[str, str | None, bool]] = []  # (tag, chart id, inside a mark group)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        chart, in_mark = self._stack[-1][1:] if self._stack else (None, False)
        if "nsr-vega" in classes:
            chart = attributes.get("id")
            self.charts[chart or ""] = 0
        if chart is not None and in_mark and tag in {"path", "line", "rect", "circle", "text"}:
            self.charts[chart] += 1
        in_mark = in_mark or (tag == "g" and "role-mark" in classes)
        if tag not in {"path", "line", "rect", "circle", "br", "img", "input", "meta", "link"}:
            self._stack.append((tag, chart, in_mark))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index][0] == tag:
                del self._stack[index:]
                return

    def handle_data(self, data: str) -> None:
        in_code = bool(self._stack) and self._stack[-1][0] in {"script", "style"}
        if not in_code and "could not be drawn" in data:
            self.failed.append(data)


@dataclass
class PageLoad:
    """What headless Chromium saw: console lines, the DOM after the scripts ran, the screenshot."""

    console: list[str]
    dom: str
    screenshot: Path

    def chart_marks(self) -> dict[str, int]:
        parser = _Marks()
        parser.feed(self.dom)
        assert not parser.failed, parser.failed
        return parser.charts


@dataclass
class Chromium:
    binary: str

    def _run(self, page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory() as profile:
            return subprocess.run(
                [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            )

    def load(self, page: Path, screenshot: Path, width: int = 1200, height: int = 2000) -> PageLoad:
        """Load PAGE once for the console, the DOM after its scripts ran and a screenshot (headless
        Chromium does all three in one launch; each launch costs about a second of CPU)."""
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.unlink(missing_ok=True)
        dumped = self._run(page, "--enable-logging=stderr", "--v=0", "--dump-dom", f"--window-size={width},{height}",
                           f"--screenshot={screenshot}")
        assert dumped.returncode == 0 and screenshot.is_file(), dumped.stderr[-2000:]
        console = [line for line in dumped.stderr.splitlines() if ":CONSOLE" in line]
        return PageLoad(console=console, dom=dumped.stdout, screenshot=screenshot)
