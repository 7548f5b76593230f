"""Run 79 (tools/ab_kernels.py): the split backward against the package's kernel for padded 25-32 KB rows.

    python tools/ab_kernels.py tools/runs/run79/split_padded.py
"""

from ln_tutorial.launch import BACKWARD_SPLIT, backward_config

VARIANTS = {}
SPLITS = [BACKWARD_SPLIT, BACKWARD_SPLIT._replace(block_n=1024, num_warps=2, programs_per_sm=8),
          BACKWARD_SPLIT._replace(block_n=4096, num_warps=8, programs_per_sm=2)]  # fmt: skip
CASES = [("backward", 4096, n, [backward_config(n, 2), *SPLITS]) for n in (12800, 13312, 14336, 15360, 15872)]
CASES += [("backward", 8192, 16384, [backward_config(16384, 2), *SPLITS])]
