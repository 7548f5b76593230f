"""Run 133, second lease: where the cluster forward's time goes.

The kernel of cluster_forward.py with a row loop (a grid of fewer clusters than rows makes it
persistent; the trade then alternates between two slots, so one cluster barrier per row is
enough) and TRADE=False, which skips the exchange and the barriers and normalizes each half by
its own statistics (wrong on purpose: the cost of the structure without the trade).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

_ARRIVE = gl.constexpr("barrier.cluster.arrive.relaxed.aligned;\nmov.u32 $0, 0;")
# $2, $3: this program's pair; $4: the slot (0 or 1); $5: nonzero on the first row (then wait for
# the start arrive first: DSMEM may be written once both programs run). TRADES[k] is TRADE=k's PTX:
# 1 the trade of cluster_forward.py; 2 a fence by the storing thread and a relaxed arrive instead of a
# release arrive; 3 the release / acquire barrier alone (no store: wrong results); 4 a relaxed
# barrier alone; 5 as 1 without the start barrier (no arrive at the start).
_HEAD = """{
.shared .align 16 .b32 pairs[4];
.reg .u32 here, there, rank, tid;
.reg .pred lead, first;
setp.ne.u32 first, $5, 0;
mov.u32 here, pairs;
mad.lo.u32 here, $4, 8, here;
mov.u32 rank, %cluster_ctarank;
xor.b32 rank, rank, 1;
mapa.shared::cluster.u32 there, here, rank;
mov.u32 tid, %tid.x;
setp.eq.u32 lead, tid, 0;
"""
_WAIT_START = "@first barrier.cluster.wait.aligned;\n"
_STORE = "@lead st.shared::cluster.v2.f32 [there], {$2, $3};\n"
_BARRIER = "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
_RELAXED = "barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n"
_TAIL = "ld.shared.v2.f32 {$0, $1}, [here];\n}"
TRADES = gl.constexpr((
    "",
    _HEAD + _WAIT_START + _STORE + _BARRIER + _TAIL,
    _HEAD + _WAIT_START + _STORE + "@lead fence.acq_rel.cluster;\n" + _RELAXED + _TAIL,
    _HEAD + _WAIT_START + "mov.f32 $0, $2;\nmov.f32 $1, $3;\n" + _BARRIER + "}",
    _HEAD + _WAIT_START + "mov.f32 $0, $2;\nmov.f32 $1, $3;\n" + _RELAXED + "}",
    _HEAD + _STORE + _BARRIER + _TAIL,
    # 6: the pair sent with st.async into the other's shared memory, completing a transaction on its
    # mbarrier; no barrier after the start one. $6: byte offset of the mbarrier (8 bytes, then the
    # pair) in the dynamic shared memory, past what Triton uses (the launch adds 16 bytes).
    """{
.reg .u32 bar, pair, there_bar, there_pair, rank, tid;
.reg .pred lead, done;
mov.u32 bar, global_smem;
add.u32 bar, bar, $6;
add.u32 pair, bar, 8;
mov.u32 rank, %cluster_ctarank;
xor.b32 rank, rank, 1;
mapa.shared::cluster.u32 there_bar, bar, rank;
mapa.shared::cluster.u32 there_pair, pair, rank;
mov.u32 tid, %tid.x;
setp.eq.u32 lead, tid, 0;
barrier.cluster.wait.aligned;
@lead mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 8;
@lead st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [there_pair], {$2, $3}, [there_bar];
WAIT:
mbarrier.try_wait.parity.shared::cta.b64 done, [bar], 0;
@!done bra WAIT;
ld.shared.v2.f32 {$0, $1}, [pair];
}""",
))
# TRADE=6 at the start: thread 0 initializes the mbarrier (one arrival), makes that visible to the
# cluster, and every thread arrives (relaxed) on the start barrier. $1: the byte offset.
_INIT = gl.constexpr("""{
.reg .u32 bar, tid;
.reg .pred lead;
mov.u32 bar, global_smem;
add.u32 bar, bar, $1;
mov.u32 tid, %tid.x;
setp.eq.u32 lead, tid, 0;
@lead mbarrier.init.shared::cta.b64 [bar], 1;
@lead fence.mbarrier_init.release.cluster;
barrier.cluster.arrive.relaxed.aligned;
mov.u32 $0, 0;
}""")


@gluon.jit
def _now():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _now_after(value):
    """The time once ``value`` (a float32 scalar) is computed."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,f", [value], dtype=gl.int64, is_pure=False,
                                     pack=1)


