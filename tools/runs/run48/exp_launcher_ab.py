"""Run 48: the launcher before and after 00b4a6f (tensors passed as addresses), alternating.

Run 46 measured Triton's compiled launcher alone: 6.5 us per call given
tensors, 5.4 us given addresses. The new launcher also builds the list of
addresses (a second comprehension). Prediction: the whole Launcher.__call__
gains 0.5-1 us per launch. "before" is the old __call__: the key from the
same specialization, the tensors passed as they are.
"""

import statistics
import time

import torch

from ln_tutorial import launch


class Before(launch.Launcher):
    def __call__(self, grid, *args):
        device = args[0].get_device()
        key = (device, *launch._launch_arguments(args)[0])  # the same key as before 00b4a6f
        run, function, packed_metadata, constexprs = self.compiled[key]
        run(
            grid[0], grid[1] if len(grid) > 1 else 1, 1, torch._C._cuda_getCurrentRawStream(device), function,
            packed_metadata, None, None, None, *args, *constexprs,
        )  # fmt: skip


def before_specialization(args):
    """The key comprehension of the launcher before 00b4a6f (data_ptr read once, no address list)."""
    return [
        (a % 16 == 0, a < 2**31) if a.__class__ is int and a > 1
        else a if a is None or a.__class__ is int or a.__class__ is float
        else (a.dtype, a.data_ptr() % 16 == 0)
        for a in args
    ]  # fmt: skip


def per_call(fn, calls=200):
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


torch.manual_seed(0)
m, n = 4096, 1024
x = torch.randn(m, n, device="cuda", dtype=torch.float16)
w, b = torch.rand(n, device="cuda", dtype=torch.float16), torch.rand(n, device="cuda", dtype=torch.float16)
dy = torch.randn_like(x)
y, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
launch.layer_norm_backward(dy, x, w, b, mean, rstd)
cfg = launch.forward_config(n, 2)
fwd = launch._forward_launcher(cfg, x.dtype)
fwd_args = (x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, *launch._split_eps(1e-5))
plan = launch._backward_plan(m, n, x.dtype, 0, "deterministic", launch.backward_config(n, 2), True, True)
dx = torch.empty_like(x)
partial = torch.empty((2, plan.programs, n), device="cuda")
grads = torch.empty_like(w), torch.empty_like(b)
barrier = launch._grid_barrier(0, torch._C._cuda_getCurrentRawStream(0))
bwd_args = (dy, x, w, mean, rstd, dx, partial, *grads, barrier, n, n, n, m, n, plan.rows_per_program)
cases = {
    "forward kernel (12 arguments)": (fwd, (launch.cdiv(m, cfg.block_m),), fwd_args),
    "one-launch backward (16 arguments)": (plan.main, (plan.programs,), bwd_args),
}
print(torch.cuda.get_device_name(), torch.__version__)
for label, (launcher, grid, args) in cases.items():
    before = Before(launcher.kernel, launcher.meta)
    before.compiled = launcher.compiled
    out = {"before": [], "after": [], "key before": [], "key and addresses after": []}
    for _ in range(40):
        out["before"].append(per_call(lambda: before(grid, *args)))
        out["after"].append(per_call(lambda: launcher(grid, *args)))
        out["key before"].append(per_call(lambda: before_specialization(args)))
        out["key and addresses after"].append(per_call(lambda: launch._launch_arguments(args)))
    print(label + ": " + ", ".join(f"{k} {statistics.median(v):.2f} us" for k, v in out.items()), flush=True)
