"""Whether nsight recovers a trace whose import failed, with the nsys at hand: an install of it whose QdstrmImporter
fails its first import (tests/capture_helpers.nsys_whose_importer_fails_once, as 2023.4.4's failed under load) records
a CUDA job with `nsight run`, the whole process and one region; nsight imports the raw stream nsys kept once more.

    python3 bench/gpu/failed_import.py [STATUS]   # in the project root; nsys as nsight finds it (NSIGHT_NSYS, PATH)

STATUS 2 (the default): the first import fails and writes nothing; 3: it writes the trace and ends "Importation
succeeded with non-fatal errors", nsys keeping the raw stream beside the trace.

Prints one JSON object per capture mode: the exit status, the imports the importer saw (nsys' failed one, then
nsight's), the files left in the output folder, the CUDA kernels in the trace, and nsight's words on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from capture_helpers import nsys_whose_importer_fails_once

from nsight_core import find_nsys, load_trace

JOB = """
import torch, nsight_core
x = torch.randn(2048, 2048, device="cuda")
with nsight_core.range("train"):
    for _ in range(20):
        x = (x @ x).tanh()
    torch.cuda.synchronize()
print("job done")
"""


def main() -> None:
    status = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print(json.dumps({"nsys": find_nsys().version, "first_import_status": status}))
    for capture in ("process", "manual"):
        folder = Path(tempfile.mkdtemp(prefix=f"failed-import-{capture}-"))
        env, imports = nsys_whose_importer_fails_once(folder, status)
        (folder / "job.py").write_text(JOB)
        done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "run", "--capture", capture, "-o",
                               str(folder / "out"), "--", sys.executable, str(folder / "job.py")],
                              capture_output=True, text=True, timeout=600, env={**os.environ, **env})
        reports = sorted((folder / "out").glob("*.nsys-rep"))
        kernels = load_trace(reports[0]).kernels.height if reports else None
        print(json.dumps({"capture": capture, "exit": done.returncode,
                          "imports": imports.read_text().splitlines() if imports.exists() else [],
                          "left": sorted(p.name for p in (folder / "out").iterdir()) if (folder / "out").exists()
                          else [], "kernels": kernels, "stdout": done.stdout.splitlines(),
                          "nsight_said": [line for line in done.stderr.splitlines() if "nsight" in line
                                          or "Importer" in line]}))


if __name__ == "__main__":
    main()
