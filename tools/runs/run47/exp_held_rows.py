"""Forward: a whole 128 KB row held in registers as bfloat16 (run 47).

Run 35 kept x in its input dtype and converted it at each use, but the compiler
merged the three identical conversions into one float32 row (the results were
the package's bits, the times the same), so the idea was never tested. Here
the second and third conversions are written as integer shifts of the bfloat16
bits (exact for bfloat16), which the compiler cannot merge with the first.

Prediction: at 2048 x 65536 a fused program then needs 32 registers per thread
for x (32 warps) instead of 64 and need not spill; one program per SM, a row
read once: 88-93 % of copy against the looped kernel's 82 % (the fused kernel
at 64 KB rows reaches 93 %). "chunks" loads the row as four quarter rows so
that w and b are loaded a quarter at a time after the row sums (at most 96
live registers otherwise). At 64 KB rows (16 warps: 32 registers of x per
thread) two programs might share an SM: a few percent, if any.
"""

from ln_tutorial.launch import ForwardConfig as F

OLD = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)
    mean = tl.sum(x, axis=1) * inv_n
    # Centre first, then square: the two-pass variance does not cancel.
    x_centered = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(x_centered * x_centered, axis=1) * inv_n
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
    y = x_centered * rstd[:, None]
    if W is not None:
        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]
    if B is not None:
        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]

    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
"""
BITS = """    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    mean = tl.sum(x.to(COMPUTE), axis=1) * inv_n
    bits = x.to(tl.uint16, bitcast=True)
    x_centered = tl.where(mask, (bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True) - mean[:, None], 0.0)
    var = tl.sum(x_centered * x_centered, axis=1) * inv_n
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
    y = tl.where(mask, (bits.to(tl.int32) << 16).to(tl.float32, bitcast=True) - mean[:, None], 0.0) * rstd[:, None]
    if W is not None:
        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]
    if B is not None:
        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(COMPUTE)[None, :]

    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
"""
CHUNK_LOADS = "\n".join(
    f"    m{k} = mask_of(rows, {k} * Q + q, M, N)\n"
    f"    x{k} = tl.load(X + rows[:, None] * stride_x + ({k} * Q + q)[None, :], mask=m{k}, other=0.0)"
    for k in range(4)
)
CHUNK_Y = "\n".join(
    f"    y = tl.where(m{k}, (x{k}.to(tl.uint16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)"
    f" - mean[:, None], 0.0) * rstd[:, None]\n"
    f"    y = y * tl.load(W + {k} * Q + q).to(COMPUTE)[None, :] + tl.load(B + {k} * Q + q).to(COMPUTE)[None, :]\n"
    f"    tl.store(Y + rows[:, None] * stride_y + ({k} * Q + q)[None, :], y.to(Y.dtype.element_ty), mask=m{k})"
    for k in range(4)
)
CHUNK_SUM = " + ".join(f"tl.sum({e}, axis=1)" for e in [f"x{k}.to(COMPUTE)" for k in range(4)])
CHUNK_DEV = "\n".join(
    f"    d{k} = tl.where(m{k}, (x{k}.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)"
    f" - mean[:, None], 0.0)"
    for k in range(4)
)
CHUNKS = f"""    Q: tl.constexpr = BLOCK_N // 4
    q = tl.arange(0, Q)
{CHUNK_LOADS}
    mean = ({CHUNK_SUM}) * inv_n
{CHUNK_DEV}
    var = ({" + ".join(f"tl.sum(d{k} * d{k}, axis=1)" for k in range(4))}) * inv_n
    rstd = 1.0 / tl.sqrt(var + eps + eps_lo)
{CHUNK_Y}
"""
MASK_OF = '''@triton.jit
def mask_of(rows, cols, M, N):
    return (rows < M)[:, None] & (cols < N)[None, :]


@triton.jit
def layer_norm_fwd_kernel('''
VARIANTS = {
    "bits": [(OLD, BITS)],
    "chunks": [(OLD, CHUNKS), ("@triton.jit\ndef layer_norm_fwd_kernel(", MASK_OF)],
}
CASES = [
    ("forward", 2048, 65536, [F(True, 1, 16384, 32), F(False, 1, 65536, 32), F(False, 1, 65536, 16)]),
    ("forward", 4096, 32768, [F(False, 1, 32768, 32), F(False, 1, 32768, 16)]),
    ("forward", 8192, 16384, [F(False, 1, 16384, 16), F(False, 1, 16384, 8)]),
]  # fmt: skip
