"""Run 85: why the looped forward's first, read-only sweep is slow at 2048 x 65536.

    python tools/runs/run85/wide_forward.py

Three parts, one lease: (1) read-only row sums (Triton, one row per program, as the
looped forward's first sweep; torch.sum) against a copy of the same size; (2) the
looped forward with the next tile's load issued before this tile's sums (A/B against
the package, tools/ab_kernels.py); (3) registers and spills of every kernel timed.
"""

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import ForwardConfig, forward_config  # noqa: E402


@triton.jit
def row_sums_kernel(X, S, N, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    """The looped forward's first sweep alone: Σx of one row, written as float32."""
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * N
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    if PREFETCH:
        raw = tl.load(x_row + cols)
        for start in range(BLOCK_N, N + BLOCK_N, BLOCK_N):
            ahead = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0)
            acc += raw.to(tl.float32)
            raw = ahead
    else:
        for start in range(0, N, BLOCK_N):
            acc += tl.load(x_row + start + cols).to(tl.float32)
    tl.store(S + row, tl.sum(acc, axis=0))


def gbps(nbytes, fn):
    fn()
    torch.cuda.synchronize()
    do_bench(fn, warmup=100, rep=50)
    q = do_bench(fn, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
    return f"{nbytes / (q[1] * 1e-3) / 1e9:6.0f} GB/s (p20 {nbytes / (q[0] * 1e-3) / 1e9:.0f}, p80 {nbytes / (q[2] * 1e-3) / 1e9:.0f})"


def read_only(m, n):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    s = torch.empty(m, device="cuda", dtype=torch.float32)
    nbytes = m * n * 2
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)  # 0.5 GB: the 1 GB copy's figure
    big_out = torch.empty_like(big)
    print(f"copy 1 GB (read+write)         {gbps(2 * big.numel(), lambda: big_out.copy_(big))}")
    print(f"copy {m}x{n} (read+write)   {gbps(2 * nbytes, lambda: y.copy_(x))}")
    print(f"torch.sum {m}x{n} (read)     {gbps(nbytes, lambda: torch.sum(x, dim=1, dtype=torch.float32))}")
    ref = x.float().sum(1)
    for block_n, warps, prefetch in ((16384, 32, 0), (16384, 32, 1), (8192, 16, 0), (8192, 16, 1), (8192, 32, 0),
                                     (8192, 32, 1), (4096, 8, 0), (4096, 8, 1), (2048, 4, 1), (32768, 32, 0)):
        if n % block_n:
            continue
        fn = lambda: row_sums_kernel[(m,)](x, s, n, BLOCK_N=block_n, PREFETCH=prefetch, num_warps=warps)
        fn()
        torch.cuda.synchronize()
        err = ((s - ref).abs().max() / ref.abs().max()).item()
        compiled = row_sums_kernel.warmup(x, s, n, BLOCK_N=block_n, PREFETCH=prefetch, num_warps=warps, grid=(1,))
        print(f"row sums {m}x{n} step {block_n:5d} warps {warps:2d} prefetch {prefetch} (read) {gbps(nbytes, fn)}"
              f"  regs {compiled.n_regs} spills {compiled.n_spills} err {err:.1e}", flush=True)


FIRST_SWEEP = """    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        # evict_last: keep the row in L2 for the second sweep
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
        dev = tl.where(mask, x - shift, 0.0)
        sum_dev += dev
        sum_sq_dev += dev * dev
"""
PREFETCHED = """    raw = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_last")
    for start in range(BLOCK_N, N + BLOCK_N, BLOCK_N):
        ahead = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0, eviction_policy="evict_last")
        dev = tl.where(start - BLOCK_N + cols < N, raw.to(COMPUTE) - shift, 0.0)
        sum_dev += dev
        sum_sq_dev += dev * dev
        raw = ahead
"""
VARIANTS = {"prefetch": [(FIRST_SWEEP, PREFETCHED)]}
LOOPED = [ForwardConfig(True, 1, 16384, 32), ForwardConfig(True, 1, 8192, 16), ForwardConfig(True, 1, 8192, 32),
          ForwardConfig(True, 1, 4096, 8)]  # fmt: skip
CASES = [
    ("forward", 2048, 65536, LOOPED),
    ("forward", 4096, 32768, [forward_config(32768, 2)] + LOOPED),
    ("forward", 4096, 9216, [forward_config(9216, 2)]),  # padded rows take the looped kernel, 2048-value steps
    ("forward", 4096, 12032, [forward_config(12032, 2)]),
]


def registers(modules):
    for name, module in modules.items():
        launch.kernels = module
        launch._forward_launcher.cache_clear()
        for _, m, n, configs in CASES:
            x = torch.randn(8, n, device="cuda", dtype=torch.bfloat16)
            for c in configs:
                kernel = launch._forward_launcher(c, x.dtype)
                launch.layer_norm_forward(x, None, None, 1e-5, config=c)
                for entry in kernel.compiled.values():
                    print(f"registers {name:<9} N={n} {tuple(c)}: {entry[5].n_regs} regs, {entry[5].n_spills} spills")
                kernel.compiled.clear()
    launch.kernels = kernels
    launch._forward_launcher.cache_clear()


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    read_only(2048, 65536)
    read_only(4096, 32768)
    modules = {"package": kernels, **{k: variant(k, v) for k, v in VARIANTS.items()}}
    registers(modules)
    time_cases(CASES, modules)
