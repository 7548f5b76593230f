"""Variant: the shared-row backward with its row sums traded through a thread-block cluster.

**Takes** what :mod:`.split` takes for half-precision rows of the widths a GPU's table lists under
``backward_cluster`` (Hopper and later, Triton 3.6, no launch hook installed: Triton's own launch
cannot launch clusters of a kernel compiled for one program). **Gains** on the split kernel, in time,
bfloat16 rows of 16384 to 65536 values: 4 to 20 % on the H100, 9 to 17 % on the H200 (each table
entry's evidence gives its A/B). **Else** :mod:`.split`, also when the driver refuses the grid.

The programs that share a row are the programs of one cluster. Each sends its part of the two row
sums straight into the shared memory of the others (``st.async``, counted by an mbarrier there),
where the split kernel writes records to global memory and polls them from L2. Rows arrive through
Triton's software pipeline: their loads are issued ``num_stages - 1`` rows ahead into shared memory,
where they hold no registers while in flight (the split kernel holds its prefetched tile in
registers, which caps it at one). The trade is inline PTX: Triton 3.6 cannot address another
program's shared memory.
"""

import ctypes

import torch
import triton
import triton.language as tl

from ln_tutorial._common import INTERPRET, TRITON_VERSION, cdiv, sm_count
from ln_tutorial.host import BackwardPlan, kernel_call
from ln_tutorial.kernels import add_partial_rows, reciprocal, store_dx_and_accumulate, store_partial_row, tile_terms
from ln_tutorial.variants import fast_launch
from ln_tutorial.variants.cooperative import grid_barrier, grid_barrier_state, reduce_blocks, refused, remember_refusal
from ln_tutorial.variants.split import add_pair, load_raw_tile, registers

#: The Triton releases this variant's PTX and launch were verified on.
VERIFIED_TRITONS = ((3, 6),)
#: Most programs in a cluster that every Hopper GPU runs (larger ones need an opt-in).
MAX_CLUSTER = 8


def takes(n: int, device: int, cfg) -> bool:
    """Whether a backward that the table gives to the split kernel runs in clusters instead: ``cfg`` is
    the table's cluster entry (or None), on a GPU that launches clusters, with Triton's launch bypassed."""
    if cfg is None or INTERPRET or device < 0 or TRITON_VERSION not in VERIFIED_TRITONS:
        return False
    if fast_launch.hooks_installed() or torch.cuda.get_device_capability(device)[0] < 9:
        return False
    return cdiv(n, cfg.block_n) <= MAX_CLUSTER and (device, cfg) not in refused


