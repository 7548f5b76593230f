"""Run 128: the benchmark's own timing of ours and Liger-Kernel's forward, before and after
torch.compile's provider has run in the process.

    PYTHONPATH=$PWD:/tmp/peer python tools/runs/run128/order.py
"""

import torch

from ln_tutorial import bench

providers = bench.available_providers(["ln_tutorial", "liger", "torch.compile"])


def rounds(label, n):
    for rnd in range(3):
        line = []
        for name in ("ln_tutorial", "liger"):
            p20, p50, p80 = bench.time_provider(providers[name], "forward", 4096, n, torch.float16)
            line.append(f"{name} {p50:5.0f} (p20 {p20:.0f}, p80 {p80:.0f})")
        print(f"{label:26s} 4096x{n} round {rnd}: " + "  ".join(line), flush=True)


for n in (2560, 3072):
    rounds("before torch.compile", n)
for n in (2560, 3072):
    p50 = bench.time_provider(providers["torch.compile"], "forward", 4096, n, torch.float16)[1]
    print(f"torch.compile 4096x{n}: {p50:.0f}", flush=True)
    rounds("after torch.compile", n)
