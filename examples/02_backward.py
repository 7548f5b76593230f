"""
Layer Normalization, part 2: the backward pass
==============================================

In this tutorial you will derive the gradients of layer normalization, write
the kernel that computes them, and tie forward and backward together for
PyTorch's autograd.

In doing so, you will learn about:

* Deriving a vector-Jacobian product by hand, and checking it numerically.

* A backward pass fused into one pass over memory.

* Reductions across programs: why the Triton tutorial's locks change the
  result from run to run, and a reduction without locks that does not.

* Wiring kernels into autograd with a ``torch.autograd.Function``.

All of it is also one file to copy:
`layer_norm_triton.py <../_downloads/standalone/layer_norm_triton.py>`_.
"""

# %%
# Setting up
# ----------
#
# As on the first page: without a GPU, the kernels run through Triton's
# interpreter on small inputs.

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: the kernels run on the CPU through Triton's interpreter\n"
          "(TRITON_INTERPRET=1), on small inputs.")

import matplotlib.pyplot as plt
import triton
import triton.language as tl

import ln_tutorial
from ln_tutorial_book.reference import layer_norm_backward_reference, relative_error
from ln_tutorial_book import figures, plain

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# The gradients
# -------------
#
# In the backward pass, autograd hands the layer the gradient of the loss with
# respect to its output, :math:`\nabla_y`, and asks for the gradients with
# respect to :math:`x`, :math:`w` and :math:`b`. Each is a *vector-Jacobian
# product*: :math:`\nabla_y` times the Jacobian of :math:`y` with respect to
# that input, never formed as a matrix.
#
# Write one row as :math:`x \in \mathbb{R}^N`, its mean :math:`\mu`, its
# standard deviation :math:`\sigma = \sqrt{\mathrm{Var}[x] + \epsilon}`, and
# the normalized row
#
# .. math::
#
#    \hat{x} = \frac{x - \mu}{\sigma}, \qquad y = \hat{x} \odot w + b .
#
# **The weight and the bias.** :math:`y_j` depends on :math:`w_j` through
# :math:`\hat{x}_j w_j` and on :math:`b_j` directly, in *every* row. So their
# gradients are sums over the :math:`M` rows (row index :math:`r`):
#
# .. math::
#
#    \nabla_w = \sum_{r=1}^{M} \nabla_{y_r} \odot \hat{x}_r , \qquad
#    \nabla_b = \sum_{r=1}^{M} \nabla_{y_r} .
#
# **The input.** Within a row, every :math:`y_j` depends on every
# :math:`x_i`, through :math:`\mu` and :math:`\sigma`. Their derivatives are
#
# .. math::
#
#    \frac{\partial \mu}{\partial x_i} = \frac{1}{N}, \qquad
#    \frac{\partial \sigma}{\partial x_i} = \frac{x_i - \mu}{N \sigma} = \frac{\hat{x}_i}{N},
#
# so that, with :math:`\delta_{ij}` equal to 1 when :math:`i = j` and 0
# otherwise,
#
# .. math::
#
#    \frac{\partial \hat{x}_j}{\partial x_i}
#    = \frac{\delta_{ij} - \frac{1}{N}}{\sigma} - \frac{x_j - \mu}{\sigma^2}\,\frac{\hat{x}_i}{N}
#    = \frac{1}{\sigma}\Big(\delta_{ij} - \frac{1}{N} - \frac{\hat{x}_i \hat{x}_j}{N}\Big).
#
# The output gradient reaches :math:`\hat{x}` multiplied by the weight,
# :math:`g = \nabla_y \odot w`, and summing over :math:`j` gives the
# vector-Jacobian product
#
# .. math::
#
#    \nabla_{x_i} = \sum_j g_j \frac{\partial \hat{x}_j}{\partial x_i}
#    = \frac{1}{\sigma}\Big(g_i - \hat{x}_i\,\underbrace{\frac{1}{N}\sum_j \hat{x}_j g_j}_{c_1}
#    - \underbrace{\frac{1}{N}\sum_j g_j}_{c_2}\Big),
#
# or, for the whole row at once,
# :math:`\nabla_x = \big(g - (\hat{x}\, c_1 + c_2)\big) \cdot \mathrm{rstd}`,
# where :math:`\mathrm{rstd} = 1/\sigma` was saved by the forward pass. The two
# constants :math:`c_1` and :math:`c_2` are row reductions, like the mean and
# variance of the forward; everything else is element-wise. Subtracting
# :math:`c_2` removes the part of the gradient that would shift the row's mean,
# subtracting :math:`\hat{x}\,c_1` the part that would change its scale: the
# normalization made the output blind to both.
#
# **Why** :math:`\hat{x}` **is not saved.** The forward saves two numbers per
# row, the mean and rstd, and the backward recomputes
# :math:`\hat{x} = (x - \mu)\,\mathrm{rstd}` from :math:`x`. Saving
# :math:`\hat{x}` would add a write of :math:`M \times N` values to the
# forward (half as much again as its necessary traffic), and the backward
# would read it instead of :math:`x`: the same bytes. Recomputing costs two
# operations per element, which a kernel that waits on memory does for free.
#
# The package's reference writes these formulas in PyTorch, in float64:

