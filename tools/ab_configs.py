"""Time a few launch configurations at a few shapes (compiled first, GPU warmed, L2 flushed).

Run it twice around a kernel edit to compare two versions of the source in one lease:
    python tools/ab_configs.py; <edit>; python tools/ab_configs.py
"""

import torch
from triton.testing import do_bench

from ln_tutorial import launch

F, B = launch.ForwardConfig, launch.BackwardConfig
CASES = [
    ("forward", 16384, 8192, [F(False, 1, 8192, 16), F(False, 1, 8192, 8)]),
    ("forward", 4096, 4096, [F(False, 1, 4096, 8), F(False, 2, 4096, 8)]),
    ("backward", 8192, 16384, [B(False, 1, 16384, 8, 1), B(False, 1, 16384, 16, 1), B(True, 16, 4096, 16, 1)]),
    ("backward", 16384, 4096, [B(False, 1, 4096, 8, 2), B(False, 2, 4096, 8, 1)]),
    ("backward", 4096, 1024, [B(False, 4, 1024, 4, 2), B(False, 2, 1024, 8, 2)]),
]

for mode, m, n, configs in CASES:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
    dy = 0.1 * torch.randn_like(x)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    if mode == "forward":
        run = lambda c: launch.layer_norm_forward(x, w, b, 1e-5, config=c)
    else:
        run = lambda c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
    for c in configs:
        run(c)
    do_bench(lambda: run(configs[0]), warmup=200, rep=100)
    for c in configs:
        ms = do_bench(lambda: run(c), warmup=50, rep=100, return_mode="median")
        moved = (2 if mode == "forward" else 3) * m * n * 2
        print(f"{mode} {m}x{n} {tuple(c)}: {moved / (ms * 1e-3) / 1e9:.0f} GB/s", flush=True)
