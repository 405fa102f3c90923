"""Helpers of the Flyte tests: where things are, and reading what an action left behind.

Kept out of conftest.py so test modules import them by a name no other conftest shares.
"""

from __future__ import annotations

import asyncio
import html
import importlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from flyte._internal.runtime.convert import convert_from_native_to_inputs, convert_outputs_to_native
from flyte._internal.runtime.io import load_outputs
from flyteidl2.core.execution_pb2 import ErrorDocument

from nsight_core.nsys import ENV_NSYS, INSTALL_PREFIX_ENV

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples"
BIN = Path(sys.executable).parent
ACTION_TIMEOUT = 180


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


def executable(source: Path, directory: Path) -> Path:
    """SOURCE as an executable script run by this venv's Python (what a console script would be)."""
    script = directory / source.stem.removesuffix("_shim")
    script.write_text(f"#!{sys.executable}\n" + source.read_text())
    script.chmod(0o755)
    return script


@dataclass
class ActionResult:
    """What one action left behind."""

    returncode: int
    workdir: Path
    stderr: str
    run_name: str = ""
    output: Any = None
    error: ErrorDocument | None = None
    traces: list[dict[str, Any]] = field(default_factory=list)

    @property
    def report(self) -> str:
        path = self.workdir / "out" / "report.html"
        return path.read_text() if path.exists() else ""

    def traces_named(self, name: str) -> list[Path]:
        """The files the traced steps called NAME returned, in order."""
        return [Path(t["output"]) for t in self.traces if t["name"] == name and t["output"]]


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment minus any nsight/Flyte action variables, plus EXTRA."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NSIGHT_", "_F_", "FLYTE_", "RANK", "TORCHELASTIC"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def without_nsys_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which nsight-core finds no nsys: not on PATH, not installed, not named."""
    empty = tmp_path / "no-nsys"
    empty.mkdir(exist_ok=True)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nsys").exists())
    return {"PATH": f"{BIN}{os.pathsep}{path}", INSTALL_PREFIX_ENV: str(empty), ENV_NSYS: ""}


def run_action_with(a0: Path, tmp_path: Path, directory: Path, module: str, task_var: str,
                    inputs: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                    entry: list[str] | None = None,
                    started: Callable[[subprocess.Popen[str], Path], None] | None = None,
                    run_name: str | None = None, raw_data: Path | None = None) -> ActionResult:
    """Run TASK_VAR of MODULE (in DIRECTORY) as a pod would: its inputs.pb, the container environment
    the decorator stamped, the `a0` shim (or ENTRY), local storage.

    The action runs in a process group of its own; STARTED(process, workdir), when given, is called
    once it runs (to signal it). RUN_NAME repeats a run (a retried attempt); by default it is fresh.
    RAW_DATA replaces the action's raw data folder (e.g. one that cannot be written).
    """
    task = getattr(load_module(directory, module), task_var)
    work = tmp_path / f"{task_var}-{uuid.uuid4().hex[:6]}"
    for sub in ("out", "raw", "base", "ckpt", "tmp"):
        (work / sub).mkdir(parents=True)
    proto = asyncio.run(convert_from_native_to_inputs(task.native_interface, **(inputs or {})))
    (work / "inputs.pb").write_bytes(proto.proto_inputs.SerializeToString())
    run_name = run_name or f"r{uuid.uuid4().hex[:8]}"
    action_env = clean_environ(
        ACTION_NAME="a0", RUN_NAME=run_name, FLYTE_INTERNAL_EXECUTION_PROJECT="p",
        FLYTE_INTERNAL_EXECUTION_DOMAIN="d", _U_ORG_NAME="o", _U_EP_OVERRIDE="localhost:1",
        _U_RUN_BASE=str(work / "base"), TMPDIR=str(work / "tmp"),
        NSIGHT_TEST_TRACES=str(work / "traces.jsonl"),
    )
    action_env.update(task.env_vars or {})
    action_env.update(env or {})
    argv = [*(entry or [str(a0)]), "--inputs", str(work / "inputs.pb"), "--outputs-path", str(work / "out"),
            "--version", "v1", "--raw-data-path", str(raw_data or work / "raw"), "--checkpoint-path",
            str(work / "ckpt"), "--prev-checkpoint", str(work / "prev"),
            "--resolver", "flyte._internal.resolvers.default.DefaultTaskResolver",
            "mod", module, "instance", task_var]
    # Its output goes to a file, not a pipe: a helper nsys leaves behind (its agent, after "Connection
    # to Agent lost") inherits it and could hold a pipe open long after the action has ended.
    with (work / "output.txt").open("w") as output:
        process = subprocess.Popen(argv, cwd=directory, env=action_env, stdout=output, stderr=subprocess.STDOUT,
                                   text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        if started is not None:
            started(process, work)
        process.wait(timeout=ACTION_TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    result = ActionResult(process.returncode, work, (work / "output.txt").read_text(), run_name)
    if (work / "out" / "outputs.pb").exists():
        outputs = asyncio.run(load_outputs(str(work / "out" / "outputs.pb")))
        result.output = asyncio.run(convert_outputs_to_native(task.native_interface, outputs))
    if (work / "out" / "error.pb").exists():
        result.error = ErrorDocument.FromString((work / "out" / "error.pb").read_bytes())
    if (work / "traces.jsonl").exists():
        result.traces = [json.loads(line) for line in (work / "traces.jsonl").read_text().splitlines()]
    return result


@pytest.fixture(scope="session")
def a0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim as an executable script with this venv's Python (the re-exec runs it again)."""
    return executable(HERE / "a0_shim.py", tmp_path_factory.mktemp("bin"))


@pytest.fixture
def run_action(a0: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    """run_action(directory, module, task_var, inputs, env=None) -> ActionResult."""

    def run(directory: Path, module: str, task_var: str, inputs: dict[str, Any] | None = None,
            env: dict[str, str] | None = None, entry: list[str] | None = None,
            **options: Any) -> ActionResult:
        """ENTRY replaces the entrypoint itself (flyte's `clustered` launcher, which execs torchrun and
        `a0` on its own). OPTIONS: those of run_action_with (started, run_name, raw_data)."""
        return run_action_with(a0, tmp_path, directory, module, task_var, inputs, env, entry, **options)

    return run


@pytest.fixture
def without_nsys(tmp_path: Path) -> dict[str, str]:
    """An environment in which nsight-core finds no nsys: not on PATH, not installed, not named."""
    return without_nsys_env(tmp_path)
