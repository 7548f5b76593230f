"""The default kernels: every call can take these, and these alone run with the variants off.

Forward: :func:`layer_norm_fwd_kernel` (rows held in registers), :func:`layer_norm_fwd_looped_kernel`
(wider rows). Backward: :func:`layer_norm_bwd_persistent_kernel` (dx and a dW/dB partial row per program)
then :func:`partial_sum_kernel` (the partial rows added in a fixed order); wider rows take
:func:`layer_norm_bwd_dx_looped_kernel` and :func:`layer_norm_bwd_dwdb_kernel`. Every kernel sees ``M``
rows of ``N`` elements through a row stride and 64-bit offsets; ``COMPUTE`` is float32, or float64 for
float64 inputs. Symbols as on the pages: ``x̂ = (x - mean) * rstd``, ``y = x̂ * w + b``,
``c1 = mean(x̂ * w * dy)``, ``c2 = mean(w * dy)``, ``dx = (w * dy - (x̂ * c1 + c2)) * rstd``.
"""

import triton
import triton.language as tl


@triton.jit
def reciprocal(N, COMPUTE: tl.constexpr):
    """``1 / N`` in the COMPUTE dtype, correctly rounded, once per program.

    Row means are then ``Σ · (1/N)``: exact when ``N = 1`` (so ``x - mean`` and
    ``dx`` are exactly 0 there, as in torch). Triton's ``/`` on float32 is a fast
    approximate division (up to 2 ulp off); the correctly rounded ``div_rn`` in
    every row cost up to a third of the bandwidth on the H100.
    """
    one = tl.full([], 1.0, COMPUTE)
    if COMPUTE == tl.float32:
        return tl.div_rn(one, tl.full([], N, COMPUTE))
    return one / N  # float64 division is always correctly rounded


@triton.jit
def layer_norm_fwd_kernel(
    X,  # input, (M, N), rows ``stride_x`` elements apart, last dim contiguous
    Y,  # output, (M, N), rows ``stride_y`` elements apart
    W,  # weight, (N,), or None
    B,  # bias, (N,), or None
    MEAN,  # per-row mean, (M,), COMPUTE dtype
    RSTD,  # per-row reciprocal standard deviation, (M,), COMPUTE dtype
    stride_x,  # elements between two rows of X
    stride_y,  # elements between two rows of Y
    M,  # number of rows
    N,  # number of columns (elements normalized together)
    eps,  # added to the variance, as in torch (rounded to float32 by Triton)
    eps_lo,  # eps minus its float32 rounding, so float64 inputs see eps exactly
    BLOCK_M: tl.constexpr,  # rows handled together by one program
    BLOCK_N: tl.constexpr,  # power of two >= N: the whole row stays on chip
    COMPUTE: tl.constexpr,  # accumulation dtype
    PARAMS_FIRST: tl.constexpr,  # load w and b with x rather than after the sums
):
    """One program normalizes ``BLOCK_M`` whole rows held in registers."""
    inv_n = reciprocal(N, COMPUTE)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]

    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    if PARAMS_FIRST:  # w and b in flight with x: shorter latency for a few rows, more registers for many
        w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None
        b = tl.load(B + cols, mask=col_mask, other=0.0) if B is not None else None
    mean = tl.sum(x, axis=1) * inv_n
    # Centre first, then square: the two-pass variance does not cancel.
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(x_centered * x_centered, axis=1) * inv_n
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
    y = x_centered * rstd[:, None]
    if not PARAMS_FIRST:
        w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None
        b = tl.load(B + cols, mask=col_mask, other=0.0) if B is not None else None
    if W is not None:
        y = y * w.to(COMPUTE)[None, :]
    if B is not None:
        y = y + b.to(COMPUTE)[None, :]

    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=row_mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def layer_norm_fwd_looped_kernel(
    X,  # input, (M, N), rows ``stride_x`` elements apart, last dim contiguous
    Y,  # output, (M, N), rows ``stride_y`` elements apart
    W,  # weight, (N,), or None
    B,  # bias, (N,), or None
    MEAN,  # per-row mean, (M,), COMPUTE dtype
    RSTD,  # per-row reciprocal standard deviation, (M,), COMPUTE dtype
    stride_x,  # elements between two rows of X
    stride_y,  # elements between two rows of Y
    eps,  # added to the variance (rounded to float32 by Triton)
    eps_lo,  # eps minus its float32 rounding
    N: tl.constexpr,  # number of columns, compiled in: the loops' steps are counted, full steps unmasked
    BLOCK_N: tl.constexpr,  # columns handled per loop step
    COMPUTE: tl.constexpr,  # accumulation dtype
):
    """Rows too wide for registers (or padded by a third or more, see ``host.forward_choice``): one row
    per program, two sweeps over it.

    The first sweep accumulates, lane by lane, Σ(x - s) and Σ(x - s)² around
    a shift ``s``: the lane's value in the row's first block. Shifting by a
    value of the row keeps ``E[(x-s)²] - E[x-s]²`` from cancelling, and since
    no sum has to finish before the sweep starts, all its loads can be in
    flight at once. Chan's formula then joins the lanes' counts, means and
    sums of squared deviations. The second sweep re-reads the row (mostly
    from L2) and writes ``y``.
    """
    inv_n = reciprocal(N, COMPUTE)
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK_N)

    # Masked: a float64 row of 8193 to 16383 values is looped but shorter than one step.
    shift = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(COMPUTE)
    sum_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    sum_sq_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    for start in range(BLOCK_N, N, BLOCK_N):
        mask = start + cols < N
        # evict_last: keep the row in L2 for the second sweep
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
        dev = tl.where(mask, x - shift, 0.0)
        sum_dev += dev
        sum_sq_dev += dev * dev
    count = ((N + BLOCK_N - 1 - cols) // BLOCK_N).to(COMPUTE)  # the lane's values (0 past a short row's end)
    lane_dev = sum_dev / tl.maximum(count, 1.0)  # the lane's mean, minus its shift
    mean = tl.sum(shift * count + sum_dev, axis=0) * inv_n
    spread = shift - mean + lane_dev  # the lane's mean, minus the row's
    var = tl.sum(sum_sq_dev - sum_dev * lane_dev + count * spread * spread, axis=0) * inv_n
    rstd = 1.0 / tl.sqrt(tl.maximum(var, 0.0) + eps + eps_lo)

    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)
        y = (x - mean) * rstd
        if W is not None:
            y = y * tl.load(W + start + cols, mask=mask, other=0.0).to(COMPUTE)
        if B is not None:
            y = y + tl.load(B + start + cols, mask=mask, other=0.0).to(COMPUTE)
        tl.store(y_row + start + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)


