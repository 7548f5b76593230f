"""Run 133, last lease: rows shared by clusters of 2, 4 or 8 programs (st.async trade).

    PYTHONPATH=$PWD python tools/runs/run133/bench_parts.py
"""

import sys

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import cluster_parts as cp  # noqa: E402

from ln_tutorial import launch  # noqa: E402

torch.manual_seed(0)
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
CONFIGS = {65536: [(2, 32), (4, 16), (4, 8), (8, 8), (8, 4)], 32768: [(2, 16), (4, 8), (4, 4), (8, 4)]}


def errors(out, x, w, b):
    """Largest relative errors of rstd, mean and y against float64."""
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5)
    y = (xd - mean[:, None]) * rstd[:, None] * w.double() + b.double()
    return (((out[2].double() - rstd).abs() / rstd).max().item(),
            ((out[1].double() - mean).abs() / mean.abs().clamp_min(1e-3)).max().item(),
            ((out[0].double() - y).abs().max() / y.abs().max()).item())


def gbps(moved, fn):
    q = do_bench(fn, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
    return f"{moved / (q[1] * 1e-3) / 1e9:.0f} GB/s (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})"


for m, n, dtype in [(256, 65536, torch.bfloat16), (256, 65536, torch.float16), (256, 40000, torch.bfloat16),
                    (512, 32768, torch.bfloat16), (512, 20000, torch.bfloat16)]:
    w = torch.rand(n, device="cuda", dtype=dtype)
    b = torch.rand(n, device="cuda", dtype=dtype)
    for label, make in [("normal", lambda: -2.3 + 0.5 * torch.randn(m, n, device="cuda")),
                        ("mean 1000", lambda: 1000 + torch.randn(m, n, device="cuda")),
                        ("outlier", lambda: torch.randn(m, n, device="cuda").index_fill_(1, torch.tensor([0], device="cuda"), 1e4))]:
        x = make().to(dtype)
        pkg = launch.layer_norm_forward(x, w, b, 1e-5)
        line = [f"package rstd/mean/y {'/'.join(f'{e:.1e}' for e in errors(pkg, x, w, b))}"]
        for cluster, warps in CONFIGS[triton.next_power_of_2(n)]:
            out = cp.launch(x, w, b, 1e-5, warps, cluster)
            again = cp.launch(x, w, b, 1e-5, warps, cluster)
            same = all(torch.equal(a, c) for a, c in zip(out, again))
            ydiff = (out[0].float() - pkg[0].float()).abs().max().item()
            line.append(f"{cluster}x{warps}w {'/'.join(f'{e:.1e}' for e in errors(out, x, w, b))} y-pkg {ydiff:.1e} same {same}")
        print(f"{m}x{n} {str(dtype)[6:]} {label}: " + "; ".join(line), flush=True)

for round_ in range(2):
    for m, n, dtype in [(2048, 65536, torch.bfloat16), (2048, 65536, torch.float16), (4096, 32768, torch.bfloat16)]:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.rand(n, device="cuda", dtype=dtype)
        b = torch.rand(n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        moved = 2 * x.numel() * x.element_size()
        print(f"round {round_} {m}x{n} {str(dtype)[6:]} copy {gbps(moved, lambda: y.copy_(x))}; package "
              f"{gbps(moved, lambda: launch.layer_norm_forward(x, w, b, 1e-5))}", flush=True)
        for cluster, warps in CONFIGS[n]:
            print(f"round {round_} {m}x{n} {str(dtype)[6:]} cluster of {cluster}, {warps} warps: "
                  f"{gbps(moved, lambda: cp.launch(x, w, b, 1e-5, warps, cluster))}", flush=True)
