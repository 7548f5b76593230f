"""Run 99: the fused forward's mean and variance in one reduction; prefetch at 8 KB and 2 KB rows.

    python tools/runs/run99/forward_onepass.py

Variants of kernels.py (tools/ab_kernels.py), timed at the launcher, L2 flushed:
``chan``: per-thread groups of 8 values reduced two-pass in registers, merged across the row with
Chan's formula in one tl.reduce; ``sumsq``: Σx and Σx² in one reduction (a bound: cancels at large
means); ``fused_<A>``: the package's fused forward prefetching the rows of program pid + A into L2
(run 95); ``chan_264``: chan with A = 264.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import forward_config  # noqa: E402

TWO_PASS = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    mean = tl.sum(x, axis=1) * inv_n
    # Centre first, then square: the two-pass variance does not cancel.
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(x_centered * x_centered, axis=1) * inv_n"""
CHAN = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    PREFETCH
    group_mask = tl.reshape(mask, [BLOCK_M, BLOCK_N // 8, 8])
    groups = tl.reshape(x, [BLOCK_M, BLOCK_N // 8, 8])
    counts = tl.sum(group_mask.to(COMPUTE), axis=2)
    group_mean = tl.sum(groups, axis=2) / tl.maximum(counts, 1.0)
    group_dev = tl.where(group_mask, groups - group_mean[:, :, None], 0.0)
    group_m2 = tl.sum(group_dev * group_dev, axis=2)
    _, mean, m2 = tl.reduce((counts, group_mean, group_m2), 1, merge_moments)
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = m2 * inv_n"""
MERGE = '''

@triton.jit
def merge_moments(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Chan et al.: (count, mean, sum of squared deviations) of two sets merged."""
    n = n_a + n_b
    frac_b = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    delta = mean_b - mean_a
    return n, mean_a + delta * frac_b, m2_a + m2_b + delta * delta * n_a * frac_b


@triton.jit
def layer_norm_fwd_kernel('''
SUMSQ = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    total, total_sq = tl.reduce((x, x * x), 1, add_pairs)
    mean = total * inv_n
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.maximum(total_sq * inv_n - mean * mean, 0.0)"""
ADD = '''

@triton.jit
def add_pairs(a, b, c, d):
    return a + c, b + d


@triton.jit
def layer_norm_fwd_kernel('''
PREFETCH = """ahead = tl.minimum(rows + AHEAD * BLOCK_M, M - 1)
    prefetch_to_l2(X + ahead[:, None] * stride_x + tl.minimum(tl.arange(0, BLOCK_N // 16) * 16, N - 1)[None, :])"""
FUSED = "\n@triton.jit\ndef layer_norm_fwd_kernel("


def prefetched(source, a):
    return source.replace("    PREFETCH\n", "    " + PREFETCH.replace("AHEAD", str(a)) + "\n") if a else source.replace("    PREFETCH\n", "")


TWO_PASS_PREFETCH = TWO_PASS.replace("mean = tl.sum", "PREFETCH\n    mean = tl.sum", 1)
VARIANTS = {
    "chan": [(TWO_PASS, prefetched(CHAN, 0)), (FUSED, MERGE)],
    "sumsq": [(TWO_PASS, SUMSQ), (FUSED, ADD)],
    "chan_264": [(TWO_PASS, prefetched(CHAN, 264)), (FUSED, MERGE)],
    **{f"fused_{a}": [(TWO_PASS, prefetched(TWO_PASS_PREFETCH, a))] for a in (66, 132, 264, 396)},
}
ALL = ["chan", "sumsq"]
SHAPES = {  # (M, N, dtype): the variants that change its kernel
    (4096, 32768, torch.bfloat16): ALL,
    (8192, 16384, torch.bfloat16): ALL,
    (16384, 8192, torch.bfloat16): ALL,
    (16384, 4096, torch.bfloat16): ALL + ["chan_264", "fused_132", "fused_264", "fused_396"],
    (65536, 1024, torch.bfloat16): ALL + ["fused_66", "fused_132"],
    (4096, 4096, torch.float16): ALL + ["fused_132", "fused_264"],
    (4096, 3072, torch.float16): ALL + ["fused_132", "fused_264"],
    (4096, 1024, torch.float16): ALL + ["fused_66", "fused_132"],
    (4096, 8192, torch.float16): ALL,
    (16384, 2048, torch.float32): ALL + ["fused_264"],  # 8 KB rows in float32: the same table entry
    (4096, 16384, torch.float32): ALL,
}

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for (m, n, dtype), names in SHAPES.items():
            cases = [("forward", m, n, [forward_config(n, dtype.itemsize)])]
            time_cases(cases, {"package": kernels, **{k: modules[k] for k in names}}, dtype=dtype)
