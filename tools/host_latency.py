"""Why small layer norms time slowly: host latency inside the benchmark's own loop.

``triton.testing.do_bench`` flushes L2 (a 256 MB memset) before every timed call. The
GPU is busy with that memset while Python prepares the call; the timed interval only
grows when our first launch reaches the GPU after the memset has finished. This tool
replays do_bench's loop with host timestamps, for each provider:

    python tools/host_latency.py [old_package_dir]

``old_package_dir`` (optional) holds a copy of the package as ``ln_tutorial_old``, to
compare two versions of the host path in one lease.

Host cost of single steps: tools/host_timeline.py. (Up to run 26 this file also
timed single steps in loops of 2000 calls without synchronizing; those of
``cache.zero_()`` and ``Event.record()`` measured a full launch queue, not host time.)
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from ln_tutorial import layer_norm

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
