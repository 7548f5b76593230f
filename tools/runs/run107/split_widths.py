"""Run 107: part widths of the split backward (launch configurations only, the package's kernels).

    python tools/runs/run107/split_widths.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases  # noqa: E402

from ln_tutorial import kernels  # noqa: E402
from ln_tutorial.launch import BackwardConfig, backward_config  # noqa: E402

CANDIDATES = [
    BackwardConfig(False, 1, 4096, 4, 2, split=True),
    BackwardConfig(False, 1, 4096, 8, 2, split=True),
    BackwardConfig(False, 1, 2048, 8, 2, split=True),
]
CASES = [(8192, 16384, torch.bfloat16), (4096, 32768, torch.bfloat16), (2048, 65536, torch.bfloat16),
         (4096, 12800, torch.float16), (4096, 14336, torch.float16)]

if __name__ == "__main__":
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n, dtype in CASES:
            time_cases([("backward", m, n, [backward_config(n, 2), *CANDIDATES])], {"package": kernels}, dtype=dtype)
