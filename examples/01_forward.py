"""
Layer Normalization, part 1: the forward pass
=============================================

In this tutorial you will write a layer normalization kernel in Triton that
normalizes each row of its input in a single read from memory, and launch it
on a grid of programs.

In doing so, you will learn about:

* What layer normalization computes, and how it differs from batch
  normalization, the bias-free layer norm and RMSNorm.

* Keeping a whole row in registers, so that the kernel reads its input once.

* Choosing the block size and the number of warps from the registers a
  thread holds.

* A variance that does not lose its digits to cancellation.

The kernels of these pages, with their autograd wiring, a check and a small
benchmark, are one file to copy into a project:
`layer_norm_triton.py <../_downloads/standalone/layer_norm_triton.py>`_
(it needs only torch, triton and matplotlib).
"""

# %%
# Setting up
# ----------
#
# The code on this page runs on an NVIDIA GPU. Without one, it switches
# Triton to its *interpreter*, which runs the same kernels on the CPU, one
# program at a time, slowly: the inputs are then small. Triton reads
# ``TRITON_INTERPRET`` when a kernel is decorated with ``@triton.jit``, so it
# is set before the kernels are imported.

# sphinx_gallery_thumbnail_number = 1

import os

import matplotlib.pyplot as plt
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: the kernels run on the CPU through Triton's interpreter "
          "(TRITON_INTERPRET=1), on small inputs.")

import triton
import triton.language as tl

import ln_tutorial
from ln_tutorial_book import figures, plain

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# Motivation
# ----------
#
# The scale of the values flowing through a deep network drifts as its
# weights are trained, and a *normalization* layer removes that drift. Layer
# normalization (Ba, Kiros and Hinton, 2016) does it one sample at a time: it
# takes the :math:`N` features of a sample (one token's hidden vector in a
# transformer, say), shifts them to mean zero, scales them to variance one,
# and lets the network choose the scale and shift it wants back through two
# learned vectors :math:`w` and :math:`b` of length :math:`N`:
#
# .. math::
#
#    y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \odot w + b
#
# Here :math:`\mathrm{E}[x]` and :math:`\mathrm{Var}[x]` are the mean and the
# (biased) variance of the :math:`N` values of the row, :math:`\odot` is the
# element-wise product, and :math:`\epsilon` (``1e-5`` by default) keeps the
# division finite for a constant row. A transformer layer applies it twice
# (around the attention block and the MLP), forward and backward.
#
# **Batch versus layer normalization.** Batch normalization (Ioffe and
# Szegedy, 2015) normalizes each *feature* over the samples of a batch, which
# ties a sample's output to the others it is batched with, fails for small
# batches and needs running averages at inference. Layer normalization
# normalizes each *sample* over its features: its output depends on that
# sample alone. On an input of shape (batch, features), batch norm reduces
# over dimension 0 and layer norm over dimension 1:

x = torch.tensor([[1.0, 2.0, 3.0, 4.0],
                  [10.0, 20.0, 30.0, 40.0],
                  [0.0, 0.0, 1.0, 1.0]])
batch_normed = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)
layer_normed = (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, unbiased=False, keepdim=True) + 1e-5)

figures.normalized_matrices([("input", x), ("batch norm: per column", batch_normed),
                             ("layer norm: per row", layer_normed)])
plt.show()

