"""The CPU capture of `make bench`: N tiny NVTX ranges pushed from Python (default 1,000,000).

    nsight run --trace nvtx --sample none -o DIR -- python bench/nvtx_ranges.py [N]

N/1000 outer ranges `step`, each holding 999 ranges named op_0..op_9 in turn: a training loop's shape
(steps holding many short operations), at a size where per-event costs dominate everything else.
"""

from __future__ import annotations

import sys

import nvtx

PER_STEP = 1000
NAMES = [f"op_{i}" for i in range(10)]


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    push, pop = nvtx.push_range, nvtx.pop_range
    for _ in range(total // PER_STEP):
        push("step")
        for i in range(PER_STEP - 1):
            push(NAMES[i % 10])
            pop()
        pop()


if __name__ == "__main__":
    main()
