"""The forward kernel written in Gluon, Triton's lower-level dialect, and nothing else.

Gluon kernels choose their own data layouts. The one here is the fused forward
(``kernels.layer_norm_fwd_kernel``) for wide half-precision rows, with the row
statistics crossing between warps once instead of twice; the performance notes
(run 130) measure it. It takes exactly the fused kernel's arguments, so the
launchers and the C++ extension launch either. Triton's interpreter cannot run
Gluon: there, and for every other row, the Triton kernels run.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def layer_norm_fwd_one_exchange_kernel(
    X,  # input, (M, N), rows ``stride_x`` elements apart, last dim contiguous
    Y,  # output, (M, N), rows ``stride_y`` elements apart
    W,  # weight, (N,), or None
    B,  # bias, (N,), or None
    MEAN,  # per-row mean, (M,), float32
    RSTD,  # per-row reciprocal standard deviation, (M,), float32
    stride_x,  # elements between two rows of X
    stride_y,  # elements between two rows of Y
    M,  # number of rows (one program per row)
    N,  # number of columns
    eps,  # added to the variance (rounded to float32)
    eps_lo,  # eps minus its float32 rounding
    BLOCK_M: gl.constexpr,  # 1: one row per program
    BLOCK_N: gl.constexpr,  # power of two >= N, at least 32 values per warp
    COMPUTE: gl.constexpr,  # accumulation dtype: float32
    PREFETCH_AHEAD: gl.constexpr,  # 0 (the fused kernel's option, not offered here)
):
    """One program normalizes one row held in registers, its warps trading the row sums once.

    Warp ``g`` holds group ``g``, columns ``[g * G, (g + 1) * G)`` with ``G =
    BLOCK_N / warps``. With shuffles inside the warp only, it sums its group
    (``Σ_g x``) and, around the group's mean ``s_g``, ``T_g = Σ (x - s_g)``
    and ``Q_g = Σ (x - s_g)²``. These cross between warps once, into a layout
    where lane ``g`` of every warp holds group ``g``'s values, and each warp
    adds them up with shuffles: ``mean = Σ_g Σ_g x / N`` and::

        Σ (x - mean)² = Σ_g [Q_g - 2 (mean - s_g) T_g + n_g (mean - s_g)²],

    with ``n_g`` the group's columns inside the row. ``Q_g`` and
    ``n_g (mean - s_g)²`` are never negative and ``T_g`` is rounding, so
    nothing cancels, whatever the mean.
    """
    gl.static_assert(BLOCK_M == 1)
    gl.static_assert(PREFETCH_AHEAD == 0)
    WARPS: gl.constexpr = gl.num_warps()
    GROUP: gl.constexpr = BLOCK_N // WARPS
    VEC: gl.constexpr = 128 // X.dtype.element_ty.primitive_bitwidth  # values per 16-byte access
    tile: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [WARPS, 1], [1, 0])  # (group, column)
    lanes: gl.constexpr = gl.BlockedLayout([1, 2, 2], [32, 1, 1], [WARPS, 1, 1], [2, 1, 0])
    inv_n = gl.div_rn(gl.full([], 1.0, COMPUTE), gl.full([], N, COMPUTE))

    row = gl.program_id(0).to(gl.int64)
    groups = gl.arange(0, WARPS, layout=gl.SliceLayout(1, tile))
    cols = groups[:, None] * GROUP + gl.arange(0, GROUP, layout=gl.SliceLayout(0, tile))[None, :]
    mask = cols < N
    x = gl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(COMPUTE)

    n_g = gl.minimum(gl.maximum(N - groups * GROUP, 0), GROUP).to(COMPUTE)
    sum_g = gl.sum(x, axis=1)  # inside each warp
    dev = gl.where(mask, x - (sum_g / gl.maximum(n_g, 1.0))[:, None], 0.0)
    t_g = gl.sum(dev, axis=1)
    q_g = gl.sum(dev * dev, axis=1)

    # The one exchange between warps: the four values of every group, packed.
    packed = gl.convert_layout(gl.join(gl.join(sum_g, t_g), gl.join(q_g, n_g)), lanes)
    sums, squares = gl.split(packed)
    sum_l, t_l = gl.split(sums)
    q_l, n_l = gl.split(squares)
    mean = gl.sum(sum_l, axis=0) * inv_n  # inside each warp
    shift_gap = mean - sum_l / gl.maximum(n_l, 1.0)  # mean - s_g
    var = gl.sum(q_l - 2.0 * shift_gap * t_l + n_l * shift_gap * shift_gap, axis=0) * inv_n
    rstd = 1.0 / gl.sqrt(var + eps + eps_lo)

    y = (x - mean) * rstd
    if W is not None:
        y = y * gl.load(W + cols, mask=mask, other=0.0).to(COMPUTE)
    if B is not None:
        y = y + gl.load(B + cols, mask=mask, other=0.0).to(COMPUTE)
    gl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)
    gl.store(MEAN + row, mean)
    gl.store(RSTD + row, rstd)
