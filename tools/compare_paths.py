"""Same shape, same data, three call paths, timed like the benchmark (do_bench, L2 flushed).

Why the launcher-level sweep (tools/tune.py) and the end-to-end benchmark disagree at some shapes:
    python tools/compare_paths.py
"""

import torch
from triton.testing import do_bench

from ln_tutorial import launch, layer_norm

CASES = [("forward", 16384, 8192), ("forward", 16384, 4096), ("backward", 8192, 16384), ("backward", 16384, 4096)]


def gbps(ms, mode, m, n):
    return (2 if mode == "forward" else 3) * m * n * 2 / (ms * 1e-3) / 1e9


for mode, m, n in CASES:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    b = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    dy = 0.1 * torch.randn_like(x)
    if mode == "forward":
        paths = {
            "launcher": lambda: launch.layer_norm_forward(x, w, b, 1e-5),
            "layer_norm, no grad": lambda: layer_norm(x, (n,), w, b),
        }
        xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
        paths["layer_norm, grad"] = lambda: layer_norm(xg, (n,), wg, bg)
    else:
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
        y = layer_norm(xg, (n,), wg, bg)
        paths = {
            "launcher": lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd),
            "y.backward": lambda: y.backward(dy, retain_graph=True),
        }
    for name, fn in paths.items():
        for rep in range(2):
            q = do_bench(fn, warmup=100, quantiles=[0.2, 0.5, 0.8], grad_to_none=[xg, wg, bg])
            print(f"{mode} {m}x{n} {name:<22} p50 {gbps(q[1], mode, m, n):7.0f} GB/s  "
                  f"(p20 {gbps(q[0], mode, m, n):.0f}, p80 {gbps(q[2], mode, m, n):.0f})", flush=True)
