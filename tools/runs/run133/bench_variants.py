"""Run 133, second lease: the cluster forward per row or persistent, with and without its trade.

    PYTHONPATH=$PWD python tools/runs/run133/bench_variants.py
"""

import sys

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import cluster_forward  # noqa: E402
import cluster_variants as cv  # noqa: E402

from ln_tutorial import launch  # noqa: E402

torch.manual_seed(0)
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def gbps(moved, fn):
    q = do_bench(fn, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
    return f"{moved / (q[1] * 1e-3) / 1e9:.0f} GB/s (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})"


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, {SMS} SMs", flush=True)
CASES = [(2048, 65536, 32, SMS // 2), (4096, 32768, 16, SMS), (4096, 32768, 32, SMS // 2)]
for m, n, warps, resident in CASES:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    b = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    moved = 2 * x.numel() * x.element_size()
    first = cluster_forward.launch(x, w, b, 1e-5, warps)
    variants = {
        "per row, trade": dict(),
        "persistent, trade": dict(clusters=resident),
        "per row, no trade": dict(trade=False),
        "per row, no trade, no cluster": dict(trade=False, in_clusters=False),
        "persistent, no trade": dict(clusters=resident, trade=False),
        "persistent, no trade, no cluster": dict(clusters=resident, trade=False, in_clusters=False),
    }
    for name, kw in variants.items():
        out = cv.launch(x, w, b, 1e-5, warps, **kw)
        if kw.get("trade", True):
            print(f"{m}x{n} {warps} warps {name}: same bits as cluster_forward {all(torch.equal(a, c) for a, c in zip(out, first))}")
    for round_ in range(2):
        print(f"round {round_} {m}x{n} copy {gbps(moved, lambda: y.copy_(x))}", flush=True)
        print(f"round {round_} {m}x{n} package: {gbps(moved, lambda: launch.layer_norm_forward(x, w, b, 1e-5))}", flush=True)
        for name, kw in variants.items():
            print(f"round {round_} {m}x{n} {warps} warps {name}: {gbps(moved, lambda kw=kw: cv.launch(x, w, b, 1e-5, warps, **kw))}", flush=True)
