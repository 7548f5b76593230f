"""Experiment: the forward for wide rows with rows shared by programs, as the split backward
(run 72) shares them: each part's Σx and Σ(x - part mean)² travel with a "written" bit in one
64-bit word, published one tile ahead; Chan's formula combines the parts.

    python tools/runs/run74/split_forward.py       # correctness against the package, then GB/s
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import bench, launch
from ln_tutorial.kernels import reciprocal, written_record


@triton.jit
def load_rows(X, rows, row_end, cols, col_mask, stride_x):
    row_mask = rows < row_end
    mask = row_mask[:, None] & col_mask[None, :]
    return tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0), row_mask, mask


@triton.jit
def publish_part_stats(RECORDS, x, rows, row_mask, mask, part, N, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr):
    xf = x.to(tl.float32)
    count = tl.minimum(N - part * BLOCK_N, BLOCK_N).to(tl.float32)
    total = tl.sum(xf, axis=1)
    dev = tl.where(mask, xf - (total / count)[:, None], 0.0)
    record = RECORDS + (rows * SPLIT + part) * 2
    tl.atomic_xchg(record, written_record(total), mask=row_mask, sem="relaxed")
    tl.atomic_xchg(record + 1, written_record(tl.sum(dev * dev, axis=1)), mask=row_mask, sem="relaxed")


@triton.jit
def row_stats(RECORDS, rows, row_mask, N, inv_n, SPLIT: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
              BLOCK_N: tl.constexpr):  # fmt: skip
    parts = tl.arange(0, SPLIT_BLOCK)
    mask = row_mask[:, None] & (parts < SPLIT)[None, :]
    records = RECORDS + (rows[:, None] * SPLIT + parts[None, :]) * 2
    ready = tl.full([], 1 << 32, tl.int64)
    first = tl.load(records, mask=mask, other=ready, volatile=True)
    second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
    while tl.min(tl.minimum(first, second)) < ready:
        first = tl.load(records, mask=mask, other=ready, volatile=True)
        second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
    totals = (first & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    squares = (second & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    counts = tl.minimum(tl.maximum(N - parts * BLOCK_N, 0), BLOCK_N).to(tl.float32)
    mean = tl.sum(totals, axis=1) * inv_n
    dev = tl.where(counts[None, :] > 0, totals / tl.maximum(counts, 1.0)[None, :] - mean[:, None], 0.0)
    var = (tl.sum(squares, axis=1) + tl.sum(counts[None, :] * dev * dev, axis=1)) * inv_n
    return mean, var


@triton.jit
def fwd_split_kernel(X, Y, W, B, MEAN, RSTD, RECORDS, stride_x, stride_y, M, N, rows_per_group, eps,
                     SPLIT: tl.constexpr, SPLIT_BLOCK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    inv_n = reciprocal(N, tl.float32)
    pid = tl.program_id(0)
    group, part = pid // SPLIT, pid % SPLIT
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)
    row_begin = group.to(tl.int64) * rows_per_group
    row_end = tl.minimum(row_begin + rows_per_group, M)
    rows = row_begin + tl.arange(0, BLOCK_M)
    x, row_mask, mask = load_rows(X, rows, row_end, cols, col_mask, stride_x)
    publish_part_stats(RECORDS, x, rows, row_mask, mask, part, N, SPLIT, BLOCK_N)
    for _ in range(row_begin, row_end, BLOCK_M):
        next_rows = rows + BLOCK_M
        x_next, next_row_mask, next_mask = load_rows(X, next_rows, row_end, cols, col_mask, stride_x)
        publish_part_stats(RECORDS, x_next, next_rows, next_row_mask, next_mask, part, N, SPLIT, BLOCK_N)
        mean, var = row_stats(RECORDS, rows, row_mask, N, inv_n, SPLIT, SPLIT_BLOCK, BLOCK_N)
        rstd = 1.0 / tl.sqrt(var + eps)
        y = (x.to(tl.float32) - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
        if part == 0:
            tl.store(MEAN + rows, mean, mask=row_mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)
        x, rows, row_mask, mask = x_next, next_rows, next_row_mask, next_mask


def split_forward(x, w, b, eps, block_n, warps, per_sm, block_m=1):
    m, n = x.shape
    parts = launch.cdiv(n, block_n)
    groups = max(1, launch._sm_count(x.get_device()) * per_sm // parts)
    rows_per_group = launch.cdiv(launch.cdiv(m, groups), block_m) * block_m
    groups = launch.cdiv(m, rows_per_group)
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device)
    rstd = torch.empty(m, device=x.device)
    records = torch.zeros((m, parts, 2), dtype=torch.int64, device=x.device)
    kernel = launch._launcher(
        fwd_split_kernel, SPLIT=parts, SPLIT_BLOCK=launch.next_power_of_2(parts), BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=warps, launch_cooperative_grid=True,
    )  # fmt: skip
    kernel((groups * parts,), x, y, w, b, mean, rstd, records, x.stride(0), y.stride(0), m, n, rows_per_group, eps)
    return y, mean, rstd


if __name__ == "__main__":
    torch.manual_seed(0)
    for m, n in [(37, 40000), (300, 65536), (5, 131072)]:
        x = (3.0 + torch.randn(m, n, device="cuda")).to(torch.bfloat16)
        x[:, 7] = 400.0  # an outlier in every row
        w, b = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype)
        ref = launch.layer_norm_forward(x, w, b, 1e-5)
        got = split_forward(x, w, b, 1e-5, 4096, 8, 2)
        errs = [(g.float() - r.float()).abs().max().item() for g, r in zip(got, ref)]
        print(f"check {m}x{n}: max |diff| y {errs[0]:.3g} mean {errs[1]:.3g} rstd {errs[2]:.3g}", flush=True)
    copy = bench.copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    for m, n in [(4096, 32768), (2048, 65536), (8192, 16384)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype)
        runs = {"package": lambda: launch.layer_norm_forward(x, w, b, 1e-5)}
        for block_n, warps, per_sm, block_m in [(2048, 4, 4, 1), (4096, 4, 2, 1), (4096, 4, 4, 1), (4096, 8, 2, 1),
                                                (8192, 8, 2, 1), (8192, 16, 1, 1), (2048, 4, 4, 2), (4096, 8, 2, 2)]:
            runs[(block_n, warps, per_sm, block_m)] = lambda c=(block_n, warps, per_sm, block_m): split_forward(
                x, w, b, 1e-5, c[0], c[1], c[2], c[3])
        for name, run in runs.items():
            try:
                run()
            except Exception as error:
                print(f"{m}x{n} {name}: {type(error).__name__} {str(error)[-60:]}", flush=True)
                continue
            ms = do_bench(run, warmup=25, rep=100, return_mode="median")
            gbps = 2 * x.numel() * 2 / (ms * 1e-3) / 1e9
            print(f"{m}x{n} {name} {gbps:.0f} GB/s ({100 * gbps / copy:.1f} % of copy)", flush=True)