# ln_tutorial:source ln_tutorial_book.reference.layer_norm_backward_reference from "x, dy = x.double()"

# %%
# Before writing any kernel, check the algebra against autograd:

xs = torch.randn(16, 64, dtype=torch.float64, requires_grad=True)
ws = torch.rand(64, dtype=torch.float64, requires_grad=True)
bs = torch.rand(64, dtype=torch.float64, requires_grad=True)
dys = torch.randn(16, 64, dtype=torch.float64)
torch.nn.functional.layer_norm(xs, (64,), ws, bs).backward(dys)
dx_formula, dw_formula, db_formula = layer_norm_backward_reference(dys, xs.detach(), ws.detach())
for name, ours, auto in (("dx", dx_formula, xs.grad), ("dw", dw_formula, ws.grad), ("db", db_formula, bs.grad)):
    print(f"{name}: relative difference to autograd {relative_error(ours, auto):.1e}")

# %%
# The gradient of :math:`x` needs, per row, one read of :math:`x` and of
# :math:`\nabla_y`, two reductions and one write: the shape of the forward.
# The hard part is :math:`\nabla_w` and :math:`\nabla_b`: every row adds to
# the same :math:`N` values, so many programs must add into one result.
#
# The Triton tutorial's reduction: locks
# --------------------------------------
#
# The Triton tutorial runs one program per row. Each program computes its row
# of :math:`\nabla_x` and its row of :math:`\nabla_y \odot \hat{x}`, then adds
# the latter into one of ``GROUP_SIZE_M`` shared buffers: row :math:`r` goes
# to buffer :math:`r \bmod \mathrm{GROUP\_SIZE\_M}`. Rows that share a buffer
# take turns, guarded by a *spin lock*: an integer that a program flips from
# 0 to 1 with an atomic compare-and-swap before touching the buffer, and sets
# back to 0 afterwards. A second, small kernel then adds the buffers into the
# final :math:`\nabla_w` and :math:`\nabla_b`. Over time, with :math:`M = 8`
# rows and three buffers (:math:`\nabla_b` is handled the same way):

figures.lock_timeline(rows=8, buffers=3)
plt.show()

# %%
# The package keeps this strategy as ``backward_strategy="lock"`` for
# comparison, but it has two problems.
#
# **1. The result changes from run to run.** The programs that share a buffer
# take its lock in whatever order they arrive, and floating-point addition is
# not associative: :math:`(a + b) + c` and :math:`a + (b + c)` can differ in
# the last bit. So :math:`\nabla_w` and :math:`\nabla_b` differ slightly
# between two runs on the same data: training is not reproducible bit for
# bit, and a failing test is hard to reproduce. Adding the same rows into a
# float32 buffer in two orders shows it (PyTorch, any machine):

rows_to_add = torch.randn(64, 1024)
in_order, shuffled = torch.zeros(1024), torch.zeros(1024)
for r, other in zip(range(64), torch.randperm(64).tolist()):
    in_order += rows_to_add[r]
    shuffled += rows_to_add[other]
print("columns whose float32 sum depends on the order of the rows:",
      int((in_order != shuffled).sum()), "of 1024")

# %%
# **2. Waiting and traffic.** Every row reads and writes a row of partial sums
# under a lock (mostly in the L2 cache, the buffers are small), and the rows
# of one buffer queue for it: the hatched bars above. ``GROUP_SIZE_M`` trades
# the queues (few buffers) against the size of the second stage (many). The
# details of the kernel, and two bugs of the tutorial's 2022 version, are on
# `the backward at full speed <05_backward_advanced.html>`_.
#
# What replaces it: one partial row per program
# ---------------------------------------------
#
# The deterministic alternative avoids locks. Its grid is sized to the GPU
# rather than to the input: two programs per SM, :math:`P` in all, a
# *persistent* grid whose programs each loop over many rows. Program :math:`p` takes rows
# :math:`p, p + P, p + 2P, \ldots`, writes their :math:`\nabla_x`, and keeps
# its share of :math:`\nabla_w` and :math:`\nabla_b` in registers, in
# float32. Only when its rows are done does it write one partial row, into a
# buffer that no other program touches. The :math:`P` partial rows are then
# added in a fixed order. Nothing waits, and nothing depends on the order in
# which programs run:

figures.private_partials(rows=8, programs=3)
plt.show()

