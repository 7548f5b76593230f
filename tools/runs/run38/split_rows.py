"""Experiment: wide rows split over several programs that exchange their row sums.

A row of N elements is cut into SPLIT slices of BLOCK_N columns; program
``group * SPLIT + part`` holds slice ``part`` of the rows ``group, group + groups, ...``
in registers. Per row each program publishes its slice's sums, waits until the
other SPLIT - 1 programs of its group have published theirs (an int32 counter
per group), and adds all SPLIT of them in the same order. The programs wait for
each other, so all must be resident at once: a cooperative launch with one grid
that fits the GPU. Each program loads its next row before it waits.
Not kept (docs/performance.md, runs 38-39): slower than the package's kernels
except for the wide backward, and erratic from one configuration to the next.

    python tools/runs/run38/split_rows.py [--spin-load]   # correctness against the package, then GB/s (L2 flushed)
    TRITON_INTERPRET=1 python tools/runs/run38/split_rows.py --check   # SPLIT=1 only: programs run one by one
"""

import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import launch
from ln_tutorial.kernels import reciprocal, store_partial_row


@triton.jit
def wait_for_group(ARRIVED, group, published, SPIN_LOAD: tl.constexpr):
    """Publish this program's sums (stored before the call) and wait for the group's ``published``."""
    tl.debug_barrier()  # every thread's stores before the release
    tl.atomic_add(ARRIVED + group, 1, sem="release")
    if SPIN_LOAD:  # poll with plain (volatile) loads, then one acquire
        while tl.load(ARRIVED + group, volatile=True) < published:
            pass
        tl.atomic_add(ARRIVED + group, 0, sem="acquire")
    else:
        while tl.atomic_add(ARRIVED + group, 0, sem="acquire") < published:
            pass


