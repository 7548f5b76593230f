"""Run 111: the package after the prefetch_rows refactor, at the shapes whose kernels it touches (a check, no variants).

    python tools/runs/run111/same_speed.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import backward_config, forward_config  # noqa: E402

if __name__ == "__main__":
    for mode, m, n, dtype in [("forward", 16384, 4096, torch.bfloat16), ("forward", 4096, 4096, torch.float16),
                              ("backward", 8192, 16384, torch.bfloat16), ("backward", 2048, 65536, torch.bfloat16)]:
        config = (forward_config if mode == "forward" else backward_config)(n, dtype.itemsize)
        time_cases([(mode, m, n, [config])], {"package": kernels}, dtype=dtype)