# %%
# The first two rows differ only by a factor of ten, and layer normalization
# maps them to the same output: it is invariant to the scale of each sample.
# Batch normalization mixes them with the third row and gives three different
# answers.
#
# **Siblings.** The *bias-free* layer norm (PaLM's) drops :math:`b`.
# *RMSNorm* (Zhang and Sennrich, 2019; LLaMA, T5) also drops the centring and
# divides by the root mean square of the row, one reduction fewer. Both are
# the kernel below with a few lines left out.
#
# The forward kernel
# ------------------
#
# Run as eager PyTorch, the formula launches about ten kernels (mean,
# subtract, square, mean, add, square root, divide, multiply, add, cast), each
# reading its whole input from memory and writing its output back. The
# arithmetic is trivial; the traffic costs the time. One fused kernel that
# reads :math:`x` once and writes :math:`y` once moves the least data.
#
# Whatever the shape of the input, layer normalization over the last
# dimension sees a matrix: :math:`M` rows (all leading dimensions flattened
# together) of :math:`N` elements. Rows are independent, so they are the
# natural unit of parallel work. A Triton kernel is written for one
# *program*; the launch starts many programs, each identified by
# ``tl.program_id(0)``. On an NVIDIA GPU a program is one CUDA thread block:
# ``num_warps`` warps of 32 threads on one SM, over which Triton spreads the
# program's vectors. Here each program normalizes one row, and holds it
# whole: ``BLOCK_N`` is a power of two at least :math:`N` (``tl.arange``
# needs a power of two), and the columns past :math:`N` are masked off.

# ln_tutorial:source ln_tutorial_book.plain.layer_norm_fwd_kernel

# %%
# What happens, line by line:
#
# 1. **Addresses.** ``X + row * stride + cols`` is a vector of pointers into
#    the row; the row index is made 64-bit first, so that offsets past
#    :math:`2^{31}` elements do not overflow.
#
# 2. **One load.** ``tl.load`` with a mask reads the row; masked lanes get
#    ``0.0``. The values are converted to float32 at once: float16 and
#    bfloat16 have too few digits to sum thousands of values.
#
# 3. **Two reductions in registers.** ``tl.sum(x, axis=0)`` gives the row
#    sum. The variance is computed from the *centred* values, which are
#    already in registers, so this second pass costs no memory traffic. The
#    masked lanes are set back to zero with ``tl.where``, or they would add
#    :math:`(0 - \mathrm{mean})^2` to the sum.
#
# 4. **Stores.** :math:`y` goes back in the output's dtype, and the mean and
#    :math:`1/\sigma` (``rstd``) of each row are saved for the backward pass.
#
# Why centre first? The textbook shortcut
# :math:`\mathrm{Var}[x] = \mathrm{E}[x^2] - \mathrm{E}[x]^2` needs a single
# pass, but when the mean is large compared to the spread it subtracts two
# nearly equal numbers, and the difference is mostly rounding error:

offset_row = 1000.0 + torch.randn(1, 4096)
exact = offset_row.double().var(unbiased=False).item()
shortcut = ((offset_row ** 2).mean() - offset_row.mean() ** 2).item()
centred = ((offset_row - offset_row.mean()) ** 2).mean().item()
print(f"exact variance           {exact:.6f}")
print(f"E[x^2] - E[x]^2, float32 {shortcut:.6f}")
print(f"E[(x - E[x])^2], float32 {centred:.6f}")

# %%
# Launching it
# ------------
#
# A kernel is launched as ``kernel[grid](arguments, meta-parameters)``. The
# grid is a tuple of program counts, here one program per row: ``(M,)``.
# Tensors are passed as pointers to their first element; Python numbers as
# scalars; ``BLOCK_N`` and ``num_warps`` are compile-time constants, and
# Triton compiles one kernel per power of two, not one per :math:`N`.

# ln_tutorial:source ln_tutorial_book.plain.MAX_ROW_BYTES
# ln_tutorial:source ln_tutorial_book.plain.launch_config
# ln_tutorial:source ln_tutorial_book.plain.layer_norm_forward

# %%
# The choice of ``num_warps`` comes from a simple model. A program is
# ``32 * num_warps`` threads, and a row of ``BLOCK_N`` values is spread over
# them, so each thread holds ``BLOCK_N / (32 * num_warps)`` float32 values in
# its registers. A thread has at most 255 registers, and the fewer it uses, the
# more threads an SM keeps busy and the more loads are in flight to hide the
# memory's latency; but each ``tl.sum`` ends in an exchange between the warps,
# so too many warps cost too. ``launch_config`` gives each thread 8 values
# until 16 warps are reached, and more past that. The backward will hold four
# float32 values per column (two rows and two running sums), which sets
# ``MAX_ROW_BYTES``. For a few row lengths:

