"""Run Flyte tasks the way a Flyte pod does: the real `a0` entrypoint, real nsys, no backend.

`run_action` writes the task's inputs.pb, starts the `a0` shim (see a0_shim.py) with the container
environment the decorator stamped on the task, and collects what a pod leaves behind: outputs or
error.pb, report.html, the traced steps, and the process's stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flyte._internal.runtime.convert import convert_from_native_to_inputs, convert_outputs_to_native
from flyte._internal.runtime.io import load_outputs
from flyte_harness import BIN, HERE, executable, load_module
from flyteidl2.core.execution_pb2 import ErrorDocument

from nsight_core.nsys import ENV_NSYS, INSTALL_PREFIX_ENV

ACTION_TIMEOUT = 180


@dataclass
class ActionResult:
    """What one action left behind."""

    returncode: int
    workdir: Path
    stderr: str
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


@pytest.fixture(scope="session")
def a0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim as an executable script with this venv's Python (the re-exec runs it again)."""
    return executable(HERE / "a0_shim.py", tmp_path_factory.mktemp("bin"))


@pytest.fixture
def run_action(a0: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    """run_action(directory, module, task_var, inputs, env=None) -> ActionResult."""

    def run(directory: Path, module: str, task_var: str, inputs: dict[str, Any] | None = None,
            env: dict[str, str] | None = None, launcher: list[str] | None = None,
            entry: list[str] | None = None) -> ActionResult:
        """LAUNCHER, when given, starts the entrypoint (torchrun for clustered workers): those
        run with no controller, so they get the real `a0` rather than the shim. ENTRY replaces the
        entrypoint itself (flyte's `clustered` launcher, which execs torchrun and `a0` on its own)."""
        task = getattr(load_module(directory, module), task_var)
        work = tmp_path / f"{task_var}-{uuid.uuid4().hex[:6]}"
        for sub in ("out", "raw", "base", "ckpt", "tmp"):
            (work / sub).mkdir(parents=True)
        proto = asyncio.run(convert_from_native_to_inputs(task.native_interface, **(inputs or {})))
        (work / "inputs.pb").write_bytes(proto.proto_inputs.SerializeToString())
        action_env = clean_environ(
            ACTION_NAME="a0", RUN_NAME=f"r{uuid.uuid4().hex[:8]}", FLYTE_INTERNAL_EXECUTION_PROJECT="p",
            FLYTE_INTERNAL_EXECUTION_DOMAIN="d", _U_ORG_NAME="o", _U_EP_OVERRIDE="localhost:1",
            _U_RUN_BASE=str(work / "base"), TMPDIR=str(work / "tmp"),
            NSIGHT_TEST_TRACES=str(work / "traces.jsonl"),
        )
        action_env.update(task.env_vars or {})
        action_env.update(env or {})
        if entry is None:
            entry = [*launcher, str(BIN / "a0")] if launcher else [str(a0)]
        argv = [*entry, "--inputs", str(work / "inputs.pb"), "--outputs-path", str(work / "out"),
                "--version", "v1", "--raw-data-path", str(work / "raw"), "--checkpoint-path",
                str(work / "ckpt"), "--prev-checkpoint", str(work / "prev"),
                "--resolver", "flyte._internal.resolvers.default.DefaultTaskResolver",
                "mod", module, "instance", task_var]
        done = subprocess.run(argv, cwd=directory, env=action_env, capture_output=True, text=True,
                              timeout=ACTION_TIMEOUT, stdin=subprocess.DEVNULL)
        result = ActionResult(done.returncode, work, done.stdout + done.stderr)
        if (work / "out" / "outputs.pb").exists():
            outputs = asyncio.run(load_outputs(str(work / "out" / "outputs.pb")))
            result.output = asyncio.run(convert_outputs_to_native(task.native_interface, outputs))
        if (work / "out" / "error.pb").exists():
            result.error = ErrorDocument.FromString((work / "out" / "error.pb").read_bytes())
        if (work / "traces.jsonl").exists():
            result.traces = [json.loads(line) for line in (work / "traces.jsonl").read_text().splitlines()]
        return result

    return run


@pytest.fixture
def without_nsys(tmp_path: Path) -> dict[str, str]:
    """An environment in which nsight-core finds no nsys: not on PATH, not installed, not named."""
    empty = tmp_path / "no-nsys"
    empty.mkdir()
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nsys").exists())
    return {"PATH": f"{BIN}{os.pathsep}{path}", INSTALL_PREFIX_ENV: str(empty), ENV_NSYS: ""}
