"""Run 46: host time of each step of a small forward, on the H100 machine's host.

Prediction: run 40's timeline puts the forward's first launch 91 us after the
call (torch's whole forward: 27 us) and Triton's compiled launcher at 19 us.
Given a tensor, that launcher calls its data_ptr method and asks the driver
whether the address is device memory (cuPointerGetAttribute), for each of the
six tensors; given the address as an int it does neither. Passing addresses
should take a few microseconds off each launch (prediction: 19 -> 12-15 us).
The rest of the list says where the other 70 us go.

Each item: host time per call, median over 20 blocks of 200 calls (the GPU is
synchronized between blocks; a 4096 x 1024 kernel takes 5 us of GPU time, less
than any call's host time, so the launch queue never fills).
"""

import inspect
import statistics
import time

import torch
import torch.nn.functional as F
import triton

from ln_tutorial import function, launch, layer_norm

torch.manual_seed(0)
m, n = 4096, 1024
x = torch.randn(m, n, device="cuda", dtype=torch.float16)
xg = x.clone().requires_grad_()
w = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
b = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
wd, bd = w.detach(), b.detach()


def per_call(fn, blocks=20, calls=200):
    times = []
    for _ in range(blocks):
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter_ns() - start) / calls / 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class FiveInputs(torch.autograd.Function):
    """The shape of LayerNormFunction without the kernel: five inputs, five saved tensors."""

    @staticmethod
    def forward(ctx, x, w, b, eps, strategy):
        ctx.save_for_backward(x, w, b, stats, stats)
        ctx.strategy = strategy
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None


y, mean, rstd = launch.layer_norm_forward(x, wd, bd, 1e-5)
stats = mean
cfg = launch.forward_config(n, 2)
kernel = launch._forward_launcher(cfg, x.dtype)
args = (x, y, wd, bd, mean, rstd, x.stride(0), y.stride(0), m, n, *launch._split_eps(1e-5))
grid = (launch.cdiv(m, cfg.block_m),)
(run, fn, packed, constexprs) = next(iter(kernel.compiled.values()))
spec, values = launch._launch_arguments(args)
stream = torch._C._cuda_getCurrentRawStream(0)


def run_with(arguments):
    return lambda: run(grid[0], 1, 1, stream, fn, packed, None, None, None, *arguments, *constexprs)


print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
print("compiled launcher:", type(run).__module__, type(run).__qualname__)
try:
    print(inspect.getsource(type(run).__call__))
except (TypeError, OSError) as error:
    print("no Python source for the launcher's __call__:", error)
items = {
    "F.layer_norm, grad enabled": lambda: F.layer_norm(xg, (n,), w, b),
    "layer_norm, grad enabled": lambda: layer_norm(xg, (n,), w, b),
    "layer_norm, no_grad inputs": lambda: layer_norm(x, (n,), wd, bd),
    "launch.layer_norm_forward": lambda: launch.layer_norm_forward(x, wd, bd, 1e-5),
    "Launcher.__call__ (addresses)": lambda: kernel(grid, *args),
    "compiled run, tensors": run_with(args),
    "compiled run, addresses": run_with(values),
    "_launch_arguments": lambda: launch._launch_arguments(args),
    "check_inputs": lambda: launch.check_inputs(xg, (n,), w, b),
    "_as_rows + 2 _flat_param": lambda: (function._as_rows(xg, n), function._flat_param(w), function._flat_param(b)),
    "is_compiling + is_autocast_enabled": lambda: (torch.compiler.is_compiling(), torch.is_autocast_enabled("cuda")),
    "Identity.apply (grad)": lambda: Identity.apply(xg),
    "FiveInputs.apply (grad)": lambda: FiveInputs.apply(xg, w, b, 1e-5, "deterministic"),
    "x.new_empty((m, n))": lambda: x.new_empty((m, n)),
    "x.new_empty((m,), float32)": lambda: x.new_empty((m,), dtype=torch.float32),
    "torch.empty((m, n), dtype, device)": lambda: torch.empty((m, n), dtype=x.dtype, device=x.device),
    "torch.empty_like(x)": lambda: torch.empty_like(x),
    "x.new_empty((2, m), float32)": lambda: x.new_empty((2, m), dtype=torch.float32),
    "stats.unbind(0) of (2, m)": lambda: torch.empty(2, m, device="cuda").unbind(0),
    "forward_config + _forward_launcher + _split_eps": lambda: (
        launch.forward_config(n, 2), launch._forward_launcher(cfg, x.dtype), launch._split_eps(1e-5)),
    "_hooks_installed": launch._hooks_installed,
    "get_device + _cuda_getDevice + raw stream": lambda: (
        x.get_device(), torch._C._cuda_getDevice(), torch._C._cuda_getCurrentRawStream(0)),
    "x.shape + x.stride(0) + element_size": lambda: (x.shape, x.stride(0), x.element_size()),
}  # fmt: skip
for label, call in items.items():
    call()
for round_ in range(2):
    for label, call in items.items():
        print(f"round {round_}: {per_call(call):7.2f} us  {label}", flush=True)
