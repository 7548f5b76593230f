"""Run 113: where the slow repetitions of the sweep's large forward points come from (see PREDICTION.md).

    python tools/runs/run113/spikes.py OUT_DIR

At 4096 x N (float16, N = 12800 ... 15872) each provider's forward is timed as
``triton.testing.do_bench`` times it (L2 flushed, CUDA events around the call),
every repetition kept, twice: as is ("plain"), and with a 300 µs spin kernel
queued after the flush and before the start event ("ahead"), so that the host
has enqueued the call long before the GPU reaches it. Slow repetitions that
remain with the spin kernel are the GPU's; those that vanish were the host's.
nvidia-smi samples clocks, power and throttle reasons every 50 ms meanwhile.
"""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from triton import runtime

from ln_tutorial import bench

out = Path(sys.argv[1])
smi = subprocess.Popen(
    ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active",
     "--format=csv", "-lms", "50"], stdout=(out / "smi.csv").open("w"), stderr=subprocess.DEVNULL,
)  # fmt: skip
providers = bench.available_providers(["ln_tutorial", "torch", "torch.compile"])
cache = runtime.driver.active.get_empty_cache_for_benchmark()
spin_cycles = 600_000  # about 300 µs at 1.98 GHz


def times(fn, ahead, reps=600):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        runtime.driver.active.clear_cache(cache)
        if ahead:
            torch.cuda._sleep(spin_cycles)
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]  # µs


results = []
for n in (12800, 13312, 13824, 14336, 14848, 15360, 15872):
    x = -2.3 + 0.5 * torch.randn(4096, n, device="cuda", dtype=torch.float16)
    w = torch.rand(n, device="cuda", dtype=x.dtype, requires_grad=True)
    b = torch.rand(n, device="cuda", dtype=x.dtype, requires_grad=True)
    for name, provider in providers.items():
        for ahead in (False, True):
            t0 = time.time()
            t = times(lambda: provider(x, w, b), ahead)
            fast = min(t)
            q = statistics.quantiles(t, n=10)
            results.append(dict(N=n, provider=name, ahead=ahead, start=t0, end=time.time(), times_us=t))
            print(f"4096x{n} {name:<14} {'ahead' if ahead else 'plain':<5}: min {fast:6.1f} µs, p20 {q[1]:6.1f}, "
                  f"p50 {statistics.median(t):6.1f}, p80 {q[7]:6.1f}, max {max(t):7.1f}; "
                  f"over 1.3x min: {sum(v > 1.3 * fast for v in t)}/{len(t)}", flush=True)
smi.terminate()
(out / "spikes.json").write_text(json.dumps(results))
