"""Run 98: fewer registers in the split backward, for more programs per SM.

    python tools/runs/run98/split_registers.py

Variants of the split kernel (package at 367bb02: prefetch, registers capped by
``_split_registers``): ``w_per_use`` reads its weights (L1) where they are used instead of
holding them across the loop; ``w_per_use_reload`` also reads the tile again after the
trade instead of holding it (run 90's change). Each at 4 to 6 programs per SM, the cap
following (96 registers at 5, 80 at 6), against the package; registers, spills, the largest
difference to the package's result.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run90"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import variant  # noqa: E402
from split_reload import split, timed, use  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import backward_config  # noqa: E402

W_ONCE = "    w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None  # the same columns in every tile\n"
W_NOW = "tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None"
PUBLISH = "        publish_row_sums(RECORDS, x_next, dy_next, w, MEAN"
TERMS = "        x_hat, dy_c, w_dy = tile_terms(x, dy, w, mean, rstd, mask, COMPUTE)\n"
RELOAD = "        x, dy, _, _ = load_raw_tile(X, DY, rows, row_end, cols, col_mask, stride_x, stride_dy)\n"
W_PER_USE = [
    (PUBLISH, PUBLISH.replace(" w, MEAN", f" {W_NOW}, MEAN")),
    (TERMS, TERMS.replace("(x, dy, w,", f"(x, dy, {W_NOW},")),
]
VARIANTS = {"w_per_use": W_PER_USE, "w_per_use_reload": W_PER_USE[:1] + [(TERMS, RELOAD + TERMS.replace("(x, dy, w,", f"(x, dy, {W_NOW},"))]}
HALF = [split(2048, 4, p) for p in (4, 5, 6)] + [split(1024, 2, p) for p in (8, 10, 12)]
CASES = [
    (torch.bfloat16, 4096, 32768, HALF),
    (torch.bfloat16, 2048, 65536, HALF),
    (torch.bfloat16, 8192, 16384, HALF),
    (torch.float32, 8192, 16384, [split(2048, 8, p) for p in (2, 3)] + [split(1024, 4, p) for p in (4, 5, 6)]),
]


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    print(f"copy 1 GB: {timed(2 * big.numel(), lambda: torch.empty_like(big).copy_(big))}")
    modules = {"package": kernels, **{k: variant(k, v) for k, v in VARIANTS.items()}}
    for dtype, m, n, configs in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * x.element_size()
        ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        print(f"{str(dtype)[6:]} {m}x{n} package default {tuple(backward_config(n, x.element_size()))[:5]}: "
              f"{timed(moved, lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd))}", flush=True)
        for c in configs:
            for name, module in modules.items():
                use(module)
                run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                label = f"{str(dtype)[6:]} {m}x{n} {name:<16} {tuple(c)[:5]} cap {launch._split_registers(c)}"
                try:
                    got = run()
                    torch.cuda.synchronize()
                except RuntimeError as exc:
                    print(f"{label}: failed ({str(exc)[:60]})", flush=True)
                    continue
                plan = launch._backward_plan(m, n, dtype, x.get_device(), "deterministic", c, True, True)
                regs = ", ".join(f"{e[5].n_regs} regs {e[5].n_spills} spills" for e in plan.main.compiled.values())
                err = max(((g.double() - r.double()).abs().max() / r.double().abs().max()).item()
                          for g, r in zip(got, ref))  # fmt: skip
                print(f"{label}: {timed(moved, run)}  {regs}, diff {err:.1e}", flush=True)
        use(kernels)


if __name__ == "__main__":
    main()
