"""Run 89: the split backward with several rows per tile, its dW/dB sums kept per column.

    python tools/runs/run89/split_column_sums.py

Run 88's candidates with 2 or 4 rows per tile did not fit 2-4 programs per SM. Variant
``column_sums``: the split kernel adds each tile's dW/dB terms over its rows before
adding them to the running sums, so those take (1, BLOCK_N) registers, not (BLOCK_M,
BLOCK_N). Printed: registers and spills of every candidate, then the A/B timings
(tools/ab_kernels.py, bfloat16, L2 flushed).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import BackwardConfig, backward_config  # noqa: E402

OLD_INIT = """    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    row_begin = group.to(tl.int64) * rows_per_group"""
NEW_INIT = """    dw_acc = tl.zeros([1, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([1, BLOCK_N], dtype=COMPUTE)
    no_sums = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    row_begin = group.to(tl.int64) * rows_per_group"""
OLD_ADD = """        dw_acc, db_acc = store_dx_and_accumulate(
            DX, rows, cols, row_mask, col_mask, stride_dx, x_hat, dy_c, w_dy, rstd, sum_xhat_wdy * inv_n,
            sum_wdy * inv_n, dw_acc, db_acc,
        )  # fmt: skip"""
NEW_ADD = """        dw_tile, db_tile = store_dx_and_accumulate(
            DX, rows, cols, row_mask, col_mask, stride_dx, x_hat, dy_c, w_dy, rstd, sum_xhat_wdy * inv_n,
            sum_wdy * inv_n, no_sums, no_sums,
        )  # fmt: skip
        dw_acc += tl.sum(dw_tile, axis=0)[None, :]
        db_acc += tl.sum(db_tile, axis=0)[None, :]"""
VARIANTS = {"column_sums": [(OLD_INIT, NEW_INIT), (OLD_ADD, NEW_ADD)]}


def split(block_m, block_n, warps, per_sm):
    return BackwardConfig(False, block_m, block_n, warps, per_sm, split=True)


CANDIDATES = [split(1, 2048, 4, 4), split(2, 2048, 8, 2), split(2, 2048, 4, 2), split(2, 1024, 4, 4),
              split(2, 1024, 8, 2), split(4, 1024, 8, 2)]  # fmt: skip
CASES = [("backward", m, n, [backward_config(n, 2), *CANDIDATES[1:]])
         for m, n in ((8192, 16384), (4096, 32768), (2048, 65536), (4096, 12800), (4096, 14848))]


def registers(modules):
    """Registers and spills of each candidate's split kernel (bfloat16, N = 32768)."""
    n = 32768
    x = torch.randn(4096, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    _, mean, rstd = launch.layer_norm_forward(x, w, w, 1e-5)
    for name, module in modules.items():
        launch.kernels = module
        launch._backward_plan.cache_clear()
        for c in CANDIDATES:
            plan = launch._backward_plan(4096, n, x.dtype, 0, "deterministic", c, True, True)
            try:
                launch.layer_norm_backward(x, x, w, w, mean, rstd, config=c)
                torch.cuda.synchronize()
                status = "ran"
            except RuntimeError as exc:
                status = f"refused ({str(exc)[:40]})"
            for entry in plan.main.compiled.values():
                print(f"registers {name:<12} {tuple(c)[:5]}: {entry[5].n_regs} regs, {entry[5].n_spills} spills, {status}")
            plan.main.compiled.clear()
    launch.kernels = kernels
    launch._backward_plan.cache_clear()


if __name__ == "__main__":
    modules = {"package": kernels, **{k: variant(k, v) for k, v in VARIANTS.items()}}
    registers(modules)
    time_cases(CASES, modules)
