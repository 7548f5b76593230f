"""Variant: the forward of padded half-precision rows as two tiles, in Gluon.

**Takes** float16/bfloat16 rows of 4097 to 12287 values that a power-of-two tile pads by a quarter or more
(the ``forward_padded`` entries with ``two_tiles``), on a GPU. **Gains** up to 11 % over the padded tile at
4608 columns (H100, 4096 rows). **Else** :func:`ln_tutorial.kernels.layer_norm_fwd_kernel`. In Gluon the
kernel chooses its own layouts, so its warps trade the row statistics once instead of twice.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def layer_norm_fwd_two_tiles_kernel(
    X,  # input, (M, N), rows ``stride_x`` elements apart, last dim contiguous
    Y,  # output, (M, N), rows ``stride_y`` elements apart
    W,  # weight, (N,), or None
    B,  # bias, (N,), or None
    MEAN,  # per-row mean, (M,), float32
    RSTD,  # per-row reciprocal standard deviation, (M,), float32
    stride_x,  # elements between two rows of X
    stride_y,  # elements between two rows of Y
    N,  # number of columns
    eps,  # added to the variance (rounded to float32)
    eps_lo,  # eps minus its float32 rounding
    BLOCK_N: gl.constexpr,  # the first tile: half the power of two >= N
    COMPUTE: gl.constexpr,  # accumulation dtype: float32
    TAIL_N: gl.constexpr,  # the second tile's width (a power of two) for the columns past BLOCK_N
):
    """One program normalizes one row held in registers, its warps trading the row sums once.

    Warp ``g`` holds group ``g``, columns ``[g * G, (g + 1) * G)`` with ``G = BLOCK_N / warps``. With
    shuffles inside the warp only, it sums its group (``Σ_g x``) and, around the group's mean ``s_g``,
    ``T_g = Σ (x - s_g)`` and ``Q_g = Σ (x - s_g)²``. These cross between warps once, into a layout
    where lane ``g`` of every warp holds group ``g``'s values, and each warp adds them up with shuffles:
    ``mean = Σ_g Σ_g x / N`` and::

        Σ (x - mean)² = Σ_g [Q_g - 2 (mean - s_g) T_g + n_g (mean - s_g)²],

    with ``n_g`` the group's columns inside the row. ``Q_g`` and ``n_g (mean - s_g)²`` are never
    negative and ``T_g`` is rounding, so nothing cancels, whatever the mean.

    With ``TAIL_N`` > 0 the row is two tiles, ``BLOCK_N`` columns and then ``TAIL_N`` (9728 = 8192 +
    2048, of which 1536 are the row's), so a padded row idles fewer lanes than one tile of the next
    power of two; warp ``g``'s group is its part of both tiles.
    """
    WARPS: gl.constexpr = gl.num_warps()
    VEC: gl.constexpr = 128 // X.dtype.element_ty.primitive_bitwidth  # values per 16-byte access
    lanes: gl.constexpr = gl.BlockedLayout([1, 2, 2], [32, 1, 1], [WARPS, 1, 1], [2, 1, 0])
    inv_n = gl.div_rn(gl.full([], 1.0, COMPUTE), gl.full([], N, COMPUTE))

    row = gl.program_id(0).to(gl.int64)
    x, cols, mask, n_g = _load_tile(X + row * stride_x, 0, N, BLOCK_N, VEC, WARPS, COMPUTE)
    sum_g = gl.sum(x, axis=1)  # inside each warp
    if TAIL_N > 0:
        gl.static_assert(TAIL_N >= 32 * WARPS)  # every lane holds at least one of the tail's columns
        TAIL_VEC: gl.constexpr = VEC if TAIL_N >= 32 * WARPS * VEC else TAIL_N // (32 * WARPS)
        x_tail, cols_tail, mask_tail, n_tail = _load_tile(X + row * stride_x, BLOCK_N, N, TAIL_N, TAIL_VEC, WARPS, COMPUTE)
        sum_g += gl.convert_layout(gl.sum(x_tail, axis=1), sum_g.type.layout)
        n_g += gl.convert_layout(n_tail, n_g.type.layout)
    center_g = sum_g / gl.maximum(n_g, 1.0)  # the group's mean s_g
    t_g, q_g = _deviation_sums(x, mask, center_g)
    if TAIL_N > 0:
        t_tail, q_tail = _deviation_sums(x_tail, mask_tail, gl.convert_layout(center_g, n_tail.type.layout))
        t_g += gl.convert_layout(t_tail, t_g.type.layout)
        q_g += gl.convert_layout(q_tail, q_g.type.layout)
    # The one exchange between warps: the four values of every group, packed, into ``lanes``.
    sums, squares = gl.split(gl.convert_layout(gl.join(gl.join(sum_g, t_g), gl.join(q_g, n_g)), lanes))
    sum_l, t_l = gl.split(sums)
    q_l, n_l = gl.split(squares)
    mean = gl.sum(sum_l, axis=0) * inv_n  # inside each warp
    shift_gap = mean - sum_l / gl.maximum(n_l, 1.0)  # mean - s_g
    var = gl.sum(q_l - 2.0 * shift_gap * t_l + n_l * shift_gap * shift_gap, axis=0) * inv_n  # inside each warp
    rstd = 1.0 / gl.sqrt(var + eps + eps_lo)
    _normalize(x, mean, rstd, W, B, Y, row * stride_y, cols, mask, COMPUTE)
    if TAIL_N > 0:
        _normalize(x_tail, mean, rstd, W, B, Y, row * stride_y, cols_tail, mask_tail, COMPUTE)
    gl.store(MEAN + row, mean)
    gl.store(RSTD + row, rstd)


@gluon.jit
def _load_tile(row_start, start, N, WIDTH: gl.constexpr, VEC: gl.constexpr, WARPS: gl.constexpr,
               COMPUTE: gl.constexpr):  # fmt: skip
    """Load columns ``[start, start + WIDTH)`` of the row at ``row_start`` (those < ``N``), warp ``g``
    holding ``[start + g * G, start + (g + 1) * G)``, ``G = WIDTH / WARPS``, in vectors of ``VEC``.
    Returns the values (zero past ``N``), their columns, the mask and each warp's count of columns."""
    GROUP: gl.constexpr = WIDTH // WARPS
    tile: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [WARPS, 1], [1, 0])  # (group, column)
    groups = gl.arange(0, WARPS, layout=gl.SliceLayout(1, tile))
    cols = start + groups[:, None] * GROUP + gl.arange(0, GROUP, layout=gl.SliceLayout(0, tile))[None, :]
    mask = cols < N
    x = gl.load(row_start + cols, mask=mask, other=0.0).to(COMPUTE)
    n_g = gl.minimum(gl.maximum(N - start - groups * GROUP, 0), GROUP).to(COMPUTE)
    return x, cols, mask, n_g


@gluon.jit
def _deviation_sums(x, mask, center_g):
    """Per group (warp): ``T_g = Σ (x - s_g)`` and ``Q_g = Σ (x - s_g)²`` over its columns in ``mask``."""
    dev = gl.where(mask, x - center_g[:, None], 0.0)
    return gl.sum(dev, axis=1), gl.sum(dev * dev, axis=1)


@gluon.jit
def _normalize(x, mean, rstd, W, B, Y, row_start, cols, mask, COMPUTE: gl.constexpr):
    """Write ``y = (x - mean) * rstd * w + b`` to the columns ``cols`` of the row at ``Y + row_start``."""
    y = (x - mean) * rstd
    if W is not None:
        y = y * gl.load(W + cols, mask=mask, other=0.0).to(COMPUTE)
    if B is not None:
        y = y + gl.load(B + cols, mask=mask, other=0.0).to(COMPUTE)
    gl.store(Y + row_start + cols, y.to(Y.dtype.element_ty), mask=mask)
