"""The forward kernels written in Gluon, Triton's lower-level dialect, and nothing else.

Gluon kernels choose their own data layouts. The two here are the fused forward
(``kernels.layer_norm_fwd_kernel``) for wide half-precision rows, with the row
statistics crossing between warps once instead of twice, padded rows held as
two tiles, and the same for rows of 128 KB held by the two programs of a
thread-block cluster, which trade their halves' statistics through each other's
shared memory (Hopper or later). Both take the fused kernel's arguments (the
first also the tail's width), so the launchers launch either (the cluster kernel
in clusters of two programs, ``launch.Launcher``). Triton's interpreter cannot
run Gluon: there, and for every other row, the Triton kernels run.
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
    TAIL_N: gl.constexpr,  # 0, or a second tile's width (power of two) for the columns past BLOCK_N
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

    With ``TAIL_N`` > 0 the row is two tiles, ``BLOCK_N`` columns and then
    ``TAIL_N`` (9728 = 8192 + 2048, of which 1536 are the row's), so a padded
    row idles fewer lanes than in one tile of the next power of two; warp
    ``g``'s group is its part of both tiles.
    """
    gl.static_assert(BLOCK_M == 1)
    gl.static_assert(PREFETCH_AHEAD == 0)
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
    sum_l, t_l, q_l, n_l = _exchange(sum_g, t_g, q_g, n_g, lanes)
    mean = gl.sum(sum_l, axis=0) * inv_n  # inside each warp
    var = _square_sum_around(mean, sum_l, t_l, q_l, n_l) * inv_n
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


# The cluster kernel's trade, in PTX. At the start: declare the shared words of the trade
# (an mbarrier, then the two programs' pairs), let thread 0 initialize the mbarrier for one
# arrival and make that visible to the cluster, and arrive (relaxed) at the cluster barrier
# that tells the other program this one runs.
_CLUSTER_START = gl.constexpr("""
.shared .align 16 .b8 ln_cluster_trade[32];
{
.reg .u32 bar, tid;
.reg .pred lead;
mov.u32 bar, ln_cluster_trade;
mov.u32 tid, %tid.x;
setp.eq.u32 lead, tid, 0;
@lead mbarrier.init.shared::cta.b64 [bar], 1;
@lead fence.mbarrier_init.release.cluster;
barrier.cluster.arrive.relaxed.aligned;
mov.u32 $0, 0;
}""")
# The trade: wait until the other program runs; thread 0 expects 8 bytes on this program's
# mbarrier and sends this program's pair ($4, $5) into its slot of the other program's shared
# memory, completing 8 bytes there; every thread waits for this program's mbarrier and reads
# both slots ($0-$3; this program's own slot is never written).
_CLUSTER_TRADE = gl.constexpr("""{
.reg .u32 bar, slots, mine, other, there_bar, there_slot, tid;
.reg .pred lead, done;
mov.u32 bar, ln_cluster_trade;
add.u32 slots, bar, 16;
mov.u32 mine, %cluster_ctarank;
xor.b32 other, mine, 1;
mad.lo.u32 there_slot, mine, 8, slots;
mapa.shared::cluster.u32 there_slot, there_slot, other;
mapa.shared::cluster.u32 there_bar, bar, other;
mov.u32 tid, %tid.x;
setp.eq.u32 lead, tid, 0;
barrier.cluster.wait.aligned;
@lead mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 8;
@lead st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [there_slot], {$4, $5}, [there_bar];
WAIT:
mbarrier.try_wait.parity.shared::cta.b64 done, [bar], 0;
@!done bra WAIT;
ld.shared.v4.f32 {$0, $1, $2, $3}, [slots];
}""")


