"""Run 87: float32 wide rows, the package's new choice (split, BACKWARD_WIDE[4]) against the looped kernels.

    python tools/runs/run87/float32_wide.py

At the launcher, L2 flushed, float32, with the largest relative difference to the looped
kernels' results and a bitwise rerun check.
"""

import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run86"))
from split_backward import copy_1gb, timed  # noqa: E402

from ln_tutorial import launch  # noqa: E402


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    print(f"copy 1 GB: {copy_1gb()}")
    for m, n in ((8192, 16384), (4096, 32768), (2048, 65536), (1024, 12800), (512, 200000)):
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda")
        w, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * 4
        chosen = launch.backward_config(n, 4)
        looped = lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=launch.BACKWARD_LOOPED)
        package = lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        ref, got, again = looped(), package(), package()
        err = max(((g.double() - r.double()).abs().max() / r.double().abs().max()).item() for g, r in zip(got, ref))
        same = all(torch.equal(g, a) for g, a in zip(got, again))
        print(f"float32 {m}x{n} looped: {timed(moved, looped)}", flush=True)
        print(f"float32 {m}x{n} package {tuple(chosen)}: {timed(moved, package)}  max rel. diff {err:.1e}, "
              f"rerun same bits {same}", flush=True)


if __name__ == "__main__":
    main()
