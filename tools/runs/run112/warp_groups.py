"""Run 112: the fused forward's statistics with one exchange between warps, exact (see PREDICTION.md).

    python tools/runs/run112/warp_groups.py

Variant ``groups`` of kernels.py (tools/ab_kernels.py): the tile is loaded as
(rows, groups, GROUP_N) with GROUP_N = 32 lanes x 16 bytes, one warp's share of a
row, so each group's sum and its sum of squared deviations around the group's own
mean are reduced inside a warp; the groups are then merged with Chan's formula in
one ``tl.reduce`` of (count, mean, M2): one exchange between warps where the
package has two. Timed at the launcher against the package, L2 flushed, two rounds.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import forward_config  # noqa: E402

SOURCE = Path(kernels.__file__).read_text()
BODY = SOURCE[
    SOURCE.index("    inv_n = reciprocal(N, COMPUTE)\n    rows = tl.program_id(0)") : SOURCE.index(
        "    tl.store(MEAN + rows, mean, mask=row_mask)"
    )
]
GROUPS = """    inv_n = reciprocal(N, COMPUTE)
    # A group is one warp's share of a row (32 lanes x 16 bytes): its sums stay in the warp.
    GROUP_N: tl.constexpr = min(BLOCK_N, 4096 // X.dtype.element_ty.primitive_bitwidth)
    GROUPS: tl.constexpr = BLOCK_N // GROUP_N
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    group_start = tl.arange(0, GROUPS) * GROUP_N
    cols = (group_start[:, None] + tl.arange(0, GROUP_N)[None, :])[None, :, :]
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None, None] & col_mask

    x = tl.load(X + rows[:, None, None] * stride_x + cols, mask=mask, other=0.0).to(COMPUTE)
    if PREFETCH_AHEAD > 0:
        prefetch_rows(X, rows + PREFETCH_AHEAD * BLOCK_M, M, 0, N, stride_x, BLOCK_N)
    counts = tl.minimum(tl.maximum(N - group_start, 0), GROUP_N).to(COMPUTE)
    counts = tl.broadcast_to(counts[None, :], [BLOCK_M, GROUPS])
    group_mean = tl.sum(x, axis=2) / tl.maximum(counts, 1.0)
    group_dev = tl.where(mask, x - group_mean[:, :, None], 0.0)
    group_m2 = tl.sum(group_dev * group_dev, axis=2)
    _, mean, m2 = tl.reduce((counts, group_mean, group_m2), 1, merge_moments)
    x_centered = tl.where(mask, x - mean[:, None, None], 0.0)
    var = m2 * inv_n
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
    y = x_centered * rstd[:, None, None]
    if W is not None:
        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)
    if B is not None:
        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)

    tl.store(Y + rows[:, None, None] * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)
"""
MERGE = '''

@triton.jit
def merge_moments(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Chan et al.: (count, mean, sum of squared deviations) of two sets merged."""
    n = n_a + n_b
    frac_b = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    delta = mean_b - mean_a
    return n, mean_a + delta * frac_b, m2_a + m2_b + (delta * frac_b) * delta * n_a


@triton.jit
def layer_norm_fwd_kernel('''
FUSED = "\n@triton.jit\ndef layer_norm_fwd_kernel("
VARIANTS = {"groups": [(BODY, GROUPS), (FUSED, MERGE)]}
CASES = [  # (M, N, dtype)
    (4096, 32768, torch.bfloat16),
    (8192, 16384, torch.bfloat16),
    (16384, 8192, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
    (4096, 16384, torch.float32),
    (4096, 4096, torch.float16),
    (4096, 2048, torch.float16),
    (4096, 1024, torch.float16),
    (4096, 6144, torch.float16),
]

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n, dtype in CASES:
            time_cases([("forward", m, n, [forward_config(n, dtype.itemsize)])], {"package": kernels, **modules}, dtype=dtype)
