"""Run 68: why Liger-Kernel's forward beats ours at 4096 x 2048 (16-bit), timed the same way.

Our kernel's variants (tools/ab_kernels.py: text edits of kernels.py) and Liger's
forward, one after another in one lease, L2 flushed, medians:

    PYTHONPATH=$PWD:/tmp/peer python3 tools/runs/run68/fwd_short_rows.py
"""

import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab_kernels import time_cases, variant  # noqa: E402
from ln_tutorial import kernels, launch  # noqa: E402

C = launch.ForwardConfig
SHORT = [C(False, 1, 2048, 8), C(False, 2, 2048, 8), C(False, 1, 2048, 4), C(False, 4, 2048, 8)]
CASES = [
    ("forward", 4096, 2048, SHORT),
    ("forward", 16384, 2048, SHORT[:2]),
    ("forward", 16384, 4096, [C(False, 2, 4096, 16), C(False, 1, 4096, 8), C(False, 1, 4096, 16)]),
    ("forward", 65536, 1024, [launch.forward_config(1024, 2), C(False, 1, 1024, 4), C(False, 2, 1024, 4)]),
]
FUSED_RSTD = "    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)\n    y = x_centered"
STATS = "    tl.store(MEAN + rows, mean, mask=row_mask)\n    tl.store(RSTD + rows, rstd, mask=row_mask)\n"
VARIANTS = {
    # an approximate reciprocal square root, as Liger takes
    "rsqrt": [(FUSED_RSTD, "    rstd = tl.math.rsqrt(var + eps + eps_lo)\n    y = x_centered")],
    # no mean/rstd stores (wrong on purpose: a bound)
    "nostats": [(STATS, "")],
    # 1/N by Triton's approximate division instead of div_rn
    "fastdiv": [("    inv_n = reciprocal(N, COMPUTE)\n    rows =", "    inv_n = 1.0 / N\n    rows =")],
    # no masks on full rows (wrong for N < BLOCK_N, right here: N is a power of two)
    "nomask": [("    mask = row_mask[:, None] & col_mask[None, :]\n\n    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)",
                "    mask = row_mask[:, None] & col_mask[None, :]\n\n    x = tl.load(X + rows[:, None] * stride_x + cols[None, :])")],
}


def time_liger():
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    except ImportError as exc:
        print(f"liger: not importable ({exc})")
        return
    for _, m, n, _ in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.rand(n, device="cuda", dtype=torch.bfloat16), torch.rand(n, device="cuda", dtype=torch.bfloat16)
        for name, run in (
            ("liger", lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5)),
            ("torch", lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)),
            ("copy", lambda: x.clone()),
        ):
            with torch.no_grad():
                do_bench(run, warmup=100, rep=50)
                q = do_bench(run, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
            moved = 2 * m * n * 2
            print(f"forward {m}x{n} {name:<10}: {moved / (q[1] * 1e-3) / 1e9:6.0f} GB/s "
                  f"(p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})", flush=True)


if __name__ == "__main__":
    time_liger()
    time_cases(CASES, {"package": kernels, **{k: variant(k, v) for k, v in VARIANTS.items()}})
    time_liger()
