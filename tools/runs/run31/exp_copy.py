"""How close can a Triton kernel with the forward's tiling get to a copy? (run 31)

Prediction: the forward reaches 93 % of torch's copy at 8 KB, 2 KB and 64 KB rows
at the launcher. If a Triton kernel that only copies the same tiles (same grid,
warps and masks) also stops near 93-95 %, the gap is in how Triton moves the
data, not in our reductions; if it reaches 98 %, the two row reductions cost the
rest. A third kernel adds one reduction to the copy.
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import launch


@triton.jit
def copy_rows(X, Y, stride, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, REDUCE: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    if REDUCE:
        x = (x.to(tl.float32) - tl.sum(x.to(tl.float32), axis=1)[:, None] / N).to(x.dtype)
    tl.store(Y + rows[:, None] * stride + cols[None, :], x, mask=mask)


def gbps(moved, fn):
    fn()
    torch.cuda.synchronize()
    do_bench(fn, warmup=100, rep=50)
    return moved / (do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e-3) / 1e9


for m, n in [(16384, 4096), (65536, 1024), (4096, 32768), (16384, 8192)]:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    cfg = launch.forward_config(n, 2)
    grid = (launch.cdiv(m, cfg.block_m),)
    moved = 2 * m * n * 2
    results = {"torch copy": gbps(moved, lambda: y.copy_(x))}
    for reduce in (False, True):
        results[f"triton copy{' + 1 sum' if reduce else ''}"] = gbps(moved, lambda: copy_rows[grid](
            x, y, n, m, n, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, REDUCE=reduce, num_warps=cfg.num_warps))
    results["layer_norm_forward"] = gbps(moved, lambda: launch.layer_norm_forward(x, w, b, 1e-5))
    line = ", ".join(f"{k} {v:.0f}" for k, v in results.items())
    print(f"{m}x{n} {tuple(cfg)}: {line} GB/s", flush=True)
