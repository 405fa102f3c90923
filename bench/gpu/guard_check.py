"""Does the memory guard's estimate cover what a summary takes? `python bench/gpu/guard_check.py TRACE...`

For each TRACE (a .nsys-rep, exported once beside it first), in a process of its own: the guard's estimate
(nsight_core.memory.summary_bytes of the export's event tables) and the peak the summary really took above
what the process held before it (build_profile and the page, as a profiled task runs them; VmHWM after
resetting it with /proc/self/clear_refs). Prints one JSON line per trace; docs/gpu-verification.md has
the numbers from the H200 machine, where captures larger than any kept in the repository can be recorded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def main() -> None:
    for trace in sys.argv[1:]:
        subprocess.run([sys.executable, "-c", "from nsight_core.trace.load import load_trace; import sys; "
                        "load_trace(sys.argv[1])", trace], check=True)  # the export, outside the measurement
        done = subprocess.run([sys.executable, "-c", MEASURE, trace], capture_output=True, text=True, check=True)
        print(done.stdout.strip().splitlines()[-1])
        print(json.dumps({"source": str(Path(trace))}), file=sys.stderr)


if __name__ == "__main__":
    main()
