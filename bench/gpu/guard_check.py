"""Does the memory guard's estimate cover what a summary takes? `python bench/gpu/guard_check.py TRACE...`

For each TRACE (a .nsys-rep): nsys' arrow export's peak (a bare `nsys export --type arrowdir` into a scratch
folder, its peak RSS from wait4) against the guard's estimate for it (nsight_core.memory.export_bytes of the
trace's bytes); then, in a process of its own on the export nsight makes beside TRACE, the summary's estimate
(summary_bytes of the export's event tables) against the peak the summary really took above what the process
held before it (build_profile and the page, as a profiled task runs them; VmHWM after resetting it with
/proc/self/clear_refs). Prints one JSON line per trace; run it on a GPU machine, where
captures larger than any kept in the repository can be recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from nsight_core import find_nsys
from nsight_core.memory import export_bytes

MEASURE = """
import json, sys
from pathlib import Path
def rss(field):
    return int(next(l for l in open('/proc/self/status') if l.startswith(field)).split()[1]) * 1024
from nsight_core.memory import summary_bytes
from nsight_core.profile import build_profile
from nsight_core.render.html import prepare, render_page
from nsight_core.trace.load import load_trace
prepare()
path = Path(sys.argv[1])
trace = load_trace(path)
events = trace.event_bytes
del trace
open('/proc/self/clear_refs', 'w').write('5')
before = rss('VmRSS:')
profile = build_profile(path)
render_page([profile], title=path.stem)
taken = rss('VmHWM:') - before
kernels = sum(row.instances for row in profile.stats.kernels) if profile.stats else 0
print(json.dumps({'trace': path.name, 'kernels': kernels, 'event_bytes': events,
                  'estimate': summary_bytes(events), 'taken': taken, 'covered': summary_bytes(events) / taken}))
"""


def export_peak(trace: Path) -> int:
    """The peak RSS in bytes of a bare arrow export of TRACE (nsys and what it starts)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [str(find_nsys().path), "export", "--type", "arrowdir", "--quiet=true", "-o",
                   str(Path(scratch) / "export"), str(trace)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"guard_check: {' '.join(command)} failed")
        return usage.ru_maxrss * 1024


def main() -> None:
    for argument in sys.argv[1:]:
        trace = Path(argument)
        exported, estimate = export_peak(trace), export_bytes(trace.stat().st_size)
        subprocess.run([sys.executable, "-c", "from nsight_core.trace.load import load_trace; import sys; "
                        "load_trace(sys.argv[1])", trace], check=True)  # the export, outside the measurement
        done = subprocess.run([sys.executable, "-c", MEASURE, trace], capture_output=True, text=True, check=True)
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({**summary, "trace_bytes": trace.stat().st_size, "export_estimate": estimate,
                          "export_taken": exported, "export_covered": estimate / exported}))


if __name__ == "__main__":
    main()
