"""Run 86: the backward kernels ncu profiles (8192 x 16384 fused, 4096 x 32768 split, bfloat16)."""

import torch

from ln_tutorial import launch

for m, n in ((8192, 16384), (4096, 32768)):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    for _ in range(2):
        launch.layer_norm_backward(dy, x, w, b, mean, rstd)
    torch.cuda.synchronize()
