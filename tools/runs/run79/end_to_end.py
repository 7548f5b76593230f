"""Run 79: the benchmark's backward timing (float16, M = 4096) with the package's configuration or, with
``split``, the split backward for every row length given.

    python tools/runs/run79/end_to_end.py default|split
"""

import sys

import torch

from ln_tutorial import bench, launch

SIZES = (12288, 12800, 13312, 14336, 15360, 15872)
if sys.argv[1] == "split":
    package_config = launch.backward_config
    launch.backward_config = lambda n, size: launch.BACKWARD_SPLIT if n in SIZES[1:] else package_config(n, size)
ours = bench.available_providers(["ln_tutorial"])["ln_tutorial"]
cells = [f"{n} {bench.time_provider(ours, 'backward', 4096, n, torch.float16)[1]:.0f}" for n in SIZES]
print(f"{sys.argv[1]:<8}", "  ".join(cells), flush=True)
