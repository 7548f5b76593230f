"""Run 130 on the GPU: the one-exchange Gluon forward against the package's fused forward.

    PYTHONPATH=$PWD python tools/runs/run130/bench_one_exchange.py
"""

import sys

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import one_exchange  # noqa: E402

from ln_tutorial import bench, launch  # noqa: E402

torch.manual_seed(0)


def gluon_forward(x, w, b, eps, warps):
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    inv_n = torch.tensor(1.0, dtype=torch.float64).div(n).float().item()  # correctly rounded
    one_exchange.one_exchange_forward_kernel[(m,)](
        x, y, w, b, mean, rstd, x.stride(0), y.stride(0), n, inv_n, eps,
        BLOCK_N=triton.next_power_of_2(n), VEC=16 // x.element_size(), WARPS=warps, num_warps=warps)
    return y, mean, rstd


def errors(out, x, w, b):
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5)
    y = (xd - mean[:, None]) * rstd[:, None] * w.double() + b.double()
    return (((out[2].double() - rstd).abs() / rstd).max().item(),
            ((out[1].double() - mean).abs() / mean.abs().clamp_min(1e-3)).max().item(),
            ((out[0].double() - y).abs().max() / y.abs().max()).item())


print(f"copy {bench.copy_bandwidth():.0f} GB/s", flush=True)
CASES = [(4096, 32768, torch.bfloat16, [32, 16]), (4096, 32768, torch.float16, [32]),
         (8192, 16384, torch.bfloat16, [8, 16]), (16384, 8192, torch.bfloat16, [16, 8]),
         (16384, 4096, torch.bfloat16, [8, 16]), (4096, 12800, torch.float16, [8, 16]),
         (4096, 15872, torch.float16, [8, 16])]
for m, n, dtype, warp_counts in CASES:
    w = torch.rand(n, device="cuda", dtype=dtype)
    b = torch.rand(n, device="cuda", dtype=dtype)
    for label, make in [("normal", lambda: -2.3 + 0.5 * torch.randn(m, n, device="cuda")),
                        ("mean 1000", lambda: 1000 + torch.randn(m, n, device="cuda")),
                        ("outlier", lambda: torch.randn(m, n, device="cuda").index_fill_(1, torch.tensor([0], device="cuda"), 1e4))]:
        x = make().to(dtype)
        pkg = launch.layer_norm_forward(x, w, b, 1e-5)
        line = [f"package rstd/mean/y {'/'.join(f'{e:.1e}' for e in errors(pkg, x, w, b))}"]
        for warps in warp_counts:
            out = gluon_forward(x, w, b, 1e-5, warps)
            again = gluon_forward(x, w, b, 1e-5, warps)
            same = all(torch.equal(a, c) for a, c in zip(out, again))
            line.append(f"gluon {warps} warps {'/'.join(f'{e:.1e}' for e in errors(out, x, w, b))} same bits {same}")
        print(f"{m}x{n} {str(dtype)[6:]} {label}: " + " | ".join(line), flush=True)
x = None
for rnd in range(3):
    for m, n, dtype, warp_counts in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.rand(n, device="cuda", dtype=dtype)
        b = torch.rand(n, device="cuda", dtype=dtype)
        moved = 2 * x.numel() * x.element_size()
        fns = {"package": lambda: launch.layer_norm_forward(x, w, b, 1e-5)}
        for warps in warp_counts:
            fns[f"gluon {warps} warps"] = lambda warps=warps: gluon_forward(x, w, b, 1e-5, warps)
        res = []
        for name, fn in fns.items():
            ms = do_bench(fn, warmup=50, rep=200, return_mode="median")
            res.append(f"{name} {moved / ms / 1e6:5.0f}")
        print(f"round {rnd} {m}x{n} {str(dtype)[6:]}: " + "  ".join(res), flush=True)