@triton.jit
def load_tile(
    X,  # input, rows ``stride_x`` elements apart
    DY,  # upstream gradient, rows ``stride_dy`` elements apart
    W,  # weight, (N,), or None
    MEAN,  # per-row mean, (M,)
    RSTD,  # per-row rstd, (M,)
    rows,  # (BLOCK_M,) row indices of the tile
    cols,  # (BLOCK_N,) column indices of the tile
    row_mask,  # (BLOCK_M,) rows that exist
    col_mask,  # (BLOCK_N,) columns that exist
    stride_x,  # elements between two rows of X
    stride_dy,  # elements between two rows of DY
    COMPUTE: tl.constexpr,  # accumulation dtype
    EVICTION: tl.constexpr,  # L2 hint for x and dy: "", "evict_last" or "evict_first"
):
    """x̂, ∇y, w·∇y (BLOCK_M, BLOCK_N) and rstd (BLOCK_M,) of a tile; x̂ is 0 outside it."""
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICTION)
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICTION)
    rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
    # w loaded per tile (L1 hits): kept in registers, w made 32 KB rows spill
    w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None
    x_hat, dy, w_dy = tile_terms(x, dy, w, tl.load(MEAN + rows, mask=row_mask, other=0.0), rstd, mask, COMPUTE)
    return x_hat, dy, w_dy, rstd


@triton.jit
def tile_terms(
    x,  # (BLOCK_M, BLOCK_N) input as loaded
    dy,  # (BLOCK_M, BLOCK_N) upstream gradient as loaded
    w,  # (BLOCK_N,) weight, or None
    mean,  # (BLOCK_M,)
    rstd,  # (BLOCK_M,)
    mask,  # (BLOCK_M, BLOCK_N) elements that exist
    COMPUTE: tl.constexpr,  # accumulation dtype
):
    """x̂, ∇y and w·∇y of a tile in the COMPUTE dtype; x̂ is 0 outside ``mask``."""
    x_hat = tl.where(mask, (x.to(COMPUTE) - mean[:, None]) * rstd[:, None], 0.0)
    dy = dy.to(COMPUTE)
    w_dy = dy
    if w is not None:
        w_dy *= w.to(COMPUTE)[None, :]
    return x_hat, dy, w_dy


