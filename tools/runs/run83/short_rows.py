"""Run 83: short-row forward configurations timed five times each, interleaved, at the launcher.

    python tools/runs/run83/short_rows.py
"""

import statistics

import torch
from triton.testing import do_bench

from ln_tutorial import bench, launch
from ln_tutorial.launch import ForwardConfig

CASES = {
    (4096, 1024, torch.float16): [(8, 4), (2, 4), (1, 4)],
    (4096, 1536, torch.float16): [(2, 8), (1, 4), (1, 8)],
    (4096, 2048, torch.float16): [(2, 8), (1, 4), (1, 8)],
    (4096, 2560, torch.float16): [(2, 8), (1, 8)],
    (4096, 3072, torch.float16): [(2, 8), (1, 8)],
    (4096, 3584, torch.float16): [(2, 8), (1, 8)],
    (4096, 4096, torch.float16): [(2, 16), (1, 8)],
    (16384, 4096, torch.bfloat16): [(2, 16), (1, 8)],
}
print(f"copy {bench.copy_bandwidth():.0f} GB/s", flush=True)
for (m, n, dtype), configs in CASES.items():
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
    w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
    moved = 2 * x.numel() * x.element_size()
    cfgs = [ForwardConfig(False, block_m, launch.next_power_of_2(n), warps) for block_m, warps in configs]
    readings = {c: [] for c in cfgs}
    for c in cfgs:
        do_bench(lambda c=c: launch.layer_norm_forward(x, w, b, 1e-5, c), warmup=100, rep=20)
    for _ in range(5):
        for c in cfgs:
            ms = do_bench(lambda c=c: launch.layer_norm_forward(x, w, b, 1e-5, c), warmup=10, rep=100)
            readings[c].append(moved / (ms * 1e-3) / 1e9)
    default = launch.forward_config(n, x.element_size())
    for c, r in readings.items():
        tag = "table" if c == default else "     "
        print(f"{m}x{n} {str(dtype)[6:]} {tag} (rows {c.block_m}, warps {c.num_warps}): median {statistics.median(r):.0f} "
              f"GB/s, readings {' '.join(f'{v:.0f}' for v in r)}", flush=True)  # fmt: skip
