"""Run 103: the backward at the sweep sizes that fell in run 102, with and without one-reduction row sums.

    python tools/runs/run103/sweep_points.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import backward_config  # noqa: E402

VARIANTS = {
    "two_sums": [
        ("    return tl.reduce((x_hat * w_dy, w_dy), 1, add_pair)", "    return tl.sum(x_hat * w_dy, axis=1), tl.sum(w_dy, axis=1)"),
        ("    return tl.reduce((first, second), 1, add_pair)", "    return tl.sum(first, axis=1), tl.sum(second, axis=1)"),
    ]
}
SIZES = [7168, 8704, 9216, 11264, 12800, 13312, 13824, 14848, 15360]

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in VARIANTS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for n in SIZES:
            time_cases([("backward", 4096, n, [backward_config(n, 2)])], {"package": kernels, **modules}, dtype=torch.float16)
