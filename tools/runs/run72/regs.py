"""Registers and spills of the split backward's compiled variants (bfloat16, 4096 x 32768)."""
import torch

from ln_tutorial import launch

m, n = 4096, 32768
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
w, b, dy = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype), torch.randn_like(x)
_, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
for step, block_m, warps in [(2048, 1, 4), (2048, 1, 8), (4096, 1, 4), (4096, 1, 8), (4096, 2, 8), (8192, 1, 16)]:
    cfg = launch.BackwardConfig(False, block_m, step, warps, 1, split=True)
    launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg)
    plan = launch._backward_plan(m, n, x.dtype, 0, "deterministic", cfg, True, True)
    kernel = next(iter(plan.main.compiled.values()))[5]
    print(f"step {step} block_m {block_m} warps {warps}: {kernel.n_regs} registers, {kernel.n_spills} spills", flush=True)
