"""Prefetch into L2, for the split backward (:mod:`.split`), which brings its tile after next into L2.

The same prefetch in the forward (the rows of a program 264 further on, for
8 KB rows) gained 1 to 4 % on the H100 in an interleaved A/B run, under the 5 %
a variant must gain, so the forward does not prefetch. The interpreter runs
no PTX, so there nothing is prefetched.
"""

import triton
import triton.language as tl


@triton.jit
def prefetch_to_l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (PTX ``prefetch.global.L2``): no registers held, nothing to wait for."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs.to(tl.int64, bitcast=True)],
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
