"""Run 90: the split backward reading each tile again after the trade, with more programs per SM.

    python tools/runs/run90/split_reload.py

Variant ``reload``: a program no longer holds its tile's x and dy across the wait for
the other parts' row sums; it reads them again (from L1 or L2) once the sums are there,
so only the next tile's values are held, and only until its own sums are published.
Printed: registers and spills of each candidate, then timings at the launcher
(L2 flushed) against the package's configuration, bfloat16 and float32.
"""

import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import variant  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import BackwardConfig, backward_config  # noqa: E402

OLD = """        sum_xhat_wdy, sum_wdy = whole_row_sums(RECORDS, rows, row_mask, SPLIT, SPLIT_BLOCK)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)"""
NEW = """        sum_xhat_wdy, sum_wdy = whole_row_sums(RECORDS, rows, row_mask, SPLIT, SPLIT_BLOCK)
        x, dy, _, _ = load_raw_tile(X, DY, rows, row_end, cols, col_mask, stride_x, stride_dy)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)"""
VARIANTS = {"reload": [(OLD, NEW)]}


def split(block_n, warps, per_sm):
    return BackwardConfig(False, 1, block_n, warps, per_sm, split=True)


HALF = [split(2048, 4, p) for p in (4, 5, 6, 8)] + [split(1024, 2, p) for p in (8, 12, 16)] + [split(1024, 4, 4), split(1024, 4, 6)]
SINGLE = [split(2048, 8, p) for p in (2, 3, 4)] + [split(2048, 4, p) for p in (4, 6)]
CASES = [
    (torch.bfloat16, 4096, 32768, HALF),
    (torch.bfloat16, 2048, 65536, HALF),
    (torch.bfloat16, 8192, 16384, HALF),  # the fused kernel's shape: the split one would have to beat it
    (torch.bfloat16, 4096, 12800, HALF),
    (torch.float32, 4096, 32768, SINGLE),
    (torch.float32, 8192, 16384, SINGLE),
]


def timed(moved, fn):
    do_bench(fn, warmup=100, rep=50)
    q = do_bench(fn, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
    return f"{moved / (q[1] * 1e-3) / 1e9:6.0f} GB/s (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})"


def use(module):
    launch.kernels = module
    launch._backward_plan.cache_clear()


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    print(f"copy 1 GB: {timed(2 * big.numel(), lambda: torch.empty_like(big).copy_(big))}")
    modules = {"package": kernels, **{k: variant(k, v) for k, v in VARIANTS.items()}}
    for dtype, m, n, configs in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        moved = 3 * m * n * x.element_size()
        print(f"{str(dtype)[6:]} {m}x{n} package {tuple(backward_config(n, x.element_size()))[:5]}: "
              f"{timed(moved, lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd))}", flush=True)
        for name, module in modules.items():
            use(module)
            for c in configs:
                run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                try:
                    got, again = run(), run()
                    torch.cuda.synchronize()
                except RuntimeError as exc:
                    print(f"{str(dtype)[6:]} {m}x{n} {name:<8} {tuple(c)[:5]}: refused ({str(exc)[:50]})", flush=True)
                    continue
                plan = launch._backward_plan(m, n, dtype, x.get_device(), "deterministic", c, True, True)
                regs = ", ".join(f"{e[5].n_regs} regs {e[5].n_spills} spills" for e in plan.main.compiled.values())
                err = max(((g.double() - r.double()).abs().max() / r.double().abs().max()).item()
                          for g, r in zip(got, ref))  # fmt: skip
                same = all(torch.equal(g, a) for g, a in zip(got, again))
                print(f"{str(dtype)[6:]} {m}x{n} {name:<8} {tuple(c)[:5]}: {timed(moved, run)}  {regs}, "
                      f"max rel. diff {err:.1e}, rerun same bits {same}", flush=True)
        use(kernels)


if __name__ == "__main__":
    main()
