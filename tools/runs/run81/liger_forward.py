"""Run 81: Liger-Kernel's forward against ours, at the launcher and end to end, M = 4096, float16.

    PYTHONPATH=$PWD:/tmp/peer python tools/runs/run81/liger_forward.py
"""

import torch
from liger_kernel.ops.layer_norm import layer_norm_forward as liger_forward
from triton.testing import do_bench

from ln_tutorial import bench, launch

SIZES = (1536, 2048, 3072, 3584, 4096)
for n in SIZES:
    x = -2.3 + 0.5 * torch.randn(4096, n, device="cuda", dtype=torch.float16)
    w, b = torch.rand(n, device="cuda", dtype=x.dtype), torch.rand(n, device="cuda", dtype=x.dtype)
    moved = 2 * x.numel() * x.element_size()
    block_n = launch.next_power_of_2(n)
    runs = {
        "liger": lambda: liger_forward(x, w, b, 1e-5),
        f"ours {tuple(launch.forward_config(n, 2))}": lambda: launch.layer_norm_forward(x, w, b, 1e-5),
        "ours (1 row, 4 warps)": lambda: launch.layer_norm_forward(x, w, b, 1e-5, launch.ForwardConfig(False, 1, block_n, 4)),
        "ours (1 row, 8 warps)": lambda: launch.layer_norm_forward(x, w, b, 1e-5, launch.ForwardConfig(False, 1, block_n, 8)),
    }  # fmt: skip
    ref = runs["liger"]()[0].float()
    for name, run in runs.items():
        err = (run()[0].float() - ref).abs().max().item()
        do_bench(run, warmup=100, rep=50)
        q = do_bench(run, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
        print(f"launcher {n:>5} {name:<32} {moved / (q[1] * 1e-3) / 1e9:6.0f} GB/s (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, "
              f"p80 {moved / (q[2] * 1e-3) / 1e9:.0f}), max |diff| to liger {err:.2g}", flush=True)  # fmt: skip
providers = bench.available_providers(["ln_tutorial", "liger"])
for round_ in range(3):
    for name, fn in providers.items():
        cells = "  ".join(f"{n} {bench.time_provider(fn, 'forward', 4096, n, torch.float16)[1]:.0f}" for n in SIZES)
        print(f"end to end, round {round_}, {name:<12} {cells}", flush=True)
