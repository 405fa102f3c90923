"""Where nsys' version matters for a killed `nsight run`: SIGKILL it while its program records a region, until a
kill leaves the collection's raw stream in $TMPDIR; say whether the stream's header names the run's folders
(which is how the next run tells it from another session's) and whether the next run deletes it.

    python3 bench/gpu/killed_run_streams.py          # nsys as nsight finds it (NSIGHT_NSYS, PATH)

Prints one JSON object: each kill's outcome (the trace so far, or a stream and what its header names), then the
next run's exit status and the streams left after it (docs/troubleshooting.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

KILLS = 6
NAMES = ("nsight-run-", "nsight-claims-", "NSIGHT_SIGNAL_FILE=")
JOB = """
    import os, time, nsight_core
    with nsight_core.range("r"):
        open({ready!r}, "w").write(str(os.getpid()))
        time.sleep(120)
"""


def agents(temp: Path) -> list[int]:
    """The nsys agents whose $TMPDIR is TEMP."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if (b"--start-agent" in cmdline.read_bytes().split(b"\0")
                    and f"TMPDIR={temp}".encode() in (cmdline.parent / "environ").read_bytes().split(b"\0")):
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def kill_once(folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """One `nsight run --capture manual` killed once its program is inside its region."""
    folder.mkdir()
    ready = folder / "ready"
    (folder / "job.py").write_text(textwrap.dedent(JOB.format(ready=str(ready))))
    with (folder / "err").open("w") as err:
        run = subprocess.Popen(["nsight", "run", "--capture", "manual", "--trace", "nvtx", "-o", str(folder / "o"),
                                "--", sys.executable, str(folder / "job.py")], stdout=subprocess.DEVNULL, stderr=err,
                               stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    started = time.monotonic()
    while not (ready.exists() and ready.read_text()):
        if run.poll() is not None or time.monotonic() - started > 120:
            return {"error": "the program never entered its region", "err": (folder / "err").read_text()[-2000:]}
        time.sleep(0.1)
    program = int(ready.read_text())
    children = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True,
                                                   text=True).stdout.split()]
    run.kill()
    run.wait()
    killed = time.monotonic()
    while any(alive(pid) for pid in (program, *children)) and time.monotonic() - killed < 90:
        time.sleep(0.1)
    gone_s = time.monotonic() - killed
    temp = Path(env["TMPDIR"])
    for agent in agents(temp):
        os.kill(agent, signal.SIGKILL)
    time.sleep(0.3)
    streams = {stream.name: [name for name in NAMES if name.encode() in stream.read_bytes()[: 1 << 20]]
               for stream in sorted(temp.glob("nsys-report-*.qdstrm"))}
    return {"gone_s": round(gone_s, 2), "all_gone": not any(alive(pid) for pid in (program, *children)),
            "left_in_output": sorted(path.name for path in (folder / "o").glob("*")), "streams": streams,
            "warning": (folder / "err").read_text()[-300:]}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="killed-run-streams-"))
    temp = root / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    result: dict[str, Any] = {"nsys": subprocess.run(["nsys", "--version"], capture_output=True, text=True,
                                                     env=env).stdout.strip(), "kills": []}
    for attempt in range(KILLS):
        result["kills"].append(kill_once(root / str(attempt), env))
        if result["kills"][-1].get("streams"):
            break
    after = subprocess.run(["nsight", "run", "--trace", "nvtx", "-o", str(root / "next"), "--", sys.executable, "-c",
                            "pass"], capture_output=True, text=True, env=env, timeout=300)
    result["next_run_exit"] = after.returncode
    result["streams_after_next_run"] = sorted(stream.name for stream in temp.glob("nsys-report-*.qdstrm"))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
