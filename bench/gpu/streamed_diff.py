"""`nsight diff` of two GPU captures too large to analyse whole, on the H200 machine: A records
bench/gpu/many_kernels.py STEPS (each step one replay of a CUDA graph of 1,000 tiny kernels, device-bound), B the same
with 2 ms of host work in every step from a third of the way on (host-bound there: a slowdown that starts part-way,
which the first steps alone do not show). Then, in a task allowed 2 GiB (``NSIGHT_SUMMARY_MEMORY=2G``), `nsight diff A B
--fail-if-slower 5` (its exports included) and `--json` (the exports reused), each command's peak the whole process
tree's (bench/bench.py ``tree_run``). The numbers go to DIR/log and DIR/result.json.

    nohup python3 bench/gpu/streamed_diff.py [STEPS] [DIR] > /tmp/diff.out 2>&1 &     (DIR default /tmp/sdiff)
"""

from __future__ import annotations

import json
import os

from large_capture import MEMORY, PY, record_many_kernels, start_run, tree_run

HOST_MS = "2"


def main() -> None:
    steps, folder, nsys, result, log = start_run(6_000, "/tmp/sdiff")
    a, b = folder / "a.nsys-rep", folder / "b.nsys-rep"
    for capture, extra in ((a, []), (b, [HOST_MS, str(steps // 3)])):
        recorded = record_many_kernels(nsys, capture, steps, extra)
        result[capture.stem] = {"record_s": recorded.seconds, "trace_bytes": capture.stat().st_size}
        log(f"recorded {capture.name}: {capture.stat().st_size:,} bytes in {recorded.seconds:.0f} s")

    env = {**os.environ, "NSIGHT_SUMMARY_MEMORY": MEMORY}
    for name, flags in (("text", ["--fail-if-slower", "5"]), ("json", ["--json"])):
        # The gate's exit status (3: B slower) through a shell, which tree_run would take for a failure.
        command = " ".join([PY, "-m", "nsight_core.cli", "diff", str(a), str(b), *flags, "2>", name + ".err",
                            ";", "echo", "$?", ">", name + ".rc"])
        run = tree_run(["sh", "-c", command], folder, env)
        entry: dict[str, object] = {"seconds": run.seconds, "tree_mb": run.tree_mb, "largest_mb": run.largest_mb,
                                    "rc": int((folder / f"{name}.rc").read_text()),
                                    "stderr": (folder / f"{name}.err").read_text()}
        if name == "text":
            entry["stdout"] = run.stdout[:3000]
        else:
            payload = json.loads(run.stdout)
            entry.update(gate=payload["gate"], verdict=payload["verdict"], streamed=payload["streamed"],
                         steps=[d for d in payload["deltas"] if d["group"] == "steps"])
        result[name] = entry
        log(f"nsight diff ({name}): {run.seconds:.0f} s, tree {run.tree_mb:.0f} MB, exit {entry['rc']}")
    (folder / "done").touch()


if __name__ == "__main__":
    main()
