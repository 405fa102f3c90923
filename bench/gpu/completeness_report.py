"""The completeness verdict of each capture, with what its recording left beside it.

    python bench/gpu/completeness_report.py REP [REP ...]

Side facts are taken where bench/gpu/actions.py left them: the `nsys stop` output recorded in the
nearest timings.json above REP (bench/gpu/a0_timed.py keeps it), the `.qdstrm` beside REP, and the nsys
that nsight-core finds now (the one that recorded, when run where the capture was made). One JSON line
per capture: path, complete, warning codes, versions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nsight_core
from nsight_core.analysis.completeness import capture_facts, check_completeness


def stop_output(report: Path) -> str:
    """What `nsys stop` printed for REPORT, from the timings of the action that recorded it ('' if none)."""
    for folder in report.parents:
        timings = folder / "timings.json"
        if timings.exists():
            events = json.loads(timings.read_text())["events"]
            return "\n".join(e.get("output", "") for e in events
                             if e["event"] == "nsys stop" and f"/{report.name}" in e.get("output", ""))
    return ""


def main(argv: list[str]) -> int:
    version = nsight_core.find_nsys().version
    for rep in map(Path, argv):
        result = check_completeness(nsight_core.load_trace(rep), capture_facts(rep, stop_output(rep), version))
        print(json.dumps({"report": str(rep), "complete": result.complete,
                          "warnings": [w.code for w in result.warnings], "nsys": result.nsys_version,
                          "cuda": result.cuda_version}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
