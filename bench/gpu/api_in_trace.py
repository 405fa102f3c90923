"""Add to an api_overhead.json what nsys recorded inside each kind's bursts: the CUDA API calls and their durations.

    python bench/gpu/api_in_trace.py api_overhead.json OUT.json RUN0.sqlite [RUN1.sqlite ...]

RUNi.sqlite is the SQLite export of the i-th run's capture (bench/gpu/api_overhead.py, region api_overhead). For each
kind, every CUPTI_ACTIVITY_KIND_RUNTIME row of the thread inside one of the kind's NVTX ranges (`<kind>_<repeat>`)
is counted: per name, the calls per burst and the median and mean duration nsys recorded. Written to each run's
"api_in_trace".
"""

from __future__ import annotations

import collections
import json
import sqlite3
import statistics
import sys


def per_kind(path: str) -> dict[str, dict[str, dict[str, float]]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    ranges = [(start, end, text or strings.get(text_id), tid) for start, end, text, text_id, tid in
              db.execute("SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS WHERE eventType = 59")]
    calls = db.execute("SELECT start, end, nameId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
    found: dict[str, dict[str, list[int]]] = {}
    bursts: collections.Counter[str] = collections.Counter()
    for start, end, name, tid in ranges:
        kind = name.rsplit("_", 1)[0]
        bursts[kind] += 1
        names = found.setdefault(kind, collections.defaultdict(list))
        for call_start, call_end, name_id, call_tid in calls:
            if call_tid == tid and start <= call_start and call_end <= end:
                names[strings[name_id]].append(call_end - call_start)
    return {kind: {name: {"calls_per_burst": len(d) / bursts[kind], "median_ns": statistics.median(d),
                          "mean_ns": statistics.fmean(d)}
                   for name, d in sorted(names.items(), key=lambda item: -len(item[1]))}
            for kind, names in found.items()}


def main() -> None:
    source, out, *exports = sys.argv[1:]
    with open(source) as fh:
        data = json.load(fh)
    for run, export in zip(data["runs"], exports, strict=True):
        run["api_in_trace"] = per_kind(export)
        run["api_in_trace_note"] = ("CUDA API rows recorded inside each kind's NVTX ranges (same thread), per burst "
                                    "of calls_per_burst calls; durations as nsys recorded them")
    with open(out, "w") as fh:
        json.dump(data, fh, indent=1)


if __name__ == "__main__":
    main()
