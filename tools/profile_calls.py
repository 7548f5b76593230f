"""Where does a layer_norm call spend its time? Host overhead per call and GPU time per kernel.

    python tools/profile_calls.py
Host µs/call: wall time of 200 back-to-back calls without synchronizing, divided by 200
(when it exceeds the GPU time, the GPU waits for Python). Kernel µs: torch.profiler.
"""

import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from ln_tutorial import layer_norm

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
