"""Variant: the backward of rows past the register budget, each row shared by programs.

**Takes** rows wider than 32 KB of input, and half-precision rows of 12289 to 16384 values, on a GPU
whose SMs hold every program at once. **Gains** one read of each row instead of two: 1.67x (bfloat16)
and 2.2x (float32) the looped kernels at 8192 x 16384 on the H100 (Triton 3.6). **Else** the looped
kernels. Parts trade row sums through global memory (a cooperative launch); the interpreter runs one
part a row.
"""

import torch
import triton
import triton.language as tl

from ln_tutorial._common import CACHE_SIZE, INTERPRET, cdiv, next_power_of_2, sm_count
from ln_tutorial.host import BackwardPlan, Run, kernel_call, reduce_call
from ln_tutorial.kernels import add_partial_rows, reciprocal, store_dx_and_accumulate, store_partial_row, tile_terms
from ln_tutorial.variants.cooperative import grid_barrier, reduce_blocks, refused, remember_refusal


def fits(cfg, n: int, device: int) -> bool:
    """Whether every program of ``cfg`` can be resident at once on ``device``: no more parts in a row
    than the GPU holds programs, and no refused cooperative launch so far. Always in the interpreter
    (a single part a row) and for device -1 (no GPU named: the table's choice stands)."""
    if INTERPRET or device < 0:
        return True
    return cdiv(n, cfg.block_n) <= sm_count(device) * cfg.programs_per_sm and (device, cfg) not in refused


