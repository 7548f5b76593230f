"""Run 78 (tools/ab_kernels.py): w and b loaded before the row sums in the fused forward; padded rows as
two tiles (configurations with tail_n).

    python tools/ab_kernels.py tools/runs/run78/short_and_padded.py
"""

from ln_tutorial.launch import ForwardConfig, forward_config, next_power_of_2

LOAD_AFFINE = '''@triton.jit
def load_affine(W, B, cols, N, COMPUTE: tl.constexpr):
    col_mask = cols < N
    w = tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)
    return w, tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)


@triton.jit
def store_normalized('''

# Experiment only: assumes a weight and a bias (the benchmark's case).
VARIANTS = {
    "wb_first": [
        ("    cols = tl.arange(0, BLOCK_N)\n    x, mask = load_rows(",
         "    cols = tl.arange(0, BLOCK_N)\n    w, b = load_affine(W, B, cols, N, COMPUTE)\n    x, mask = load_rows("),
        ("        x_tail, tail_mask = load_rows(",
         "        w_t, b_t = load_affine(W, B, tail_cols, N, COMPUTE)\n        x_tail, tail_mask = load_rows("),
        ("    store_normalized(Y, W, B, x_centered,", "    store_normalized(Y, w, b, x_centered,"),
        ("store_normalized(Y, W, B, tail_centered,", "store_normalized(Y, w_t, b_t, tail_centered,"),
        ("        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]\n    if B",
         "        y = y * W[None, :]\n    if B"),
        ("        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]\n    tl.store(Y + rows",
         "        y = y + B[None, :]\n    tl.store(Y + rows"),
        ("@triton.jit\ndef store_normalized(", LOAD_AFFINE),
    ],
}  # fmt: skip


def fused(n, block_m, warps):
    return ForwardConfig(False, block_m, next_power_of_2(n), warps)


def two_tiles(n, block_m, warps):
    return ForwardConfig(False, block_m, 8192, warps, next_power_of_2(n - 8192))


CASES = [("forward", 4096, n, [forward_config(n, 2), fused(n, 1, 4), fused(n, 1, 8), fused(n, 2, 4)])
         for n in (1024, 1536, 2048)]
CASES += [("forward", 4096, n, [forward_config(n, 2)]) for n in (2560, 3072, 4096, 5632, 8192)]
CASES += [("forward", 4096, n, [forward_config(n, 2), two_tiles(n, 1, 8), two_tiles(n, 1, 16), two_tiles(n, 2, 16)])
          for n in (8704, 9216, 10240, 11264, 11776, 12288)]
CASES += [("forward", m, n, [forward_config(n, 2)])
          for m, n in ((65536, 1024), (16384, 4096), (16384, 8192), (8192, 16384), (4096, 32768))]
