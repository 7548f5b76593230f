"""
Layer Normalization, part 1: the forward pass
=============================================

In this tutorial you will write a layer normalization kernel in Triton that
normalizes each row of its input in a single read from memory, and launch it
on a grid of programs.

In doing so, you will learn about:

* What layer normalization computes, why networks use it, and how it differs
  from batch normalization and from its siblings, the bias-free layer norm and
  RMSNorm.

* Keeping a whole row in registers, so that a memory-bound kernel reads its
  input exactly once.

* Choosing the block size and the number of warps from a simple model of the
  registers a thread holds.

* Computing a variance that does not lose its digits to cancellation.

* Checking a kernel against PyTorch.

The kernels of these pages, with their autograd wiring, a check and a small
benchmark, are also one file to copy into a project:
`layer_norm_triton.py <../_downloads/standalone/layer_norm_triton.py>`_
(it needs only torch, triton and matplotlib).
"""

# %%
# Setting up
# ----------
#
# The code on this page runs on an NVIDIA GPU. On a machine without one, it
# switches Triton to its *interpreter*, which runs the same kernels on the CPU,
# one program at a time. Triton reads ``TRITON_INTERPRET`` when a kernel is
# decorated with ``@triton.jit``, so the variable must be set before
# ``ln_tutorial`` (which defines the kernels) is imported. The interpreter is
# slow, so the inputs are then kept small.

# sphinx_gallery_thumbnail_number = 1

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: the kernels run on the CPU through Triton's interpreter "
          "(TRITON_INTERPRET=1), on small inputs.")

import triton
import triton.language as tl

import ln_tutorial
from ln_tutorial_book import plain

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# Motivation
# ----------
#
# Deep networks are stacks of layers, and the scale of the values flowing
# through them drifts as the weights are trained: a layer that receives
# inputs ten times larger than last step sees a different problem. A
# *normalization* layer removes that drift. Layer normalization, proposed by
# Ba, Kiros and Hinton in 2016, does it for one sample at a time: it takes the
# :math:`N` features of a sample (one token's hidden vector in a transformer,
# say), shifts them to mean zero, scales them to variance one, and then lets
# the network choose the scale and shift it wants back through two learned
# vectors :math:`w` and :math:`b` of length :math:`N`:
#
# .. math::
#
#    y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \odot w + b
#
# Here :math:`\mathrm{E}[x]` and :math:`\mathrm{Var}[x]` are the mean and the
# (biased) variance of the :math:`N` values of the row, :math:`\odot` is the
# element-wise product, and :math:`\epsilon` (``1e-5`` by default) keeps the
# division finite for a constant row. Every transformer layer applies it
# twice (before or after the attention block and the MLP), so a model with 32
# layers applies 64 layer norms per token, forward and backward.
#
# **Batch versus layer normalization.** Batch normalization (Ioffe and
# Szegedy, 2015), its predecessor, normalizes each *feature* over the samples
# of a batch. That ties a sample's output to the other samples it happens to be
# batched with, breaks down for small batches, needs running averages at
# inference time, and fits sequences of varying length badly. Layer
# normalization normalizes each *sample* over its features: its output depends
# on that sample alone, and training and inference compute the same thing. In
# tensor terms, on an input of shape (batch, features), batch norm reduces over
# dimension 0 and layer norm over dimension 1:

x = torch.tensor([[1.0, 2.0, 3.0, 4.0],
                  [10.0, 20.0, 30.0, 40.0],
                  [0.0, 0.0, 1.0, 1.0]])
batch_normed = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)
layer_normed = (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, unbiased=False, keepdim=True) + 1e-5)

fig, axes = plt.subplots(1, 3, figsize=(9, 2.8))
for ax, data, title in zip(axes, (x, batch_normed, layer_normed),
                           ("input", "batch norm: per column", "layer norm: per row")):
    ax.imshow(data, cmap="coolwarm", vmin=-data.abs().max(), vmax=data.abs().max())
    for (i, j), value in np.ndenumerate(data.numpy()):
        ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("feature")
    ax.set_xticks(range(4))
    ax.set_yticks(range(3))
axes[0].set_ylabel("sample")
fig.tight_layout()
plt.show()

