"""Run 126: kernel durations (CUPTI, L2 flushed) of (2 rows, 8 warps) and (1 row, 4 warps) at 4 KB rows,
five interleaved rounds.

    PYTHONPATH=$PWD:/tmp/peer python tools/runs/run126/many_rows.py
"""

import runpy
import statistics
from pathlib import Path

import torch

from ln_tutorial import launch

kernel_us = runpy.run_path(str(Path(__file__).parents[1] / "run124" / "kernel_times.py"), run_name="lib")["kernel_us"]
SHAPES = [(16384, 2048, torch.bfloat16), (32768, 2048, torch.bfloat16), (16384, 1536, torch.float16),
          (16384, 1024, torch.float32), (4096, 1536, torch.float16)]  # fmt: skip
CONFIGS = [(2, 8), (1, 4)]
readings = {}
inputs = {}
for m, n, dtype in SHAPES:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
    inputs[(m, n, dtype)] = (x, torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype))
for rnd in range(5):
    for (m, n, dtype), (x, w, b) in inputs.items():
        table = launch.forward_config(n, x.element_size())
        for rows, warps in CONFIGS:
            cfg = table._replace(block_m=rows, num_warps=warps)
            us = kernel_us(lambda cfg=cfg: launch.layer_norm_forward(x, w, b, 1e-5, cfg))[0]
            readings.setdefault((m, n, str(dtype)[6:], rows, warps), []).append(us)
for (m, n, dtype, rows, warps), r in readings.items():
    base = statistics.median(readings[(m, n, dtype, *CONFIGS[0])])
    print(f"{m}x{n} {dtype:8s} ({rows}, {warps}): median {statistics.median(r):6.2f} us "
          f"({100 * (statistics.median(r) / base - 1):+.1f} % against (2, 8)); rounds {' '.join(f'{v:.2f}' for v in r)}")
