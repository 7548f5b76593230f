"""Run 95: the forward prefetching, into L2, the rows of the program one wave of programs later.

    python tools/runs/run95/forward_prefetch.py

Variants of kernels.py: ``fused_<A>``: the fused forward, after issuing its own loads, prefetches
(``prefetch_to_l2``) the rows of program ``pid + A``; ``looped_<A>``: the looped forward, in its
second sweep (L2 reads and HBM writes), prefetches row ``pid + A`` step by step, so that a later
program's first sweep reads from L2 while this one writes. Timings at the launcher, bfloat16,
L2 flushed (tools/ab_kernels.py), with the largest difference to the package's result.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import forward_config  # noqa: E402

FUSED_OLD = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    mean = tl.sum(x, axis=1) * inv_n"""
FUSED_NEW = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    ahead = tl.minimum(rows + AHEAD * BLOCK_M, M - 1)
    prefetch_cols = tl.minimum(tl.arange(0, BLOCK_N // 16) * 16, N - 1)
    prefetch_to_l2(X + ahead[:, None] * stride_x + prefetch_cols[None, :])
    mean = tl.sum(x, axis=1) * inv_n"""
LOOPED_OLD = """    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)"""
LOOPED_NEW = """    ahead_row = X + tl.minimum(row + AHEAD, tl.num_programs(0) - 1) * stride_x
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        prefetch_to_l2(ahead_row + tl.minimum(start + tl.arange(0, BLOCK_N // 16) * 16, N - 1))
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)"""

VARIANTS = {
    **{f"fused_{a}": [(FUSED_OLD, FUSED_NEW.replace("AHEAD", str(a)))] for a in (132, 264, 528, 1056)},
    **{f"looped_{a}": [(LOOPED_OLD, LOOPED_NEW.replace("AHEAD", str(a)))] for a in (132, 264)},
}
SHAPES = {  # shape: the variants that change its kernel
    (16384, 4096): ["fused_132", "fused_264", "fused_528"],
    (65536, 1024): ["fused_264", "fused_528", "fused_1056"],
    (16384, 8192): ["fused_132", "fused_264"],
    (8192, 16384): ["fused_132", "fused_264"],
    (4096, 32768): ["fused_132", "fused_264"],
    (2048, 65536): ["looped_132", "looped_264"],
    (4096, 8192): ["fused_132", "fused_264", "fused_528"],
    (4096, 12032): ["looped_132", "looped_264"],  # padded rows: the looped kernel, 2048-value steps
}

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for (m, n), names in SHAPES.items():
        time_cases([("forward", m, n, [forward_config(n, 2)])], {"package": kernels, **{k: modules[k] for k in names}})
