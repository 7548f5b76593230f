"""Where a layer_norm call spends its time: host µs per call (ours, torch, and the layers of our
forward from the bare Triton launch up) and device time per kernel (torch.profiler).

    python tools/profile_calls.py
Host µs/call: the wall time of back-to-back calls without synchronising, divided by their number;
when it exceeds the GPU time, the GPU waits for Python. On a CPU (TRITON_INTERPRET=1, tiny shapes)
the same report runs with CPU times, to check the tool.
"""

import argparse
import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton compiles any kernel

import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from ln_tutorial import dispatch, host, layer_norm  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SHAPES = "float16:4096x1024,float16:4096x4096,bfloat16:16384x4096,bfloat16:2048x65536"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def host_us(fn, calls):
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    sync()
    return host


def kernel_table(fn, calls):
    """Device time per call of each kernel (CPU time per operator on a CPU)."""
    fn()
    sync()
    activity = ProfilerActivity.CUDA if DEVICE == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(calls):
            fn()
        sync()
    rows = []
    for evt in prof.key_averages():
        total = evt.device_time_total if DEVICE == "cuda" else evt.self_cpu_time_total
        if total > 0:
            rows.append(f"    {evt.key[:60]:<60} {total / evt.count:8.1f} us x{max(evt.count // calls, 1)}")
    return "\n".join(rows)


def launch_breakdown(m, n, dtype, calls):
    """Host µs of the layers of one forward call, from the bare Triton launch up."""
    x = torch.randn(m, n, device=DEVICE, dtype=dtype)
    w, b = torch.randn(n, device=DEVICE, dtype=dtype), torch.randn(n, device=DEVICE, dtype=dtype)
    y, mean, rstd = dispatch.layer_norm_forward(x, w, b, 1e-5)
    cfg = dispatch.forward_config(n, x.element_size())
    # Triton's own launch of the kernel the package picks (rows of one tile: the looped kernel takes other arguments).
    kernel = dispatch.forward_call(cfg, x.dtype, n)
    named = host.forward_arguments(x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, 1e-5)
    args = [named[name] for name in kernel.names]
    bare = lambda: kernel.kernel[(triton.cdiv(m, cfg.block_m),)](*args, **dict(kernel.meta))  # noqa: E731
    for name, fn in (
        *([] if cfg.looped else [("bare triton launch", bare)]),
        ("dispatch.layer_norm_forward", lambda: dispatch.layer_norm_forward(x, w, b, 1e-5)),
        ("layer_norm (no grad)", lambda: layer_norm(x, (n,), w, b)),
        ("torch.empty x3", lambda: (torch.empty_like(x), torch.empty(m, device=DEVICE), torch.empty(m, device=DEVICE))),
        ("F.layer_norm", lambda: F.layer_norm(x, (n,), w, b)),
    ):
        print(f"  host {name:<28} {host_us(fn, calls):7.1f} us/call")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("--shapes", default=SHAPES, help="dtype:MxN, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="calls per host timing")
    args = parser.parse_args(argv)
    shapes = []
    for item in args.shapes.split(","):
        name, shape = item.split(":")
        shapes.append((*map(int, shape.split("x")), getattr(torch, name)))
    print(f"triton {triton.__version__}, torch {torch.__version__}, {DEVICE}")
    launch_breakdown(*shapes[0], args.calls)
    for m, n, dtype in shapes:
        x = torch.randn(m, n, device=DEVICE, dtype=dtype, requires_grad=True)
        w = torch.randn(n, device=DEVICE, dtype=dtype, requires_grad=True)
        b = torch.randn(n, device=DEVICE, dtype=dtype, requires_grad=True)
        dy = torch.randn_like(x)
        for name, ln in (("ln_tutorial", lambda: layer_norm(x, (n,), w, b)),
                         ("torch", lambda: F.layer_norm(x, (n,), w, b))):  # fmt: skip
            y = ln()

            def backward():
                torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)

            print(f"{name} {m}x{n} {str(dtype)[6:]}: host fwd {host_us(ln, args.calls):.1f} us/call, "
                  f"host bwd {host_us(backward, args.calls):.1f} us/call")  # fmt: skip
            print("  forward kernels:\n" + kernel_table(ln, min(args.calls, 10)))
            print("  backward kernels:\n" + kernel_table(backward, min(args.calls, 10)))


if __name__ == "__main__":
    main()
