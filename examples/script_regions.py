"""A plain script profiled region by region: run it with

    nsight run --capture manual --trace nvtx,osrt -- python examples/script_regions.py

Each `nsight_core.range` block becomes its own .nsys-rep; NVTX ranges label the work inside it.
Run without nsight, the ranges do nothing and the script behaves the same.
"""

import time

import nvtx

import nsight_core


def load_batch(i: int) -> list[int]:
    time.sleep(0.002)
    return list(range(i, i + 1000))


def train_step(batch: list[int]) -> int:
    time.sleep(0.005)
    return sum(x * x for x in batch)


def main() -> None:
    with nsight_core.range("training"):
        for i in range(10):
            with nvtx.annotate("data"):
                batch = load_batch(i)
            with nvtx.annotate("step"):
                train_step(batch)
    with nsight_core.range("evaluation"):
        for i in range(3):
            with nvtx.annotate("eval"):
                train_step(load_batch(i))
    print("finished")


if __name__ == "__main__":
    main()