@triton.jit
def fwd_split_kernel(
    X, Y, W, B, MEAN, RSTD,
    ROW_SUMS,  # COMPUTE (M, 2, SPLIT): each slice's Σ x and Σ (x - slice mean)² of each row
    ARRIVED,  # int32 (groups,), zeroed
    stride_x, stride_y, M, N, eps, eps_lo,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr,
    SPIN_LOAD: tl.constexpr,
):  # fmt: skip
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    group, part = pid // SPLIT, pid % SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    parts = tl.arange(0, SPLIT)
    # columns in each slice: the last ones may be short or empty
    sizes = tl.minimum(tl.maximum(N - parts * BLOCK_N, 0), BLOCK_N).to(COMPUTE)
    own_size = tl.maximum(tl.minimum(N - part * BLOCK_N, BLOCK_N), 1).to(COMPUTE)
    w = tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE) if W is not None else None
    b = tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE) if B is not None else None
    step = groups * BLOCK_M
    first = group.to(tl.int64) * BLOCK_M  # row offsets in 64 bits
    rows = first + tl.arange(0, BLOCK_M)
    x_next = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=(rows < M)[:, None] & col_mask[None, :], other=0.0)
    published = 0
    for start in range(first, M, step):
        rows = start + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        x = x_next.to(COMPUTE)
        x_next = tl.load(X + (rows + step)[:, None] * stride_x + cols[None, :], mask=(rows + step < M)[:, None] & col_mask[None, :], other=0.0)
        slice_sum = tl.sum(x, axis=1)
        slice_dev = tl.where(mask, x - (slice_sum / own_size)[:, None], 0.0)
        sums = ROW_SUMS + rows * 2 * SPLIT + part
        tl.store(sums, slice_sum, mask=row_mask)
        tl.store(sums + SPLIT, tl.sum(slice_dev * slice_dev, axis=1), mask=row_mask)
        published += SPLIT
        wait_for_group(ARRIVED, group, published, SPIN_LOAD)
        all_sums = ROW_SUMS + rows[:, None] * 2 * SPLIT + parts[None, :]
        sum_g = tl.load(all_sums, mask=row_mask[:, None], other=0.0, volatile=True)
        m2_g = tl.load(all_sums + SPLIT, mask=row_mask[:, None], other=0.0, volatile=True)
        mean = tl.sum(sum_g, axis=1) * inv_n
        # Chan et al.: M2 = Σ_g M2_g + n_g (mean_g - mean)²
        dev = tl.where(sizes[None, :] > 0, sum_g / tl.maximum(sizes, 1.0)[None, :] - mean[:, None], 0.0)
        var = tl.sum(m2_g + sizes[None, :] * dev * dev, axis=1) * inv_n
        rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
        y = (x - mean[:, None]) * rstd[:, None]
        if W is not None:
            y = y * w[None, :]
        if B is not None:
            y = y + b[None, :]
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
        if part == 0:
            tl.store(MEAN + rows, mean, mask=row_mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def bwd_split_kernel(
    DY, X, W, MEAN, RSTD, DX,
    PARTIAL,  # COMPUTE (K, groups, N)
    ROW_SUMS,  # COMPUTE (M, 2, SPLIT): each slice's Σ x̂·w·∇y and Σ w·∇y of each row
    ARRIVED,  # int32 (groups,), zeroed
    stride_dy, stride_x, stride_dx, M, N,
    HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr, SPIN_LOAD: tl.constexpr,
):  # fmt: skip
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    group, part = pid // SPLIT, pid % SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    parts = tl.arange(0, SPLIT)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    step = groups * BLOCK_M
    first = group.to(tl.int64) * BLOCK_M
    rows = first + tl.arange(0, BLOCK_M)
    next_mask = (rows < M)[:, None] & col_mask[None, :]
    x_next = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=next_mask, other=0.0)
    dy_next = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=next_mask, other=0.0)
    published = 0
    for start in range(first, M, step):
        rows = start + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        x, dy = x_next.to(COMPUTE), dy_next.to(COMPUTE)
        next_mask = (rows + step < M)[:, None] & col_mask[None, :]
        x_next = tl.load(X + (rows + step)[:, None] * stride_x + cols[None, :], mask=next_mask, other=0.0)
        dy_next = tl.load(DY + (rows + step)[:, None] * stride_dy + cols[None, :], mask=next_mask, other=0.0)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        x_hat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        w_dy = dy
        if W is not None:
            w_dy *= tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]
        sums = ROW_SUMS + rows * 2 * SPLIT + part
        tl.store(sums, tl.sum(x_hat * w_dy, axis=1), mask=row_mask)
        tl.store(sums + SPLIT, tl.sum(w_dy, axis=1), mask=row_mask)
        published += SPLIT
        wait_for_group(ARRIVED, group, published, SPIN_LOAD)
        all_sums = ROW_SUMS + rows[:, None] * 2 * SPLIT + parts[None, :]
        c1 = tl.sum(tl.load(all_sums, mask=row_mask[:, None], other=0.0, volatile=True), axis=1) * inv_n
        c2 = tl.sum(tl.load(all_sums + SPLIT, mask=row_mask[:, None], other=0.0, volatile=True), axis=1) * inv_n
        dx = (w_dy - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        dw_acc += dy * x_hat
        db_acc += dy
    store_partial_row(PARTIAL, HAS_DW, HAS_DB, group, groups, N, cols, col_mask, dw_acc, db_acc)


def split_forward(x, w, b, eps, split, block_m, warps, per_sm, sms):
    m, n = x.shape
    groups = (sms * per_sm) // split
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device)
    rstd = torch.empty(m, device=x.device)
    row_sums = torch.empty((m, 2, split), device=x.device)  # rows past M are never stored
    arrived = torch.zeros(groups, dtype=torch.int32, device=x.device)
    k = launch._launcher(
        fwd_split_kernel, SPLIT=split, BLOCK_M=block_m, SPIN_LOAD=SPIN, BLOCK_N=launch.next_power_of_2(n) // split, COMPUTE=tl.float32,
        num_warps=warps, launch_cooperative_grid=not launch.INTERPRET,
    )  # fmt: skip
    k((groups * split,), x, y, w, b, mean, rstd, row_sums, arrived, x.stride(0), y.stride(0), m, n,
      *launch._split_eps(eps))  # fmt: skip
    return y, mean, rstd


def split_backward(dy, x, w, b, mean, rstd, split, block_m, warps, per_sm, sms):
    m, n = x.shape
    groups = (sms * per_sm) // split
    dx = torch.empty_like(x)
    partial = torch.empty((2, groups, n), device=x.device)
    row_sums = torch.empty((m, 2, split), device=x.device)  # rows past M are never stored
    arrived = torch.zeros(groups, dtype=torch.int32, device=x.device)
    k = launch._launcher(
        bwd_split_kernel, HAS_DW=True, HAS_DB=True, SPLIT=split, BLOCK_M=block_m, SPIN_LOAD=SPIN, BLOCK_N=launch.next_power_of_2(n) // split,
        COMPUTE=tl.float32, num_warps=warps, launch_cooperative_grid=not launch.INTERPRET,
    )  # fmt: skip
    k((groups * split,), dy, x, w, mean, rstd, dx, partial, row_sums, arrived, dy.stride(0), x.stride(0), n, m, n)
    dw, db = torch.empty_like(w), torch.empty_like(b)
    reduce = launch._launcher(
        launch.kernels.partial_sum_kernel, BLOCK_P=min(128, launch.next_power_of_2(groups)), BLOCK_N=32, num_warps=4
    )
    reduce((launch.cdiv(n, 32), 2), partial, dw, db, groups, n)
    return dx, dw, db


