"""Run 124: kernel durations (CUPTI) of our forward and Liger-Kernel's, L2 flushed before each call.

    PYTHONPATH=$PWD:/tmp/peer python tools/runs/run124/kernel_times.py
"""

import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import variant  # noqa: E402

from ln_tutorial import bench, kernels, launch, layer_norm  # noqa: E402
from liger_kernel.ops.layer_norm import LigerLayerNormFunction  # noqa: E402

W_FIRST = [
    ("    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)\n",
     "    w_first = tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)\n"
     "    b_first = tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)\n"
     "    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)\n"),
    ("y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]", "y = y * w_first[None, :]"),
    ("y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]", "y = y + b_first[None, :]"),
]
PLAIN_DIV = [("    inv_n = reciprocal(N, COMPUTE)\n    rows = tl.program_id(0)", "    inv_n = 1.0 / N\n    rows = tl.program_id(0)")]
VARIANTS = {"package": kernels, "w_first": variant("w_first", W_FIRST), "plain_div": variant("plain_div", PLAIN_DIV)}
CACHE = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")  # do_bench's flush buffer


def kernel_us(fn, reps=200):
    """Median duration (µs) of the kernels fn launches whose name says layer norm, one call after each flush."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            CACHE.zero_()
            fn()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if "layer_norm" in e.name and e.device_time > 0]
    names = sorted({e.name for e in prof.events() if "layer_norm" in e.name})
    return statistics.median(times), len(times), names


def set_kernels(module):
    launch.kernels = module
    launch._forward_launcher.cache_clear()


if __name__ == "__main__":
    print(f"copy {bench.copy_bandwidth():.0f} GB/s", flush=True)
    SHAPES = [(4096, n, torch.float16) for n in (1024, 1536, 2048, 2560, 3072, 4096)] + [(16384, 4096, torch.bfloat16)]
    for rnd in range(2):
        for m, n, dtype in SHAPES:
            x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
            w = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
            b = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
            moved = 2 * x.numel() * x.element_size()
            table = launch.forward_config(n, x.element_size())
            cases = {
                "ours end to end": lambda: layer_norm(x, (n,), w, b),
                "liger end to end": lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5),
            }
            wd, bd = w.detach(), b.detach()
            for rows, warps in sorted({(table.block_m, table.num_warps), (1, 8), (1, 4)}):
                cfg = table._replace(block_m=rows, num_warps=warps)
                for vname in VARIANTS:
                    cases[f"{vname} rows {rows} warps {warps}{' (table)' if cfg == table else ''}"] = (
                        lambda cfg=cfg, vname=vname: (set_kernels(VARIANTS[vname]), launch.layer_norm_forward(x, wd, bd, 1e-5, cfg)))
            ref = layer_norm(x, (n,), w, b).float()
            for name, fn in cases.items():
                out = fn()
                y = out[1][0] if isinstance(out, tuple) and out[0] is None else out
                err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                us, count, names = kernel_us(fn)
                e2e = do_bench(fn, warmup=100, rep=200, return_mode="median") if "end to end" in name else float("nan")
                print(f"round {rnd} {m}x{n} {str(dtype)[6:]} {name:38s} kernel {us:7.2f} us = {moved / us / 1e3:5.0f} GB/s"
                      f"  (end to end {moved / e2e / 1e6:5.0f} GB/s; {count} kernels; diff {err:.1e}) {names}", flush=True)
            set_kernels(kernels)
