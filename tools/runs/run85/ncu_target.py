"""Run 85: the kernels ncu profiles (tools/runs/run85/README: the command line)."""

import torch

from ln_tutorial import launch

x = torch.randn(2048, 65536, device="cuda", dtype=torch.bfloat16)
w, b = torch.rand(65536, device="cuda", dtype=torch.bfloat16), torch.rand(65536, device="cuda", dtype=torch.bfloat16)
x2 = torch.randn(4096, 32768, device="cuda", dtype=torch.bfloat16)
w2, b2 = w[:32768].clone(), b[:32768].clone()
y = torch.empty_like(x)
for _ in range(3):
    launch.layer_norm_forward(x, w, b, 1e-5)  # the looped kernel
    launch.layer_norm_forward(x2, w2, b2, 1e-5)  # the fused kernel, 64 KB rows
    y.copy_(x)  # a copy of the same size
torch.cuda.synchronize()
