"""Run 124, second part: end-to-end readings (do_bench, as the benchmark times) of ours and
Liger-Kernel's forward, interleaved, with each one's parts separated: the autograd call, the
launch without a graph node, and the kernel launched from Python.

    PYTHONPATH=$PWD:/tmp/peer python tools/runs/run124/end_to_end.py
"""

import statistics

import torch
from triton.testing import do_bench

from ln_tutorial import launch, layer_norm
from liger_kernel.ops.layer_norm import LigerLayerNormFunction, layer_norm_forward

readings = {}
for n in (1536, 2048, 3072):
    m, dtype = 4096, torch.float16
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    wd, bd = w.detach(), b.detach()
    moved = 2 * x.numel() * x.element_size()
    table = launch.forward_config(n, 2)
    cases = {
        "ours, autograd (benchmark)": lambda: layer_norm(x, (n,), w, b),
        "ours, no grad": lambda: layer_norm(x, (n,), wd, bd),
        "ours, Python launcher": lambda: launch.layer_norm_forward(x, wd, bd, 1e-5),
        "ours, Python launcher (1 row, 4 warps)": lambda: launch.layer_norm_forward(
            x, wd, bd, 1e-5, table._replace(block_m=1, num_warps=4)),
        "liger, autograd (benchmark)": lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5),
        "liger, its launcher": lambda: layer_norm_forward(x, wd, bd, 1e-5),
    }
    for fn in cases.values():
        fn()
    for rep in range(7):
        for name, fn in cases.items():
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            readings.setdefault((n, name), []).append(moved / ms / 1e6)
    for name in cases:
        r = readings[(n, name)]
        print(f"4096x{n} {name:40s} median of 7: {statistics.median(r):5.0f} GB/s  "
              f"(min {min(r):.0f}, max {max(r):.0f}): {' '.join(f'{v:.0f}' for v in r)}", flush=True)