@gluon.jit
def cluster_rows_kernel(
    X, Y, W, B, MEAN, RSTD,
    TIMES,  # (programs, 5) int64: start, before the trade, after it, end, SM (TRACE only)
    stride_x, stride_y, M, N, eps,
    smem_offset,  # TRADE=6: where its mbarrier and pair sit in the dynamic shared memory
    BLOCK_N: gl.constexpr,
    TRADE: gl.constexpr,  # 0: no trade (wrong on purpose), k > 0: TRADES[k]
    TRACE: gl.constexpr,  # one row per cluster only
):
    WARPS: gl.constexpr = gl.num_warps()
    HALF: gl.constexpr = BLOCK_N // 2
    GROUP: gl.constexpr = HALF // WARPS
    VEC: gl.constexpr = 128 // X.dtype.element_ty.primitive_bitwidth
    tile: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [WARPS, 1], [1, 0])
    lanes: gl.constexpr = gl.BlockedLayout([1, 2, 2], [32, 1, 1], [WARPS, 1, 1], [2, 1, 0])
    inv_n = gl.div_rn(gl.full([], 1.0, gl.float32), gl.full([], N, gl.float32))

    if TRACE:
        gl.store(TIMES + gl.program_id(0) * 5, _now())
    if TRADE > 0 and TRADE < 5:
        gl.inline_asm_elementwise(_ARRIVE, "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    if TRADE == 6:
        gl.inline_asm_elementwise(_INIT, "=r,r", [smem_offset], dtype=gl.int32, is_pure=False, pack=1)
    rank = gl.program_id(0) % 2
    start = rank * HALF
    groups = gl.arange(0, WARPS, layout=gl.SliceLayout(1, tile))
    cols = start + groups[:, None] * GROUP + gl.arange(0, GROUP, layout=gl.SliceLayout(0, tile))[None, :]
    mask = cols < N
    n_g = gl.minimum(gl.maximum(N - start - groups * GROUP, 0), GROUP).to(gl.float32)
    n_lo = gl.minimum(N, HALF).to(gl.float32)
    n_hi = gl.maximum(N - HALF, 0).to(gl.float32)
    first_row = gl.program_id(0) // 2
    for row in range(first_row, M, gl.num_programs(0) // 2):
        row = row.to(gl.int64)
        x = gl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(gl.float32)
        sum_g = gl.sum(x, axis=1)
        dev = gl.where(mask, x - (sum_g / gl.maximum(n_g, 1.0))[:, None], 0.0)
        t_g = gl.sum(dev, axis=1)
        q_g = gl.sum(dev * dev, axis=1)
        packed = gl.convert_layout(gl.join(gl.join(sum_g, t_g), gl.join(q_g, n_g)), lanes)
        sums, squares = gl.split(packed)
        sum_l, t_l = gl.split(sums)
        q_l, n_l = gl.split(squares)
        sum_own = gl.sum(sum_l, axis=0)
        n_own = gl.sum(n_l, axis=0)
        mean_own = sum_own / gl.maximum(n_own, 1.0)
        gap = mean_own - sum_l / gl.maximum(n_l, 1.0)
        m2_own = gl.sum(q_l - 2.0 * gap * t_l + n_l * gap * gap, axis=0)
        if TRACE:
            gl.store(TIMES + gl.program_id(0) * 5 + 1, _now_after(m2_own))  # after the sums
        if TRADE:
            slot = ((row - first_row) // (gl.num_programs(0) // 2) % 2).to(gl.int32)
            is_first = (row == first_row).to(gl.int32)
            sum_other, m2_other = gl.inline_asm_elementwise(
                TRADES[TRADE], "=f,=f,f,f,r,r,r", [sum_own, m2_own, slot, is_first, smem_offset],
                dtype=(gl.float32, gl.float32),
                is_pure=False, pack=1)
            sum_lo = gl.where(rank == 0, sum_own, sum_other)
            sum_hi = gl.where(rank == 0, sum_other, sum_own)
            m2_lo = gl.where(rank == 0, m2_own, m2_other)
            m2_hi = gl.where(rank == 0, m2_other, m2_own)
            mean = (sum_lo + sum_hi) * inv_n
            gap_lo = sum_lo / gl.maximum(n_lo, 1.0) - mean
            gap_hi = sum_hi / gl.maximum(n_hi, 1.0) - mean
            var = (m2_lo + m2_hi + n_lo * gap_lo * gap_lo + n_hi * gap_hi * gap_hi) * inv_n
        else:
            mean = mean_own
            var = m2_own / gl.maximum(n_own, 1.0)
        rstd = 1.0 / gl.sqrt(var + eps)
        if TRACE:
            gl.store(TIMES + gl.program_id(0) * 5 + 2, _now_after(rstd))  # after the trade
        y = (x - mean) * rstd
        y = y * gl.load(W + cols, mask=mask, other=0.0).to(gl.float32)
        y = y + gl.load(B + cols, mask=mask, other=0.0).to(gl.float32)
        gl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)
        if rank == 0:
            gl.store(MEAN + row, mean)
            gl.store(RSTD + row, rstd)
    if TRACE:
        gl.store(TIMES + gl.program_id(0) * 5 + 3, _now())
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
        gl.store(TIMES + gl.program_id(0) * 5 + 4, sm.to(gl.int64))


def launch(x, w, b, eps=1e-5, warps=32, clusters=None, trade=True, in_clusters=True, times=None):
    """``clusters`` clusters of two programs (None: one per row); ``in_clusters=False`` launches
    the same 2 * clusters programs without a cluster (only with ``trade=False``)."""
    import torch
    import triton

    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    block_n = triton.next_power_of_2(n)
    trace = times is not None
    args = (x, y, w, b, mean, rstd, times if trace else mean, x.stride(0), y.stride(0), m, n, eps, 16)
    key = (x.dtype, block_n, warps, trade, in_clusters, trace)
    if key not in _COMPILED:
        compiled = cluster_rows_kernel.warmup(*args, BLOCK_N=block_n, TRADE=trade, TRACE=trace, num_warps=warps,
                                              grid=(1,))
        compiled._init_handles()
        num_warps, _, shared = compiled.packed_metadata
        offset = (shared + 15) // 16 * 16
        compiled.packed_metadata = (num_warps, 2 if in_clusters else 1, offset + 16)
        _COMPILED[key] = compiled, offset
    grid = clusters or m
    compiled, offset = _COMPILED[key]
    compiled[(grid if in_clusters else 2 * grid, 1, 1)](*args[:-1], offset, block_n, trade, trace)
    return y, mean, rstd


_COMPILED = {}
