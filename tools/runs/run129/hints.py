"""Run 129: cache hints in the split backward, three rounds at the launcher.

    PYTHONPATH=$PWD python tools/runs/run129/hints.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import bench, kernels, launch  # noqa: E402

DX_STORE = "tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)"
X_LOAD = "x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)\n    dy = tl.load(DY"
DY_LOAD = "dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0)\n    return x, dy"


def store_hint(hint):
    return [(DX_STORE, DX_STORE[:-1] + f", {hint})")]


LOADS_FIRST = [
    (X_LOAD, X_LOAD.replace("other=0.0)", 'other=0.0, eviction_policy="evict_first")')),
    (DY_LOAD, DY_LOAD.replace("other=0.0)", 'other=0.0, eviction_policy="evict_first")')),
]
VARIANTS = {
    "dx_evict_first": variant("dx_evict_first", store_hint('eviction_policy="evict_first"')),
    "dx_cs": variant("dx_cs", store_hint('cache_modifier=".cs"')),
    "loads_first": variant("loads_first", LOADS_FIRST),
    "dx_cs_loads_first": variant("dx_cs_loads_first", store_hint('cache_modifier=".cs"') + LOADS_FIRST),
}
CASES = [("backward", m, n, [launch.backward_config(n, 2)]) for m, n in ((4096, 32768), (2048, 65536), (8192, 16384))]
print(f"copy {bench.copy_bandwidth():.0f} GB/s", flush=True)
for rnd in range(3):
    print(f"round {rnd}", flush=True)
    time_cases(CASES, {"package": kernels, **VARIANTS}, torch.bfloat16)
