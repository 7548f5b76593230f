"""Run 40: host time of a cooperative launch against a plain one (the open question of run 39).

Prediction: if the driver checks that a cooperative grid fits on every launch,
the one-launch backward's launch costs a few microseconds more of host time.
Measured: the same compiled one-launch backward kernel, launched through the
package's Launcher with and without launch_cooperative_grid, 2000 launches each
(alternating in blocks of 100), host wall time per launch; a 4096 x 1024 float16
input keeps each kernel short, so the GPU keeps up with the queue.
"""

import time

import torch

from ln_tutorial import kernels, launch

torch.manual_seed(0)
m, n = 4096, 1024
x = torch.randn(m, n, device="cuda", dtype=torch.float16)
dy = torch.randn_like(x)
w, b = torch.randn(n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16)
_, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
cfg = launch.backward_config(n, 2)
plan = launch._backward_plan(m, n, x.dtype, 0, "deterministic", cfg, True, True)
meta = dict(plan.main.meta)
launchers = {
    "cooperative": plan.main,
    "plain": launch._launcher(kernels.layer_norm_bwd_one_launch_kernel, **{**meta, "launch_cooperative_grid": False}),
}
dx = torch.empty_like(x)
partial = torch.empty((2, plan.programs, n), device="cuda")
grads = torch.empty_like(w), torch.empty_like(b)
barrier = launch._grid_barrier(0, torch._C._cuda_getCurrentRawStream(0))
args = (dy, x, w, mean, rstd, dx, partial, *grads, barrier, n, n, n, m, n, plan.rows_per_program)
per_launch = {name: [] for name in launchers}
for name, launcher in launchers.items():
    launcher((plan.programs,), *args)  # compile
torch.cuda.synchronize()
for block in range(40):
    for name, launcher in launchers.items():
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(50):
            launcher((plan.programs,), *args)
        per_launch[name].append((time.perf_counter() - start) / 50 * 1e6)
        torch.cuda.synchronize()
print(torch.cuda.get_device_name(), torch.__version__, "grid", plan.programs, "meta", {k: v for k, v in meta.items() if k != "COMPUTE"})
for name, times in per_launch.items():
    q = torch.tensor(times).quantile(torch.tensor([0.2, 0.5, 0.8])).tolist()
    print(f"{name}: host us per launch p20 {q[0]:.1f} p50 {q[1]:.1f} p80 {q[2]:.1f}")