@triton.jit
def store_partial_row(
    PARTIAL,  # COMPUTE (K, P, N): the dW partial rows (if HAS_DW), then the dB ones (if HAS_DB)
    HAS_DW: tl.constexpr,  # the layer norm has a weight
    HAS_DB: tl.constexpr,  # the layer norm has a bias
    p,  # which partial row to write
    P,  # partial rows per set
    N,  # number of columns
    cols,  # (BLOCK_N,) column indices
    col_mask,  # (BLOCK_N,) columns that exist
    dw_acc,  # (BLOCK_M, BLOCK_N) running sums of ∇y·x̂
    db_acc,  # (BLOCK_M, BLOCK_N) running sums of ∇y
):
    """Write one program's dW/dB partial sums: its accumulators summed over their BLOCK_M rows."""
    row = PARTIAL + p.to(tl.int64) * N + cols
    if HAS_DW:
        tl.store(row, tl.sum(dw_acc, axis=0), mask=col_mask)
        row += P.to(tl.int64) * N  # the dB set follows the dW set
    if HAS_DB:
        tl.store(row, tl.sum(db_acc, axis=0), mask=col_mask)


@triton.jit
def store_dx_and_accumulate(
    DX,  # input gradient, rows ``stride_dx`` elements apart
    rows,  # (BLOCK_M,) row indices of the tile
    cols,  # (BLOCK_N,) column indices of the tile
    row_mask,  # (BLOCK_M,) rows that exist
    col_mask,  # (BLOCK_N,) columns that exist
    stride_dx,  # elements between two rows of DX
    x_hat,  # (BLOCK_M, BLOCK_N) from load_tile
    dy,  # (BLOCK_M, BLOCK_N)
    w_dy,  # (BLOCK_M, BLOCK_N)
    rstd,  # (BLOCK_M,)
    c1,  # (BLOCK_M,) mean of x̂·w·∇y over each whole row
    c2,  # (BLOCK_M,) mean of w·∇y over each whole row
    dw_acc,  # (BLOCK_M, BLOCK_N) running sums of ∇y·x̂
    db_acc,  # (BLOCK_M, BLOCK_N) running sums of ∇y
):
    """Write the tile's dx; return the dW/dB running sums with the tile added."""
    dx = (w_dy - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
    mask = row_mask[:, None] & col_mask[None, :]
    tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    return dw_acc + dy * x_hat, db_acc + dy


@triton.jit
def layer_norm_bwd_persistent_kernel(
    DY,  # upstream gradient, (M, N), rows ``stride_dy`` elements apart
    X,  # input saved by the forward, (M, N), rows ``stride_x`` apart
    W,  # weight, (N,), or None
    MEAN,  # per-row mean from the forward, (M,)
    RSTD,  # per-row rstd from the forward, (M,)
    DX,  # input gradient, (M, N), rows ``stride_dx`` apart
    PARTIAL,  # COMPUTE (K, P, N): program p's Σ dy * x̂ (if HAS_DW) and Σ dy (if HAS_DB) over its rows
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dx,  # elements between two rows of DX
    M,  # number of rows
    N,  # number of columns
    rows_per_program,  # each program owns this many consecutive rows
    HAS_DW: tl.constexpr,  # the layer norm has a weight: write dW partial rows
    HAS_DB: tl.constexpr,  # the layer norm has a bias: write dB partial rows
    BLOCK_M: tl.constexpr,  # rows processed together per loop step
    BLOCK_N: tl.constexpr,  # power of two >= N, or (with TAIL_N) the first BLOCK_N columns
    COMPUTE: tl.constexpr,  # accumulation dtype
    NUM_STAGES: tl.constexpr,  # tiles in flight: loads issued ahead of their use
    RELOAD: tl.constexpr,  # read each tile twice (the second time from L2) to save registers
    TAIL_N: tl.constexpr,  # 0, or a power of two >= N - BLOCK_N: a second, narrower tile for the rest of the row
):
    """dx for every row, and one partial row of dW/dB per program.

    The grid is persistent: program ``p`` owns rows
    ``[p * rows_per_program, (p + 1) * rows_per_program)``. Its dW/dB partial
    sums stay in COMPUTE-dtype registers across those rows and are written once.
    A second kernel (or, for small inputs, the same programs after a
    grid-wide barrier: :mod:`ln_tutorial.variants.one_launch`) adds the
    partial rows in a fixed order, so the result is the same bit for bit on
    every run: no locks, and no atomics in the sums.

    A row that one power of two would pad by a quarter or more (9216 values
    in a 16384-wide tile) is held as two tiles, ``BLOCK_N`` and ``TAIL_N``
    wide (8192 + 1024), so that fewer lanes idle.
    """
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    if TAIL_N > 0:
        tail_cols = BLOCK_N + tl.arange(0, TAIL_N)
        tail_mask = tail_cols < N
        dw_tail = tl.zeros([BLOCK_M, TAIL_N], dtype=COMPUTE)
        db_tail = tl.zeros([BLOCK_M, TAIL_N], dtype=COMPUTE)

    row_begin = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_begin + rows_per_program, M)
    for row_start in tl.range(row_begin, row_end, BLOCK_M, num_stages=NUM_STAGES):
        rows = row_start + tl.arange(0, BLOCK_M)
        row_mask = rows < row_end
        x_hat, dy, w_dy, rstd = load_tile(
            X, DY, W, MEAN, RSTD, rows, cols, row_mask, col_mask, stride_x, stride_dy, COMPUTE,
            "evict_last" if RELOAD else "",
        )  # fmt: skip
        sum_xhat_wdy = tl.sum(x_hat * w_dy, axis=1)
        sum_wdy = tl.sum(w_dy, axis=1)
        if TAIL_N > 0:
            x_hat_t, dy_t, w_dy_t, _ = load_tile(
                X, DY, W, MEAN, RSTD, rows, tail_cols, row_mask, tail_mask, stride_x, stride_dy, COMPUTE,
                "evict_last" if RELOAD else "",
            )  # fmt: skip
            sum_xhat_wdy += tl.sum(x_hat_t * w_dy_t, axis=1)
            sum_wdy += tl.sum(w_dy_t, axis=1)
        c1 = sum_xhat_wdy * inv_n
        c2 = sum_wdy * inv_n
        if RELOAD:  # wide rows: x̂ and w·∇y held across the sums would spill; read the tile again (L2)
            x_hat, dy, w_dy, rstd = load_tile(
                X, DY, W, MEAN, RSTD, rows, cols, row_mask, col_mask, stride_x, stride_dy, COMPUTE, "evict_first"
            )
            if TAIL_N > 0:
                x_hat_t, dy_t, w_dy_t, _ = load_tile(
                    X, DY, W, MEAN, RSTD, rows, tail_cols, row_mask, tail_mask, stride_x, stride_dy, COMPUTE,
                    "evict_first",
                )  # fmt: skip
        dw_acc, db_acc = store_dx_and_accumulate(
            DX, rows, cols, row_mask, col_mask, stride_dx, x_hat, dy, w_dy, rstd, c1, c2, dw_acc, db_acc
        )
        if TAIL_N > 0:
            dw_tail, db_tail = store_dx_and_accumulate(
                DX, rows, tail_cols, row_mask, tail_mask, stride_dx, x_hat_t, dy_t, w_dy_t, rstd, c1, c2, dw_tail,
                db_tail,
            )  # fmt: skip

    store_partial_row(PARTIAL, HAS_DW, HAS_DB, pid, tl.num_programs(0), N, cols, col_mask, dw_acc, db_acc)
    if TAIL_N > 0:
        store_partial_row(PARTIAL, HAS_DW, HAS_DB, pid, tl.num_programs(0), N, tail_cols, tail_mask, dw_tail, db_tail)


