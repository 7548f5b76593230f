"""The Triton kernels of ln_tutorial, and nothing else.

Every kernel works on a 2-D view of the data: ``M`` rows (all leading dimensions
flattened) of ``N`` elements (the normalized dimensions flattened). Rows are
addressed through a row stride and 64-bit offsets, so a row-strided input needs
no copy and ``M * N`` may exceed ``2**31``.

Symbols match the tutorial pages:

* ``x̂ = (x - mean) * rstd``, with ``rstd = 1 / sqrt(var + eps)``;
* ``y = x̂ * w + b``;
* ``c1 = mean(x̂ * w * dy)`` and ``c2 = mean(w * dy)`` over a row;
* ``dx = (w * dy - (x̂ * c1 + c2)) * rstd``;
* ``dw = Σ_rows dy * x̂`` and ``db = Σ_rows dy``.

``COMPUTE`` is the accumulation dtype: float32, or float64 for float64 inputs.
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
    PREFETCH_AHEAD: tl.constexpr,  # 0, or bring the rows of program pid + this into L2 (not in the interpreter)
):
    """One program normalizes ``BLOCK_M`` whole rows held in registers.

    With ``PREFETCH_AHEAD``, once its own loads are issued a program asks L2 for
    the rows of a program that starts later, whose loads then come from L2.
    """
    inv_n = reciprocal(N, COMPUTE)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]

    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    if PREFETCH_AHEAD > 0:
        prefetch_rows(X, rows + PREFETCH_AHEAD * BLOCK_M, M, 0, N, stride_x, BLOCK_N)
    mean = tl.sum(x, axis=1) * inv_n
    # Centre first, then square: the two-pass variance does not cancel.
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(x_centered * x_centered, axis=1) * inv_n
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
    y = x_centered * rstd[:, None]
    if W is not None:
        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]
    if B is not None:
        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]

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
    N,  # number of columns; usually more than BLOCK_N
    eps,  # added to the variance (rounded to float32 by Triton)
    eps_lo,  # eps minus its float32 rounding
    BLOCK_N: tl.constexpr,  # columns handled per loop step
    COMPUTE: tl.constexpr,  # accumulation dtype
):
    """Rows too wide for registers (or that registers would pad by a third or more, see
    ``launch.forward_config``): one row per program, two sweeps over it.

    The first sweep accumulates Σ(x - s) and Σ(x - s)² around a shift ``s``,
    the mean of the first block (or of the row, if shorter). Shifting by a
    value close to the mean keeps ``var = E[(x-s)²] - E[x-s]²`` from
    cancelling. The second sweep re-reads the row (mostly from L2) and
    writes ``y``.
    """
    inv_n = reciprocal(N, COMPUTE)
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK_N)

    # Masked: a float64 row of 8193 to 16383 values is looped but shorter than one step.
    first = tl.load(x_row + cols, mask=cols < N, other=0.0).to(COMPUTE)
    shift = tl.sum(first, axis=0) / tl.minimum(N, BLOCK_N)
    sum_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    sum_sq_dev = tl.zeros([BLOCK_N], dtype=COMPUTE)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        # evict_last: keep the row in L2 for the second sweep
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
        dev = tl.where(mask, x - shift, 0.0)
        sum_dev += dev
        sum_sq_dev += dev * dev
    mean_dev = tl.sum(sum_dev, axis=0) * inv_n
    var = tl.maximum(tl.sum(sum_sq_dev, axis=0) * inv_n - mean_dev * mean_dev, 0.0)
    mean = shift + mean_dev
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)

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
    grid-wide barrier: :func:`layer_norm_bwd_one_launch_kernel`) adds the
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
    """dx for rows too wide for registers: one row per program.

    The first sweep accumulates the row sums behind c1 and c2, the second
    re-reads the row (mostly from L2) and writes dx. dW/dB come from
    :func:`layer_norm_bwd_dwdb_kernel`.
    """
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
def load_raw_tile(
    X,  # input, rows ``stride_x`` elements apart
    DY,  # upstream gradient, rows ``stride_dy`` elements apart
    rows,  # (BLOCK_M,) row indices of the tile
    row_end,  # rows from here on are not the program's
    cols,  # (BLOCK_N,) column indices of the tile
    col_mask,  # (BLOCK_N,) columns that exist
    stride_x,  # elements between two rows of X
    stride_dy,  # elements between two rows of DY
):
    """x and ∇y of a tile as stored (two bytes a value in half precision: fewer registers
    to hold than the float32 terms), and its row mask and element mask."""
    row_mask = rows < row_end
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0)
    return x, dy, row_mask, mask


@triton.jit
def add_pair(a, b, c, d):
    """Combine function of two sums reduced together: ``(a, b) + (c, d)``.

    Two ``tl.sum`` calls each end in their own exchange between warps (shared
    memory and a barrier); one ``tl.reduce`` of the pair exchanges both at once.
    In the split kernel that gained 1-2 % at the wide shapes; in the persistent
    kernel it moved the two-tile rows by -24 to +6 % with no pattern, so that
    kernel sums twice.
    """
    return a + c, b + d


@triton.jit
def publish_row_sums(
    RECORDS,  # int64 (M, SPLIT, 2): each part's two row sums as (tag << 32) | float32 bits
    x,  # (BLOCK_M, BLOCK_N) input as loaded
    dy,  # (BLOCK_M, BLOCK_N) upstream gradient as loaded
    w,  # (BLOCK_N,) weight, or None
    MEAN,  # per-row mean, (M,)
    RSTD,  # per-row rstd, (M,)
    rows,  # (BLOCK_M,) row indices of the tile
    row_mask,  # (BLOCK_M,) rows that exist
    mask,  # (BLOCK_M, BLOCK_N) elements that exist
    part,  # which of the SPLIT parts of each row this program holds
    tag,  # this launch's "written" flag, never 0 (see layer_norm_bwd_split_kernel)
    SPLIT: tl.constexpr,  # programs sharing each row
    COMPUTE: tl.constexpr,  # accumulation dtype (float32)
):
    """Write this program's part of the tile's two row sums, Σ x̂·w·∇y and Σ w·∇y.

    Each sum travels with its launch's "written" flag in one 64-bit word, written
    atomically: a reader that sees the flag sees the sum, so no fence or
    barrier is needed, and the record is read in one round trip.
    """
    mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
    rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
    x_hat, _, w_dy = tile_terms(x, dy, w, mean, rstd, mask, COMPUTE)
    record = RECORDS + (rows * SPLIT + part) * 2
    sum_xhat_wdy, sum_wdy = tl.reduce((x_hat * w_dy, w_dy), 1, add_pair)
    tl.atomic_xchg(record, written_record(sum_xhat_wdy, tag), mask=row_mask, sem="relaxed")
    tl.atomic_xchg(record + 1, written_record(sum_wdy, tag), mask=row_mask, sem="relaxed")


@triton.jit
def written_record(total, tag=1):
    """``(tag << 32) | the float32 bits of total``: a sum and its "written" flag in one int64."""
    flag = (tag + tl.zeros([], tl.int64)) << 32
    return flag | (total.to(tl.float32).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def whole_row_sums(
    RECORDS,  # int64 (M, SPLIT, 2), as publish_row_sums writes it
    rows,  # (BLOCK_M,) row indices of the tile
    row_mask,  # (BLOCK_M,) rows that exist
    tag,  # the "written" flag of this launch
    SPLIT: tl.constexpr,  # programs sharing each row
    SPLIT_BLOCK: tl.constexpr,  # power of two >= SPLIT
):
    """Σ x̂·w·∇y and Σ w·∇y over whole rows, once all SPLIT parts have written theirs.

    Polled with volatile loads (from L2 every time) until every record carries
    this launch's flag (not 0, nor an earlier launch's). The parts are added in
    the same order by every program: deterministic.
    """
    parts = tl.arange(0, SPLIT_BLOCK)
    mask = row_mask[:, None] & (parts < SPLIT)[None, :]
    records = RECORDS + (rows[:, None] * SPLIT + parts[None, :]) * 2
    ready = written_record(tl.zeros([], tl.float32), tag)  # what absent parts and rows read as: written, 0.0
    first = tl.load(records, mask=mask, other=ready, volatile=True)
    second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
    # until the upper halves, the flags, all equal this launch's (compared as bits: a flag may set the sign)
    while tl.max(((((first ^ ready) | (second ^ ready)) >> 32) != 0).to(tl.int32)) > 0:
        first = tl.load(records, mask=mask, other=ready, volatile=True)
        second = tl.load(records + 1, mask=mask, other=ready, volatile=True)
    first = (first & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    second = (second & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    return tl.reduce((first, second), 1, add_pair)


@triton.jit
def prefetch_to_l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (PTX ``prefetch.global.L2``): no registers held, nothing to wait for."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n mov.u32 $0, 0;", "=r,l", [ptrs.to(tl.int64, bitcast=True)],
        dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def prefetch_rows(
    PTR,  # a tensor's rows, ``stride`` elements apart
    rows,  # (BLOCK_M,) row indices; those from row_end on fetch the last row again
    row_end,  # rows from here on are not to be fetched
    col_begin,  # first column
    N,  # number of columns
    stride,  # elements between two rows
    BLOCK_N: tl.constexpr,  # columns to fetch from col_begin on, at least 16
):
    """Start bringing BLOCK_N columns of some rows into L2: one address per 16 values (one or two
    32-byte sectors), clamped to the tensor so that no address falls outside it."""
    rows = tl.minimum(rows, row_end - 1)
    cols = tl.minimum(col_begin + tl.arange(0, BLOCK_N // 16) * 16, N - 1)
    prefetch_to_l2(PTR + rows[:, None] * stride + cols[None, :])


@triton.jit
def prefetch_tile(
    X,  # input, rows ``stride_x`` elements apart
    DY,  # upstream gradient, rows ``stride_dy`` elements apart
    rows,  # (BLOCK_M,) row indices; those from row_end on fetch the last row again
    row_end,  # rows from here on are not the program's
    col_begin,  # first column of the tile
    N,  # number of columns
    stride_x,  # elements between two rows of X
    stride_dy,  # elements between two rows of DY
    BLOCK_N: tl.constexpr,  # columns of the tile, at least 16
):
    """Start bringing a tile's x and ∇y into L2."""
    prefetch_rows(X, rows, row_end, col_begin, N, stride_x, BLOCK_N)
    prefetch_rows(DY, rows, row_end, col_begin, N, stride_dy, BLOCK_N)


