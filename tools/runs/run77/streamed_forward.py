"""Experiment (run 77): a persistent forward for wide rows that reads row r + P from memory while it
writes row r, so that every SM reads and writes at once, as a copy does.

    python tools/runs/run77/streamed_forward.py
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import bench, launch
from ln_tutorial.kernels import reciprocal


@triton.jit
def row_shift(x_row, limit, BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr):
    """limit: N, or 0 for a row that is not there."""
    cols = tl.arange(0, BLOCK_N)
    first = tl.load(x_row + cols, mask=cols < limit, other=0.0).to(COMPUTE)
    return tl.sum(first, axis=0) / tl.maximum(tl.minimum(limit, BLOCK_N), 1)


@triton.jit
def add_chunk(x_row, start, limit, shift, sum_dev, sum_sq_dev, BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr):
    cols = start + tl.arange(0, BLOCK_N)
    mask = cols < limit
    x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
    dev = tl.where(mask, x - shift, 0.0)
    return sum_dev + dev, sum_sq_dev + dev * dev


@triton.jit
def finish_stats(sum_dev, sum_sq_dev, shift, inv_n, eps, eps_lo):
    mean_dev = tl.sum(sum_dev, axis=0) * inv_n
    var = tl.maximum(tl.sum(sum_sq_dev, axis=0) * inv_n - mean_dev * mean_dev, 0.0)
    return shift + mean_dev, 1.0 / tl.sqrt(var + eps + eps_lo)


@triton.jit
def write_chunk(x_row, y_row, W, B, start, N, mean, rstd, BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr):
    cols = start + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)
    y = (x - mean) * rstd
    if W is not None:
        y = y * tl.load(W + cols, mask=mask, other=0.0).to(COMPUTE)
    if B is not None:
        y = y + tl.load(B + cols, mask=mask, other=0.0).to(COMPUTE)
    tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def fwd_streamed_kernel(X, Y, W, B, MEAN, RSTD, stride_x, stride_y, M, N, eps, eps_lo,
                        BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr, READ_FIRST: tl.constexpr):  # fmt: skip
    inv_n = reciprocal(N, COMPUTE)
    step = tl.num_programs(0).to(tl.int64)
    first_row = tl.program_id(0).to(tl.int64)
    x_row = X + first_row * stride_x
    shift = row_shift(x_row, N, BLOCK_N, COMPUTE)
    sum_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    sum_sq_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    for start in range(0, N, BLOCK_N):
        sum_dev, sum_sq_dev = add_chunk(x_row, start, N, shift, sum_dev, sum_sq_dev, BLOCK_N, COMPUTE)
    mean, rstd = finish_stats(sum_dev, sum_sq_dev, shift, inv_n, eps, eps_lo)
    for row in range(first_row, M, step):
        x_row = X + row * stride_x
        y_row = Y + row * stride_y
        next_limit = tl.where(row + step < M, N, 0)  # no next row: nothing read
        next_row = X + (row + step) * stride_x
        next_shift = row_shift(next_row, next_limit, BLOCK_N, COMPUTE)
        sum_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
        sum_sq_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
        for start in range(0, N, BLOCK_N):
            if READ_FIRST:
                sum_dev, sum_sq_dev = add_chunk(next_row, start, next_limit, next_shift, sum_dev, sum_sq_dev,
                                                BLOCK_N, COMPUTE)  # fmt: skip
                write_chunk(x_row, y_row, W, B, start, N, mean, rstd, BLOCK_N, COMPUTE)
            else:
                write_chunk(x_row, y_row, W, B, start, N, mean, rstd, BLOCK_N, COMPUTE)
                sum_dev, sum_sq_dev = add_chunk(next_row, start, next_limit, next_shift, sum_dev, sum_sq_dev,
                                                BLOCK_N, COMPUTE)  # fmt: skip
        tl.store(MEAN + row, mean)
        tl.store(RSTD + row, rstd)
        mean, rstd = finish_stats(sum_dev, sum_sq_dev, next_shift, inv_n, eps, eps_lo)


def streamed_forward(x, w, b, eps, block_n, warps, per_sm, read_first=True):
    """per_sm=0: one program per row (nothing to prefetch)."""
    m, n = x.shape
    programs = m if per_sm == 0 else min(m, launch._sm_count(x.get_device()) * per_sm)
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device)
    rstd = torch.empty(m, device=x.device)
    kernel = launch._launcher(fwd_streamed_kernel, BLOCK_N=block_n, COMPUTE=tl.float32, READ_FIRST=read_first,
                              num_warps=warps)  # fmt: skip
    kernel((programs,), x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, *launch._split_eps(eps))
    return y, mean, rstd


def gbps(fn, moved):
    q = do_bench(fn, warmup=50, rep=200, quantiles=[0.2, 0.5, 0.8])
    return [moved / (t * 1e-3) / 1e9 for t in q]


if __name__ == "__main__":
    torch.manual_seed(0)
    for m, n, dtype in [(37, 40000, torch.bfloat16), (300, 65536, torch.bfloat16), (5, 131072, torch.float32),
                        (1000, 10000, torch.float16)]:  # fmt: skip
        x = (3.0 + torch.randn(m, n, device="cuda")).to(dtype)
        x[:, 7] = 400.0  # an outlier in every row
        w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
        looped = launch.ForwardConfig(True, 1, 16384, 32)
        ref = launch.layer_norm_forward(x, w, b, 1e-5, config=looped)
        for per_sm in (0, 1, 2):
            got = streamed_forward(x, w, b, 1e-5, 16384, 32, per_sm)
            same = all(torch.equal(g, r) for g, r in zip(got, ref))
            errs = [(g.float() - r.float()).abs().max().item() for g, r in zip(got, ref)]
            print(f"check {m}x{n} {str(dtype)[6:]} per_sm={per_sm}: same bits as looped {same}; max |diff| "
                  f"y {errs[0]:.3g} mean {errs[1]:.3g} rstd {errs[2]:.3g}", flush=True)  # fmt: skip
    copy = bench.copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    configs = {
        (2048, 65536, torch.bfloat16): [(16384, 32, 0), (16384, 32, 1), (8192, 32, 1), (8192, 16, 1), (8192, 16, 2),
                                        (4096, 8, 2), (4096, 8, 4), (4096, 16, 2), (2048, 8, 4), (2048, 4, 8)],
        (4096, 32768, torch.bfloat16): [(8192, 16, 1), (8192, 16, 2), (4096, 8, 4), (4096, 16, 2), (2048, 8, 4)],
        (1024, 131072, torch.bfloat16): [(16384, 32, 0), (8192, 16, 2), (4096, 8, 4)],
        (4096, 8704, torch.float16): [(2048, 8, 0), (2048, 8, 2), (2048, 4, 4), (1024, 4, 4), (2048, 8, 4)],
        (4096, 10240, torch.float16): [(2048, 8, 0), (2048, 8, 2), (2048, 4, 4), (1024, 4, 4), (2048, 8, 4)],
        (4096, 12288, torch.float16): [(2048, 8, 0), (2048, 8, 2), (2048, 4, 4), (1024, 4, 4), (2048, 8, 4)],
        (2048, 65536, torch.float32): [(16384, 32, 0), (8192, 16, 1), (8192, 16, 2), (4096, 8, 4)],
    }  # fmt: skip
    for (m, n, dtype), cands in configs.items():
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
        moved = 2 * m * n * x.element_size()
        cfg = launch.forward_config(n, x.element_size())
        p = gbps(lambda: launch.layer_norm_forward(x, w, b, 1e-5), moved)
        print(f"{m}x{n} {str(dtype)[6:]} package {tuple(cfg)}: {p[1]:.0f} GB/s ({100 * p[1] / copy:.1f} %)", flush=True)
        for block_n, warps, per_sm in cands:
            for read_first in (True, False):
                try:
                    p = gbps(lambda: streamed_forward(x, w, b, 1e-5, block_n, warps, per_sm, read_first), moved)
                except Exception as exc:
                    print(f"  streamed {block_n}/{warps}w/{per_sm}: failed {type(exc).__name__}: {str(exc)[:100]}")
                    break
                print(f"  streamed BLOCK_N {block_n} warps {warps} per_sm {per_sm} read_first {read_first}: "
                      f"{p[1]:.0f} GB/s ({100 * p[1] / copy:.1f} %, p20 {p[0]:.0f} p80 {p[2]:.0f})", flush=True)
