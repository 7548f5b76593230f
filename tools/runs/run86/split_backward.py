"""Run 86: the split backward for float32 rows, and for 32 KB bfloat16 rows with wider parts.

    python tools/runs/run86/split_backward.py

At the launcher, L2 flushed (do_bench), each configuration against the package's own
choice at the same shape, with the largest relative difference of dx, dW and dB to it.
"""

import torch
import triton
from triton.testing import do_bench

from ln_tutorial import launch
from ln_tutorial.launch import BackwardConfig


def split(block_n, warps, per_sm):
    return BackwardConfig(False, 1, block_n, warps, per_sm, split=True)


CASES = [
    (torch.bfloat16, 8192, 16384, [split(2048, 4, 4), split(4096, 8, 2), split(4096, 4, 2), split(8192, 16, 1), split(8192, 8, 1)]),
    (torch.float32, 8192, 16384, [split(2048, 4, 4), split(1024, 2, 8), split(1024, 4, 4), split(2048, 8, 2), split(4096, 8, 2)]),
    (torch.float32, 4096, 32768, [split(2048, 4, 4), split(1024, 2, 8), split(2048, 8, 2), split(4096, 8, 2)]),
    (torch.float32, 2048, 65536, [split(2048, 4, 4), split(4096, 8, 2), split(4096, 4, 2)]),
]  # fmt: skip


def timed(moved, fn):
    do_bench(fn, warmup=100, rep=50)
    q = do_bench(fn, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
    return f"{moved / (q[1] * 1e-3) / 1e9:6.0f} GB/s (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})"


def copy_1gb():
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    out = torch.empty_like(big)
    return timed(2 * big.numel(), lambda: out.copy_(big))


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    print(f"copy 1 GB: {copy_1gb()}")
    for dtype, m, n, configs in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * x.element_size()
        ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        package = launch.backward_config(n, x.element_size())
        print(f"{dtype} {m}x{n} package {tuple(package)}: "
              f"{timed(moved, lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd))}", flush=True)
        for c in configs:
            run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
            try:
                got = run()
                again = run()
                torch.cuda.synchronize()
            except Exception as exc:
                print(f"{dtype} {m}x{n} {tuple(c)}: failed: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
                continue
            err = max(((g.double() - r.double()).abs().max() / r.double().abs().max()).item() for g, r in zip(got, ref))
            same = all(torch.equal(g, a) for g, a in zip(got, again))
            print(f"{dtype} {m}x{n} {tuple(c)}: {timed(moved, run)}  max rel. diff {err:.1e}, rerun same bits {same}",
                  flush=True)


if __name__ == "__main__":
    main()
