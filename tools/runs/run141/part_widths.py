"""Run 141: part widths of the split backward at the widest shapes (launch configurations only), and
the one-exchange forward at N = 32768 with whole and partial last waves.

    PYTHONPATH=$PWD python tools/runs/run141/part_widths.py
"""

import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import BackwardConfig, backward_config  # noqa: E402

CANDIDATES = [
    BackwardConfig(False, 1, 2048, 4, 4, split=True),
    BackwardConfig(False, 1, 4096, 8, 2, split=True),
    BackwardConfig(False, 1, 8192, 16, 1, split=True),
]
CASES = [(4096, 32768), (2048, 65536), (8192, 16384)]

print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
for round_ in range(3):
    print(f"--- round {round_ + 1}", flush=True)
    for m, n in CASES:
        package = backward_config(n, 2)
        others = [c for c in CANDIDATES if c != package]
        time_cases([("backward", m, n, [package, *others])], {"package": kernels})
    for m in (3960, 4092, 4096, 4224):
        x = torch.randn(m, 32768, device="cuda", dtype=torch.bfloat16)
        w, b = torch.rand(32768, device="cuda", dtype=x.dtype), torch.rand(32768, device="cuda", dtype=x.dtype)
        q = do_bench(lambda: launch.layer_norm_forward(x, w, b, 1e-5), warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
        moved = 2 * x.numel() * 2
        print(f"forward {m}x32768 bfloat16 waves {m / 132:.2f}: {moved / (q[1] * 1e-3) / 1e9:.0f} GB/s "
              f"(p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})", flush=True)
