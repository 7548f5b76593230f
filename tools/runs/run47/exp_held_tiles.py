"""Backward at 32 KB rows: hold x and dy as bfloat16 bits instead of reading the tile twice (run 47).

At 32 KB rows the persistent backward reads each tile a second time from L2
(RELOAD), because x̂ and w·∇y in float32 held across the row sums, next to the
dW/dB accumulators, would spill. Holding the raw bfloat16 tiles takes half the
registers; the second widening is written as an integer shift of the bits so
that the compiler cannot merge it with the first (run 47's forward variant).

Prediction: 8192 x 16384 goes from 76 % of copy (2260 GB/s at the launcher,
run 39) to 80-85 %: the second read's L2 latency is no longer waited for.
"""

from ln_tutorial.launch import BackwardConfig as B

OLD = """        if RELOAD:  # wide rows: x̂ and w·∇y held across the sums would spill; read the tile again (L2)
            x_hat, dy, w_dy, rstd = load_tile(
                X, DY, W, MEAN, RSTD, rows, cols, row_mask, col_mask, stride_x, stride_dy, COMPUTE, "evict_first"
            )
"""
NEW = """        if RELOAD:  # widen the held bfloat16 bits again, written so that it is not merged with the first
            mask = row_mask[:, None] & col_mask[None, :]
            x_raw = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
            dy_raw = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0)
            mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
            x_hat = tl.where(mask, (x_raw.to(COMPUTE) - mean[:, None]) * rstd[:, None], 0.0)
            dy = dy_raw.to(COMPUTE)
            w_dy = dy * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]
            c1 = tl.sum(x_hat * w_dy, axis=1) * inv_n
            c2 = tl.sum(w_dy, axis=1) * inv_n
            x_bits = (x_raw.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            x_hat = tl.where(mask, (x_bits - mean[:, None]) * rstd[:, None], 0.0)
            dy = (dy_raw.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            w_dy = dy * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]
"""
VARIANTS = {"held_bits": [(OLD, NEW)]}
CASES = [
    ("backward", 8192, 16384, [B(False, 1, 16384, 8, 1, 1, True), B(False, 1, 16384, 16, 1, 1, True),
                               B(False, 1, 16384, 8, 1, 2, True), B(False, 1, 16384, 32, 1, 1, True)]),
]  # fmt: skip
