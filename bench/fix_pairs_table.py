"""The predicted-vs-real table of docs/analysis.md, from the fix-pair fixtures (tests/fixtures/h200-fix-pairs*).

    .venv/bin/python bench/fix_pairs_table.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nsight_core
from nsight_core.analysis.steps import FamilySteps

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PAIRS = [("host_load", "fixed", ("host_work",)), ("dataloader", "fixed", ("host_work",)),
         ("sync_log", "fixed", ("sync_wait",)), ("graph", "fixed", ("launch_bound",)),
         ("pageable", "fixed", ("pageable_copy",)), ("two", "fix_load", ("host_work",)),
         ("two", "fix_copy", ("pageable_copy",)), ("two", "fixed", ("host_work", "pageable_copy")),
         ("gpu_bound", "fixed", ("sync_wait",)), ("tf32", "fixed", ("fp32_matmul",))]


def main() -> None:
    print("| nsys | fix | cause (finding) | step p50, GPU clock | unprofiled step | predicted saving | real saving "
          "| off by |")
    print("|---|---|---|---|---|---|---|---|")
    recordings = (("2023.4.4", "h200-fix-pairs", ".nsys-rep"), ("2025.3", "h200-fix-pairs-2025", ".sqlite"))
    for version, folder, suffix in recordings:
        truth = json.loads((ROOT / folder / "truth.json").read_text())["cases"]
        for case, fixed, causes in PAIRS:
            problem = nsight_core.analyze(nsight_core.load_trace(ROOT / folder / f"{case}-problem{suffix}"))
            step = truth[case]["variants"]["problem"]["step_ms"]
            real = step - truth[case]["variants"][fixed]["step_ms"]
            savings = [f.saving.per_step_ns / 1e6 for f in problem.findings
                       if f.kind in causes and f.saving is not None and f.saving.per_step_ns is not None]
            predicted = f"{sum(savings):.2f} ms" if savings else "none claimed"
            off = f"{(sum(savings) - real) / real:+.0%}" if savings and real > 0.5 else "(near zero)" if savings else ""
            p50 = problem.steps.family.p50_ns / 1e6 if isinstance(problem.steps, FamilySteps) else float("nan")
            print(f"| {version} | {case}: problem → {fixed} | {', '.join(causes)} | {p50:.2f} ms | {step:.2f} ms | "
                  f"{predicted} | {real:.2f} ms | {off} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
