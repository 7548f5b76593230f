"""Run 88: the half-precision split backward with two or four rows per tile (one trade per tile).

    python tools/ab_kernels.py tools/runs/run88/split_rows_per_tile.py
"""

from ln_tutorial.launch import BackwardConfig, backward_config


def split(block_m, block_n, warps, per_sm):
    return BackwardConfig(False, block_m, block_n, warps, per_sm, split=True)


CANDIDATES = [split(2, 2048, 8, 2), split(2, 2048, 4, 4), split(2, 1024, 4, 4), split(2, 1024, 2, 8),
              split(4, 1024, 8, 2), split(4, 2048, 8, 2)]  # fmt: skip
VARIANTS = {}
CASES = [("backward", m, n, [backward_config(n, 2), *CANDIDATES])
         for m, n in ((8192, 16384), (4096, 32768), (2048, 65536), (4096, 12800), (4096, 14848))]
