"""Run 96: how far ahead the split backward prefetches (package at 5c22ded: the tile after next).

    python tools/runs/run96/prefetch_distance.py

Variants: ``three_ahead`` prefetches the tile three steps ahead instead of two; ``both``
prefetches both. At the launcher, L2 flushed, against the package, with registers and
the largest difference to the package's result.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run90"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import variant  # noqa: E402
from split_reload import timed, use  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import backward_config  # noqa: E402

OLD = "            prefetch_tile(X, DY, next_rows + BLOCK_M, row_end, part * BLOCK_N, N, stride_x, stride_dy, BLOCK_N)\n"
THREE = OLD.replace("next_rows + BLOCK_M", "next_rows + 2 * BLOCK_M")
VARIANTS = {"three_ahead": [(OLD, THREE)], "both": [(OLD, OLD + THREE)]}
SHAPES = [(torch.bfloat16, 4096, 32768), (torch.bfloat16, 2048, 65536), (torch.bfloat16, 8192, 16384),
          (torch.bfloat16, 4096, 12800), (torch.float32, 8192, 16384), (torch.float32, 2048, 65536)]


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    print(f"copy 1 GB: {timed(2 * big.numel(), lambda: torch.empty_like(big).copy_(big))}")
    modules = {"package": kernels, **{k: variant(k, v) for k, v in VARIANTS.items()}}
    for dtype, m, n in SHAPES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * x.element_size()
        c = backward_config(n, x.element_size())
        ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        for _ in range(2):
            for name, module in modules.items():
                use(module)
                run = lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                label = f"{str(dtype)[6:]} {m}x{n} {name:<12}"
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
                print(f"{label}: {timed(moved, run)}  {regs}, diff to package {err:.1e}", flush=True)
        use(kernels)


if __name__ == "__main__":
    main()
