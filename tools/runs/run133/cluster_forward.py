"""Run 133: a wide row shared by the two programs of a thread-block cluster (Gluon, Hopper).

Each program of a 2-program cluster holds half of a row in registers, as the one-exchange
kernel (ln_tutorial/kernels_gluon.py) holds a whole 64 KB row, and computes its half's sum and
Σ(x - mean_half)² with one exchange between its warps. The two halves' pairs cross once, through
distributed shared memory: each program stores its pair into the other's shared memory
(st.shared::cluster) and both meet at a cluster barrier. Triton 3.6 cannot lower a reduction or
layout change across the programs of a cluster (an assertion, and a mapa type error), and with
num_ctas=2 its layouts must be split across the cluster, where its loads lose their 16-byte
vectors; so the kernel is compiled for one program (plain layouts), launched in clusters of two
(`launch` below), and the exchange is inline PTX. Both programs combine the halves in the same order (Chan's formula, terms
that do not cancel) and so hold the same mean and rstd.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# Kernel start: "I have started" (a relaxed arrive; the output is unused).
_ARRIVE = gl.constexpr("barrier.cluster.arrive.relaxed.aligned;\nmov.u32 $0, 0;")
# Wait until both programs have started (DSMEM may then be written), store this program's pair
# into the other's shared memory (thread 0 only), meet again (release / acquire), read the pair
# the other program stored here.
_TRADE = gl.constexpr("""{
.shared .align 8 .b32 pair[2];
.reg .u32 here, there, rank, tid;
.reg .pred first;
barrier.cluster.wait.aligned;
mov.u32 here, pair;
mov.u32 rank, %cluster_ctarank;
xor.b32 rank, rank, 1;
mapa.shared::cluster.u32 there, here, rank;
mov.u32 tid, %tid.x;
setp.eq.u32 first, tid, 0;
@first st.shared::cluster.v2.f32 [there], {$2, $3};
barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
ld.shared.v2.f32 {$0, $1}, [here];
}""")


@gluon.jit
def cluster_forward_kernel(
    X, Y, W, B, MEAN, RSTD,  # as in kernels_gluon.layer_norm_fwd_one_exchange_kernel
    stride_x, stride_y, N, eps,
    BLOCK_N: gl.constexpr,  # power of two >= N; each program holds BLOCK_N / 2 columns
):
    WARPS: gl.constexpr = gl.num_warps()
    HALF: gl.constexpr = BLOCK_N // 2
    GROUP: gl.constexpr = HALF // WARPS
    VEC: gl.constexpr = 128 // X.dtype.element_ty.primitive_bitwidth
    tile: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [WARPS, 1], [1, 0])
    lanes: gl.constexpr = gl.BlockedLayout([1, 2, 2], [32, 1, 1], [WARPS, 1, 1], [2, 1, 0])
    inv_n = gl.div_rn(gl.full([], 1.0, gl.float32), gl.full([], N, gl.float32))

    gl.inline_asm_elementwise(_ARRIVE, "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    rank = gl.program_id(0) % 2  # = %cluster_ctarank in clusters of two along x
    row = (gl.program_id(0) // 2).to(gl.int64)
    start = rank * HALF
    groups = gl.arange(0, WARPS, layout=gl.SliceLayout(1, tile))
    cols = start + groups[:, None] * GROUP + gl.arange(0, GROUP, layout=gl.SliceLayout(0, tile))[None, :]
    mask = cols < N
    x = gl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(gl.float32)

    n_g = gl.minimum(gl.maximum(N - start - groups * GROUP, 0), GROUP).to(gl.float32)
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

    sum_other, m2_other = gl.inline_asm_elementwise(
        _TRADE, "=f,=f,f,f", [sum_own, m2_own], dtype=(gl.float32, gl.float32), is_pure=False, pack=1)
    first = rank == 0
    sum_lo = gl.where(first, sum_own, sum_other)  # the first half's values, in both programs
    sum_hi = gl.where(first, sum_other, sum_own)
    m2_lo = gl.where(first, m2_own, m2_other)
    m2_hi = gl.where(first, m2_other, m2_own)
    n_lo = gl.minimum(N, HALF).to(gl.float32)
    n_hi = gl.maximum(N - HALF, 0).to(gl.float32)
    mean = (sum_lo + sum_hi) * inv_n
    gap_lo = sum_lo / gl.maximum(n_lo, 1.0) - mean
    gap_hi = sum_hi / gl.maximum(n_hi, 1.0) - mean
    var = (m2_lo + m2_hi + n_lo * gap_lo * gap_lo + n_hi * gap_hi * gap_hi) * inv_n
    rstd = 1.0 / gl.sqrt(var + eps)

    y = (x - mean) * rstd
    y = y * gl.load(W + cols, mask=mask, other=0.0).to(gl.float32)
    y = y + gl.load(B + cols, mask=mask, other=0.0).to(gl.float32)
    gl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)
    if rank == 0:
        gl.store(MEAN + row, mean)
        gl.store(RSTD + row, rstd)


def launch(x, w, b, eps=1e-5, warps=32):
    """y, mean, rstd of the (M, N) half-precision ``x``: M clusters of two programs."""
    import torch
    import triton

    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    args = (x, y, w, b, mean, rstd, x.stride(0), y.stride(0), n, eps)
    block_n = triton.next_power_of_2(n)
    key = (x.dtype, block_n, warps)
    if key not in _COMPILED:
        compiled = cluster_forward_kernel.warmup(*args, BLOCK_N=block_n, num_warps=warps, grid=(1,))
        compiled._init_handles()
        num_warps, _, shared = compiled.packed_metadata
        compiled.packed_metadata = (num_warps, 2, shared)  # the launcher: 2 * M programs, clusters of 2
        _COMPILED[key] = compiled
    _COMPILED[key][(m, 1, 1)](*args, block_n)  # the compile-time BLOCK_N last, as Triton passes it
    return y, mean, rstd


_COMPILED = {}
