"""Run 125: kernel durations (CUPTI, L2 flushed) of the 4 KB-row forward configurations.

    PYTHONPATH=$PWD python tools/runs/run125/short_rows.py
"""

import runpy
from pathlib import Path

import torch

from ln_tutorial import launch

kernel_us = runpy.run_path(str(Path(__file__).parents[1] / "run124" / "kernel_times.py"), run_name="lib")["kernel_us"]
SHAPES = [(4096, n, torch.float16) for n in (1088, 1280, 1536, 1792, 2048)] + [
    (16384, 2048, torch.bfloat16), (4096, 768, torch.float32), (4096, 1024, torch.float32),
    (16384, 1024, torch.float32)]  # fmt: skip
for rnd in range(2):
    for m, n, dtype in SHAPES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        moved = 2 * x.numel() * x.element_size()
        table = launch.forward_config(n, x.element_size())
        ref = launch.layer_norm_forward(x, w, b, 1e-5)[0].float()
        line = []
        for rows, warps in [(table.block_m, table.num_warps), (1, 4), (1, 8), (2, 4)]:
            cfg = table._replace(block_m=rows, num_warps=warps)
            fn = lambda cfg=cfg: launch.layer_norm_forward(x, w, b, 1e-5, cfg)
            err = ((fn()[0].float() - ref).abs().max() / ref.abs().max()).item()
            us = kernel_us(fn)[0]
            line.append(f"({rows}, {warps}) {us:6.2f} us {moved / us / 1e3:5.0f} GB/s diff {err:.0e}")
        print(f"round {rnd} {m}x{n} {str(dtype)[6:]:8s} table first: " + " | ".join(line), flush=True)
