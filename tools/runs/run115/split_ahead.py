"""Run 115: run 114's split forward with its parts' sums published AHEAD rows ahead (see PREDICTION.md).

    python tools/runs/run115/split_ahead.py

As run 114 (tools/runs/run114/split_forward.py), but a program publishes its part
of row k + AHEAD at step k, so that the parts of a group may drift AHEAD steps apart
before one waits for another.

SPLIT programs share each row, BLOCK_N columns each, as the split backward does.
Unlike run 74's forward, a program holds no tile while it waits: at step k it
loads its part of row k + 1 (prefetched into L2 a step earlier), publishes that
part's Σx and Σ(x - part mean)² as "written" records, then waits for row k's
records (published by every part a step ago), reads its part of row k again
(from L2) and writes y. Few registers, so many programs per SM.
"""

import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import bench, launch
from ln_tutorial.kernels import prefetch_rows, reciprocal, written_record


@triton.jit
def publish_part(RECORDS, X, row, row_end, part, cols, col_mask, count, stride_x, SPLIT: tl.constexpr):
    """This part's Σx and Σ(x - part mean)² of one row, each with its "written" flag."""
    live = row < row_end
    x = tl.load(X + row * stride_x + cols, mask=col_mask & (cols * 0 + row < row_end), other=0.0,
                eviction_policy="evict_last")
    x = x.to(tl.float32)
    total = tl.sum(x, axis=0)
    dev = tl.where(col_mask, x - total / count, 0.0)
    record = RECORDS + (row * SPLIT + part) * 2
    tl.atomic_xchg(record, written_record(total), mask=live, sem="relaxed")
    tl.atomic_xchg(record + 1, written_record(tl.sum(dev * dev, axis=0)), mask=live, sem="relaxed")


