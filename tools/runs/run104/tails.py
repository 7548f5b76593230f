"""Run 104: the two-tile backward's tail width with one-reduction row sums (see PREDICTION.md).

    python tools/runs/run104/tails.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run103"))
from ab_kernels import time_cases, variant  # noqa: E402
from sweep_points import VARIANTS  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import backward_config  # noqa: E402

TWO_SUMS = {"two_sums": VARIANTS["two_sums"][:1]}  # the persistent kernel's sums only

if __name__ == "__main__":
    modules = {name: variant(name, replacements) for name, replacements in TWO_SUMS.items()}
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for n in (8704, 9216, 9728, 10240, 11776, 12288, 4096, 6144):
            cfg = backward_config(n, 2)
            configs = [cfg, cfg._replace(tail_n=1024)] if cfg.tail_n == 512 else [cfg]
            time_cases([("backward", 4096, n, configs)], {"package": kernels, **modules}, dtype=torch.float16)
        time_cases([("backward", 16384, 8192 + 512, [backward_config(8704, 2)._replace(tail_n=1024)])], {"package": kernels, **modules}, dtype=torch.bfloat16)
