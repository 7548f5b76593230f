"""Thread-block clusters (Triton's num_ctas) for rows too wide for one SM's registers (run 29).

Prediction: with num_ctas=2 a program spans two SMs, so a 128 KB bf16 row (65536
values, 256 KB as float32) fits in registers again. If Triton compiles the
cross-CTA row sums, the fused forward at 2048 x 65536 should beat the looped
kernel's 2455 GB/s (82 % of copy); the persistent backward at 8192 x 16384 should
no longer need the second read (2264 GB/s with it). It may not compile at all.
"""

import torch
import torch.nn.functional as F
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import kernels, launch


def gbps(moved, fn):
    fn()
    torch.cuda.synchronize()
    ms = do_bench(fn, warmup=25, rep=150, return_mode="median")
    return moved / (ms * 1e-3) / 1e9


big = torch.empty(2048 * 65536, dtype=torch.bfloat16, device="cuda")
print(f"copy: {gbps(2 * big.numel() * 2, lambda: big.clone()):.0f} GB/s", flush=True)

m, n = 2048, 65536
x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
ref = F.layer_norm(x.float(), (n,), w.float(), b.float())
for warps, ctas in [(32, 1), (32, 2), (16, 2), (16, 4), (32, 4)]:
    y, mean, rstd = torch.empty_like(x), x.new_empty(m, dtype=torch.float32), x.new_empty(m, dtype=torch.float32)

    def run():
        kernels.layer_norm_fwd_kernel[(m,)](
            x, y, w, b, mean, rstd, n, n, m, n, 1e-5, 0.0, BLOCK_M=1, BLOCK_N=n, COMPUTE=tl.float32,
            num_warps=warps, num_ctas=ctas,
        )

    try:
        speed = gbps(2 * m * n * 2, run)
        err = (y.float() - ref).abs().max().item()
        print(f"forward {m}x{n} fused, {warps} warps, num_ctas={ctas}: {speed:.0f} GB/s, max abs err {err:.2e}", flush=True)
    except Exception as exc:
        print(f"forward {m}x{n} fused, {warps} warps, num_ctas={ctas}: failed: {type(exc).__name__}: {str(exc)[:300]}")

m, n = 8192, 16384
x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
dy = 0.1 * torch.randn_like(x)
_, mean, rstd = launch.layer_norm_forward(x, w, w, 1e-5)
dx_ref, dw_ref, _ = launch.layer_norm_backward(dy, x, w, w, mean, rstd)
for warps, ctas, programs, reload in [(8, 1, 132, True), (8, 2, 66, False), (8, 2, 132, False), (16, 2, 66, False),
                                      (8, 2, 66, True), (4, 2, 66, False)]:  # fmt: skip
    rows_per_program = launch.cdiv(m, programs)
    dx = torch.empty_like(x)
    partial = mean.new_empty((2, programs, n))

    def run():
        kernels.layer_norm_bwd_persistent_kernel[(programs,)](
            dy, x, w, mean, rstd, dx, partial, n, n, n, m, n, rows_per_program, HAS_DW=True, HAS_DB=True,
            BLOCK_M=1, BLOCK_N=n, COMPUTE=tl.float32, NUM_STAGES=1, RELOAD=reload, num_warps=warps, num_ctas=ctas,
        )

    try:
        speed = gbps(3 * m * n * 2, run)  # the main kernel alone (the partial sum is a few us more)
        err = (dx.float() - dx_ref.float()).abs().max().item()
        dw_err = (partial[0].sum(0) - dw_ref.float()).abs().max().item()
        print(f"backward {m}x{n} persistent, {warps} warps, num_ctas={ctas}, {programs} programs, reload={reload}: "
              f"{speed:.0f} GB/s, dx max abs diff {err:.2e}, dw {dw_err:.2e}", flush=True)  # fmt: skip
    except Exception as exc:
        print(f"backward {warps} warps num_ctas={ctas}: failed: {type(exc).__name__}: {str(exc)[:300]}")