def check(m, n, cfg, sms, dtype):
    x = -2.3 + 0.5 * torch.randn(m, n, device=DEV, dtype=dtype)
    w, b = torch.rand(n, device=DEV, dtype=dtype), torch.rand(n, device=DEV, dtype=dtype)
    dy = 0.1 * torch.randn_like(x)
    ref_y, ref_mean, ref_rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    ref = launch.layer_norm_backward(dy, x, w, b, ref_mean, ref_rstd)
    y, mean, rstd = split_forward(x, w, b, 1e-5, *cfg, sms)
    grads = split_backward(dy, x, w, b, ref_mean, ref_rstd, *cfg, sms)
    outs, refs = (y, mean, rstd, *grads), (ref_y, ref_mean, ref_rstd, *ref)
    errs = [f"{(a.float() - r.float()).abs().max().item():.2g}" for a, r in zip(outs, refs)]
    again = split_backward(dy, x, w, b, ref_mean, ref_rstd, *cfg, sms)
    return errs, all(torch.equal(a, r) for a, r in zip(grads, again))


DEV = "cpu" if launch.INTERPRET else "cuda"
SPIN = "--spin-load" in sys.argv
# (SPLIT, BLOCK_M, warps, programs per SM) per row width
CONFIGS = {
    16384: [(2, 1, 16, 1), (4, 1, 8, 1), (4, 1, 4, 2), (4, 2, 8, 1), (4, 2, 16, 1), (8, 1, 4, 2), (8, 2, 4, 2)],
    32768: [(4, 1, 16, 1), (8, 1, 8, 1), (8, 1, 4, 2), (8, 2, 8, 1), (8, 2, 16, 1), (16, 1, 4, 2), (16, 2, 4, 2)],
    65536: [(8, 1, 16, 1), (8, 1, 32, 1), (16, 1, 8, 1), (16, 1, 16, 1), (16, 1, 4, 2), (16, 2, 16, 1),
            (32, 1, 4, 2), (32, 2, 4, 2)],
}  # fmt: skip

if __name__ == "__main__":
    if "--check" in sys.argv:
        for m, n, block_m in ((7, 40, 1), (9, 100, 2), (4, 1, 4)):
            print(m, n, check(m, n, (1, block_m, 1, 2), 4, torch.float32))
        sys.exit()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "SMs", sms, flush=True)
    for m, n, cfg in ((64, 40000, (4, 2, 8, 1)), (8, 131072, (8, 1, 8, 1)), (37, 16384, (2, 4, 8, 1)),
                      (4096, 8192, (2, 2, 8, 1)), (33, 70000, (8, 4, 4, 2))):  # fmt: skip
        print("check", m, n, cfg, check(m, n, cfg, sms, torch.bfloat16), flush=True)
    src = torch.empty(2**29 // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() * 2 / do_bench(lambda: dst.copy_(src), rep=200) * 1e-6
    print(f"copy {copy:.0f} GB/s", flush=True)
    for m, n in ((8192, 16384), (4096, 32768), (2048, 65536)):
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        fwd_bytes, bwd_bytes = 2 * m * n * 2, 3 * m * n * 2
        t = do_bench(lambda: launch.layer_norm_forward(x, w, b, 1e-5), rep=200)
        print(f"{m}x{n} package forward {fwd_bytes / t * 1e-6:.0f} GB/s ({fwd_bytes / t * 1e-4 / copy:.1f} %)")
        t = do_bench(lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd), rep=200)
        print(f"{m}x{n} package backward {bwd_bytes / t * 1e-6:.0f} GB/s ({bwd_bytes / t * 1e-4 / copy:.1f} %)", flush=True)
        for cfg in CONFIGS[n]:
            for mode, fn, moved in (
                ("forward", lambda: split_forward(x, w, b, 1e-5, *cfg, sms), fwd_bytes),
                ("backward", lambda: split_backward(dy, x, w, b, mean, rstd, *cfg, sms), bwd_bytes),
            ):
                try:
                    t = do_bench(fn, rep=100)
                except Exception as e:  # noqa: BLE001 -- a configuration that does not launch is reported
                    print(f"{m}x{n} {cfg} {mode}: {type(e).__name__} {str(e)[:100]}")
                    continue
                gbps = moved / t * 1e-6
                print(f"{m}x{n} (split, block_m, warps, per_sm) {cfg} {mode} {gbps:.0f} GB/s ({100 * gbps / copy:.1f} %)", flush=True)
