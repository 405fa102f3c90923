"""Every step's "What to fix" of a GPU capture too large to analyse whole, on the H200 machine, checked against the
analysis read whole: record bench/gpu/many_kernels.py STEPS with 2 ms of host work in each step from a third of the
way on (device-bound first, host-bound after: what the first steps alone do not show), then `nsight stats --json` in a
task allowed 2 GiB (``NSIGHT_SUMMARY_MEMORY=2G``: streamed, its SQLite export made), the same read whole
(``NSIGHT_SUMMARY_MEMORY=off``, the export reused: the reference), and `nsight report` allowed 2 GiB. Each command's
peak is its whole process tree's (bench/bench.py ``tree_run``). The numbers go to DIR/log and DIR/result.json, with
``equal``: whether the streamed analysis (steps, budget, window, ranges, findings) is the one read whole.

    nohup python3 bench/gpu/streamed_budget.py [STEPS] [DIR] > /tmp/budget.out 2>&1 &     (DIR default /tmp/sbudget)
"""

from __future__ import annotations

import json
import os

from large_capture import MEMORY, PY, record_many_kernels, start_run, tree_run

HOST_MS = "2"


def main() -> None:
    steps, folder, nsys, result, log = start_run(6_000, "/tmp/sbudget")
    capture = folder / "b.nsys-rep"
    recorded = record_many_kernels(nsys, capture, steps, [HOST_MS, str(steps // 3)])
    result["record"] = {"seconds": recorded.seconds, "trace_bytes": capture.stat().st_size}
    log(f"recorded {capture.name}: {capture.stat().st_size:,} bytes in {recorded.seconds:.0f} s")

    payloads = {}
    for name, memory in (("streamed", MEMORY), ("whole", "off")):
        run = tree_run([PY, "-m", "nsight_core.cli", "stats", capture, "--json"], folder,
                       {**os.environ, "NSIGHT_SUMMARY_MEMORY": memory})
        payload = payloads[name] = json.loads(run.stdout)
        result[name] = {"seconds": run.seconds, "tree_mb": run.tree_mb, "largest_mb": run.largest_mb,
                        "export": payload.get("export"), "notes": payload.get("notes"), "budget": payload.get("budget"),
                        "steps": payload.get("steps", {}).get("family"), "bound": payload.get("steps", {}).get("bound"),
                        "findings": [(finding["kind"], finding["severity"]) for finding in payload.get("findings", [])],
                        "coverage": payload.get("coverage")}
        log(f"nsight stats --json ({name}, NSIGHT_SUMMARY_MEMORY={memory}): {run.seconds:.0f} s, tree "
            f"{run.tree_mb:.0f} MB, largest {run.largest_mb:.0f} MB")
    streamed, whole = payloads["streamed"], payloads["whole"]
    result["equal"] = {name: streamed.get(name) == whole.get(name)
                       for name in ("window", "budget", "ranges", "findings", "completeness")}
    result["equal"]["steps"] = ({**streamed.get("steps", {}), "candidates": []}
                                == {**whole.get("steps", {}), "candidates": []})
    log(f"equal to the analysis read whole: {result['equal']}")

    page = folder / "page.html"
    report = tree_run([PY, "-m", "nsight_core.cli", "report", capture, "-o", page], folder,
                      {**os.environ, "NSIGHT_SUMMARY_MEMORY": MEMORY})
    result["report"] = {"seconds": report.seconds, "tree_mb": report.tree_mb, "largest_mb": report.largest_mb,
                        "page_bytes": page.stat().st_size}
    log(f"nsight report: {report.seconds:.0f} s, tree {report.tree_mb:.0f} MB, page {page.stat().st_size:,} bytes")
    (folder / "done").touch()


if __name__ == "__main__":
    main()
