"""Run 51: why is the forward slow at some small N in the benchmark, and Liger's not?

In the recorded sweeps the forward at M = 4096, N = 1024, 1536, 2048 and 3072
often reads 300-900 GB/s while N = 2560 and 3584 read ~2000, and Liger-Kernel
(a Triton kernel behind a Python autograd.Function as well, launched through
Triton's slower generic path) reads 1600-2400 at the same points. The host
timeline of run 50 puts our whole forward call at 58 us, under the 90 us flush:
the GPU, not the host, should decide. So something differs between the timeline
(GPU synchronized before each call) and do_bench's loop (no synchronization).

This times do_bench's loop by hand: per iteration the flush, a start event, the
call, an end event; it reports the GPU time between the events (median) and the
host time per iteration (wall time of the loop / iterations). Variants: ours as
the benchmark calls it, ours with the garbage collector off, ours with
parameters that do not require grad, the launcher alone, Liger, torch.
Prediction: host time per iteration for ours ~75 us, under the ~96 us of GPU
time, so the event times should be the kernel's (~6-10 us) unless the host
time differs inside this loop from the timeline's.
"""

import gc
import statistics
import time

import torch
import torch.nn.functional as F
from liger_kernel.ops.layer_norm import LigerLayerNormFunction

from ln_tutorial import launch, layer_norm


def loop(fn, iters=600):
    cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    for _ in range(50):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for i in range(iters):
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    host = (time.perf_counter() - begin) / iters * 1e6
    torch.cuda.synchronize()
    gpu = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3
    return host, gpu


torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for round_ in range(2):
    for n in (1024, 2048, 2560, 3072):
        m = 4096
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.float16)
        w = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
        b = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
        wd, bd = w.detach(), b.detach()

        def ours_gc_off():
            gc.disable()
            try:
                return layer_norm(x, (n,), w, b)
            finally:
                gc.enable()

        variants = {
            "ours": lambda: layer_norm(x, (n,), w, b),
            "ours, gc off": ours_gc_off,
            "ours, params without grad": lambda: layer_norm(x, (n,), wd, bd),
            "launcher alone": lambda: launch.layer_norm_forward(x, wd, bd, 1e-5),
            "liger": lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5),
            "torch": lambda: F.layer_norm(x, (n,), w, b),
        }
        moved = 2 * m * n * 2
        for name, fn in variants.items():
            host, gpu = loop(fn)
            print(f"round {round_} N={n:5d} {name:<26} host {host:6.1f} us/iter, events {gpu:6.1f} us "
                  f"= {moved / (gpu * 1e-6) / 1e9:6.0f} GB/s", flush=True)
