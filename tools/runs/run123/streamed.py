"""Run 123: the wide forward in Gluon, rows held in a ring of shared-memory chunks.

A persistent program streams its rows through SLOTS chunks of CHUNK values in shared memory,
filled by cp.async. Pass 1 sums a row's chunks as they arrive (shifted sums, as the looped
kernel); pass 2 normalizes each chunk from shared memory, writes y, and at once refills the
slot with the chunk SLOTS places later in the program's stream (the next row's), so reads
and writes of different rows overlap as in a copy.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy


@gluon.jit
def _issue(slot, X, row, chunk, M, N, stride_x, cols, CHUNK: gl.constexpr):
    offs = chunk * CHUNK + cols
    mask = (offs < N) & (row < M)  # rows past the last one: an empty group, no traffic
    async_copy.async_copy_global_to_shared(slot, X + row * stride_x + offs, mask=mask)
    async_copy.commit_group()


@gluon.jit
def _weights(W, B, chunk, N, cols, CHUNK: gl.constexpr):
    offs = chunk * CHUNK + cols
    mask = offs < N  # past the row's last chunk: no traffic
    return gl.load(W + offs, mask=mask, other=0.0), gl.load(B + offs, mask=mask, other=0.0)


@gluon.jit
def streamed_forward_kernel(
    X,  # input, (M, N), rows stride_x apart
    Y,  # output, (M, N), rows stride_y apart
    W,  # weight, (N,)
    B,  # bias, (N,)
    MEAN,  # (M,) float32
    RSTD,  # (M,) float32
    stride_x,
    stride_y,
    M,
    N,
    eps,
    CHUNK: gl.constexpr,  # values per shared-memory slot
    CHUNKS: gl.constexpr,  # cdiv(N, CHUNK)
    SLOTS: gl.constexpr,  # slots in the ring, >= CHUNKS
    VEC: gl.constexpr,  # values per 16-byte access
    WARPS: gl.constexpr,  # = num_warps
    WB_AHEAD: gl.constexpr,  # 0, 1 or 2: w and b of that many chunks later are loaded before a chunk's work
    COPY_ONLY: gl.constexpr = False,  # a bound, wrong on purpose: no row sums, y = x * w + b
):
    gl.static_assert(SLOTS >= CHUNKS)
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [WARPS], [0])
    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    ring = gl.allocate_shared_memory(X.dtype.element_ty, [SLOTS, CHUNK], smem_layout)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    cols = gl.arange(0, CHUNK, layout=layout)

    for g in gl.static_range(SLOTS):
        row = (pid + (g // CHUNKS) * programs).to(gl.int64)
        _issue(ring.index(g), X, row, g % CHUNKS, M, N, stride_x, cols, CHUNK)

    rows_here = (M - pid + programs - 1) // programs
    for j in range(rows_here):
        row = (pid + j * programs).to(gl.int64)
        base = j * CHUNKS
        if WB_AHEAD >= 1:  # the first chunks' w and b, in flight during pass 1
            w1, b1 = _weights(W, B, 0, N, cols, CHUNK)
        if WB_AHEAD == 2:
            w2, b2 = _weights(W, B, 1, N, cols, CHUNK)
        if COPY_ONLY:
            async_copy.wait_group(SLOTS - CHUNKS)
            mean = 0.0
            rstd = 1.0
        else:
            async_copy.wait_group(SLOTS - 1)
            first = ring.index(base % SLOTS).load(layout).to(gl.float32)
            shift = gl.sum(first, axis=0) / gl.minimum(N, CHUNK).to(gl.float32)
            sum_dev = gl.zeros([CHUNK], gl.float32, layout)
            sum_sq_dev = gl.zeros([CHUNK], gl.float32, layout)
            for i in gl.static_range(CHUNKS):
                async_copy.wait_group(SLOTS - 1 - i)
                x = ring.index((base + i) % SLOTS).load(layout).to(gl.float32)
                dev = gl.where(i * CHUNK + cols < N, x - shift, 0.0)
                sum_dev += dev
                sum_sq_dev += dev * dev
            mean_dev = gl.sum(sum_dev, axis=0) / N
            var = gl.maximum(gl.sum(sum_sq_dev, axis=0) / N - mean_dev * mean_dev, 0.0)
            mean = shift + mean_dev
            rstd = 1.0 / gl.sqrt(var + eps)
        gl.store(MEAN + row, mean)
        gl.store(RSTD + row, rstd)
        for i in gl.static_range(CHUNKS):
            slot = ring.index((base + i) % SLOTS)
            offs = i * CHUNK + cols
            mask = offs < N
            if WB_AHEAD == 0:
                w, b = _weights(W, B, i, N, cols, CHUNK)
            elif WB_AHEAD == 1:
                w, b = w1, b1
                w1, b1 = _weights(W, B, i + 1, N, cols, CHUNK)
            else:
                w, b = w1, b1
                w1, b1 = w2, b2
                w2, b2 = _weights(W, B, i + 2, N, cols, CHUNK)
            x = slot.load(layout).to(gl.float32)
            y = (x - mean) * rstd * w.to(gl.float32) + b.to(gl.float32)
            gl.store(Y + row * stride_y + offs, y.to(Y.dtype.element_ty), mask=mask)
            later = i + SLOTS  # this slot's next chunk in the program's stream
            next_row = (pid + (j + later // CHUNKS) * programs).to(gl.int64)
            _issue(slot, X, next_row, later % CHUNKS, M, N, stride_x, cols, CHUNK)
    async_copy.wait_group(0)
