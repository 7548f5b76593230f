"""Run 100: row sums in one exchange (one tl.reduce of two sums), forward and backward.

    python tools/runs/run100/row_sums.py

Variants of kernels.py (tools/ab_kernels.py), timed at the launcher, L2 flushed: ``sumsq`` (run 99's
bound), ``shifted`` (the forward's Σ(x-s), Σ(x-s)² around each row's first value, two-pass again where
that would cancel), ``pair`` (the backward's two row sums in one reduction), ``looped_pair`` (the looped
forward's two sums after its first sweep in one reduction).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import backward_config, forward_config  # noqa: E402

ADD = '''

@triton.jit
def add_pairs(a, b, c, d):
    return a + c, b + d


@triton.jit
def layer_norm_fwd_kernel('''
FUSED = "\n@triton.jit\ndef layer_norm_fwd_kernel("
TWO_PASS = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    mean = tl.sum(x, axis=1) * inv_n
    # Centre first, then square: the two-pass variance does not cancel.
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(x_centered * x_centered, axis=1) * inv_n"""
SUMSQ = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    total, total_sq = tl.reduce((x, x * x), 1, add_pairs)
    mean = total * inv_n
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.maximum(total_sq * inv_n - mean * mean, 0.0)"""
SHIFTED = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    shift = tl.load(X + rows * stride_x, mask=row_mask, other=0.0).to(COMPUTE)
    dev = tl.where(mask, x - shift[:, None], 0.0)
    sum_dev, sum_sq_dev = tl.reduce((dev, dev * dev), 1, add_pairs)
    mean_dev = sum_dev * inv_n
    mean_sq_dev = sum_sq_dev * inv_n
    var = mean_sq_dev - mean_dev * mean_dev
    mean = shift + mean_dev
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    if tl.max(tl.where(row_mask, mean_sq_dev > 8.0 * var, False).to(tl.int32), axis=0) > 0:
        var = tl.sum(x_centered * x_centered, axis=1) * inv_n"""
BWD_OLD = """        sum_xhat_wdy = tl.sum(x_hat * w_dy, axis=1)
        sum_wdy = tl.sum(w_dy, axis=1)"""
BWD_NEW = """        sum_xhat_wdy, sum_wdy = tl.reduce((x_hat * w_dy, w_dy), 1, add_pairs)"""
TAIL_OLD = """            sum_xhat_wdy += tl.sum(x_hat_t * w_dy_t, axis=1)
            sum_wdy += tl.sum(w_dy_t, axis=1)"""
TAIL_NEW = """            tail_xhat_wdy, tail_wdy = tl.reduce((x_hat_t * w_dy_t, w_dy_t), 1, add_pairs)
            sum_xhat_wdy += tail_xhat_wdy
            sum_wdy += tail_wdy"""
PUB_OLD = """    tl.atomic_xchg(record, written_record(tl.sum(x_hat * w_dy, axis=1)), mask=row_mask, sem="relaxed")
    tl.atomic_xchg(record + 1, written_record(tl.sum(w_dy, axis=1)), mask=row_mask, sem="relaxed")"""
PUB_NEW = """    sum_xhat_wdy, sum_wdy = tl.reduce((x_hat * w_dy, w_dy), 1, add_pairs)
    tl.atomic_xchg(record, written_record(sum_xhat_wdy), mask=row_mask, sem="relaxed")
    tl.atomic_xchg(record + 1, written_record(sum_wdy), mask=row_mask, sem="relaxed")"""
WHOLE_OLD = "    return tl.sum(first, axis=1), tl.sum(second, axis=1)"
WHOLE_NEW = "    return tl.reduce((first, second), 1, add_pairs)"
LOOPED_OLD = """    mean_dev = tl.sum(sum_dev, axis=0) * inv_n
    var = tl.maximum(tl.sum(sum_sq_dev, axis=0) * inv_n - mean_dev * mean_dev, 0.0)"""
LOOPED_NEW = """    total_dev, total_sq_dev = tl.reduce((sum_dev, sum_sq_dev), 0, add_pairs)
    mean_dev = total_dev * inv_n
    var = tl.maximum(total_sq_dev * inv_n - mean_dev * mean_dev, 0.0)"""

VARIANTS = {
    "sumsq": [(TWO_PASS, SUMSQ), (FUSED, ADD)],
    "shifted": [(TWO_PASS, SHIFTED), (FUSED, ADD)],
    "pair": [(BWD_OLD, BWD_NEW), (TAIL_OLD, TAIL_NEW), (PUB_OLD, PUB_NEW), (WHOLE_OLD, WHOLE_NEW), (FUSED, ADD)],
    "looped_pair": [(LOOPED_OLD, LOOPED_NEW), (FUSED, ADD)],
}
FWD = ["sumsq", "shifted"]
CASES = [  # (mode, M, N, dtype, variants)
    ("forward", 4096, 32768, torch.bfloat16, FWD),
    ("forward", 8192, 16384, torch.bfloat16, FWD),
    ("forward", 16384, 8192, torch.bfloat16, FWD),
    ("forward", 16384, 4096, torch.bfloat16, FWD),
    ("forward", 65536, 1024, torch.bfloat16, FWD),
    ("forward", 4096, 4096, torch.float16, FWD),
    ("forward", 4096, 2048, torch.float16, FWD),
    ("forward", 4096, 16384, torch.float32, FWD),
    ("forward", 2048, 65536, torch.bfloat16, ["looped_pair"]),
    ("forward", 4096, 12032, torch.float16, ["looped_pair"]),  # padded rows: the looped kernel
    ("backward", 16384, 4096, torch.bfloat16, ["pair"]),
    ("backward", 16384, 8192, torch.bfloat16, ["pair"]),
    ("backward", 8192, 16384, torch.bfloat16, ["pair"]),  # split
    ("backward", 4096, 32768, torch.bfloat16, ["pair"]),  # split
    ("backward", 2048, 65536, torch.bfloat16, ["pair"]),  # split
    ("backward", 65536, 1024, torch.bfloat16, ["pair"]),
    ("backward", 4096, 9216, torch.float16, ["pair"]),  # two tiles
    ("backward", 4096, 12800, torch.float16, ["pair"]),  # split, padded
    ("backward", 8192, 16384, torch.float32, ["pair"]),  # split, float32
]

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for mode, m, n, dtype, names in CASES:
            config = (forward_config if mode == "forward" else backward_config)(n, dtype.itemsize)
            time_cases([(mode, m, n, [config])], {"package": kernels, **{k: modules[k] for k in names}}, dtype=dtype)
