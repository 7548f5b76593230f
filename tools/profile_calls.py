"""Where does a layer_norm call spend its time? Host overhead per call and GPU time per kernel.

    python tools/profile_calls.py
Host µs/call: wall time of 200 back-to-back calls without synchronizing, divided by 200
(when it exceeds the GPU time, the GPU waits for Python). Kernel µs: torch.profiler.
"""

import time

import torch
import triton
import triton.language as tl
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from ln_tutorial import kernels, launch, layer_norm

SHAPES = [(4096, 1024, torch.float16), (4096, 4096, torch.float16), (16384, 4096, torch.bfloat16),
          (2048, 65536, torch.bfloat16)]  # fmt: skip


def host_us(fn, calls=200):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def kernel_table(fn):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        if evt.device_time_total > 0:
            rows.append(f"    {evt.key[:60]:<60} {evt.device_time_total / evt.count:8.1f} us x{evt.count // 10}")
    return "\n".join(rows)


def launch_breakdown(m=4096, n=1024, dtype=torch.float16):
    """Host µs of the layers of one forward call, from the bare Triton launch up."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
    y, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    cfg = launch.forward_config(n, x.element_size())
    bare = lambda: kernels.layer_norm_fwd_kernel[(triton.cdiv(m, cfg.block_m),)](
        x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, 1e-5, 0.0,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, COMPUTE=tl.float32, num_warps=cfg.num_warps)  # fmt: skip
    for name, fn in (
        ("bare triton launch", bare),
        ("launch.layer_norm_forward", lambda: launch.layer_norm_forward(x, w, b, 1e-5)),
        ("layer_norm (no grad)", lambda: layer_norm(x, (n,), w, b)),
        ("torch.empty x3", lambda: (torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda"))),
        ("F.layer_norm", lambda: F.layer_norm(x, (n,), w, b)),
    ):
        print(f"  host {name:<28} {host_us(fn):7.1f} us/call")


print(f"triton {triton.__version__}, torch {torch.__version__}")
launch_breakdown()
for m, n, dtype in SHAPES:
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    for name, ln in (("ln_tutorial", lambda: layer_norm(x, (n,), w, b)), ("torch", lambda: F.layer_norm(x, (n,), w, b))):
        y = ln()

        def backward():
            x.grad = w.grad = b.grad = None
            y.backward(dy, retain_graph=True)

        print(f"{name} {m}x{n} {str(dtype)[6:]}: host fwd {host_us(ln):.1f} us/call, host bwd {host_us(backward):.1f} us/call")
        print("  forward kernels:\n" + kernel_table(ln))
        print("  backward kernels:\n" + kernel_table(backward))
