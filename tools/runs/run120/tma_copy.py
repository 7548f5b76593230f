"""Run 120: can Hopper's TMA copy the forward's small-row tiles faster than plain loads? (see PREDICTION.md)

    python tools/runs/run120/tma_copy.py

Copies of (M, N) bfloat16 at the forward's LLM shapes, L2 flushed, GB/s counting bytes read
plus written: torch's ``copy_``; a Triton copy with the forward's tiles and plain loads
(``ldg``); the same tiles through tensor descriptors, which Triton lowers to TMA on sm_90
(``tma``, boxes of BLOCK_M x 256); and a persistent TMA copy whose loop over row blocks
Triton pipelines (``tma_persistent``, 3 stages).
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench
from triton.tools.tensor_descriptor import TensorDescriptor

from ln_tutorial import bench


@triton.jit
def ldg_copy(X, Y, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    offsets = rows[:, None] * N + cols[None, :]
    tl.store(Y + offsets, tl.load(X + offsets))


@triton.jit
def tma_copy(x_desc, y_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOX_N: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M
    for chunk in tl.static_range(BLOCK_N // BOX_N):
        y_desc.store([row, chunk * BOX_N], x_desc.load([row, chunk * BOX_N]))


@triton.jit
def tma_copy_persistent(x_desc, y_desc, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOX_N: tl.constexpr):
    for row in tl.range(tl.program_id(0) * BLOCK_M, M, tl.num_programs(0) * BLOCK_M, num_stages=3):
        for chunk in tl.static_range(BLOCK_N // BOX_N):
            y_desc.store([row, chunk * BOX_N], x_desc.load([row, chunk * BOX_N]))


SHAPES = [(65536, 1024, 8, 4), (16384, 4096, 2, 16), (16384, 8192, 1, 16), (4096, 32768, 1, 32)]  # M, N, rows, warps

if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    copy = bench.copy_bandwidth()
    print(f"copy (1 GB) {copy:.0f} GB/s", flush=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for round_ in range(2):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n, block_m, warps in SHAPES:
            x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            y = torch.empty_like(x)
            box_n = min(n, 256)
            x_desc, y_desc = TensorDescriptor.from_tensor(x, [block_m, box_n]), TensorDescriptor.from_tensor(y, [block_m, box_n])
            grid = (m // block_m,)
            runs = {
                "torch": lambda: y.copy_(x),
                "ldg": lambda: ldg_copy[grid](x, y, n, BLOCK_M=block_m, BLOCK_N=n, num_warps=warps),
                "tma": lambda: tma_copy[grid](x_desc, y_desc, BLOCK_M=block_m, BLOCK_N=n, BOX_N=box_n, num_warps=warps),
                "tma_persistent": lambda: tma_copy_persistent[(2 * sms,)](
                    x_desc, y_desc, m, BLOCK_M=block_m, BLOCK_N=n, BOX_N=box_n, num_warps=warps),
            }  # fmt: skip
            for name, run in runs.items():
                try:
                    y.zero_()
                    run()
                    torch.cuda.synchronize()
                    assert torch.equal(x, y), "copy differs"
                    q = do_bench(run, warmup=50, rep=200, quantiles=[0.2, 0.5, 0.8])
                except Exception as error:  # a variant this Triton cannot compile or run
                    print(f"{m}x{n} {name}: {type(error).__name__}: {str(error)[:150]}", flush=True)
                    continue
                gbps = [2 * x.numel() * 2 / (ms * 1e-3) / 1e9 for ms in q]
                print(f"{m}x{n} {name}: {gbps[1]:.0f} GB/s ({100 * gbps[1] / copy:.1f} % of copy; p20 {gbps[0]:.0f}, "
                      f"p80 {gbps[2]:.0f})", flush=True)  # fmt: skip
