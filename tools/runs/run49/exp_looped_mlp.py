"""Looped forward at 2048 x 65536: more bytes in flight in the first sweep (run 49).

exp_looped_bounds.py: without the re-read the looped forward gains 2 % (2447 ->
2504 GB/s), without the first sweep it reaches 2810. So the first sweep, which
only reads, is what is slow: each program has one step (32 KB) of loads in
flight, then waits. Run 47's folded running sums ("acc8") free the registers
that two steps in flight need: either wider steps (32768 elements, which
spilled with full-width sums: 1807 GB/s in run 28) or Triton's software
pipelining of the first loop (num_stages).

Prediction: acc8 with 32768-element steps or 2 stages: 2600-2750 GB/s
(87-92 % of copy, from 82 %).
"""

import runpy
from pathlib import Path

from ln_tutorial.launch import ForwardConfig as F

ACC8 = runpy.run_path(str(Path(__file__).parents[1] / "run47" / "exp_looped_acc.py"))["VARIANTS"]["acc8"]
FIRST_LOOP = """    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        # evict_last"""


def stages(n):
    return (FIRST_LOOP, FIRST_LOOP.replace("range(0, N, BLOCK_N)", f"tl.range(0, N, BLOCK_N, num_stages={n})"))


VARIANTS = {"acc8": ACC8, "acc8_stages2": ACC8 + [stages(2)], "acc8_stages3": ACC8 + [stages(3)], "stages2": [stages(2)]}
CASES = [
    ("forward", 2048, 65536, [F(True, 1, 16384, 32), F(True, 1, 32768, 32), F(True, 1, 8192, 32), F(True, 1, 16384, 16)]),
    ("forward", 4096, 32768, [F(True, 1, 16384, 32), F(True, 1, 8192, 16)]),
]  # fmt: skip