@gluon.jit
def layer_norm_fwd_cluster_kernel(
    X,  # input, (M, N), rows ``stride_x`` elements apart, last dim contiguous
    Y,  # output, (M, N), rows ``stride_y`` elements apart
    W,  # weight, (N,), or None
    B,  # bias, (N,), or None
    MEAN,  # per-row mean, (M,), float32
    RSTD,  # per-row reciprocal standard deviation, (M,), float32
    stride_x,  # elements between two rows of X
    stride_y,  # elements between two rows of Y
    M,  # number of rows (one cluster of two programs per row)
    N,  # number of columns, more than BLOCK_N / 2
    eps,  # added to the variance (rounded to float32)
    eps_lo,  # eps minus its float32 rounding
    BLOCK_M: gl.constexpr,  # 1: one row per cluster
    BLOCK_N: gl.constexpr,  # power of two >= N; each program holds half of it
    COMPUTE: gl.constexpr,  # accumulation dtype: float32 (the trade carries float32 pairs)
    PREFETCH_AHEAD: gl.constexpr,  # 0 (the fused kernel's option, not offered here)
):
    """The two programs of a thread-block cluster normalize one row, each holding half of it.

    Launched in clusters of two along the grid's first axis: program ``2r + k``
    (``k`` its rank in the cluster) takes half ``k`` of row ``r``. Each computes
    its half's sum ``S_k`` and ``M2_k = Σ (x - S_k / n_k)²`` as
    ``layer_norm_fwd_one_exchange_kernel`` computes a row's, with one exchange
    between its warps. The two pairs then cross once, through distributed shared
    memory: each program's thread 0 stores its pair into the other program's
    shared memory (``st.async``, completing a transaction on that program's
    mbarrier), and every thread waits on its own mbarrier. Both programs combine
    the halves in the same order, so they hold the same bits::

        mean = (S_0 + S_1) / N,
        Σ (x - mean)² = Σ_k [M2_k + n_k (S_k / n_k - mean)²],

    where no term cancels. Triton 3.6 cannot reduce across the programs of a
    cluster, so the trade is inline PTX for sm_90 and later.
    """
    gl.static_assert(COMPUTE == gl.float32)
    gl.static_assert(BLOCK_M == 1)
    gl.static_assert(PREFETCH_AHEAD == 0)
    WARPS: gl.constexpr = gl.num_warps()
    HALF: gl.constexpr = BLOCK_N // 2
    GROUP: gl.constexpr = HALF // WARPS
    VEC: gl.constexpr = 128 // X.dtype.element_ty.primitive_bitwidth
    lanes: gl.constexpr = gl.BlockedLayout([1, 2, 2], [32, 1, 1], [WARPS, 1, 1], [2, 1, 0])
    inv_n = gl.div_rn(gl.full([], 1.0, COMPUTE), gl.full([], N, COMPUTE))
    gl.inline_asm_elementwise(_CLUSTER_START, "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    rank = gl.program_id(0) % 2  # = %cluster_ctarank: clusters of two along the first axis
    row = (gl.program_id(0) // 2).to(gl.int64)
    start = rank * HALF
    x, cols, mask, n_g = _load_tile(X + row * stride_x, start, N, HALF, VEC, WARPS, COMPUTE)
    # Ask L1 for this half of w and b while the sums and the trade run (+2 %; issued
    # before the loads of x, or just before the trade, it was slower). One address per 16-byte vector.
    per_vector: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [WARPS, 1], [1, 0])
    vectors = gl.minimum(  # a padded row's last value stands in for the columns past it
        start
        + gl.arange(0, WARPS, layout=gl.SliceLayout(1, per_vector))[:, None] * GROUP
        + gl.arange(0, GROUP // VEC, layout=gl.SliceLayout(0, per_vector))[None, :] * VEC,
        N - 1,
    )
    if W is not None:
        _prefetch_to_l1(W + vectors)
    if B is not None:
        _prefetch_to_l1(B + vectors)

    sum_l, t_l, q_l, n_l = _exchanged_group_sums(x, mask, n_g, lanes)
    sum_half = gl.sum(sum_l, axis=0)
    m2_half = _square_sum_around(sum_half / gl.maximum(gl.sum(n_l, axis=0), 1.0), sum_l, t_l, q_l, n_l)
    sum_0, m2_0, sum_1, m2_1 = gl.inline_asm_elementwise(
        _CLUSTER_TRADE, "=f,=f,=f,=f,f,f", [sum_half, m2_half], dtype=(gl.float32, gl.float32, gl.float32, gl.float32),
        is_pure=False, pack=1)  # fmt: skip
    sum_0 = gl.where(rank == 0, sum_half, sum_0)
    m2_0 = gl.where(rank == 0, m2_half, m2_0)
    sum_1 = gl.where(rank == 1, sum_half, sum_1)
    m2_1 = gl.where(rank == 1, m2_half, m2_1)
    n_0 = gl.minimum(N, HALF).to(COMPUTE)
    n_1 = gl.maximum(N - HALF, 0).to(COMPUTE)
    mean = (sum_0 + sum_1) * inv_n
    gap_0 = sum_0 / gl.maximum(n_0, 1.0) - mean
    gap_1 = sum_1 / gl.maximum(n_1, 1.0) - mean
    var = ((m2_0 + n_0 * gap_0 * gap_0) + (m2_1 + n_1 * gap_1 * gap_1)) * inv_n
    rstd = 1.0 / gl.sqrt(var + eps + eps_lo)
    _normalize(x, mean, rstd, W, B, Y, row * stride_y, cols, mask, COMPUTE)
    if rank == 0:
        gl.store(MEAN + row, mean)
        gl.store(RSTD + row, rstd)


@gluon.jit
def _prefetch_to_l1(ptrs):
    """Ask L1 for the lines at ``ptrs`` (PTX ``prefetch.global.L1``): no registers held, nothing to wait for."""
    gl.inline_asm_elementwise(
        "prefetch.global.L1 [$1];\n mov.u32 $0, 0;", "=r,l", [ptrs.to(gl.int64, bitcast=True)], dtype=gl.int32,
        is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _exchanged_group_sums(x, mask, n_g, lanes: gl.constexpr):
    """Each warp's group sums ``(Σ_g x, T_g, Q_g, n_g)``, crossed between warps once into
    ``lanes``, where lane ``g`` of every warp holds group ``g``'s values."""
    sum_g = gl.sum(x, axis=1)  # inside each warp
    t_g, q_g = _deviation_sums(x, mask, sum_g / gl.maximum(n_g, 1.0))
    return _exchange(sum_g, t_g, q_g, n_g, lanes)


@gluon.jit
def _deviation_sums(x, mask, center_g):
    """Per group (warp): ``T_g = Σ (x - s_g)`` and ``Q_g = Σ (x - s_g)²`` over its columns in ``mask``."""
    dev = gl.where(mask, x - center_g[:, None], 0.0)
    return gl.sum(dev, axis=1), gl.sum(dev * dev, axis=1)


@gluon.jit
def _exchange(sum_g, t_g, q_g, n_g, lanes: gl.constexpr):
    """The one exchange between warps: the four values of every group, packed, into ``lanes``."""
    packed = gl.convert_layout(gl.join(gl.join(sum_g, t_g), gl.join(q_g, n_g)), lanes)
    sums, squares = gl.split(packed)
    sum_l, t_l = gl.split(sums)
    q_l, n_l = gl.split(squares)
    return sum_l, t_l, q_l, n_l


@gluon.jit
def _square_sum_around(center, sum_l, t_l, q_l, n_l):
    """``Σ (x - center)²`` from the group sums: ``Σ_g [Q_g - 2 (center - s_g) T_g + n_g (center - s_g)²]``."""
    shift_gap = center - sum_l / gl.maximum(n_l, 1.0)  # center - s_g
    return gl.sum(q_l - 2.0 * shift_gap * t_l + n_l * shift_gap * shift_gap, axis=0)  # inside each warp


@gluon.jit
def _normalize(x, mean, rstd, W, B, Y, row_start, cols, mask, COMPUTE: gl.constexpr):
    """Write ``y = (x - mean) * rstd * w + b`` to the columns ``cols`` of the row at ``Y + row_start``."""
    y = (x - mean) * rstd
    if W is not None:
        y = y * gl.load(W + cols, mask=mask, other=0.0).to(COMPUTE)
    if B is not None:
        y = y + gl.load(B + cols, mask=mask, other=0.0).to(COMPUTE)
    gl.store(Y + row_start + cols, y.to(Y.dtype.element_ty), mask=mask)
