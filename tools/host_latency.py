"""Why small layer norms time slowly: host latency inside the benchmark's own loop.

``triton.testing.do_bench`` flushes L2 (a 256 MB memset) before every timed call. The
GPU is busy with that memset while Python prepares the call; the timed interval only
grows when our first launch reaches the GPU after the memset has finished. This tool
replays do_bench's loop with host timestamps, for each provider:

    python tools/host_latency.py [old_package_dir]

``old_package_dir`` (optional) holds a copy of the package as ``ln_tutorial_old``, to
compare two versions of the host path in one lease.
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from ln_tutorial import launch, layer_norm

SHAPES = [(4096, 1024), (4096, 2048), (4096, 4096), (4096, 8192)]
providers = {
    "ln_tutorial": lambda x, w, b: layer_norm(x, (x.shape[-1],), w, b),
    "torch": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
}
if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
    import ln_tutorial_old

    providers["ln_tutorial-old"] = lambda x, w, b: ln_tutorial_old.layer_norm(x, (x.shape[-1],), w, b)
try:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    providers["liger"] = lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)
except ImportError:
    pass

cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")


def replay(fn, grads, reps=300):
    """do_bench's timed loop, with host timestamps: medians in us."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    host_call, host_iter = [], []
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    last = time.perf_counter()
    for start, end in events:
        for t in grads:
            t.grad = None
        cache.zero_()
        start.record()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        end.record()
        host_call.append(t2 - t1)
        host_iter.append(t2 - last)
        last = t2
    torch.cuda.synchronize()
    gpu = [s.elapsed_time(e) * 1e3 for s, e in events]
    return statistics.median(gpu), statistics.median(host_call) * 1e6, statistics.median(host_iter) * 1e6


start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
flush = []
for _ in range(50):
    start.record()
    cache.zero_()
    end.record()
    torch.cuda.synchronize()
    flush.append(start.elapsed_time(end) * 1e3)
print(f"L2 flush (256 MB memset): {statistics.median(flush):.1f} us of GPU time")

for m, n in SHAPES:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.float16)
    w = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
    b = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
    dy = 0.1 * torch.randn_like(x)
    for name, ln in providers.items():
        xg = x.clone().requires_grad_()
        y = ln(xg, w, b)
        cases = {"forward": (lambda: ln(x, w, b), []),
                 "backward": (lambda: y.backward(dy, retain_graph=True), [xg, w, b])}  # fmt: skip
        for mode, (fn, grads) in cases.items():
            gpu, call, it = replay(fn, grads)
            q = do_bench(fn, warmup=100, quantiles=[0.5], grad_to_none=grads or None)
            q = q[0] if isinstance(q, list) else q
            moved = (2 if mode == "forward" else 3) * m * n * 2
            print(f"{m}x{n} {mode:<8} {name:<16} timed {gpu:7.1f} us (do_bench {q * 1e3:7.1f} us, "
                  f"{moved / (q * 1e-3) / 1e9:6.0f} GB/s)  host: call {call:6.1f} us, iteration {it:6.1f} us",
                  flush=True)  # fmt: skip


def per_call_us(fn, calls=2000):
    fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


x = torch.randn(4096, 1024, device="cuda", dtype=torch.float16)
w = torch.rand(1024, device="cuda", dtype=torch.float16)
y, mean, rstd = launch.layer_norm_forward(x, w, w, 1e-5)
cfg = launch.forward_config(1024, 2)
fwd_args = (x, y, w, w, mean, rstd, x.stride(0), y.stride(0), 4096, 1024, 1e-5, 0.0)
fwd_meta = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, COMPUTE=launch.tl.float32, num_warps=cfg.num_warps)
launch._launch(launch.kernels.layer_norm_fwd_kernel, (1024,), *fwd_args, **fwd_meta)
entry = next(v for k, v in launch._compiled_kernels.items() if k[0] is launch.kernels.layer_norm_fwd_kernel)
run, function, packed, constexprs = entry
stream = torch._C._cuda_getCurrentRawStream(0)
print(f"direct launches cached: {len(launch._compiled_kernels)}; hooks installed: {launch._hooks_installed()}")
print("host cost of single steps (us per call):")
for name, fn in {
    "torch.empty(shape, dtype=, device=)": lambda: torch.empty((4096, 1024), dtype=x.dtype, device=x.device),
    "x.new_empty(shape)": lambda: x.new_empty((4096, 1024)),
    "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
    "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
    "torch.cuda.current_device()": torch.cuda.current_device,
    "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
    "launch.check_inputs": lambda: launch.check_inputs(x, (1024,), w, w),
    "launch.layer_norm_forward": lambda: launch.layer_norm_forward(x, w, w, 1e-5),
    "layer_norm, no grad": lambda: layer_norm(x, (1024,), w, w),
    "F.layer_norm": lambda: F.layer_norm(x, (1024,), w, w),
    "launch._launch (forward kernel)": lambda: launch._launch(
        launch.kernels.layer_norm_fwd_kernel, (1024,), *fwd_args, **fwd_meta
    ),
    "compiled.run, arguments prebuilt": lambda: run(
        1024, 1, 1, stream, function, packed, None, None, None, *fwd_args, *constexprs
    ),
    "_specialization(args)": lambda: launch._specialization(fwd_args),
    "torch.is_grad_enabled()": torch.is_grad_enabled,
    "cache.zero_()": cache.zero_,
    "Event.record()": start.record,
}.items():
    print(f"  {name:<42} {per_call_us(fn):7.2f}")


class Identity(torch.autograd.Function):
    """The cheapest possible Python autograd node: what the engine alone costs."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


print("host cost of a backward (us per call), 4096 x 1024 float16:")
xg = x.clone().requires_grad_()
wg, bg = w.clone().requires_grad_(), w.clone().requires_grad_()
dy = torch.randn_like(x)
y_ours, y_torch, y_identity = layer_norm(xg, (1024,), wg, bg), F.layer_norm(xg, (1024,), wg, bg), Identity.apply(xg)
_, mean, rstd = launch.layer_norm_forward(x, w, w, 1e-5)
params = (xg, wg, bg)


def backward_of(y):
    def run():
        for t in params:
            t.grad = None
        y.backward(dy, retain_graph=True)

    return run


for name, fn in {
    "grads to None only": lambda: [setattr(t, "grad", None) for t in params],
    "y.backward, identity Function": backward_of(y_identity),
    "y.backward, torch": backward_of(y_torch),
    "y.backward, ln_tutorial": backward_of(y_ours),
    "launch.layer_norm_backward": lambda: launch.layer_norm_backward(dy, x, w, w, mean, rstd),
    "launch._backward_grid": lambda: launch._backward_grid(4096, 1024, x.device, launch.backward_config(1024, 2), "deterministic"),
    "y_ours.grad_fn.saved_tensors": lambda: y_ours.grad_fn.saved_tensors,
}.items():
    print(f"  {name:<42} {per_call_us(fn, 500):7.2f}")

