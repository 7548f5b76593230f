"""Run 119: software pipelining of the looped forward's sweeps at the padded rows (see PREDICTION.md).

    python tools/runs/run119/looped_stages.py

Variants of kernels.py (tools/ab_kernels.py): the first sweep (read and sum), or both
sweeps, of ``layer_norm_fwd_looped_kernel`` as ``tl.range`` loops with 2 or 3 stages,
timed at the launcher against the package, L2 flushed, two rounds.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import forward_config  # noqa: E402

FIRST = """    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        # evict_last"""
SECOND = """    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first")"""


def staged(loop, stages):
    return loop.replace("range(0, N, BLOCK_N)", f"tl.range(0, N, BLOCK_N, num_stages={stages})")


VARIANTS = {
    "first_2": [(FIRST, staged(FIRST, 2))],
    "first_3": [(FIRST, staged(FIRST, 3))],
    "both_2": [(FIRST, staged(FIRST, 2)), (SECOND, staged(SECOND, 2))],
}
CASES = [(4096, 8704, torch.float16), (4096, 9728, torch.float16), (4096, 10752, torch.float16),
         (4096, 11776, torch.float16), (2048, 65536, torch.bfloat16)]  # fmt: skip

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n, dtype in CASES:
            cfg = forward_config(n, dtype.itemsize)
            assert cfg.looped, cfg
            time_cases([("forward", m, n, [cfg])], {"package": kernels, **modules}, dtype=dtype)
