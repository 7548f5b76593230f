"""Experiment: two variants of the split backward against the package's (run 72's) configuration.

- "1024 x 8": parts of 1024 columns, 2 warps, 8 programs per SM (the package's kernel, another configuration);
- "lag 2": the package's kernel changed to publish each tile's sums two tiles ahead (three tiles held).

    python tools/runs/run76/split_variants.py
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import bench, launch
from ln_tutorial.kernels import (
    load_raw_tile, publish_row_sums, reciprocal, store_dx_and_accumulate, store_partial_row, tile_terms,
    whole_row_sums,
)  # fmt: skip


@triton.jit
def bwd_split_lag2_kernel(DY, X, W, MEAN, RSTD, DX, PARTIAL, RECORDS, stride_dy, stride_x, stride_dx, M, N,
                          rows_per_group, HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, SPLIT: tl.constexpr,
                          SPLIT_BLOCK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          COMPUTE: tl.constexpr):  # fmt: skip
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    group, part = pid // SPLIT, pid % SPLIT
    programs = tl.num_programs(0)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    row_begin = group.to(tl.int64) * rows_per_group
    row_end = tl.minimum(row_begin + rows_per_group, M)
    rows = row_begin + tl.arange(0, BLOCK_M)
    x, dy, row_mask, mask = load_raw_tile(X, DY, rows, row_end, cols, col_mask, stride_x, stride_dy)
    publish_row_sums(RECORDS, x, dy, w, MEAN, RSTD, rows, row_mask, mask, part, SPLIT, COMPUTE)
    rows1 = rows + BLOCK_M
    x1, dy1, row_mask1, mask1 = load_raw_tile(X, DY, rows1, row_end, cols, col_mask, stride_x, stride_dy)
    publish_row_sums(RECORDS, x1, dy1, w, MEAN, RSTD, rows1, row_mask1, mask1, part, SPLIT, COMPUTE)
    for _ in range(row_begin, row_end, BLOCK_M):
        rows2 = rows1 + BLOCK_M
        x2, dy2, row_mask2, mask2 = load_raw_tile(X, DY, rows2, row_end, cols, col_mask, stride_x, stride_dy)
        publish_row_sums(RECORDS, x2, dy2, w, MEAN, RSTD, rows2, row_mask2, mask2, part, SPLIT, COMPUTE)
        sum_xhat_wdy, sum_wdy = whole_row_sums(RECORDS, rows, row_mask, SPLIT, SPLIT_BLOCK)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        x_hat, dy_c, w_dy = tile_terms(x, dy, w, mean, rstd, mask, COMPUTE)
        dw_acc, db_acc = store_dx_and_accumulate(
            DX, rows, cols, row_mask, col_mask, stride_dx, x_hat, dy_c, w_dy, rstd, sum_xhat_wdy * inv_n,
            sum_wdy * inv_n, dw_acc, db_acc,
        )  # fmt: skip
        x, dy, rows, row_mask, mask = x1, dy1, rows1, row_mask1, mask1
        x1, dy1, rows1, row_mask1, mask1 = x2, dy2, rows2, row_mask2, mask2
    store_partial_row(PARTIAL, HAS_DW, HAS_DB, group, programs // SPLIT, N, cols, col_mask, dw_acc, db_acc)


def lag2_backward(dy, x, w, b, mean, rstd, block_n, warps, per_sm):
    """The package's split path with the lag-2 kernel (weight and bias, float32 sums)."""
    m, n = x.shape
    cfg = launch.BackwardConfig(False, 1, block_n, warps, per_sm, split=True)
    programs, rows_per_group = launch._backward_grid(m, n, x.get_device(), cfg, "deterministic")
    parts = launch.cdiv(n, block_n)
    dx = torch.empty_like(x)
    partial = mean.new_empty((2, programs, n))
    records = torch.zeros((m, parts, 2), dtype=torch.int64, device=x.device)
    kernel = launch._launcher(
        bwd_split_lag2_kernel, HAS_DW=True, HAS_DB=True, SPLIT=parts, SPLIT_BLOCK=launch.next_power_of_2(parts),
        BLOCK_M=1, BLOCK_N=block_n, COMPUTE=tl.float32, num_warps=warps, launch_cooperative_grid=True,
    )  # fmt: skip
    kernel((programs * parts,), dy, x, w, mean, rstd, dx, partial, records, dy.stride(0), x.stride(0), n, m, n,
           rows_per_group)  # fmt: skip
    dw, db = torch.empty_like(w), torch.empty_like(b)
    plan = launch._backward_plan(m, n, x.dtype, x.get_device(), "deterministic", cfg, True, True)
    plan.reduce((launch.cdiv(n, launch.REDUCE_BLOCK_N), 2), partial, dw, db, programs, n)
    return dx, dw, db


if __name__ == "__main__":
    torch.manual_seed(0)
    B = launch.BackwardConfig
    copy = bench.copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    for m, n in [(4096, 32768), (2048, 65536)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b, dy = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype), torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        got = lag2_backward(dy, x, w, b, mean, rstd, 2048, 4, 3)
        print(f"{m}x{n} lag 2 (3 per SM) same bits as the package: dx {torch.equal(got[0], ref[0])}, dw {torch.equal(got[1], ref[1])}, "
              f"db {torch.equal(got[2], ref[2])}", flush=True)
        runs = {
            "package 2048 x 4w x 4": lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd),
            "1024 x 2w x 8": lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=B(False, 1, 1024, 2, 8, split=True)),
            "1024 x 2w x 6": lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=B(False, 1, 1024, 2, 6, split=True)),
            "lag 2, 2048 x 4w x 4": lambda: lag2_backward(dy, x, w, b, mean, rstd, 2048, 4, 4),
            "lag 2, 2048 x 4w x 3": lambda: lag2_backward(dy, x, w, b, mean, rstd, 2048, 4, 3),
            "lag 2, 4096 x 8w x 2": lambda: lag2_backward(dy, x, w, b, mean, rstd, 4096, 8, 2),
            "lag 2, 4096 x 8w x 1": lambda: lag2_backward(dy, x, w, b, mean, rstd, 4096, 8, 1),
        }  # fmt: skip
        for name, run in runs.items():
            try:
                run()
            except Exception as error:
                print(f"{m}x{n} {name}: {type(error).__name__} {str(error)[-50:]}", flush=True)
                continue
            ms = do_bench(run, warmup=25, rep=100, return_mode="median")
            gbps = 3 * x.numel() * 2 / (ms * 1e-3) / 1e9
            print(f"{m}x{n} {name} {gbps:.0f} GB/s ({100 * gbps / copy:.1f} % of copy)", flush=True)
