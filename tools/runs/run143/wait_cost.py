"""Run 143: the split backward with no wait for the row sums (a bound) and with a pause between polls.

    PYTHONPATH=$PWD python tools/runs/run143/wait_cost.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402

from ln_tutorial import bench, kernels, launch  # noqa: E402

LOOP = """    while tl.max(((((first ^ ready) | (second ^ ready)) >> 32) != 0).to(tl.int32)) > 0:
        first = tl.load(records, mask=mask, other=ready, volatile=True)
        second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
"""
SLEEP = """        tl.inline_asm_elementwise("nanosleep.u32 100;\\n mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                                  pack=1)
"""
NO_WAIT = ""  # the first read of the records is used as it is
VARIANTS = {
    "no_wait": variant("no_wait", [(LOOP, NO_WAIT)]),
    "sleep": variant("sleep", [(LOOP, LOOP.split("\n")[0] + "\n" + SLEEP + LOOP.split("\n", 1)[1])]),
}
CASES = [("backward", m, n, [launch.backward_config(n, 2)]) for m, n in ((4096, 32768), (2048, 65536), (8192, 16384))]
print(f"copy {bench.copy_bandwidth():.0f} GB/s", flush=True)
for rnd in range(3):
    print(f"round {rnd}", flush=True)
    time_cases(CASES, {"package": kernels, **VARIANTS}, torch.bfloat16)
