"""Run 101: the cost of the shifted forward's load and of its branch (see PREDICTION.md).

    python tools/runs/run101/shift_cost.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run100"))
from ab_kernels import time_cases, variant  # noqa: E402
from row_sums import ADD, FUSED, SHIFTED, SUMSQ, TWO_PASS  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import forward_config  # noqa: E402

SHIFT_LOAD = "    shift = tl.load(X + rows * stride_x, mask=row_mask, other=0.0).to(COMPUTE)\n"
TILE_LOAD = "    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)\n"
GUARD = """
    if tl.max(tl.where(row_mask, mean_sq_dev > 8.0 * var, False).to(tl.int32), axis=0) > 0:
        var = tl.sum(x_centered * x_centered, axis=1) * inv_n"""
VARIANTS = {
    "sumsq": [(TWO_PASS, SUMSQ), (FUSED, ADD)],
    "shifted": [(TWO_PASS, SHIFTED), (FUSED, ADD)],
    "shifted_first": [(TWO_PASS, SHIFTED.replace(TILE_LOAD + SHIFT_LOAD, SHIFT_LOAD + TILE_LOAD)), (FUSED, ADD)],
    "no_guard": [(TWO_PASS, SHIFTED.replace(GUARD, "")), (FUSED, ADD)],
}
CASES = [
    (4096, 32768, torch.bfloat16),
    (4096, 16384, torch.float32),
    (8192, 16384, torch.bfloat16),
    (16384, 4096, torch.bfloat16),
    (65536, 1024, torch.bfloat16),
]

if __name__ == "__main__":
    assert SHIFTED.count(GUARD) == 1 and SHIFTED.count(TILE_LOAD + SHIFT_LOAD) == 1
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n, dtype in CASES:
            time_cases([("forward", m, n, [forward_config(n, dtype.itemsize)])], {"package": kernels, **modules}, dtype=dtype)