def plan(m: int, n: int, compute, device: int, cfg, has_dw: bool, has_db: bool) -> BackwardPlan:
    """Clusters of ``parts`` programs; ``programs`` is the most clusters an SM count allows (the partial
    rows' buffer), the launch takes as many as the GPU holds at once (:func:`clusters_that_fit`)."""
    parts = cdiv(n, cfg.block_n)
    programs = max(1, min(m, sm_count(device) * cfg.programs_per_sm // parts))
    main = kernel_call(
        layer_norm_bwd_cluster_kernel, HAS_DW=has_dw, HAS_DB=has_db, SPLIT=parts, BLOCK_N=cfg.block_n,
        COMPUTE=compute, **reduce_blocks(n, has_dw + has_db, programs * parts, programs, cfg.num_warps),
        num_warps=cfg.num_warps, launch_cooperative_grid=True, maxnreg=registers(cfg),
        STAGES=cfg.num_stages,
    )  # fmt: skip
    return BackwardPlan(programs, cdiv(m, programs), parts, main, None, None)


def run(plan: BackwardPlan, args: dict, params: list, device: int, cfg):
    """Launch the cluster kernel through :mod:`.fast_launch` (the launch that asks the driver for
    clusters); return the gradients it added up."""
    grads = [torch.empty_like(p) for p in params]
    outs = grads or [args["DX"]]
    with torch.cuda.device(device):  # Triton compiles for the current device
        barrier = grid_barrier_state(device, torch._C._cuda_getCurrentRawStream(device))
        args.update(OUT0=outs[0], OUT1=outs[-1], BARRIER=barrier)
        entry, _ = fast_launch.compiled_entry(plan.main, [args[name] for name in plan.main.names], device)
        args["rows_per_program"] = cdiv(args["M"], min(plan.programs, clusters_that_fit(entry, plan.parts)))
        try:
            fast_launch.run(plan.main, (cdiv(args["M"], args["rows_per_program"]),), args, cluster=plan.parts)
        except RuntimeError as error:
            remember_refusal(error, device, cfg)
    return grads


_fits: dict = {}  # (compiled kernel's handle, parts) -> clusters the GPU holds at once


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute with a cluster dimension as its value
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("dim", ctypes.c_uint * 3), ("rest", ctypes.c_ubyte * 52)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]


def clusters_that_fit(entry: tuple, parts: int) -> int:
    """How many clusters of ``parts`` programs of the compiled kernel the GPU runs at once, as its driver
    says (``cuOccupancyMaxActiveClusters``): clusters fill whole GPCs, so on a 132-SM H100 15 clusters of
    8 programs fit, not 16. A cooperative launch of more is refused."""
    _, function, (num_warps, _, shared), _, _, _ = entry
    key = (function, parts)
    if key not in _fits:
        attribute = _LaunchAttribute(id=4, dim=(parts, 1, 1))  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        config = _LaunchConfig(grid=(parts, 1, 1), block=(32 * num_warps, 1, 1), shared=shared,
                               attrs=ctypes.pointer(attribute), count=1)  # fmt: skip
        count = ctypes.c_int(0)
        status = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(
            ctypes.byref(count), ctypes.c_void_p(function), ctypes.byref(config)
        )
        if status != 0 or count.value < 1:
            raise RuntimeError(f"layer_norm: cuOccupancyMaxActiveClusters failed (CUDA error {status})")
        _fits[key] = count.value
    return _fits[key]


# Shared memory of the trade, declared once per program: 8 mbarriers (one per row in flight, row i
# uses i % 8), then slot[row % 8][part] of 2 float32 sums. Thread 0 sets each mbarrier to wait for
# one arrival, and every program of the cluster waits until all have done so.
_START = tl.constexpr("""
.shared .align 16 .b8 ln_cluster_trade[1088];
{
.reg .u32 bar, tid;
.reg .pred lead;
mov.u32 bar, ln_cluster_trade;
mov.u32 tid, %tid.x;
setp.eq.u32 lead, tid, 0;
@lead mbarrier.init.shared::cta.b64 [bar], 1;
@lead mbarrier.init.shared::cta.b64 [bar+8], 1;
@lead mbarrier.init.shared::cta.b64 [bar+16], 1;
@lead mbarrier.init.shared::cta.b64 [bar+24], 1;
@lead mbarrier.init.shared::cta.b64 [bar+32], 1;
@lead mbarrier.init.shared::cta.b64 [bar+40], 1;
@lead mbarrier.init.shared::cta.b64 [bar+48], 1;
@lead mbarrier.init.shared::cta.b64 [bar+56], 1;
@lead fence.mbarrier_init.release.cluster;
barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
mov.u32 $0, 0;
}""")
# Publish this part's sums ($1, $2) of row slot $3 unless $4 (the row exists) is 0: thread 0 writes them
# into its own program's slot and arrives there, expecting 8 bytes from each other program; thread t
# (t < cluster size, t not this program's rank) stores them into the same slot of program t,
# completing 8 bytes on its mbarrier.
_PUBLISH = tl.constexpr("""{
.reg .u32 base, bar, slot, me, size, tid, bytes, there_bar, there_slot, index;
.reg .pred lead, sender, other, live;
mov.u32 base, ln_cluster_trade;
mov.u32 me, %cluster_ctarank;
mov.u32 size, %cluster_nctarank;
mov.u32 tid, %tid.x;
mad.lo.u32 bar, $3, 8, base;
mad.lo.u32 index, $3, 16, me;
mad.lo.u32 slot, index, 8, base;
add.u32 slot, slot, 64;
setp.ne.u32 live, $4, 0;
setp.eq.u32 lead, tid, 0;
and.pred lead, lead, live;
sub.u32 bytes, size, 1;
shl.b32 bytes, bytes, 3;
@lead st.shared.v2.f32 [slot], {$1, $2};
@lead mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes;
setp.lt.u32 sender, tid, size;
setp.ne.u32 other, tid, me;
and.pred sender, sender, other;
and.pred sender, sender, live;
@sender mapa.shared::cluster.u32 there_slot, slot, tid;
@sender mapa.shared::cluster.u32 there_bar, bar, tid;
@sender st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [there_slot], {$1, $2}, [there_bar];
mov.u32 $0, 0;
}""")
# Unless $4 (the row exists) is 0, wait for row slot $2's mbarrier to complete phase parity $3, then
# add the parts' sums in rank order: every program of the cluster gets the same bits.
_GATHER = tl.constexpr("""{
.reg .u32 base, bar, slot, size, k;
.reg .pred done, more, skip;
.reg .f32 a, b, s1, s2;
mov.f32 s1, 0f00000000;
mov.f32 s2, 0f00000000;
setp.eq.u32 skip, $4, 0;
@skip bra DONE;
mov.u32 base, ln_cluster_trade;
mov.u32 size, %cluster_nctarank;
mad.lo.u32 bar, $2, 8, base;
WAIT:
mbarrier.try_wait.parity.shared::cta.b64 done, [bar], $3;
@!done bra WAIT;
mad.lo.u32 slot, $2, 128, base;
add.u32 slot, slot, 64;
ld.shared.v2.f32 {s1, s2}, [slot];
mov.u32 k, 1;
NEXT:
setp.lt.u32 more, k, size;
@!more bra DONE;
add.u32 slot, slot, 8;
ld.shared.v2.f32 {a, b}, [slot];
add.rn.f32 s1, s1, a;
add.rn.f32 s2, s2, b;
add.u32 k, k, 1;
bra NEXT;
DONE:
mov.f32 $0, s1;
mov.f32 $1, s2;
}""")
# No program leaves while another may still write into its shared memory.
_END = tl.constexpr("""{
barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
mov.u32 $0, 0;
}""")


@triton.jit
def publish_row_sums(
    x,  # (1, BLOCK_N) input as loaded
    dy,  # (1, BLOCK_N) upstream gradient as loaded
    w,  # (BLOCK_N,) weight, or None
    MEAN,  # per-row mean, (M,)
    RSTD,  # per-row rstd, (M,)
    rows,  # (1,) the row
    row_mask,  # (1,) whether it exists
    mask,  # (1, BLOCK_N) elements that exist
    i,  # the row's place among the program's rows
    COMPUTE: tl.constexpr,  # accumulation dtype (float32)
):
    """Send this part's Σ x̂·w·∇y and Σ w·∇y of the row to every program of the cluster (if it exists)."""
    mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
    rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
    x_hat, _, w_dy = tile_terms(x, dy, w, mean, rstd, mask, COMPUTE)
    sum_xhat_wdy, sum_wdy = tl.reduce((x_hat * w_dy, w_dy), 1, add_pair)
    slot = tl.zeros_like(rows).to(tl.int32) + i % 8
    tl.inline_asm_elementwise(_PUBLISH, "=r,f,f,r,r", [sum_xhat_wdy, sum_wdy, slot, row_mask.to(tl.int32)],
                              dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit
def whole_row_sums(
    rows,  # (1,) the row
    row_mask,  # (1,) whether it exists
    i,  # the row's place among the program's rows
):
    """Σ x̂·w·∇y and Σ w·∇y over the whole row, once every part has sent its own (0 if it does not exist)."""
    slot = tl.zeros_like(rows).to(tl.int32) + i % 8
    parity = tl.zeros_like(rows).to(tl.int32) + (i // 8) % 2  # the slot's mbarrier completes once per use
    return tl.inline_asm_elementwise(_GATHER, "=f,=f,r,r,r", [slot, parity, row_mask.to(tl.int32)],
                                     dtype=(tl.float32, tl.float32), is_pure=False, pack=1)  # fmt: skip


@triton.jit
def layer_norm_bwd_cluster_kernel(
    DY,  # upstream gradient, (M, N), rows ``stride_dy`` elements apart
    X,  # input saved by the forward, (M, N), rows ``stride_x`` apart
    W,  # weight, (N,), or None
    MEAN,  # per-row mean from the forward, (M,)
    RSTD,  # per-row rstd from the forward, (M,)
    DX,  # input gradient, (M, N), rows ``stride_dx`` apart
    PARTIAL,  # COMPUTE (K, G, N): cluster g's Σ dy * x̂ (if HAS_DW) and Σ dy (if HAS_DB) over its rows
    OUT0,  # (N,) the first gradient, dW (if HAS_DW) or dB
    OUT1,  # (N,) dB when there are both (else OUT0 again)
    BARRIER,  # int32 (2,) for grid_barrier, kept for launches on one stream
    stride_dy,  # elements between two rows of DY
    stride_x,  # elements between two rows of X
    stride_dx,  # elements between two rows of DX
    M,  # number of rows
    N,  # number of columns
    rows_per_program,  # each cluster holds this many consecutive rows
    HAS_DW: tl.constexpr,  # the layer norm has a weight: write dW partial rows
    HAS_DB: tl.constexpr,  # the layer norm has a bias: write dB partial rows
    SPLIT: tl.constexpr,  # programs in a cluster, sharing each row: cdiv(N, BLOCK_N)
    BLOCK_N: tl.constexpr,  # columns of each row that one program holds
    COMPUTE: tl.constexpr,  # accumulation dtype (float32)
    REDUCE_BLOCK_P: tl.constexpr,  # partial rows added per step of the dW/dB reduction
    REDUCE_BLOCK_N: tl.constexpr,  # columns per block of the reduction
    STAGES: tl.constexpr,  # rows in the software pipeline: loads are issued STAGES - 1 rows ahead
):
    """:func:`ln_tutorial.variants.split.layer_norm_bwd_split_kernel`, one row at a time, with the row
    sums traded inside a cluster (launched in clusters of SPLIT programs along the grid's axis).

    A row's sums are sent one pass before they are awaited, so a program is at most two rows ahead
    of another and eight slots suffice.
    """
    tl.inline_asm_elementwise(_START, "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    inv_n = reciprocal(N, COMPUTE)
    pid = tl.program_id(0)
    group, part = pid // SPLIT, pid % SPLIT  # = %cluster_ctarank: clusters along the grid's axis
    programs = tl.num_programs(0)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = tl.load(W + cols, mask=col_mask, other=0.0) if W is not None else None
    dw_acc = tl.zeros([1, BLOCK_N], dtype=COMPUTE)
    db_acc = tl.zeros([1, BLOCK_N], dtype=COMPUTE)
    row_begin = group.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_begin + rows_per_program, M)

    x_last = tl.zeros([1, BLOCK_N], dtype=X.dtype.element_ty)
    dy_last = tl.zeros([1, BLOCK_N], dtype=DY.dtype.element_ty)
    i = 0
    # Row r's loads are issued STAGES - 1 rows ahead, into shared memory (Triton's software pipeline:
    # no registers held while they are in flight); the pass that loads row r sends its sums, then
    # awaits row r - 1's and stores its ∇x, so one pass past the last row finishes it.
    for r in tl.range(row_begin, row_end + 1, num_stages=STAGES):
        rows = r + tl.arange(0, 1)
        x, dy, row_mask, mask = load_raw_tile(X, DY, rows, row_end, cols, col_mask, stride_x, stride_dy)
        publish_row_sums(x, dy, w, MEAN, RSTD, rows, row_mask, mask, i, COMPUTE)
        last = rows - 1
        last_mask = (last >= row_begin) & (last < row_end)
        sum_xhat_wdy, sum_wdy = whole_row_sums(last, last_mask, i - 1)
        mean = tl.load(MEAN + last, mask=last_mask, other=0.0)
        rstd = tl.load(RSTD + last, mask=last_mask, other=0.0)
        x_hat, dy_c, w_dy = tile_terms(x_last, dy_last, w, mean, rstd, last_mask[:, None] & col_mask[None, :],
                                       COMPUTE)  # fmt: skip
        dw_acc, db_acc = store_dx_and_accumulate(
            DX, last, cols, last_mask, col_mask, stride_dx, x_hat, dy_c, w_dy, rstd, sum_xhat_wdy * inv_n,
            sum_wdy * inv_n, dw_acc, db_acc,
        )  # fmt: skip
        x_last, dy_last = x, dy
        i += 1
    tl.inline_asm_elementwise(_END, "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    store_partial_row(PARTIAL, HAS_DW, HAS_DB, group, programs // SPLIT, N, cols, col_mask, dw_acc, db_acc)
    grid_barrier(BARRIER)
    col_blocks = tl.cdiv(N, REDUCE_BLOCK_N)
    for task in range(pid, col_blocks * (HAS_DW + HAS_DB), programs):
        k, col_block = task // col_blocks, task % col_blocks
        add_partial_rows(PARTIAL, OUT0, OUT1, k, col_block, programs // SPLIT, N, REDUCE_BLOCK_P, REDUCE_BLOCK_N)
