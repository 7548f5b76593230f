"""Run 93: how far the prefetching split backward should reach (package at the prefetch commit).

    python tools/runs/run93/split_reach.py

At the launcher, L2 flushed: half-precision rows of 8193-16384 values (two tiles or one
16384-wide tile in the table) and float32 rows of 8192 (one tile) against the split kernel,
and float32 at 2048 x 65536 with and without the prefetch, alternated three times.
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

NO_PREFETCH = [("        if PREFETCH:\n            prefetch_tile(", "        if False:\n            prefetch_tile(")]
CASES = [  # dtype, M, N, configurations, rounds
    *[(torch.float16, 4096, n, [None, split(2048, 4, 4), split(1024, 2, 8)], 1)
      for n in (8704, 9216, 10240, 11264, 12288, 12800, 16384)],
    (torch.bfloat16, 8192, 16384, [backward_config(16384, 2)._replace(split=False, block_n=16384, num_warps=8,
                                                                      programs_per_sm=1, reload=True)], 1),
    (torch.float32, 8192, 8192, [None, split(2048, 8, 2), split(1024, 4, 4)], 1),
    (torch.float32, 2048, 65536, [None], 3),
]


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    print(f"copy 1 GB: {timed(2 * big.numel(), lambda: torch.empty_like(big).copy_(big))}")
    modules = {"package": kernels, "no_prefetch": variant("no_prefetch", NO_PREFETCH)}
    for dtype, m, n, configs, rounds in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * x.element_size()
        names = ["package", "no_prefetch"] if rounds > 1 else ["package"]
        for _ in range(rounds):
            for c in configs:
                c = c or backward_config(n, x.element_size())
                for name in names:
                    use(modules[name])
                    run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                    label = f"{str(dtype)[6:]} {m}x{n} {name:<11} {tuple(c)[:5]} split {c.split} tail {c.tail_n}"
                    try:
                        run()
                        torch.cuda.synchronize()
                    except RuntimeError as exc:
                        print(f"{label}: failed ({str(exc)[:60]})", flush=True)
                        continue
                    print(f"{label}: {timed(moved, run)}", flush=True)
        use(kernels)


if __name__ == "__main__":
    main()