# %%
# The first two rows differ only by a factor of ten, and layer normalization
# maps them to the same output: it is invariant to the scale of each sample.
# Batch normalization mixes them with the third row and gives three different
# answers.
#
# **Siblings.** The *bias-free* layer norm drops :math:`b` (PaLM, for
# instance, uses no biases anywhere). *RMSNorm* (Zhang and Sennrich, 2019)
# also drops the centring: it divides by the root mean square of the row and
# multiplies by :math:`w`, which saves one reduction; LLaMA and T5 use it.
# Both are the kernel below with a few lines left out.
#
# The forward kernel
# ------------------
#
# Run as eager PyTorch, the formula launches about ten kernels (mean,
# subtract, square, mean, add, square root, divide, multiply, add, cast), and
# each one reads its whole input from the GPU's memory and writes its whole
# output back. The arithmetic is trivial; the memory traffic is what costs
# time. A single fused kernel that reads :math:`x` once and writes :math:`y`
# once moves the least data possible, and that is the kernel to write.
#
# Whatever the shape of the input, layer normalization over the last
# dimension sees a matrix: :math:`M` rows (all leading dimensions flattened
# together) of :math:`N` elements. Rows are independent, so they are the
# natural unit of parallel work. A Triton kernel is written for one
# *program*; the launch starts many programs, each identified by
# ``tl.program_id(0)``. Here each program normalizes one row, and holds it
# whole: ``BLOCK_N`` is a power of two at least :math:`N` (``tl.arange``
# needs a power of two), and the columns past :math:`N` are masked off.

# ln_tutorial:source ln_tutorial_book.plain.layer_norm_fwd_kernel

# %%
# What happens, line by line:
#
# 1. **Addresses.** ``cols`` is a vector of column indices, and
#    ``X + row * stride + cols`` a vector of pointers into the row. The row
#    index is made 64-bit first, so that offsets past :math:`2^{31}` elements
#    do not overflow.
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
#    :math:`1/\sigma` (``rstd``) of each row are saved for the backward pass,
#    which then does not need to recompute them.
#
# Why centre first? The textbook shortcut
# :math:`\mathrm{Var}[x] = \mathrm{E}[x^2] - \mathrm{E}[x]^2` needs a single
# pass, but when the mean is large compared to the spread it subtracts two
# nearly equal numbers and the difference is mostly rounding error. Hidden
# states with a large offset are common enough that this matters:

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
# memory's latency. Too many warps cost too: each ``tl.sum`` ends in an
# exchange of partial sums between the warps. So ``launch_config`` gives each
# thread 8 values until 16 warps are reached, and lets the count grow past
# that. The backward will hold four float32 values per column (two rows and
# two running sums), which sets ``MAX_ROW_BYTES``. Here is the model's result
# for a few row lengths:

print(f"{'N':>6} {'dtype':>8} {'BLOCK_N':>8} {'warps':>6} {'values per thread':>18}")
for n in (256, 768, 1024, 4096, 8192, 16384):
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
# Last, the kernel is compared with PyTorch, and with the package's default
# forward (``ln_tutorial.layer_norm``), on a shape whose rows are not a power
# of two, in every supported precision. The error is measured relative to the
# largest value: a low-precision result cannot be closer than the rounding of
# its own dtype, so each dtype gets the tolerance that matches its machine
# epsilon.

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
# The package's default forward computes the same function, with more
# machinery for speed. One row per program is too little work when rows are
# short, so it packs several rows into a program; rows too wide for the
# registers take a kernel that sweeps each row twice; and a launch table
# measured on an H100 sets rows per program and warps by row size. Its tuning
# and the kernels that only some shapes need are on
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
# * Aakanksha Chowdhery et al., "PaLM: Scaling Language Modeling with
#   Pathways", arXiv:2204.02311, 2022 (no biases in its layer norms).
#   `arxiv.org/abs/2204.02311 <https://arxiv.org/abs/2204.02311>`_
#
# * Tony F. Chan, Gene H. Golub and Randall J. LeVeque, "Algorithms for
#   Computing the Sample Variance: Analysis and Recommendations", The American
#   Statistician 37(3), 1983.
#
# * Philippe Tillet, H. T. Kung and David Cox, "Triton: an intermediate
#   language and compiler for tiled neural network computations", MAPL 2019;
#   and the Triton documentation's own layer normalization tutorial, whose
#   arc these pages follow.
