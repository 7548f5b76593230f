"""Run 92: run 91's split prefetch with the registers capped, so that half precision keeps 4 programs per SM.

    python tools/runs/run92/prefetch_capped.py

Run 91's prefetch took the half-precision split kernel over 128 registers per thread, and
its grid (4 programs of 4 warps per SM) was refused. Here the split kernel is compiled with
Triton's ``maxnreg`` option where a configuration gives one (ptxas then keeps to it, spilling
if it must). Timings at the launcher, L2 flushed, as in run 91.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run90"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run91"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import variant  # noqa: E402
from prefetch import VARIANTS  # noqa: E402
from split_reload import split, timed, use  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402
from ln_tutorial.launch import backward_config  # noqa: E402

MAXNREG = {"value": None}
_plain_launcher = launch._launcher


def capped_launcher(kernel, **meta):
    """launch._launcher, with maxnreg added to the split kernel's options when one is set."""
    if kernel.__name__ == "layer_norm_bwd_split_kernel" and MAXNREG["value"]:
        meta["maxnreg"] = MAXNREG["value"]
    return _plain_launcher(kernel, **meta)


launch._launcher = capped_launcher
HALF = [split(2048, 4, 4), split(1024, 2, 8), split(2048, 4, 3)]
CASES = [  # dtype, M, N, configurations, (variant, maxnreg) pairs after the package
    (torch.bfloat16, 4096, 32768, HALF, [("package", 128), ("split_pf16", 128), ("split_pf16", None)]),
    (torch.bfloat16, 2048, 65536, HALF, [("package", 128), ("split_pf16", 128), ("split_pf16", None)]),
    (torch.bfloat16, 8192, 16384, [backward_config(16384, 2), *HALF[:2]], [("split_pf16", 128)]),
    (torch.bfloat16, 4096, 12800, HALF[:2], [("split_pf16", 128)]),
    (torch.bfloat16, 4096, 15872, HALF[:1], [("split_pf16", 128)]),
    (torch.float32, 2048, 65536, [None], [("split_pf16", None)]),
    (torch.float32, 4096, 32768, [None], [("split_pf16", None)]),
    (torch.float32, 8192, 16384, [None], [("split_pf16", None)]),
    (torch.float32, 1024, 12800, [None], [("split_pf16", None)]),
]


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    print(f"copy 1 GB: {timed(2 * big.numel(), lambda: torch.empty_like(big).copy_(big))}")
    modules = {"package": kernels, "split_pf16": variant("split_pf16", VARIANTS["split_pf16"])}
    for dtype, m, n, configs, runs in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * x.element_size()
        for c in configs:
            c = c or backward_config(n, x.element_size())
            ref = None
            for name, cap in [("package", None), *runs]:
                MAXNREG["value"] = cap
                launch._launchers.clear()  # the cap is part of a launcher's options
                use(modules[name])
                run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                label = f"{str(dtype)[6:]} {m}x{n} {name:<10} maxnreg {cap!s:<4} {tuple(c)[:5]}"
                try:
                    got, again = run(), run()
                    torch.cuda.synchronize()
                except RuntimeError as exc:
                    print(f"{label}: failed ({str(exc)[:60]})", flush=True)
                    continue
                ref = ref or got
                plan = launch._backward_plan(m, n, dtype, x.get_device(), "deterministic", c, True, True)
                regs = ", ".join(f"{e[5].n_regs} regs {e[5].n_spills} spills" for e in plan.main.compiled.values())
                err = max(((g.double() - r.double()).abs().max() / r.double().abs().max()).item()
                          for g, r in zip(got, ref))  # fmt: skip
                same = all(torch.equal(g, a) for g, a in zip(got, again))
                print(f"{label}: {timed(moved, run)}  {regs}, diff to package {err:.1e}, rerun same bits {same}",
                      flush=True)
        MAXNREG["value"] = None
        launch._launchers.clear()
        use(kernels)


if __name__ == "__main__":
    main()
