"""Run the Flyte examples through the real `a0` entrypoint, profiled and unprofiled, and time our costs.

    python bench/gpu/actions.py OUT [--cases quick_start,regions,...] [--modes profiled,unprofiled]
                                    [--env NAME=VALUE ...] [--timeout 300]

Each run is what a Flyte pod does with the task (the environment the decorator stamped, `a0`, its
`_F_EXEC_WRAPPER` re-exec under `nsight launch`), through bench/gpu/a0_timed.py, which times every
nsys command, each region's start/stop/finalize and each `nvtx.range` block. "unprofiled" is the same
action without the exec wrapper (what `enabled=False` gives). Per run OUT/<case>-<mode>/ keeps the
action's log, report.html, the session's files (.nsys-rep, any leftover .qdstrm) and timings.json;
OUT/summary.json holds every run, and the table is printed. Needs the project's packages and nsys
(scripts/gpu-check.sh sets both up); the GPU cases need torch with CUDA.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "flyte"
sys.path.insert(0, str(HARNESS))

from flyte_harness import EXAMPLES, executable, load_module, torchrun  # noqa: E402


@dataclass(frozen=True)
class Case:
    module: str
    task: str
    inputs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 0  # > 0: a clustered worker started by torchrun, rank 0 profiled


CASES = {
    "quick_start": Case("flyte_quick_start", "train", {"steps": 20}),
    "regions": Case("flyte_regions", "train_regions", {"steps": 30}),
    "regions_sync": Case("flyte_regions", "train_regions_sync", {"steps": 30}),
    "profile_switch": Case("flyte_profile_switch", "train", {"steps": 10}, {"PROFILE_GPU": "1"}),
    "osrt": Case("flyte_osrt", "train", {"steps": 5}),
    "ddp": Case("flyte_ddp", "train_ddp", {"steps": 30}, {"FLYTE_CLUSTERED_WORKER": "1"}, ranks=1),
}
WRAPPER_VARS = ("_F_EXEC_WRAPPER", "_F_EXEC_WRAPPER_CLUSTERED")


def action_env(work: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment minus nsight/Flyte action variables, plus a pod's action variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NSIGHT_", "_F_", "FLYTE_", "RANK", "TORCHELASTIC"))}
    env.update(ACTION_NAME="a0", RUN_NAME=f"r{uuid.uuid4().hex[:8]}", FLYTE_INTERNAL_EXECUTION_PROJECT="p",
               FLYTE_INTERNAL_EXECUTION_DOMAIN="d", _U_ORG_NAME="o", _U_EP_OVERRIDE="localhost:1",
               _U_RUN_BASE=str(work / "base"), TMPDIR=str(work / "tmp"),
               NSIGHT_TEST_TRACES=str(work / "traces.jsonl"), NSIGHT_BENCH_LOG=str(work / "timings.jsonl"),
               NSIGHT_BENCH_HARNESS=str(HARNESS), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run_case(name: str, case: Case, profiled: bool, out: Path, shim: Path, extra_env: dict[str, str],
             timeout: float) -> dict[str, Any]:
    from flyte._internal.runtime.convert import convert_from_native_to_inputs, convert_outputs_to_native
    from flyte._internal.runtime.io import load_outputs

    os.environ.update(case.env)  # the module reads them at import (profile switch), as flyte run would
    task = getattr(load_module(EXAMPLES, case.module), case.task)
    work = out / f"{name}-{'profiled' if profiled else 'unprofiled'}"
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("out", "raw", "base", "ckpt", "tmp"):
        (work / sub).mkdir(parents=True)
    proto = asyncio.run(convert_from_native_to_inputs(task.native_interface, **case.inputs))
    (work / "inputs.pb").write_bytes(proto.proto_inputs.SerializeToString())
    stamped = {k: v for k, v in (task.env_vars or {}).items() if profiled or k not in WRAPPER_VARS}
    env = action_env(work, {**stamped, **case.env, **extra_env})
    entry = [*torchrun(case.ranks), str(shim)] if case.ranks else [str(shim)]
    argv = [*entry, "--inputs", str(work / "inputs.pb"), "--outputs-path", str(work / "out"), "--version", "v1",
            "--raw-data-path", str(work / "raw"), "--checkpoint-path", str(work / "ckpt"),
            "--prev-checkpoint", str(work / "prev"),
            "--resolver", "flyte._internal.resolvers.default.DefaultTaskResolver",
            "mod", case.module, "instance", case.task]
    started = time.time()
    with open(work / "log.txt", "w") as log:
        try:
            returncode = subprocess.run(argv, cwd=EXAMPLES, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            returncode = -1
    ended = time.time()
    wall = ended - started
    output: Any = None
    if (work / "out" / "outputs.pb").exists():
        outputs = asyncio.run(load_outputs(str(work / "out" / "outputs.pb")))
        output = asyncio.run(convert_outputs_to_native(task.native_interface, outputs))
    files = sorted(f"{p.relative_to(work)} {p.stat().st_size}" for p in (work / "tmp").rglob("*")
                   if p.is_file() and p.suffix in (".nsys-rep", ".qdstrm", ".qdrep", ".sqlite", ".claim"))
    events = [json.loads(line) for line in (work / "timings.jsonl").read_text().splitlines()] \
        if (work / "timings.jsonl").exists() else []
    result = {"case": name, "profiled": profiled, "returncode": returncode, "wall_s": round(wall, 3),
              "output": repr(output), "error": (work / "out" / "error.pb").exists(), "session_files": files,
              **summarize(events, started, ended)}
    (work / "timings.json").write_text(json.dumps({"result": result, "events": events}, indent=1))
    return result


def summarize(events: list[dict[str, Any]], started: float, ended: float) -> dict[str, Any]:
    """Per region: start, stop, finalize seconds; NVTX step p50 (ms); when the profiled process began
    (the re-exec under nsys) and how long the action ran after its last timed event (nsys teardown)."""
    regions = []
    starts = [e for e in events if e["event"] == "region start"]
    stops = [e for e in events if e["event"] == "region stop"]
    finals = [e for e in events if e["event"] == "finalize publish"]
    for i, start in enumerate(starts):
        regions.append({"start_s": round(start["seconds"], 3),
                        "stop_s": round(stops[i]["seconds"], 3) if i < len(stops) else None,
                        "finalize_s": round(finals[i]["seconds"], 3) if i < len(finals) else None})
    steps = [e["seconds"] * 1e3 for e in events if e["event"] == "nvtx range" and e["name"].startswith("step_")]
    execs = [e for e in events if e["event"] == "process start"]
    last = max((e["t1"] for e in events), default=started)
    return {"regions": regions, "after_last_event_s": round(ended - last, 3) if events else None,
            "step_p50_ms": round(statistics.median(steps), 3) if steps else None,
            "steps": len(steps),
            "profiled_process_at_s": round(execs[-1]["t1"] - started, 3) if len(execs) > 1 else None}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| case | mode | rc | wall s | regions: start / stop / finalize s | step p50 ms (n) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        regions = "; ".join(f"{g['start_s']} / {g['stop_s']} / {g['finalize_s']}" for g in r["regions"]) or "-"
        lines.append(f"| {r['case']} | {'profiled' if r['profiled'] else 'unprofiled'} | {r['returncode']} | "
                     f"{r['wall_s']} | {regions} | {r['step_p50_ms']} ({r['steps']}) |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the runs (created)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    parser.add_argument("--modes", default="profiled,unprofiled", help="profiled, unprofiled or both")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra action environment (e.g. NSIGHT_NSYS=/opt/other/bin/nsys)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per action (default 300)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shim = executable(Path(__file__).with_name("a0_timed.py"), args.out)
    extra = dict(item.split("=", 1) for item in args.env)
    results = []
    for name in args.cases.split(","):
        for mode in args.modes.split(","):
            result = run_case(name, CASES[name], mode == "profiled", args.out, shim, extra, args.timeout)
            print(json.dumps(result), flush=True)
            results.append(result)
    summary = args.out / "summary.json"
    previous = json.loads(summary.read_text()) if summary.exists() else []
    summary.write_text(json.dumps(previous + results, indent=1))
    print(table(results))
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