# %%
# The kernel is the formula above, line for line (``g`` is
# :math:`\nabla_y \odot w`, ``c1`` and ``c2`` the two row reductions; masked
# lanes are zero, so they add nothing), inside a loop over the program's rows:

# ln_tutorial:source ln_tutorial_book.plain.layer_norm_bwd_kernel

# %%
# Its launch has a grid of :math:`P` programs, not :math:`M`, and one more
# step: summing the :math:`P` partial rows, which is a small reduction that
# ``torch.sum`` does in a fixed order.

# ln_tutorial:source ln_tutorial_book.plain.backward_programs
# ln_tutorial:source ln_tutorial_book.plain.layer_norm_backward

# %%
# "The same bit for bit" has a scope. The partial rows depend on :math:`P`,
# which is twice the number of SMs, so the result is reproducible for the
# same GPU model, the same SM count (a GPU partitioned with MIG has fewer) and
# the same shape; a different GPU adds the same terms in another grouping and
# may differ in the last bit, as any two correct float32 sums may.
# ``ln_tutorial.layer_norm``'s backward has this scope too, plus the settings
# its docstring lists.
#
# The autograd wiring
# -------------------
#
# A ``torch.autograd.Function`` ties the two launchers together: ``forward``
# flattens the input to rows, launches the forward kernel and saves the rows,
# the weight and the two per-row statistics; ``backward`` returns one
# gradient per input of ``forward`` (``None`` for ``eps``).
# ``plain.layer_norm(x, w, b)`` is ``LayerNorm.apply(x, w, b, 1e-5)``.

# ln_tutorial:source ln_tutorial_book.plain.LayerNorm

# %%
# Checking the gradients
# ----------------------
#
# Now the whole function, forward and backward, against PyTorch's autograd,
# against the float64 formulas and against the package's default backward.
# :math:`\nabla_w` and :math:`\nabla_b` are sums over many rows, so their
# error is measured relative to their norm. Last, the backward is run again on
# the same data and must give identical bits: on a GPU, whatever the
# scheduling of the programs. Triton's interpreter runs them one at a time in
# a fixed order, so there this line proves nothing, and says so.

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
shape = (4096, 3000) if ON_GPU else (37, 300)
n = shape[-1]
print(f"{'dtype':>9} {'ours':>10} {'torch':>10} {'default':>10} {'tol':>8}  (largest of dx, dw, db)")
all_ok = True
for dtype, tol in TOL.items():
    x = (-2.3 + 0.5 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
    w, b = (torch.rand(n, device=DEVICE).to(dtype).requires_grad_(True) for _ in range(2))
    dy = (0.1 * torch.randn(shape, device=DEVICE)).to(dtype)
    exact = layer_norm_backward_reference(dy, x.detach(), w.detach())
    outputs = (plain.layer_norm(x, w, b), torch.nn.functional.layer_norm(x, (n,), w, b),
               ln_tutorial.layer_norm(x, (n,), w, b))
    grads = [torch.autograd.grad(y, (x, w, b), dy) for y in outputs]
    errors = [max(relative_error(g, e) for g, e in zip(gs, exact)) for gs in grads]
    ours = grads[0]
    all_ok &= errors[0] <= tol and all(g.dtype == dtype for g in ours)
    print(f"{str(dtype)[6:]:>9}" + "".join(f"{e:>11.2e}" for e in errors) + f"{tol:>9.0e}")
again = torch.autograd.grad(plain.layer_norm(x, w, b), (x, w, b), dy)
same = all(torch.equal(a, o) for a, o in zip(again, ours))
print("identical gradients when run again:", same,
      "" if ON_GPU else "(interpreter: one program at a time, so this shows nothing about a GPU)")
assert all_ok and same, "the backward does not match the reference"

# %%
# Where the default goes further
# ------------------------------
#
# ``ln_tutorial.layer_norm`` uses the same lock-free idea with more
# machinery: tiles of several rows, a launch table per GPU model, one launch
# instead of two behind a grid-wide barrier, rows too wide for one program
# shared by several, and a C++ autograd node that shortens each call's host
# time. All of it is on
# `the backward at full speed <05_backward_advanced.html>`_.
#
# Next, `the benchmark <03_benchmark.html>`_: how fast all this is.
#
# References
# ----------
#
# * The Triton documentation's layer normalization tutorial, whose backward
#   introduced the ``GROUP_SIZE_M`` lock-based reduction described above.
#   `triton-lang.org <https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html>`_
#
# * David Goldberg, "What Every Computer Scientist Should Know About
#   Floating-Point Arithmetic", ACM Computing Surveys 23(1), 1991 (why the
#   order of additions matters).
#
# * PyTorch documentation, "Reproducibility", on the operations whose results
#   depend on scheduling.
#   `pytorch.org/docs/stable/notes/randomness.html <https://pytorch.org/docs/stable/notes/randomness.html>`_
