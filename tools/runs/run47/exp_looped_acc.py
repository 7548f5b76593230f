"""Looped forward: running sums folded to an eighth of the step, so two programs fit on an SM (run 47).

The looped forward keeps two running sums of BLOCK_N float32 values each: at
16384-element steps with 32 warps that is 32 registers per thread before any
data, and one 1024-thread program fills an SM, so nothing overlaps its row sums
and the start of its second sweep. Summing each group of 8 neighbouring values
(within a thread) before accumulating leaves BLOCK_N / 8 values per sum.

Prediction: with 8 or 16 warps per program two programs then share an SM, one
streaming while the other reduces: 2048 x 65536 from 82 % of copy (2448 GB/s
at the launcher) to 88-92 %. The sums are added in another order: results
within a few float32 ulps of the package's.
"""

from ln_tutorial.launch import ForwardConfig as F

VARIANTS = {
    "acc8": [
        ("""    sum_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    sum_sq_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)""", """    sum_dev = tl.zeros([BLOCK_N // 8], dtype=COMPUTE)
    sum_sq_dev = tl.zeros([BLOCK_N // 8], dtype=COMPUTE)"""),
        ("""        dev = tl.where(mask, x - shift, 0.0)
        sum_dev += dev
        sum_sq_dev += dev * dev""", """        dev = tl.reshape(tl.where(mask, x - shift, 0.0), [BLOCK_N // 8, 8])
        sum_dev += tl.sum(dev, axis=1)
        sum_sq_dev += tl.sum(dev * dev, axis=1)"""),
    ],
}
CASES = [
    ("forward", 2048, 65536, [F(True, 1, 16384, 32), F(True, 1, 16384, 16), F(True, 1, 16384, 8), F(True, 1, 8192, 16),
                              F(True, 1, 8192, 8), F(True, 1, 8192, 4), F(True, 1, 32768, 16)]),
    ("forward", 4096, 32768, [F(False, 1, 32768, 16), F(True, 1, 16384, 16), F(True, 1, 8192, 8)]),
]  # fmt: skip
