"""
Layer Normalization, part 1: the forward pass
=============================================

In this tutorial you will write a layer normalization kernel in Triton that
normalizes each row of its input in a single read from memory, and a launcher
that chooses how the work is split for any row length.

In doing so, you will learn about:

* What layer normalization computes, why networks use it, and how it differs
  from batch normalization and from its siblings, the bias-free layer norm and
  RMSNorm.

* Keeping a whole row in registers, so that a memory-bound kernel reads its
  input exactly once.

* Choosing the block size and the number of warps from the row length and the
  data type.

* Handling rows too wide for the registers, and computing a variance that
  does not lose its digits to cancellation.

* Checking a kernel against PyTorch in every supported precision.
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
#
# (The ``__future__`` import keeps Python from evaluating type annotations:
# cells below show the package's own functions, annotations included.)

# sphinx_gallery_thumbnail_number = 1

from __future__ import annotations

import functools
import os
from typing import NamedTuple

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
from ln_tutorial import launch
from ln_tutorial.reference import layer_norm_reference

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)
print(f"device: {DEVICE}, torch {torch.__version__}, triton {triton.__version__}")

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
# layers runs 64 layer norms per token, forward and backward.
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
print("batch norm, each column has mean 0 and variance 1:\n", batch_normed)
print("layer norm, each row has mean 0 and variance 1:\n", layer_normed)

# %%
# The same three results as pictures: a row is a sample, a column a feature.

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
# **Siblings.** Two variants matter in today's language models, and the
# kernels below cover or almost cover both:
#
# * The *bias-free* layer norm drops :math:`b` (PaLM, for instance, uses no
#   biases anywhere). PyTorch offers it as ``torch.nn.LayerNorm(N, bias=False)``;
#   here it is ``ln_tutorial.layer_norm(x, (N,), w, None)``, and the kernel is
#   compiled without the bias load at all.
#
# * *RMSNorm* (Zhang and Sennrich, 2019) also drops the centring: it divides by
#   the root mean square of the row and multiplies by :math:`w`. It saves one
#   reduction and works as well in practice, which is why LLaMA and T5 use it.
#   Its kernel is the one below with the mean left out:
#
# .. math::
#
#    y = \frac{x}{\sqrt{\frac{1}{N}\sum_{i} x_i^2 + \epsilon}} \odot w
#
# Computing it, slowly
# --------------------
#
# Before writing a kernel, here is the formula as plain PyTorch. It is the
# package's reference implementation, which the tests and this page use as the
# exact answer: it computes in float64, one step per line.

# ln_tutorial:source ln_tutorial.reference.layer_norm_reference

# %%
# Run as eager PyTorch, these lines launch about ten kernels (mean, subtract,
# square, mean, add, square root, divide, multiply, add, cast), and each one
# reads its whole input from the GPU's memory and writes its whole output back.
# The arithmetic is trivial; the memory traffic is what costs time. A single
# fused kernel that reads :math:`x` once and writes :math:`y` once moves the
# least data possible, and that is the kernel to write.
#
# The forward kernel
# ------------------
#
# Whatever the shape of the input, layer normalization over the last
# dimensions sees a matrix: :math:`M` rows (all leading dimensions flattened
# together) of :math:`N` elements (the normalized dimensions flattened). Rows
# are independent, so they are the natural unit of parallel work. A Triton
# kernel is written for one *program*; the launch starts many programs, each
# identified by ``tl.program_id(0)``. Here each program normalizes
# ``BLOCK_M`` consecutive rows, and holds each of them whole: ``BLOCK_N`` is a
# power of two at least :math:`N` (``tl.arange`` needs a power of two), and
# the columns past :math:`N` are masked off. The kernel uses two helpers:
# ``reciprocal``, which computes :math:`1/N` once per program, and
# ``prefetch_rows``, which asks the L2 cache for some rows without waiting for
# them, through ``prefetch_to_l2`` (both are explained below).

# ln_tutorial:source ln_tutorial.kernels.reciprocal
# ln_tutorial:source ln_tutorial.kernels.prefetch_to_l2
# ln_tutorial:source ln_tutorial.kernels.prefetch_rows
# ln_tutorial:source ln_tutorial.kernels.layer_norm_fwd_kernel

# %%
# What happens, line by line:
#
# 1. **Addresses.** ``rows`` and ``cols`` are vectors of indices; broadcasting
#    them (``rows[:, None]``, ``cols[None, :]``) gives a ``BLOCK_M`` by
#    ``BLOCK_N`` tile of addresses. Rows are ``stride_x`` elements apart, so a
#    view with padded rows needs no copy. The row index is made 64-bit first,
#    so that offsets past :math:`2^{31}` elements do not overflow.
#
# 2. **One load.** ``tl.load`` with a mask reads the tile; masked lanes get
#    ``0.0``. The values are converted to ``COMPUTE`` (float32, or float64 for
#    float64 inputs) at once: float16 and bfloat16 have too few digits to sum
#    thousands of values.
#
#    With ``PREFETCH_AHEAD`` (a compile-time constant, so without it the lines
#    vanish), the program then asks L2 for the rows of the program
#    ``PREFETCH_AHEAD`` places later, one address per 16 values, through a
#    PTX ``prefetch.global.L2`` instruction in Triton's inline assembly: no
#    register is held and nothing waits for it. When that program starts, its
#    load comes from L2. On the H100 this helped only rows of 8 KB, by 1–5 %
#    (``FORWARD_PREFETCH`` below); the interpreter has no PTX, so there it is
#    off.
#
# 3. **Two reductions in registers.** ``tl.sum(x, axis=1)`` gives the row
#    sums. The variance is computed from the *centred* values, which are
#    already in registers, so this second pass costs no memory traffic. The
#    masked lanes are set back to zero with ``tl.where``, or they would add
#    :math:`(0 - \mathrm{mean})^2` to the sum. Both sums are multiplied by
#    ``inv_n``, the :math:`1/N` that ``reciprocal`` computes once per program.
#    Triton's ``/`` on float32 is a fast division that may be off by a couple
#    of units in the last place: harmless almost everywhere, but it would make
#    :math:`x - \mathrm{mean}` slightly non-zero for a row of one element.
#    ``tl.div_rn`` rounds correctly, so :math:`1/N` is exactly 1 when
#    :math:`N = 1` and the mean of one value is that value. Why not
#    ``tl.div_rn`` on every row sum? That was the first version, and on the
#    H100 it cost up to a third of the bandwidth (see the performance notes):
#    even one scalar per row is not free inside a kernel this tight.
#
# 4. **Optional parameters.** ``W`` and ``B`` may be ``None``. Triton
#    specializes the kernel on that: ``if W is not None`` is decided at compile
#    time, and the bias-free variant contains no bias load at all.
#
# 5. **Stores.** :math:`y` goes back in the output's dtype, and the mean and
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
# The launcher
# ------------
#
# The kernel needs a launch configuration: how many rows each program takes
# (``BLOCK_M``), how wide its tile is (``BLOCK_N``), and how many warps (groups
# of 32 threads) run it. The package keeps these choices in a small table,
# keyed by the size of a padded row in bytes, and measured rather than guessed:
# the entries are the fastest configurations found on an H100 by a sweep over
# the candidates (the `performance notes <../performance.html>`_ give the
# numbers).

# ln_tutorial:source ln_tutorial.launch.ForwardConfig
# ln_tutorial:source ln_tutorial.launch.MAX_FUSED_FWD_BYTES
# ln_tutorial:source ln_tutorial.launch.FORWARD_TABLE
# ln_tutorial:source ln_tutorial.launch.FORWARD_LOOPED
# ln_tutorial:source ln_tutorial.launch.FORWARD_PREFETCH
# ln_tutorial:source ln_tutorial.launch.FORWARD_PADDED
# ln_tutorial:source ln_tutorial.launch.FORWARD_ONE_EXCHANGE
# ln_tutorial:source ln_tutorial.launch.FORWARD_TWO_TILES
# ln_tutorial:source ln_tutorial.launch.forward_config

# %%
# The reasoning behind the numbers:
#
# * ``BLOCK_N`` is the next power of two above :math:`N`, so a row is loaded
#   in one go and stays on chip. The row length :math:`N` is a run-time
#   argument, but ``BLOCK_N`` is a compile-time constant: Triton compiles one
#   kernel per power of two, not one per :math:`N`.
#
# * ``BLOCK_M``: a GPU hides the latency of its memory only if enough bytes
#   are in flight at once. One row of 256 float16 values is 512 bytes, far too
#   little for one program, so short rows are packed several to a program;
#   rows of a few kilobytes and more fill a program alone.
#
# * ``num_warps``: more warps mean fewer values per thread, hence fewer
#   registers per thread and more loads in flight, but also more threads that
#   must combine their partial sums in each reduction. Wide rows get more
#   warps; past about 32 values per thread the extra warps only add reduction
#   overhead, which is why the table does not simply grow with the row.
#
# * The configuration depends on bytes, not elements: a float32 row of 4096
#   values and a float16 row of 8192 values occupy the same registers and move
#   the same amount of memory.
#
# * Padding costs. A row of 9216 float16 values sits in a tile 16384 wide:
#   44 % of the lanes load nothing yet hold registers. For half-precision
#   rows that a tile would pad, ``FORWARD_PADDED`` overrides the table: one
#   row per program with 4 warps for rows of 1025 to 1792 values, 8 warps
#   rather than 16 for rows of 2049 to 4095 and of 4097 to 6656 values, and
#   for rows of 8193 to 12287 values the looped kernel of the next section,
#   whose 2048-value steps waste nothing.
#
# * Each ``tl.sum`` over a row spread across warps ends in an exchange between
#   the warps, through shared memory, and the second sum waits for the first.
#   With 16 or 32 warps that wait shows. On a GPU, with Triton 3.6 or later,
#   half-precision rows of 12288 to 32768 values therefore take
#   ``FORWARD_ONE_EXCHANGE``: a variant of this kernel written in Gluon,
#   Triton's lower-level dialect, in which each warp sums its own columns and
#   the warps trade their sums once (``ln_tutorial/kernels_gluon.py``; the
#   `performance notes <../performance.html>`_, run 130, have the formula and
#   the numbers). Triton's interpreter cannot run Gluon, so on the CPU these
#   rows take the kernel above, which computes the same function.
#
# * The same Gluon kernel takes padded half-precision rows of 4097 to 8191
#   and 8193 to 12287 values as two tiles, half the padded width and then a
#   power-of-two tail (``FORWARD_TWO_TILES``): a row of 9728 values is 8192 +
#   2048, of which 1536 are the row's, where one tile would be 16384 wide.
#   Fewer lanes idle than in one tile, and nothing is read twice as in the
#   loop; each warp's group is its part of both tiles, so the warps still
#   trade their sums once (run 139: 3 to 11 % faster than the entries above).
#
# * A row of 65536 half-precision values (128 KB) is too much for one program
#   to hold in registers. On a Hopper GPU two programs of a thread-block
#   cluster hold half of it each and trade their halves' sums once, through
#   each other's shared memory (``layer_norm_fwd_cluster_kernel`` in the same
#   file; the performance notes, run 133, measure it). Other GPUs and other
#   wide rows take the looped kernel of the next section.
#
# Here is what it picks for a few row lengths:

print(f"{'N':>7} {'dtype':>9} {'BLOCK_M':>8} {'BLOCK_N':>8} {'TAIL_N':>7} {'warps':>6} {'looped':>7}")
for n in (128, 768, 1024, 1536, 2560, 4096, 4608, 8192, 9216, 16384, 32768, 65536):
    for dtype in (torch.float16, torch.float32):
        cfg = launch.forward_config(n, torch.empty(0, dtype=dtype).element_size())
        tiles = f"{cfg.block_m:>8} {cfg.block_n:>8} {cfg.tail_n:>7}"
        print(f"{n:>7} {str(dtype)[6:]:>9} {tiles} {cfg.num_warps:>6} {cfg.looped!s:>7}")

# %%
# The launcher itself allocates the outputs (statistics in the compute dtype),
# picks the configuration and launches one program per ``BLOCK_M`` rows. The
# grid is a tuple of program counts; ``cdiv`` rounds up, and the last
# program's spare rows are masked off by ``rows < M``. One detail: Triton
# passes a Python float to a kernel as float32, which would round
# :math:`\epsilon` for float64 inputs, so the launcher splits it into its
# float32 value and the remainder (``eps`` and ``eps_lo``), and the kernel adds
# both.

# ln_tutorial:source ln_tutorial.launch._split_eps
# ln_tutorial:source ln_tutorial.launch.layer_norm_forward

# %%
# ``kernel`` is ``kernel[grid](..., **meta)`` with the compile-time arguments
# bound once per configuration. A ``Launcher`` also skips Triton's general
# per-call dispatch once the kernel is compiled, which matters for small
# inputs: the performance notes measure it.

# ln_tutorial:source ln_tutorial.launch._forward_launcher

# %%
# Calling it directly on a 2-D input gives :math:`y` and the saved statistics:

M, N = (1151, 8192) if ON_GPU else (64, 512)
x = -2.3 + 0.5 * torch.randn(M, N, device=DEVICE)
weight = torch.rand(N, device=DEVICE)
bias = torch.rand(N, device=DEVICE)
y, mean, rstd = launch.layer_norm_forward(x, weight, bias, 1e-5)
print("y:", tuple(y.shape), y.dtype, " mean:", tuple(mean.shape), " rstd:", tuple(rstd.shape))
print("max |y - torch|:", (y - torch.nn.functional.layer_norm(x, (N,), weight, bias)).abs().max().item())

# %%
# Wide rows
# ---------
#
# A row in registers is fast, but registers are finite: an SM has 256 KB of
# them, shared by all the programs it runs, and the kernel converts every
# value to float32, so a row of 64 KB of float16 input already needs 128 KB.
# Past ``MAX_FUSED_FWD_BYTES`` the kernel would spill to slow local memory, so
# ``forward_config`` returns ``FORWARD_LOOPED``, which selects a second kernel.
# It walks each row in steps of ``BLOCK_N`` elements, twice:

# ln_tutorial:source ln_tutorial.kernels.layer_norm_fwd_looped_kernel

# %%
# The first sweep cannot centre the values (the mean is not known yet), so it
# sums :math:`x - s` and :math:`(x - s)^2` around a *shift* :math:`s`, the mean
# of the first block, and uses
#
# .. math::
#
#    \mathrm{Var}[x] = \mathrm{E}[(x - s)^2] - \mathrm{E}[x - s]^2 .
#
# This is the one-pass formula again, but applied to values from which
# something close to the mean has already been removed, so the two terms are
# no longer nearly equal (Chan, Golub and LeVeque, 1983). The second sweep
# reads the row again to write :math:`y`. The row is still in the L2 cache at
# that point, and the loads say so: the first sweep loads with
# ``eviction_policy="evict_last"`` (keep these lines in the cache), the second
# with ``"evict_first"`` (they will not be needed again), so the re-read costs
# little memory traffic.
#
# A launch configuration can also be passed explicitly, which lets us run the
# looped kernel on a small input, with a step of 128 elements, and compare it
# with PyTorch on a row whose offset would defeat the plain one-pass formula:

wide = 1000.0 + torch.randn(8, 1000, device=DEVICE)
looped_cfg = launch.ForwardConfig(looped=True, block_m=1, block_n=128, num_warps=4)
y_looped, _, _ = launch.layer_norm_forward(wide, None, None, 1e-5, config=looped_cfg)
y_torch = torch.nn.functional.layer_norm(wide, (1000,))
print("looped kernel, max |y - torch|:", (y_looped - y_torch).abs().max().item())

# %%
# Using it
# --------
#
# The launchers take 2-D inputs and compute no gradients. The package's public
# entry point, ``ln_tutorial.layer_norm``, has the signature of
# ``torch.nn.functional.layer_norm``: it accepts any number of leading
# dimensions, any strides, and ``normalized_shape`` with several dimensions,
# flattens the input to rows (without a copy when the rows are already
# contiguous), and registers the forward and backward as PyTorch custom
# operators, so autograd and ``torch.compile`` see one operation. The module
# ``ln_tutorial.LayerNorm`` is a ``torch.nn.LayerNorm`` subclass with the same
# parameters and ``state_dict``, so it can replace the PyTorch module in an
# existing model:

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)).to(DEVICE)
fast = torch.nn.Sequential(torch.nn.Linear(64, 64), ln_tutorial.LayerNorm(64)).to(DEVICE)
fast.load_state_dict(model.state_dict())
inp = torch.randn(4, 10, 64, device=DEVICE)
print(fast[1])
print("same output as torch.nn.LayerNorm:", torch.allclose(model(inp), fast(inp), atol=1e-5))

# %%
# Checking it
# -----------
#
# Last, the forward is compared with PyTorch and with the float64 reference in
# every supported precision, for a shape whose rows are not a power of two, a
# 3-D input, a bias-free call and float32 parameters with a half-precision
# input (the mixed-precision case of ``torch.autocast``). The error is
# measured relative to the float64 answer: a low-precision result cannot be
# closer than the rounding of its own dtype, so each dtype gets the tolerance
# that matches its machine epsilon, and PyTorch's own error is printed beside
# ours for comparison.

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}
cases = [
    ("2-D, N not a power of two", (M, N - 3) if ON_GPU else (37, 300)),
    ("3-D, normalized over the last dim", (4, 128, 768) if ON_GPU else (2, 8, 96)),
]
print(f"{'case':<36} {'dtype':>9} {'ours':>10} {'torch':>10} {'tol':>8}  ok")
all_ok = True
for label, shape in cases:
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        n = shape[-1]
        x = (-2.3 + 0.5 * torch.randn(shape, device=DEVICE)).to(dtype)
        w = torch.rand(n, device=DEVICE).to(dtype)
        b = torch.rand(n, device=DEVICE).to(dtype)
        exact = layer_norm_reference(x, (n,), w, b)
        ours = ln_tutorial.layer_norm(x, (n,), w, b)
        theirs = torch.nn.functional.layer_norm(x, (n,), w, b)
        err = ((ours.double() - exact).abs().max() / exact.abs().max()).item()
        err_torch = ((theirs.double() - exact).abs().max() / exact.abs().max()).item()
        ok = ours.dtype == dtype and err <= TOL[dtype]
        all_ok &= ok
        print(f"{label:<36} {str(dtype)[6:]:>9} {err:>10.2e} {err_torch:>10.2e} {TOL[dtype]:>8.0e}  {'yes' if ok else 'NO'}")

x = torch.randn(cases[0][1], device=DEVICE, dtype=torch.float16)
n = x.shape[-1]
w32 = torch.rand(n, device=DEVICE)
b32 = torch.rand(n, device=DEVICE)
for label, (w, b) in {"bias-free": (w32.half(), None), "float32 w, b with float16 x": (w32, b32)}.items():
    exact = layer_norm_reference(x, (n,), w, b)
    ours = ln_tutorial.layer_norm(x, (n,), w, b)
    err = ((ours.double() - exact).abs().max() / exact.abs().max()).item()
    ok = ours.dtype == torch.float16 and err <= TOL[torch.float16]
    all_ok &= ok
    print(f"{label:<36} {'float16':>9} {err:>10.2e} {'':>10} {TOL[torch.float16]:>8.0e}  {'yes' if ok else 'NO'}")

assert all_ok, "the forward does not match the reference"
print("forward pass: all checks passed")

# %%
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
# * Ruibin Xiong et al., "On Layer Normalization in the Transformer
#   Architecture", ICML 2020 (where the layer norms go in a transformer).
#   `arxiv.org/abs/2002.04745 <https://arxiv.org/abs/2002.04745>`_
#
# * Tony F. Chan, Gene H. Golub and Randall J. LeVeque, "Algorithms for
#   Computing the Sample Variance: Analysis and Recommendations", The American
#   Statistician 37(3), 1983.
#
# * Philippe Tillet, H. T. Kung and David Cox, "Triton: an intermediate
#   language and compiler for tiled neural network computations", MAPL 2019;
#   and the Triton documentation's own layer normalization tutorial, from
#   which the lock-based backward on the next page comes.
