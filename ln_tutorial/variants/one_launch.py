"""Variant: the deterministic backward in one launch, for inputs up to 64 MB.

**Takes** the persistent kernel's backward with a weight or bias, up to ``MAX_BYTES`` of input, on a GPU.
**Gains** the second launch: the programs meet at a grid-wide barrier and add up the dW/dB partial rows
themselves, so the GPU never waits for the host (past 64 MB two launches measured 1-3 % faster). **Else**
:func:`ln_tutorial.kernels.partial_sum_kernel` in a second launch, also when the driver refuses the grid.
"""

import torch
import triton
import triton.language as tl

from ln_tutorial._common import INTERPRET
from ln_tutorial.host import BackwardPlan, KernelCall, Run, kernel_call
from ln_tutorial.kernels import add_partial_rows, layer_norm_bwd_persistent_kernel
from ln_tutorial.variants.cooperative import grid_barrier, grid_barrier_state, reduce_blocks, refused, remember_refusal

MAX_BYTES = 64 * 2**20


def takes(m: int, n: int, dtype: torch.dtype, device: int, cfg, has_grads: bool) -> bool:
    """Whether a persistent backward of this shape takes one launch."""
    small = m * n * dtype.itemsize <= MAX_BYTES
    return cfg.one_launch and has_grads and small and not INTERPRET and (device, cfg) not in refused


def call_for(meta: dict, n: int, sets: int, programs: int, cfg) -> KernelCall:
    """The one-launch kernel with the persistent kernel's ``meta`` and its reduction's tile."""
    return kernel_call(
        layer_norm_bwd_one_launch_kernel, **meta, **reduce_blocks(n, sets, programs, programs, cfg.num_warps),
        launch_cooperative_grid=True,
    )  # fmt: skip


def run(plan: BackwardPlan, args: dict, params: list, device: int, cfg, launch: Run) -> list:
    """Launch ``plan.main`` (a cooperative kernel) with ``args``; return the gradients it adds up."""
    grads = [torch.empty_like(p) for p in params]  # separate allocations: outputs of a torch.library op
    stream = torch._C._cuda_getCurrentRawStream(device)
    args.update(OUT0=grads[0], OUT1=grads[-1], BARRIER=grid_barrier_state(device, stream))
    try:
        launch(plan.main, (plan.programs,), args)
    except RuntimeError as error:
        remember_refusal(error, device, cfg)
    return grads


@triton.jit
def layer_norm_bwd_one_launch_kernel(
    # the arguments of layer_norm_bwd_persistent_kernel, with the gradients and the barrier after PARTIAL:
    DY, X, W, MEAN, RSTD, DX, PARTIAL,
    OUT0,  # (N,): the first gradient, dW (if HAS_DW) or dB
    OUT1,  # (N,): dB when there are both (else OUT0 again)
    BARRIER,  # int32 (2,) for grid_barrier: zeroed once, each launch leaves its count at 0
    stride_dy, stride_x, stride_dx, M, N, rows_per_program,
    HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, COMPUTE: tl.constexpr,
    NUM_STAGES: tl.constexpr, RELOAD: tl.constexpr, TAIL_N: tl.constexpr,
    REDUCE_BLOCK_P: tl.constexpr,  # partial rows added per step of the reduction
    REDUCE_BLOCK_N: tl.constexpr,  # columns per block of the reduction
):  # fmt: skip
    """The persistent kernel and the partial-row sums in one launch (cooperative).

    Each program does what :func:`layer_norm_bwd_persistent_kernel` does,
    waits at a grid-wide barrier until every partial row is written, then adds
    up column blocks of them as :func:`partial_sum_kernel` does, in wider
    blocks (there are fewer programs), without a second launch.
    """
    layer_norm_bwd_persistent_kernel(
        DY, X, W, MEAN, RSTD, DX, PARTIAL, stride_dy, stride_x, stride_dx, M, N, rows_per_program, HAS_DW, HAS_DB,
        BLOCK_M, BLOCK_N, COMPUTE, NUM_STAGES, RELOAD, TAIL_N,
    )  # fmt: skip
    grid_barrier(BARRIER)
    programs = tl.num_programs(0)
    col_blocks = tl.cdiv(N, REDUCE_BLOCK_N)
    for task in range(tl.program_id(0), col_blocks * (HAS_DW + HAS_DB), programs):
        k, col_block = task // col_blocks, task % col_blocks
        add_partial_rows(PARTIAL, OUT0, OUT1, k, col_block, programs, N, REDUCE_BLOCK_P, REDUCE_BLOCK_N)
