"""The split backward's leading configurations, the looped kernels and copy, timed alike (L2 flushed).

    python tools/runs/run72/split_ab.py [label]
"""
import sys

import torch
from triton.testing import do_bench

from ln_tutorial import bench, launch

B = launch.BackwardConfig
SPLITS = [B(False, 1, 2048, 4, 4, split=True), B(False, 1, 4096, 4, 2, split=True), B(False, 1, 4096, 8, 2, split=True),
          B(False, 1, 8192, 8, 1, split=True), B(False, 1, 8192, 16, 1, split=True)]  # fmt: skip
label = sys.argv[1] if len(sys.argv) > 1 else ""
copy = bench.copy_bandwidth()
print(f"{label} copy {copy:.0f} GB/s", flush=True)
for m, n in [(4096, 32768), (2048, 65536), (8192, 16384)]:
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w, b, dy = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype), torch.randn_like(x)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    for cfg in [launch.backward_config(n, 2), launch.BACKWARD_LOOPED, *SPLITS]:
        run = lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg)
        try:
            run()
        except RuntimeError as error:
            print(f"{label} {m}x{n} {tuple(cfg)}: {str(error)[-40:]}")
            continue
        ms = do_bench(run, warmup=25, rep=100, return_mode="median")
        gbps = 3 * x.numel() * 2 / (ms * 1e-3) / 1e9
        print(f"{label} {m}x{n} {tuple(cfg)} {gbps:.0f} GB/s ({100 * gbps / copy:.1f} % of copy)", flush=True)