@triton.jit
def layer_norm_bwd_split_kernel(
    DY,  # upstream gradient, (M, N), rows ``stride_dy`` elements apart
    X,  # input saved by the forward, (M, N), rows ``stride_x`` apart
    W,  # weight, (N,), or None
    MEAN,  # per-row mean from the forward, (M,)
    RSTD,  # per-row rstd from the forward, (M,)
    DX,  # input gradient, (M, N), rows ``stride_dx`` apart
    PARTIAL,  # COMPUTE (K, G, N): group g's Σ dy * x̂ (if HAS_DW) and Σ dy (if HAS_DB) over its rows
    OUT0,  # ONE_LAUNCH: (N,) the first gradient, dW (if HAS_DW) or dB
    OUT1,  # ONE_LAUNCH: (N,) dB when there are both (else OUT0 again)
    BARRIER,  # ONE_LAUNCH: int32 (2,) for grid_barrier, kept for this kernel's launches on one stream
    RECORDS,  # int64 (M, SPLIT, 2): the parts' row sums, see publish_row_sums; zeroed unless ONE_LAUNCH
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dx,  # elements between two rows of DX
    M,  # number of rows
    N,  # number of columns
    rows_per_group,  # each group of SPLIT programs owns this many consecutive rows, a multiple of BLOCK_M
    HAS_DW: tl.constexpr,  # the layer norm has a weight: write dW partial rows
    HAS_DB: tl.constexpr,  # the layer norm has a bias: write dB partial rows
    SPLIT: tl.constexpr,  # programs sharing each row: cdiv(N, BLOCK_N)
    SPLIT_BLOCK: tl.constexpr,  # power of two >= SPLIT
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # columns of each row that one program holds
    COMPUTE: tl.constexpr,  # accumulation dtype (float32)
    PREFETCH: tl.constexpr,  # prefetch the tile after the next one into L2 (not in the interpreter)
    ONE_LAUNCH: tl.constexpr,  # add up dW/dB after a grid-wide barrier (not in the interpreter)
    REDUCE_BLOCK_P: tl.constexpr,  # ONE_LAUNCH: partial rows added per step of the reduction
    REDUCE_BLOCK_N: tl.constexpr,  # ONE_LAUNCH: columns per block of the reduction
):
    """Rows too wide for one program's registers, read once: SPLIT programs share each row.

    Program ``g * SPLIT + part`` holds columns ``[part * BLOCK_N, (part + 1) * BLOCK_N)``
    of group ``g``'s rows, and its dW/dB partial sums for those columns. c1 and c2
    need sums over the whole row, so each program writes its part of them
    (:func:`publish_row_sums`) and waits for the others' (:func:`whole_row_sums`).
    A tile's sums are written one tile ahead of their use: while the others
    catch up, the program is loading and summing its next tile, whose loads
    come from L2: the tile after it is prefetched there one step ahead. The
    programs wait for each other, so all must be resident at once: a
    cooperative launch.

    With ONE_LAUNCH the programs then meet at a grid-wide barrier and add up
    the partial rows (no second launch), and RECORDS needs no zeroing: a
    record's flag is the barrier's generation at the start of the launch
    (plus 1, so never 0), which every program reads before any can pass the
    barrier that moves it on. A record left by an earlier launch carries an
    earlier generation; ``launch._split_state`` zeroes RECORDS again long before
    the generation could come round to the same value (2**31 launches).
    """
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    if ONE_LAUNCH:
        tag = (tl.atomic_add(BARRIER + 1, 0, sem="relaxed").to(tl.int64) & 0x7FFFFFFF) + 1
    else:
        tag = 1
    group, part = pid // SPLIT, pid % SPLIT
    programs = tl.num_programs(0)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None  # the same columns in every tile
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    row_begin = group.to(tl.int64) * rows_per_group
    row_end = tl.minimum(row_begin + rows_per_group, M)

    rows = row_begin + tl.arange(0, BLOCK_M)
    x, dy, row_mask, mask = load_raw_tile(X, DY, rows, row_end, cols, col_mask, stride_x, stride_dy)
    publish_row_sums(RECORDS, x, dy, w, MEAN, RSTD, rows, row_mask, mask, part, tag, SPLIT, COMPUTE)
    for _ in range(row_begin, row_end, BLOCK_M):
        next_rows = rows + BLOCK_M
        if PREFETCH:
            prefetch_tile(X, DY, next_rows + BLOCK_M, row_end, part * BLOCK_N, N, stride_x, stride_dy, BLOCK_N)
        x_next, dy_next, next_row_mask, next_mask = load_raw_tile(
            X, DY, next_rows, row_end, cols, col_mask, stride_x, stride_dy
        )
        publish_row_sums(RECORDS, x_next, dy_next, w, MEAN, RSTD, next_rows, next_row_mask, next_mask, part, tag,
                         SPLIT, COMPUTE)  # fmt: skip
        sum_xhat_wdy, sum_wdy = whole_row_sums(RECORDS, rows, row_mask, tag, SPLIT, SPLIT_BLOCK)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        x_hat, dy_c, w_dy = tile_terms(x, dy, w, mean, rstd, mask, COMPUTE)
        dw_acc, db_acc = store_dx_and_accumulate(
            DX, rows, cols, row_mask, col_mask, stride_dx, x_hat, dy_c, w_dy, rstd, sum_xhat_wdy * inv_n,
            sum_wdy * inv_n, dw_acc, db_acc,
        )  # fmt: skip
        x, dy, rows, row_mask, mask = x_next, dy_next, next_rows, next_row_mask, next_mask
    store_partial_row(PARTIAL, HAS_DW, HAS_DB, group, programs // SPLIT, N, cols, col_mask, dw_acc, db_acc)
    if ONE_LAUNCH:
        grid_barrier(BARRIER)
        col_blocks = tl.cdiv(N, REDUCE_BLOCK_N)
        for task in range(pid, col_blocks * (HAS_DW + HAS_DB), programs):
            k, col_block = task // col_blocks, task % col_blocks
            add_partial_rows(PARTIAL, OUT0, OUT1, k, col_block, programs // SPLIT, N, REDUCE_BLOCK_P, REDUCE_BLOCK_N)


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
    """Second stage of dW/dB: add the partial rows, always in the same order.

    Grid (column blocks, K): narrow column blocks give enough programs to keep
    the (L2-resident) partial buffer streaming even when N is small.
    """
    add_partial_rows(PARTIAL, OUT0, OUT1, tl.program_id(1), tl.program_id(0), P, N, BLOCK_P, BLOCK_N)


@triton.jit
def grid_barrier(
    BARRIER,  # int32 (2,): programs arrived (0 between launches), then a generation count
):
    """Wait until every program of the grid has arrived here.

    Only for a cooperative launch, which guarantees that all programs are
    resident at once: otherwise a waiting program could keep another from
    ever starting. The last program to arrive resets the count for the next
    launch and moves the generation on, which releases the others.
    """
    tl.debug_barrier()  # every thread's stores before this program arrives
    generation = tl.atomic_add(BARRIER + 1, 0, sem="acquire")
    if tl.atomic_add(BARRIER, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.atomic_xchg(BARRIER, 0, sem="relaxed")
        tl.atomic_add(BARRIER + 1, 1, sem="release")
    else:
        while tl.atomic_add(BARRIER + 1, 0, sem="acquire") == generation:
            pass
    tl.debug_barrier()  # no thread reads before the wait is over


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