print(f"{'N':>6} {'dtype':>8} {'BLOCK_N':>8} {'warps':>6} {'values per thread':>18}")
for n in (256, 1024, 4096, 16384):
    for dtype in (torch.float16, torch.float32):
        size = torch.empty(0, dtype=dtype).element_size()
        if triton.next_power_of_2(n) * size > plain.MAX_ROW_BYTES:
            continue
        block_n, warps = plain.launch_config(n, size)
        print(f"{n:>6} {str(dtype)[6:]:>8} {block_n:>8} {warps:>6} {block_n // (32 * warps):>18}")

# %%
# Checking it
# -----------
#
# The kernel is compared with PyTorch and with the package's default forward
# (``ln_tutorial.layer_norm``) on rows that are not a power of two, in every
# supported precision, relative to the largest value; each dtype gets a
# tolerance that matches its rounding.

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
M, N = (4096, 3000) if ON_GPU else (37, 300)
print(f"{'dtype':>9} {'vs torch':>10} {'vs default':>11} {'tol':>8}  ok")
all_ok = True
for dtype, tol in TOL.items():
    x = (-2.3 + 0.5 * torch.randn(M, N, device=DEVICE)).to(dtype)
    w = torch.rand(N, device=DEVICE).to(dtype)
    b = torch.rand(N, device=DEVICE).to(dtype)
    y, mean, rstd = plain.layer_norm_forward(x, w, b, 1e-5)
    theirs = torch.nn.functional.layer_norm(x, (N,), w, b)
    default = ln_tutorial.layer_norm(x, (N,), w, b)
    err = ((y - theirs).abs().max() / theirs.abs().max()).item()
    err_default = ((y - default).abs().max() / default.abs().max()).item()
    ok = y.dtype == dtype and max(err, err_default) <= tol
    all_ok &= ok
    print(f"{str(dtype)[6:]:>9} {err:>10.2e} {err_default:>11.2e} {tol:>8.0e}  {'yes' if ok else 'NO'}")
assert all_ok, "the forward does not match torch"

# %%
# Where the default goes further
# ------------------------------
#
# The package's default forward packs short rows several to a program: each
# program pays fixed costs (starting, the two reductions between its load and
# its store, writing its statistics), and a 2 KB row is too little to spread
# them over or to keep the memory busy. It also sweeps rows too wide for the
# registers twice, and sizes everything from a launch table per GPU model:
# `the forward at full speed <04_forward_advanced.html>`_.
#
# Next, `the backward pass <02_backward.html>`_: the gradients of this
# function, and the parallel reduction they need.
#
# References
# ----------
#
# * Jimmy Lei Ba, Jamie Ryan Kiros and Geoffrey E. Hinton, "Layer
#   Normalization", arXiv:1607.06450, 2016.
#   `arxiv.org/abs/1607.06450 <https://arxiv.org/abs/1607.06450>`_
#
# * Sergey Ioffe and Christian Szegedy, "Batch Normalization: Accelerating Deep
#   Network Training by Reducing Internal Covariate Shift", ICML 2015.
#   `arxiv.org/abs/1502.03167 <https://arxiv.org/abs/1502.03167>`_
#
# * Biao Zhang and Rico Sennrich, "Root Mean Square Layer Normalization",
#   NeurIPS 2019. `arxiv.org/abs/1910.07467 <https://arxiv.org/abs/1910.07467>`_
#
# * Tony F. Chan, Gene H. Golub and Randall J. LeVeque, "Algorithms for
#   Computing the Sample Variance: Analysis and Recommendations", The American
#   Statistician 37(3), 1983.
#
# * The Triton documentation's layer normalization tutorial, whose arc these
#   pages follow.
#   `triton-lang.org <https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html>`_
