"""The Triton tutorial's backward, ``backward_strategy="lock"``: kept for comparison, never chosen for you.

Each program adds its row's ``dy * x̂`` and ``dy`` into one of ``GROUP_SIZE_M`` buffers under a spin lock;
the order of the programs varies from run to run, and so do the gradients' last bits. The default
backward is deterministic and faster at every recorded shape. Rows must fit in registers (64 KB).
"""

import torch
import triton
import triton.language as tl

from ln_tutorial._common import cdiv, compute_dtype, next_power_of_2
from ln_tutorial.host import REDUCE_BLOCK_N, Run, kernel_call, reduce_call
from ln_tutorial.kernels import reciprocal
from ln_tutorial.tuning import MAX_FUSED_FWD_BYTES


def group_size(n: int) -> int:
    """GROUP_SIZE_M of the Triton tutorial: more buffers for short rows."""
    if n <= 1024:
        return 256
    if n <= 4096:
        return 128
    return 96 if n <= 8192 else 64


def backward(args: dict, weight, bias, run: Run):
    """dW and dB (or None) of the rows in ``args`` (:func:`ln_tutorial.host.backward_arguments`); writes DX."""
    x, m, n = args["X"], args["M"], args["N"]
    block_n = next_power_of_2(n)
    if block_n * x.element_size() > MAX_FUSED_FWD_BYTES:
        raise ValueError(
            f"layer_norm: the 'lock' backward keeps a whole row in registers and supports rows of at "
            f"most {MAX_FUSED_FWD_BYTES} bytes, got {n} elements of {x.element_size()} bytes; "
            "use backward_strategy='deterministic'"
        )
    groups = min(group_size(n), m)  # every buffer gets at least one row
    params = [p for p in (weight, bias) if p is not None]
    partial = args["MEAN"].new_empty((len(params), groups, n))  # the dW buffers, then the dB ones
    rows = partial.unbind(0)
    lock_and_count = torch.zeros((2, groups), dtype=torch.int32, device=x.device)
    args.update(
        DW_PARTIAL=rows[0] if weight is not None else None, DB_PARTIAL=rows[-1] if bias is not None else None,
        LOCK=lock_and_count[0], COUNT=lock_and_count[1],
    )  # fmt: skip
    call = kernel_call(
        layer_norm_bwd_lock_kernel, GROUP_SIZE_M=groups, BLOCK_N=block_n, COMPUTE=compute_dtype(x.dtype),
        num_warps=min(32, max(4, block_n // 512)),
    )  # fmt: skip
    run(call, (m,), args)
    if not params:
        return None, None
    grads = [torch.empty_like(p) for p in params]
    args.update(PARTIAL=partial, OUT0=grads[0], OUT1=grads[-1], P=groups)
    run(reduce_call(groups), (cdiv(n, REDUCE_BLOCK_N), len(params)), args)
    return grads[0] if weight is not None else None, grads[-1] if bias is not None else None


@triton.jit
def layer_norm_bwd_lock_kernel(
    DY,  # upstream gradient, (M, N), rows ``stride_dy`` elements apart
    X,  # input, (M, N), rows ``stride_x`` apart
    W,  # weight, (N,), or None
    MEAN,  # per-row mean, (M,)
    RSTD,  # per-row rstd, (M,)
    DX,  # input gradient, (M, N), rows ``stride_dx`` apart
    DW_PARTIAL,  # COMPUTE (GROUP_SIZE_M, N) buffers shared by row % GROUP_SIZE_M, or None
    DB_PARTIAL,  # COMPUTE (GROUP_SIZE_M, N), or None
    LOCK,  # int32 (GROUP_SIZE_M,), zeroed: 1 while a program updates that buffer
    COUNT,  # int32 (GROUP_SIZE_M,), zeroed: 1 once that buffer holds data
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dx,  # elements between two rows of DX
    N,  # number of columns
    GROUP_SIZE_M: tl.constexpr,  # number of shared partial buffers
    BLOCK_N: tl.constexpr,  # power of two >= N
    COMPUTE: tl.constexpr,  # accumulation dtype
):
    """The Triton tutorial's strategy: one row per program, locked buffers.

    Row ``r`` adds its ``dy * x̂`` and ``dy`` into buffer ``r % GROUP_SIZE_M``
    under a spin lock. The order in which programs take a lock varies from
    run to run, so float rounding makes dW/dB non-deterministic; the buffers
    are float32 (float64 for float64 input) and the barrier before the release makes every store land
    before the next program reads.
    """
    inv_n = reciprocal(N, COMPUTE)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(COMPUTE)
    dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0).to(COMPUTE)
    mean = tl.load(MEAN + row)
    rstd = tl.load(RSTD + row)
    x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
    w_dy = dy * tl.load(W + cols, mask=mask, other=0.0).to(COMPUTE) if W is not None else dy
    c1 = tl.sum(x_hat * w_dy, axis=0) * inv_n
    c2 = tl.sum(w_dy, axis=0) * inv_n
    dx = (w_dy - (x_hat * c1 + c2)) * rstd
    tl.store(DX + row * stride_dx + cols, dx.to(DX.dtype.element_ty), mask=mask)

    group = row % GROUP_SIZE_M
    lock = LOCK + group
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    count = COUNT + group
    first = tl.load(count) == 0
    if first:
        tl.atomic_xchg(count, 1)
    if DW_PARTIAL is not None:
        dw = (dy * x_hat).to(DW_PARTIAL.dtype.element_ty)
        if not first:
            dw += tl.load(DW_PARTIAL + group * N + cols, mask=mask)
        tl.store(DW_PARTIAL + group * N + cols, dw, mask=mask)
    if DB_PARTIAL is not None:
        db = dy.to(DB_PARTIAL.dtype.element_ty)
        if not first:
            db += tl.load(DB_PARTIAL + group * N + cols, mask=mask)
        tl.store(DB_PARTIAL + group * N + cols, db, mask=mask)
    # Without this barrier some threads could release the lock while others
    # are still storing, and the next owner would read a half-written buffer.
    tl.debug_barrier()
    tl.atomic_xchg(lock, 0)
