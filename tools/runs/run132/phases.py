"""Run 132: the looped forward as a persistent kernel, with some programs starting late.

    PYTHONPATH=$PWD python tools/runs/run132/phases.py

Hypothesis (PREDICTION.md): at 2048 x 65536 the 132 programs read their rows together and
write them together, so DRAM never mixes reads and writes as a copy does. Programs listed by
DELAYED wait DELAY_NS before their first row; TRACE records when each row's sweeps start.
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer
from triton.testing import do_bench

from ln_tutorial import bench, kernels, launch


@triton.jit
def persistent_looped_forward(
    X, Y, W, B, MEAN, RSTD,  # as in kernels.layer_norm_fwd_looped_kernel, float32 statistics
    TIMES,  # (M, 3) int64: sweep 1 start, sweep 2 start, end of each row (TRACE only)
    stride_x, stride_y, M, N, eps,
    DELAY_NS,  # how long a delayed program waits before its first row
    DELAYED: tl.constexpr,  # 0: nobody, 1: programs with fewer rows, 2: odd programs
    TRACE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    late = False
    if DELAYED == 1:
        late = pid >= M % programs
    if DELAYED == 2:
        late = pid % 2 == 1
    if late:
        start_ns = globaltimer()
        while globaltimer() - start_ns < DELAY_NS:
            pass
    inv_n = kernels.reciprocal(N, tl.float32)
    cols = tl.arange(0, BLOCK_N)
    for row in range(pid, M, programs):
        if TRACE:
            tl.store(TIMES + row * 3, globaltimer())
        x_row = X + row.to(tl.int64) * stride_x
        y_row = Y + row.to(tl.int64) * stride_y
        first = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        shift = tl.sum(first, axis=0) / tl.minimum(N, BLOCK_N)
        sum_dev = tl.zeros([BLOCK_N], dtype=tl.float32)
        sum_sq_dev = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            dev = tl.where(mask, x - shift, 0.0)
            sum_dev += dev
            sum_sq_dev += dev * dev
        mean_dev = tl.sum(sum_dev, axis=0) * inv_n
        var = tl.maximum(tl.sum(sum_sq_dev, axis=0) * inv_n - mean_dev * mean_dev, 0.0)
        mean = shift + mean_dev
        rstd = 1.0 / tl.sqrt(var + eps)
        if TRACE:
            tl.store(TIMES + row * 3 + 1, globaltimer())
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = (x - mean) * rstd
            y = y * tl.load(W + start + cols, mask=mask, other=0.0).to(tl.float32)
            y = y + tl.load(B + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(MEAN + row, mean)
        tl.store(RSTD + row, rstd)
        if TRACE:
            tl.store(TIMES + row * 3 + 2, globaltimer())


SMS = torch.cuda.get_device_properties(0).multi_processor_count


def persistent(x, w, b, delayed=0, delay_ns=0, trace=False):
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    times = torch.zeros(m, 3, device=x.device, dtype=torch.int64)
    persistent_looped_forward[(SMS,)](
        x, y, w, b, mean, rstd, times, x.stride(0), y.stride(0), m, n, 1e-5, delay_ns,
        DELAYED=delayed, TRACE=trace, BLOCK_N=16384, num_warps=32)
    return y, mean, rstd, times


def gbps(moved, fn):
    q = do_bench(fn, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
    return moved / (q[1] * 1e-3) / 1e9, moved / (q[0] * 1e-3) / 1e9, moved / (q[2] * 1e-3) / 1e9


def phase_summary(times, m):
    """How many programs are in each sweep over the kernel's life, from one traced call."""
    t = (times - times[:, 0].min()).double().cpu() / 1000.0  # us from the first row's start
    end = t[:, 2].max().item()
    grid = torch.arange(0.0, end, 0.25, dtype=torch.float64)
    reading = ((t[None, :, 0] <= grid[:, None]) & (grid[:, None] < t[None, :, 1])).sum(1).double()
    writing = ((t[None, :, 1] <= grid[:, None]) & (grid[:, None] < t[None, :, 2])).sum(1).double()
    active = reading + writing
    share = torch.where(active > 0, torch.maximum(reading, writing) / active.clamp_min(1), 0)
    row_us = (t[:, 2] - t[:, 0]).median().item()
    read_us = (t[:, 1] - t[:, 0]).median().item()
    return (f"kernel {end:.1f} us, row {row_us:.2f} us (sweep 1 {read_us:.2f}), time with >= 80 % of programs "
            f"in one sweep {(share >= 0.8).double().mean().item() * 100:.0f} %, mean majority share "
            f"{share[active > 0].mean().item() * 100:.0f} %")


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, {SMS} SMs")
print(f"copy {bench.copy_bandwidth():.0f} GB/s (1 GB)", flush=True)
torch.manual_seed(0)
for m, n in [(2048, 65536), (4096, 65536), (1024, 131072)]:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    b = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    size = x.numel() * x.element_size()
    ref = launch.layer_norm_forward(x, w, b, 1e-5)
    variants = [("package", lambda: launch.layer_norm_forward(x, w, b, 1e-5))]
    variants += [(f"persistent, fewer-rows delayed {d} ns", lambda d=d: persistent(x, w, b, 1 if d else 0, d))
                 for d in (0, 2000, 4000, 6000, 8000, 10000, 13000)]
    variants += [(f"persistent, odd delayed {d} ns", lambda d=d: persistent(x, w, b, 2, d)) for d in (3000, 6000)]
    for name, fn in variants[1:]:
        out = fn()
        again = fn()
        diff = max((a.float() - r.float()).abs().max().item() for a, r in zip(out[:3], ref))
        same = all(torch.equal(a, c) for a, c in zip(out[:3], again[:3]))
        print(f"{m}x{n} {name}: max abs diff to package {diff:.1e}, same bits {same}")
    for round_ in range(3):
        lines = [f"copy {gbps(2 * size, lambda: y.copy_(x))[0]:.0f}",
                 f"read only {gbps(size, lambda: x.sum(1, dtype=torch.float32))[0]:.0f}",
                 f"write only {gbps(size, lambda: y.zero_())[0]:.0f}"]
        print(f"round {round_} {m}x{n} bytes moved per second: " + ", ".join(lines), flush=True)
        for name, fn in variants:
            p50, p20, p80 = gbps(2 * size, fn)
            print(f"round {round_} {m}x{n} {name}: {p50:.0f} GB/s (p20 {p20:.0f}, p80 {p80:.0f})", flush=True)
    for delayed, d in [(0, 0), (1, 6000), (1, 10000)]:
        persistent(x, w, b, delayed, d, trace=True)
        times = persistent(x, w, b, delayed, d, trace=True)[3]
        print(f"trace {m}x{n} delayed={delayed} {d} ns: {phase_summary(times, m)}", flush=True)
