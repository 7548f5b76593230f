"""Run 42: the wide-row backward in bands, programs owning column slices (experiment).

Program p owns columns [p*S, p*S + S) of every row. The rows are taken in bands
small enough that a band's x and dy stay in L2. For each band a program
(A) reads its slice of x and dy (HBM) and writes its share of each row's sums;
waits at a grid-wide barrier; (B) adds the P shares of each row (same order in
every program), reads its slice again (L2), writes dx and adds dy*x̂, dy into
dW/dB accumulators that stay in registers for the whole kernel: dW/dB are
written once at the end, no partial rows, no second kernel. HBM traffic: x and
dy once, dx once. With PIPELINE the barrier is split: a program announces the
end of A(b), does A(b+1), then waits for b and does B(b), hiding the wait.

    python tools/runs/run42/exp_banded.py          # GPU: check, then GB/s (L2 flushed)
    TRITON_INTERPRET=1 python tools/runs/run42/exp_banded.py --check   # one program
"""

import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import launch
from ln_tutorial.kernels import load_tile, reciprocal


@triton.jit
def arrive(BARRIER):
    """Count this program in; return the generation to wait past. The last one releases everyone."""
    tl.debug_barrier()
    generation = tl.atomic_add(BARRIER + 1, 0, sem="acquire")
    if tl.atomic_add(BARRIER, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.atomic_xchg(BARRIER, 0, sem="relaxed")
        tl.atomic_add(BARRIER + 1, 1, sem="release")
    return generation


@triton.jit
def wait(BARRIER, generation):
    while tl.atomic_add(BARRIER + 1, 0, sem="acquire") == generation:
        pass
    tl.debug_barrier()


@triton.jit
def phase_a(X, DY, W, MEAN, RSTD, SUMS, band, band_end, cols, col_mask, stride_x, stride_dy,
            P, pid, BLOCK_M: tl.constexpr, COMPUTE: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    for r0 in tl.range(band, band_end, BLOCK_M, num_stages=STAGES):
        rows = r0 + tl.arange(0, BLOCK_M)
        row_mask = rows < band_end
        x_hat, dy, w_dy, rstd = load_tile(
            X, DY, W, MEAN, RSTD, rows, cols, row_mask, col_mask, stride_x, stride_dy, COMPUTE, "evict_last"
        )
        sums = SUMS + rows * 2 * P + pid
        tl.store(sums, tl.sum(x_hat * w_dy, axis=1), mask=row_mask)
        tl.store(sums + P, tl.sum(w_dy, axis=1), mask=row_mask)


@triton.jit
def banded_bwd_kernel(
    DY, X, W, MEAN, RSTD, DX, DW, DB,
    SUMS,  # fp32 (M, 2, P)
    BARRIER,  # int32 (2,)
    stride_dy, stride_x, stride_dx, M, N,
    slice_n,  # columns per program
    band_rows,  # rows per band, a multiple of BLOCK_M
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, P_POW2: tl.constexpr, COMPUTE: tl.constexpr,
    STAGES: tl.constexpr, PIPELINE: tl.constexpr,
):  # fmt: skip
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    cols = pid * slice_n + tl.arange(0, BLOCK_N)
    col_mask = (tl.arange(0, BLOCK_N) < slice_n) & (cols < N)
    progs = tl.arange(0, P_POW2)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    if PIPELINE:
        phase_a(X, DY, W, MEAN, RSTD, SUMS, 0, tl.minimum(band_rows, M), cols, col_mask, stride_x, stride_dy, P, pid,
                BLOCK_M, COMPUTE, STAGES)  # fmt: skip
        generation = arrive(BARRIER)
    for band in range(0, M, band_rows):
        band_end = tl.minimum(band + band_rows, M)
        if PIPELINE:
            next_end = tl.minimum(band_end + band_rows, M)
            phase_a(X, DY, W, MEAN, RSTD, SUMS, band_end, next_end, cols, col_mask, stride_x, stride_dy, P, pid,
                    BLOCK_M, COMPUTE, STAGES)  # fmt: skip
            wait(BARRIER, generation)
        else:
            phase_a(X, DY, W, MEAN, RSTD, SUMS, band, band_end, cols, col_mask, stride_x, stride_dy, P, pid,
                    BLOCK_M, COMPUTE, STAGES)  # fmt: skip
            wait(BARRIER, arrive(BARRIER))
        for r0 in tl.range(band, band_end, BLOCK_M, num_stages=STAGES):
            rows = r0 + tl.arange(0, BLOCK_M)
            row_mask = rows < band_end
            shares = SUMS + rows[:, None] * 2 * P + progs[None, :]
            share_mask = row_mask[:, None] & (progs < P)[None, :]
            c1 = tl.sum(tl.load(shares, mask=share_mask, other=0.0, cache_modifier=".cg"), axis=1) * inv_n
            c2 = tl.sum(tl.load(shares + P, mask=share_mask, other=0.0, cache_modifier=".cg"), axis=1) * inv_n
            x_hat, dy, w_dy, rstd = load_tile(
                X, DY, W, MEAN, RSTD, rows, cols, row_mask, col_mask, stride_x, stride_dy, COMPUTE, "evict_first"
            )
            dx = (w_dy - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
            mask = row_mask[:, None] & col_mask[None, :]
            tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            dw_acc += dy * x_hat
            db_acc += dy
        if PIPELINE:
            if band_end < M:
                generation = arrive(BARRIER)
    tl.store(DW + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_mask)
    tl.store(DB + cols, tl.sum(db_acc, axis=0).to(DB.dtype.element_ty), mask=col_mask)


def banded_backward(dy, x, w, b, mean, rstd, programs_target, l2_bytes, tile, warps, stages, pipeline):
    m, n = x.shape
    slice_n = -(-launch.cdiv(n, programs_target) // 64) * 64
    programs = launch.cdiv(n, slice_n)
    block_n = launch.next_power_of_2(slice_n)
    block_m = max(1, tile // block_n)
    band = max(block_m, (l2_bytes // (2 * n * x.element_size())) // block_m * block_m)
    if pipeline:
        band //= 2  # two bands in L2 at once
        band = max(block_m, band // block_m * block_m)
    dx = torch.empty_like(x)
    dw, db = torch.empty_like(w), torch.empty_like(b)
    sums = torch.empty((m, 2, programs), device=x.device)
    barrier = torch.zeros(2, dtype=torch.int32, device=x.device)
    k = launch._launcher(
        banded_bwd_kernel, BLOCK_M=block_m, BLOCK_N=block_n, P_POW2=launch.next_power_of_2(programs),
        COMPUTE=tl.float32, STAGES=stages, PIPELINE=pipeline, num_warps=warps,
        launch_cooperative_grid=not launch.INTERPRET,
    )  # fmt: skip
    k((programs,), dy, x, w, mean, rstd, dx, dw, db, sums, barrier, dy.stride(0), x.stride(0), n, m, n, slice_n, band)
    return dx, dw, db


def check(m, n, dtype, cfg):
    dev = "cpu" if launch.INTERPRET else "cuda"
    x = -2.3 + 0.5 * torch.randn(m, n, device=dev, dtype=dtype)
    w, b = torch.rand(n, device=dev, dtype=dtype), torch.rand(n, device=dev, dtype=dtype)
    dy = 0.1 * torch.randn_like(x)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
    got = banded_backward(dy, x, w, b, mean, rstd, *cfg)
    again = banded_backward(dy, x, w, b, mean, rstd, *cfg)
    errs = [f"{(a.float() - r.float()).abs().max().item():.2g}" for a, r in zip(got, ref)]
    return errs, all(torch.equal(a, c) for a, c in zip(got, again))


if __name__ == "__main__":
    if "--check" in sys.argv:  # one program: the barrier never waits
        for m, n, pipe in ((37, 100, False), (37, 100, True), (5, 64, True), (64, 130, False)):
            print(m, n, pipe, check(m, n, torch.float32, (1, 4 * n * 4 * 10, 256, 1, 1, pipe)))
        sys.exit()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "SMs", sms, flush=True)
    for m, n in ((64, 40000), (300, 32768), (8, 131072), (1000, 16384)):
        for pipe in (False, True):
            print("check", m, n, pipe, check(m, n, torch.bfloat16, (sms, 8 << 20, 4096, 8, 2, pipe)), flush=True)
    src = torch.empty(2**29 // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() * 2 / do_bench(lambda: dst.copy_(src), rep=200) * 1e-6
    print(f"copy {copy:.0f} GB/s", flush=True)
    configs = [(sms, l2 << 20, tile, warps, stages, pipe) for pipe in (False, True) for l2 in (16, 32)
               for tile, warps in ((4096, 8), (8192, 8), (8192, 16)) for stages in (1, 3)]  # fmt: skip
    for m, n in ((8192, 16384), (4096, 32768), (2048, 65536)):
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * 2
        t = do_bench(lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd), rep=200)
        print(f"{m}x{n} package backward {moved / t * 1e-6:.0f} GB/s ({moved / t * 1e-4 / copy:.1f} %)", flush=True)
        for cfg in configs:
            try:
                t = do_bench(lambda: banded_backward(dy, x, w, b, mean, rstd, *cfg), rep=100)
            except Exception as e:  # noqa: BLE001 -- a configuration that does not launch is reported
                print(f"{m}x{n} {cfg[1:]}: {type(e).__name__} {str(e)[:100]}", flush=True)
                continue
            gbps = moved / t * 1e-6
            print(f"{m}x{n} (L2 bytes, tile, warps, stages, pipeline) {cfg[1:]}: {gbps:.0f} GB/s ({100 * gbps / copy:.1f} %)",
                  flush=True)  # fmt: skip
