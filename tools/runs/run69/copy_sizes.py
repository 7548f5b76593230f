"""Run 69: a device-to-device copy of the tutorial sweep's sizes, next to our forward, L2 flushed.

The forward moves 2·M·N·s bytes, as a copy of x does; at M = 4096 the copy of
that size, not the 1 GB copy, is what a forward can at best reach.

    PYTHONPATH=$PWD python3 tools/runs/run69/copy_sizes.py
"""

import torch
from triton.testing import do_bench

from ln_tutorial import layer_norm

M = 4096
for n in range(1024, 16385, 512):
    x = torch.randn(M, n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    w, b = torch.randn(n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16)
    moved = 2 * M * n * 2
    line = [f"N={n}"]
    for name, run in (("copy", lambda: y.copy_(x)), ("ln_tutorial", lambda: layer_norm(x, (n,), w, b))):
        do_bench(run, warmup=50, rep=50)
        q = do_bench(run, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
        line.append(f"{name} {moved / (q[1] * 1e-3) / 1e9:.0f} ({moved / (q[0] * 1e-3) / 1e9:.0f}-{moved / (q[2] * 1e-3) / 1e9:.0f})")
    print("  ".join(line), flush=True)