@triton.jit
def layer_norm_bwd_dx_looped_kernel(
    DY,  # upstream gradient, (M, N), rows ``stride_dy`` elements apart
    X,  # input, (M, N), rows ``stride_x`` apart
    W,  # weight, (N,), or None
    MEAN,  # per-row mean, (M,)
    RSTD,  # per-row rstd, (M,)
    DX,  # input gradient, (M, N), rows ``stride_dx`` apart
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dx,  # elements between two rows of DX
    N,  # number of columns; larger than BLOCK_N
    BLOCK_N: tl.constexpr,  # columns per loop step
    COMPUTE: tl.constexpr,  # accumulation dtype
):
    """dx for rows too wide for registers, one row per program: a first sweep sums c1 and c2, a second
    re-reads the row (mostly from L2) and writes dx. dW/dB come from :func:`layer_norm_bwd_dwdb_kernel`."""
    inv_n = reciprocal(N, COMPUTE)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mean = tl.load(MEAN + row)
    rstd = tl.load(RSTD + row)
    sum_xhat_wdy = tl.zeros([BLOCK_N], dtype=COMPUTE)
    sum_wdy = tl.zeros([BLOCK_N], dtype=COMPUTE)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(X + row * stride_x + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
        w_dy = tl.load(DY + row * stride_dy + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
        if W is not None:
            w_dy *= tl.load(W + start + cols, mask=mask, other=0.0).to(COMPUTE)
        sum_xhat_wdy += tl.where(mask, (x - mean) * rstd, 0.0) * w_dy
        sum_wdy += w_dy
    c1 = tl.sum(sum_xhat_wdy, axis=0) * inv_n
    c2 = tl.sum(sum_wdy, axis=0) * inv_n

    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(X + row * stride_x + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)
        w_dy = tl.load(DY + row * stride_dy + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)
        if W is not None:
            w_dy *= tl.load(W + start + cols, mask=mask, other=0.0).to(COMPUTE)
        dx = (w_dy - ((x - mean) * rstd * c1 + c2)) * rstd
        tl.store(DX + row * stride_dx + start + cols, dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_bwd_dwdb_kernel(
    DY,  # upstream gradient, (M, N), rows ``stride_dy`` elements apart
    X,  # input, (M, N), rows ``stride_x`` apart
    MEAN,  # per-row mean, (M,)
    RSTD,  # per-row rstd, (M,)
    PARTIAL,  # COMPUTE (K, P, N): Σ dy * x̂ (if HAS_DW) and Σ dy (if HAS_DB) over row group p
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    M,  # number of rows
    N,  # number of columns
    rows_per_program,  # rows in one row group
    HAS_DW: tl.constexpr,  # write dW partial rows
    HAS_DB: tl.constexpr,  # write dB partial rows
    BLOCK_M: tl.constexpr,  # rows per loop step
    BLOCK_N: tl.constexpr,  # columns owned by one program
    COMPUTE: tl.constexpr,  # accumulation dtype
    NUM_STAGES: tl.constexpr,  # tiles in flight: loads issued ahead of their use
):
    """dW/dB partial sums for wide rows, on a (column block, row group) grid."""
    col_block = tl.program_id(0)
    group = tl.program_id(1)
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    row_begin = group.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_begin + rows_per_program, M)
    for row_start in tl.range(row_begin, row_end, BLOCK_M, num_stages=NUM_STAGES):
        rows = row_start + tl.arange(0, BLOCK_M)
        row_mask = rows < row_end
        x_hat, dy, _, _ = load_tile(
            X, DY, None, MEAN, RSTD, rows, cols, row_mask, col_mask, stride_x, stride_dy, COMPUTE, ""
        )
        dw_acc += dy * x_hat
        db_acc += dy
    store_partial_row(PARTIAL, HAS_DW, HAS_DB, group, tl.num_programs(1), N, cols, col_mask, dw_acc, db_acc)


@triton.jit
def add_partial_rows(
    PARTIAL,  # COMPUTE (K, P, N): K stacked sets (dW, dB) of P partial rows
    OUT0,  # (N,) in the parameter's dtype: Σ_p PARTIAL[0, p]
    OUT1,  # (N,): Σ_p PARTIAL[1, p] (unused when K == 1)
    k,  # which set to add up
    col_block,  # which BLOCK_N columns of it
    P,  # partial rows per set
    N,  # number of columns
    BLOCK_P: tl.constexpr,  # partial rows added per loop step
    BLOCK_N: tl.constexpr,  # columns per block
):
    """Add up the P partial rows of set ``k`` over one column block, always in the same order."""
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=PARTIAL.dtype.element_ty)
    for p_start in range(0, P, BLOCK_P):
        p = p_start + tl.arange(0, BLOCK_P)
        mask = (p < P)[:, None] & col_mask[None, :]
        # .cg: read from L2, where the other programs' stores are (L1 is not coherent)
        rows = PARTIAL + (k.to(tl.int64) * P + p[:, None]) * N + cols[None, :]
        acc += tl.load(rows, mask=mask, other=0.0, cache_modifier=".cg")
    total = tl.sum(acc, axis=0)
    if k == 0:
        tl.store(OUT0 + cols, total.to(OUT0.dtype.element_ty), mask=col_mask)
    else:
        tl.store(OUT1 + cols, total.to(OUT1.dtype.element_ty), mask=col_mask)


@triton.jit
def partial_sum_kernel(
    PARTIAL,  # COMPUTE (K, P, N): K stacked sets (dW, dB) of P partial rows
    OUT0,  # (N,) in the parameter's dtype: Σ_p PARTIAL[0, p]
    OUT1,  # (N,): Σ_p PARTIAL[1, p] (unused when K == 1)
    P,  # partial rows per set
    N,  # number of columns
    BLOCK_P: tl.constexpr,  # partial rows added per loop step
    BLOCK_N: tl.constexpr,  # columns per program
):
    """Second stage of dW/dB: add the partial rows, always in the same order. Grid (column blocks, K):
    narrow column blocks give enough programs to stream the (L2-resident) partial rows even when N is small."""
    add_partial_rows(PARTIAL, OUT0, OUT1, tl.program_id(1), tl.program_id(0), P, N, BLOCK_P, BLOCK_N)
