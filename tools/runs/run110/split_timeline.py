"""Run 110: where the split backward's time goes outside its main kernel (torch.profiler, CUDA time per kernel).

    python tools/runs/run110/split_timeline.py
"""

import torch
from torch.profiler import ProfilerActivity, profile

from ln_tutorial import launch

for m, n in [(8192, 16384), (4096, 32768), (2048, 65536)]:
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    for _ in range(5):
        launch.layer_norm_backward(dy, x, w, b, mean, rstd)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        torch.cuda.synchronize()
    print(f"--- {m}x{n} bfloat16, 20 calls")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))
