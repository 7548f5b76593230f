"""Run 91: the backward's next loads made shorter: L2 prefetches one tile further ahead.

    python tools/runs/run91/prefetch.py

Variants: the split kernel prefetches (PTX ``prefetch.global.L2``, no registers held) the
x and dy of the tile after the next one, one prefetch per 16 values ("split_pf16") or
per 64 ("split_pf64"); the persistent kernel prefetches its next row step
("persist_pf16"). Timings at the launcher, L2 flushed, with registers, the largest
difference to the package's result, and a bitwise rerun check.
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

HELPERS = '''@triton.jit
def prefetch_l2(ptrs):
    """Ask L2 for the lines at ``ptrs``: nothing held in registers, nothing to wait for."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\\n mov.u32 $0, 0;", "=r,l", [ptrs.to(tl.int64, bitcast=True)],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_tile(X, DY, rows, row_end, col_begin, N, stride_x, stride_dy, BLOCK_N: tl.constexpr, STEP: tl.constexpr):
    """Prefetch x and dy of ``rows`` (clamped to the program's last row), every STEP-th value."""
    rows = tl.minimum(rows, row_end - 1)
    cols = tl.minimum(col_begin + tl.arange(0, BLOCK_N // STEP) * STEP, N - 1)
    prefetch_l2(X + rows[:, None] * stride_x + cols[None, :])
    prefetch_l2(DY + rows[:, None] * stride_dy + cols[None, :])


@triton.jit
def layer_norm_bwd_persistent_kernel('''
SPLIT_OLD = """    for _ in range(row_begin, row_end, BLOCK_M):
        next_rows = rows + BLOCK_M
"""
SPLIT_NEW = """    for _ in range(row_begin, row_end, BLOCK_M):
        next_rows = rows + BLOCK_M
        prefetch_tile(X, DY, rows + 2 * BLOCK_M, row_end, part * BLOCK_N, N, stride_x, stride_dy, BLOCK_N, STEP)
"""
PERSIST_OLD = """        rows = row_start + tl.arange(0, BLOCK_M)
        row_mask = rows < row_end
        x_hat, dy, w_dy, rstd = load_tile("""
PERSIST_NEW = """        rows = row_start + tl.arange(0, BLOCK_M)
        row_mask = rows < row_end
        prefetch_tile(X, DY, rows + BLOCK_M, row_end, 0, N, stride_x, stride_dy, BLOCK_N, 16)
        if TAIL_N > 0:
            prefetch_tile(X, DY, rows + BLOCK_M, row_end, BLOCK_N, N, stride_x, stride_dy, TAIL_N, 16)
        x_hat, dy, w_dy, rstd = load_tile("""
DEFINE = ("@triton.jit\ndef layer_norm_bwd_persistent_kernel(", HELPERS)
VARIANTS = {
    "split_pf16": [DEFINE, (SPLIT_OLD, SPLIT_NEW.replace("STEP)", "16)"))],
    "split_pf64": [DEFINE, (SPLIT_OLD, SPLIT_NEW.replace("STEP)", "64)"))],
    "persist_pf16": [DEFINE, (PERSIST_OLD, PERSIST_NEW)],
}
SPLITS = [split(2048, 4, 4), split(1024, 2, 8)]
CASES = [  # dtype, M, N, configurations (None: the package's), variants
    (torch.bfloat16, 4096, 32768, [None, split(1024, 2, 8)], ["split_pf16", "split_pf64"]),
    (torch.bfloat16, 2048, 65536, [None], ["split_pf16", "split_pf64"]),
    (torch.bfloat16, 4096, 12800, [None, split(1024, 2, 8)], ["split_pf16", "split_pf64"]),
    (torch.bfloat16, 8192, 16384, [None], ["persist_pf16"]),
    (torch.bfloat16, 8192, 16384, [split(2048, 4, 4), split(1024, 2, 8)], ["split_pf16"]),
    (torch.bfloat16, 16384, 4096, [None], ["persist_pf16"]),
    (torch.bfloat16, 16384, 8192, [None], ["persist_pf16"]),
    (torch.bfloat16, 65536, 1024, [None], ["persist_pf16"]),
    (torch.float32, 4096, 32768, [None], ["split_pf16", "split_pf64"]),
    (torch.float32, 8192, 16384, [None], ["split_pf16"]),
]


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    big = torch.empty(2**29, device="cuda", dtype=torch.uint8)
    print(f"copy 1 GB: {timed(2 * big.numel(), lambda: torch.empty_like(big).copy_(big))}")
    modules = {k: variant(k, v) for k, v in VARIANTS.items()}
    for dtype, m, n, configs, names in CASES:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        moved = 3 * m * n * x.element_size()
        for c in configs:
            c = c or backward_config(n, x.element_size())
            ref = None
            for name in ["package", *names]:
                use(modules.get(name, kernels))
                run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                try:
                    got, again = run(), run()
                    torch.cuda.synchronize()
                except RuntimeError as exc:
                    print(f"{str(dtype)[6:]} {m}x{n} {name:<12} {tuple(c)[:7]}: failed ({str(exc)[:60]})", flush=True)
                    continue
                ref = ref or got
                plan = launch._backward_plan(m, n, dtype, x.get_device(), "deterministic", c, True, True)
                regs = ", ".join(f"{e[5].n_regs} regs" for e in plan.main.compiled.values())
                err = max(((g.double() - r.double()).abs().max() / r.double().abs().max()).item()
                          for g, r in zip(got, ref))  # fmt: skip
                same = all(torch.equal(g, a) for g, a in zip(got, again))
                print(f"{str(dtype)[6:]} {m}x{n} {name:<12} {tuple(c)[:7]}: {timed(moved, run)}  {regs}, "
                      f"diff to package {err:.1e}, rerun same bits {same}", flush=True)
        use(kernels)


if __name__ == "__main__":
    main()