def plan(m: int, n: int, compute, device: int, cfg, has_dw: bool, has_db: bool) -> BackwardPlan:
    """Groups of ``parts`` programs, each group a band of rows, and the kernel that runs them."""
    block_n = next_power_of_2(n) if INTERPRET else cfg.block_n  # interpreter: one part a row (see above)
    parts = cdiv(n, block_n)
    groups = max(1, sm_count(device) * cfg.programs_per_sm // parts)
    rows_per_program = cdiv(cdiv(m, groups), cfg.block_m) * cfg.block_m  # a group's rows
    programs = cdiv(m, rows_per_program)
    gpu_only = {} if INTERPRET else {"launch_cooperative_grid": True, "maxnreg": registers(cfg)}
    reduce_meta = reduce_blocks(n, has_dw + has_db, programs * parts, programs, cfg.num_warps)
    main = kernel_call(
        layer_norm_bwd_split_kernel, HAS_DW=has_dw, HAS_DB=has_db, SPLIT=parts,
        SPLIT_BLOCK=records_block(parts, cfg), BLOCK_M=cfg.block_m, BLOCK_N=block_n, COMPUTE=compute,
        PREFETCH=not INTERPRET and block_n >= 16, ONE_LAUNCH=not INTERPRET, num_warps=cfg.num_warps,
        **reduce_meta, **gpu_only,
    )  # fmt: skip
    return BackwardPlan(programs, rows_per_program, parts, main, None, reduce_call(programs) if INTERPRET else None)


def run(plan: BackwardPlan, args: dict, params: list, device: int, cfg, launch: Run):
    """Launch the split kernel; return the gradients it added up (None: a second launch adds them)."""
    if plan.reduce is None:  # one launch: records and barrier kept for the stream, never zero-filled
        grads = [torch.empty_like(p) for p in params]  # separate allocations: outputs of a torch.library op
        barrier, records = records_state(device, torch._C._cuda_getCurrentRawStream(device), args["M"] * plan.parts * 2)
    else:
        grads, barrier = None, None
        records = torch.zeros((args["M"], plan.parts, 2), dtype=torch.int64, device=args["X"].device)
    outs = grads or [args["DX"]]  # (no gradient to add up: the kernel writes none)
    args.update(OUT0=outs[0], OUT1=outs[-1], BARRIER=barrier, RECORDS=records)
    try:
        launch(plan.main, (plan.programs * plan.parts,), args)
    except RuntimeError as error:
        remember_refusal(error, device, cfg)
    return grads


def records_block(parts: int, cfg) -> int:
    """Width of the tile of records a program polls. Triton sums one of a value's copies, not always the
    one whose flag was checked (Triton 3.9 then added a part read too early). Up to 32 parts, one row a tile:
    each warp holds all records and checks what it sums. Else a record a thread at least: no copies."""
    if parts <= 32 and cfg.block_m == 1:
        return next_power_of_2(parts)
    return max(next_power_of_2(parts), 32 * cfg.num_warps // cfg.block_m)


def registers(cfg) -> int:
    """Registers per thread that let ``cfg.programs_per_sm`` split programs share an SM (65536 an SM
    since Kepler, in steps of 8 a thread). Without the cap the prefetch's addresses took the
    half-precision kernel past 128, and its grid was refused."""
    threads = cfg.programs_per_sm * cfg.num_warps * 32
    return min(255, 65536 // threads // 8 * 8)


#: Split launches after which ``records_state`` zeroes a stream's records again, long before
#: the barrier's generation, which tags them (modulo 2**31), could come round to an old tag.
RECORDS_LIFETIME = 1 << 30
_states: dict = {}  # (device, stream) -> (barrier, records, launches), least recently used first


def records_state(device: int, stream: int, size: int):
    """The barrier and records of one-launch split kernels on one stream (whose launches run one after
    another). Records are tagged with the barrier's generation, so they are zeroed only when they grow and
    every ``RECORDS_LIFETIME`` launches; past ``CACHE_SIZE`` streams the least recently used starts again."""
    barrier, records, launches = _states.pop((device, stream), (None, None, 0))
    if barrier is None:
        barrier = torch.zeros(2, dtype=torch.int32, device=device)
    if records is None or records.numel() < size or launches >= RECORDS_LIFETIME:
        records, launches = torch.zeros(size, dtype=torch.int64, device=device), 0
    _states[(device, stream)] = (barrier, records, launches + 1)  # now the most recently used
    if len(_states) > CACHE_SIZE:
        del _states[next(iter(_states))]
    return barrier, records


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
    """x and ∇y of a tile as stored (in half precision, fewer registers to hold than the float32
    terms), and its row mask and element mask."""
    row_mask = rows < row_end
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0)
    return x, dy, row_mask, mask


@triton.jit
def prefetch_to_l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (PTX ``prefetch.global.L2``): no registers held, nothing to wait for."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs.to(tl.int64, bitcast=True)],
        dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


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
    """Start bringing a tile's x and ∇y into L2: one address per 16 values (one or two 32-byte
    sectors), clamped so that none falls outside the tensors. (The forward does not prefetch: there
    it gained 1 to 4 % on the H100, under the 5 % a variant must gain.)"""
    rows = tl.minimum(rows, row_end - 1)
    cols = tl.minimum(col_begin + tl.arange(0, BLOCK_N // 16) * 16, N - 1)
    prefetch_to_l2(X + rows[:, None] * stride_x + cols[None, :])
    prefetch_to_l2(DY + rows[:, None] * stride_dy + cols[None, :])


@triton.jit
def add_pair(a, b, c, d):
    """Combine function of two sums reduced together, ``(a, b) + (c, d)``: one ``tl.reduce`` of the pair
    exchanges both between warps at once (shared memory and a barrier) where two ``tl.sum`` calls exchange
    twice. The persistent kernel sums twice: there the pair gave no steady gain."""
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
    SPLIT_BLOCK: tl.constexpr,  # power of two >= SPLIT: see records_block
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
    rows_per_program,  # each program holds its part of this many consecutive rows (its group's), a multiple of BLOCK_M
    HAS_DW: tl.constexpr,  # the layer norm has a weight: write dW partial rows
    HAS_DB: tl.constexpr,  # the layer norm has a bias: write dB partial rows
    SPLIT: tl.constexpr,  # programs sharing each row: cdiv(N, BLOCK_N)
    SPLIT_BLOCK: tl.constexpr,  # records polled per row: see records_block
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
    earlier generation; ``records_state`` zeroes RECORDS again long before
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
    row_begin = group.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_begin + rows_per_program, M)

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