@triton.jit
def row_statistics(RECORDS, row, N, inv_n, SPLIT: tl.constexpr, SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr):
    """Mean and variance of a whole row from its parts' records (Chan's formula), once all are written."""
    parts = tl.arange(0, SPLIT_BLOCK)
    mask = parts < SPLIT
    records = RECORDS + (row * SPLIT + parts) * 2
    ready = tl.full([], 1 << 32, tl.int64)
    first = tl.load(records, mask=mask, other=ready, volatile=True)
    second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
    while tl.min(tl.minimum(first, second), axis=0) < ready:
        first = tl.load(records, mask=mask, other=ready, volatile=True)
        second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
    totals = (first & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    squares = (second & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    counts = tl.minimum(tl.maximum(N - parts * BLOCK_N, 0), BLOCK_N).to(tl.float32)
    mean = tl.sum(totals, axis=0) * inv_n
    dev = tl.where(counts > 0, totals / tl.maximum(counts, 1.0) - mean, 0.0)
    return mean, (tl.sum(squares, axis=0) + tl.sum(counts * dev * dev, axis=0)) * inv_n


@triton.jit
def fwd_split_kernel(
    X, Y, W, B, MEAN, RSTD, RECORDS, stride_x, stride_y, M, N, rows_per_group, eps,
    SPLIT: tl.constexpr, SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr,
    AHEAD: tl.constexpr,
):  # fmt: skip
    inv_n = reciprocal(N, tl.float32)
    pid = tl.program_id(0)
    group, part = pid // SPLIT, pid % SPLIT
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    count = tl.minimum(N - part * BLOCK_N, BLOCK_N).to(tl.float32)
    row_begin = group.to(tl.int64) * rows_per_group
    row_end = tl.minimum(row_begin + rows_per_group, M)
    if PREFETCH:
        prefetch_rows(X, (row_begin + AHEAD)[None], row_end, part * BLOCK_N, N, stride_x, BLOCK_N)
    for ahead in tl.static_range(AHEAD):
        publish_part(RECORDS, X, row_begin + ahead, row_end, part, cols, col_mask, count, stride_x, SPLIT)
    for row in range(row_begin, row_end):
        if PREFETCH:
            prefetch_rows(X, (row + AHEAD + 1)[None], row_end, part * BLOCK_N, N, stride_x, BLOCK_N)
        publish_part(RECORDS, X, row + AHEAD, row_end, part, cols, col_mask, count, stride_x, SPLIT)
        mean, var = row_statistics(RECORDS, row, N, inv_n, SPLIT, SPLIT_BLOCK, BLOCK_N)
        rstd = 1.0 / tl.sqrt(var + eps)
        x = tl.load(X + row * stride_x + cols, mask=col_mask, other=0.0, eviction_policy="evict_first")
        y = (x.to(tl.float32) - mean) * rstd
        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=col_mask)
        if part == 0:
            tl.store(MEAN + row, mean)
            tl.store(RSTD + row, rstd)


def split_forward(x, w, b, eps, block_n, warps, per_sm, ahead, prefetch=True):
    m, n = x.shape
    parts = launch.cdiv(n, block_n)
    groups = max(1, launch._sm_count(x.get_device()) * per_sm // parts)
    rows_per_group = launch.cdiv(m, groups)
    groups = launch.cdiv(m, rows_per_group)
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device)
    rstd = torch.empty(m, device=x.device)
    records = torch.zeros((m, parts, 2), dtype=torch.int64, device=x.device)
    kernel = launch._launcher(
        fwd_split_kernel, SPLIT=parts, SPLIT_BLOCK=launch.next_power_of_2(parts), BLOCK_N=block_n,
        PREFETCH=prefetch, AHEAD=ahead, num_warps=warps, launch_cooperative_grid=True,
    )  # fmt: skip
    kernel((groups * parts,), x, y, w, b, mean, rstd, records, x.stride(0), y.stride(0), m, n, rows_per_group, eps)
    return y, mean, rstd


CONFIGS = [  # (columns per program, warps, programs per SM, rows ahead)
    (2048, 4, 8, 1), (2048, 4, 8, 2), (2048, 4, 8, 4), (2048, 4, 8, 8),
    (4096, 4, 4, 1), (4096, 4, 4, 2), (4096, 4, 4, 4), (4096, 4, 4, 8),
    (1024, 2, 16, 2), (1024, 2, 16, 4),
]

if __name__ == "__main__":
    torch.manual_seed(0)
    for m, n in [(37, 40000), (300, 65536), (5, 131072)]:
        x = (3.0 + torch.randn(m, n, device="cuda")).to(torch.bfloat16)
        x[:, 7] = 400.0  # an outlier in every row
        w, b = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype)
        ref = launch.layer_norm_forward(x, w, b, 1e-5)
        for c in CONFIGS[1:4] + CONFIGS[6:7]:
            got = split_forward(x, w, b, 1e-5, *c)
            again = split_forward(x, w, b, 1e-5, *c)
            errs = [(g.float() - r.float()).abs().max().item() for g, r in zip(got, ref)]
            same = all(torch.equal(a, g) for a, g in zip(again, got))
            print(f"check {m}x{n} {c}: max |diff| y {errs[0]:.3g} mean {errs[1]:.3g} rstd {errs[2]:.3g}, rerun same bits: {same}",
                  flush=True)  # fmt: skip
    copy = bench.copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n in [(2048, 65536), (4096, 32768), (1024, 131072)]:
            x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            w, b = torch.rand(n, device="cuda", dtype=x.dtype), torch.rand(n, device="cuda", dtype=x.dtype)
            runs = {"package": lambda: launch.layer_norm_forward(x, w, b, 1e-5)}
            for c in CONFIGS:
                runs[c] = lambda c=c: split_forward(x, w, b, 1e-5, *c)
            for name, run in runs.items():
                try:
                    run()
                    torch.cuda.synchronize()
                except Exception as error:
                    print(f"{m}x{n} {name}: {type(error).__name__} {str(error)[-60:]}", flush=True)
                    continue
                q = do_bench(run, warmup=50, rep=150, quantiles=[0.2, 0.5, 0.8])
                gbps = [2 * x.numel() * 2 / (ms * 1e-3) / 1e9 for ms in q]
                print(f"{m}x{n} {name}: {gbps[1]:.0f} GB/s ({100 * gbps[1] / copy:.1f} % of copy; p20 {gbps[0]:.0f}, "
                      f"p80 {gbps[2]:.0f})", flush=True)  # fmt: skip
    sys.exit(0)
