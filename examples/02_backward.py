"""
Layer Normalization, part 2: the backward pass
==============================================

In this tutorial you will derive the gradients of layer normalization, write
the kernel that computes them, and tie forward and backward together for
PyTorch's autograd.

In doing so, you will learn about:

* Deriving a vector-Jacobian product by hand, and checking it numerically.

* Implementing a backward pass in Triton, fused into one pass over memory.

* Parallel reductions across programs: why the Triton tutorial's locks give
  results that change from run to run, and a reduction without locks whose
  result is the same bit for bit.

* Wiring kernels into autograd with a short ``torch.autograd.Function``.

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
from matplotlib.patches import FancyArrowPatch, Rectangle

import ln_tutorial
from ln_tutorial_book import plain
from ln_tutorial.reference import layer_norm_backward_reference, relative_error

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# The gradients
# -------------
#
# In the backward pass, autograd hands the layer the gradient of the loss with
# respect to its output, :math:`\nabla_y`, and asks for the gradients with
# respect to its inputs: :math:`x`, :math:`w` and :math:`b`. Each is a
# *vector-Jacobian product*: :math:`\nabla_y` multiplied by the Jacobian of
# :math:`y` with respect to that input, which is never formed as a matrix.
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
#
# .. math::
#
#    \nabla_x = \big(\nabla_y \odot w - (\hat{x}\, c_1 + c_2)\big) \cdot \mathrm{rstd},
#    \qquad c_1 = \tfrac{1}{N}\,\hat{x} \cdot (\nabla_y \odot w), \quad
#    c_2 = \tfrac{1}{N}\,\mathbf{1} \cdot (\nabla_y \odot w),
#
# where :math:`\mathrm{rstd} = 1/\sigma` was saved by the forward pass. The two
# constants :math:`c_1` and :math:`c_2` are row reductions, like the mean and
# variance of the forward; everything else is element-wise. Subtracting
# :math:`c_2` removes the part of the gradient that would shift the row's mean,
# subtracting :math:`\hat{x}\,c_1` the part that would change its scale: the
# normalization made the output blind to both.
#
# The package's reference writes these formulas in PyTorch, in float64:

# ln_tutorial:source ln_tutorial.reference.layer_norm_backward_reference

# %%
# Before writing any kernel, check the algebra against autograd, which
# differentiates the forward formula mechanically:

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
# :math:`\nabla_y`, two reductions, and one write of :math:`\nabla_x`: the same
# shape of work as the forward, and the same kernel structure. The hard part is
# :math:`\nabla_w` and :math:`\nabla_b`: every row contributes to the same
# :math:`N` values, so many programs must add into one result.
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
# back to 0 afterwards. A second, small kernel then adds the ``GROUP_SIZE_M``
# buffers into the final :math:`\nabla_w` and :math:`\nabla_b`. With
# :math:`M = 8` rows and three buffers (the bias is handled the same way and
# left out):


def draw_rows(ax, x0, top, labels, colors, title, title_y, width=2.4, height=0.5, gap=0.2):
    """Draw one bar per label, stacked downwards from ``top``; return their left, right, middle."""
    centres = []
    for i, (label, color) in enumerate(zip(labels, colors)):
        y = top - i * (height + gap)
        ax.add_patch(Rectangle((x0, y - height), width, height, facecolor=color, edgecolor="black", lw=0.8))
        ax.text(x0 + width / 2, y - height / 2, label, ha="center", va="center", fontsize=9)
        centres.append((x0, x0 + width, y - height / 2))
    ax.text(x0 + width / 2, title_y, title, ha="center", va="bottom", fontsize=10, weight="bold")
    return centres


def arrow(ax, start, end, color="0.3", style="-|>", **kw):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, color=color, lw=1.0, **kw))


def draw_reduction(ax, rows, buffers, owner, stage1, stage2):
    """rows -> partial buffers (owner[r]) -> one final row, as in the two-stage reductions."""
    palette = plt.get_cmap("Pastel1").colors
    row_colors = [palette[owner[r] % len(palette)] for r in range(rows)]
    title_y = rows * 0.7 + 0.2
    row_boxes = draw_rows(ax, 0.0, rows * 0.7, [f"row {r}: dy * x_hat" for r in range(rows)], row_colors,
                          "per-row terms", title_y)
    buf_top = rows * 0.7 - (rows - buffers) * 0.35
    buf_boxes = draw_rows(ax, 4.2, buf_top, [f"partial {p}" for p in range(buffers)],
                          [palette[p % len(palette)] for p in range(buffers)], stage1, title_y)
    final = draw_rows(ax, 8.4, buf_top - (buffers - 1) * 0.35, ["dw"], ["0.85"], stage2, title_y)
    for r in range(rows):
        _, right, y = row_boxes[r]
        left, _, yb = buf_boxes[owner[r]]
        arrow(ax, (right, y), (left, yb), connectionstyle="arc3,rad=0.0")
    for p in range(buffers):
        _, right, yb = buf_boxes[p]
        arrow(ax, (right, yb), (final[0][0], final[0][2]))
    ax.set_xlim(-0.2, 11.0)
    ax.set_ylim(-0.3, rows * 0.7 + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")


fig, ax = plt.subplots(figsize=(9, 4.6))
draw_reduction(ax, rows=8, buffers=3, owner=[r % 3 for r in range(8)],
               stage1="GROUP_SIZE_M = 3 locked buffers", stage2="second kernel")
ax.set_title("Lock-based reduction: row r adds into buffer r % GROUP_SIZE_M, one program at a time")
plt.show()

# %%
# Rows of the same colour share a buffer, so their programs queue on its
# lock; rows of different colours proceed in parallel. This works, and the
# package keeps it as ``backward_strategy="lock"`` (its kernel is on
# `the backward at full speed <05_backward_advanced.html>`_), but it has four
# problems.
#
# **1. The result changes from run to run.** The programs that share a buffer
# take its lock in whatever order the GPU schedules them, and floating-point
# addition is not associative: :math:`(a + b) + c` and :math:`a + (b + c)` can
# differ in the last bit. So :math:`\nabla_w` and :math:`\nabla_b` differ
# slightly between two runs on the same data. That breaks bitwise
# reproducibility of training, and makes a failing test hard to reproduce. The
# effect needs no GPU to be seen: add the same rows into a float32 buffer in
# two different orders.

rows_to_add = torch.randn(64, 1024)
in_order = torch.zeros(1024)
shuffled = torch.zeros(1024)
for r in range(64):
    in_order += rows_to_add[r]
for r in torch.randperm(64).tolist():
    shuffled += rows_to_add[r]
print("columns whose float32 sum depends on the order of the rows:",
      int((in_order != shuffled).sum()), "of 1024")

# %%
# **2. Low-precision partial sums.** The tutorial allocated its buffers in the
# dtype of the input, so a float16 model accumulated :math:`\nabla_w` in
# float16: with 11 bits of mantissa every addition rounds away digits of the
# small terms. Buffers in float32, rounded once at the end, avoid it.
#
# **3. A race without a barrier.** A Triton program is many threads, and each
# stores its own part of the buffer row. Nothing in the language makes all
# those stores finish before the thread that releases the lock does so; if the
# release comes first, the next program can read a buffer row that is still
# half written, and some rows' contributions are lost. The 2022 version of the
# Triton tutorial had no barrier there; newer versions put one before the
# release, as the package's kernel does (``tl.debug_barrier()``).
#
# **4. Traffic and waiting.** Every input row reads and writes a row of
# partial sums of :math:`\nabla_w` and :math:`\nabla_b` under a lock: that
# read-modify-write is extra traffic per row (mostly served by the L2 cache,
# since the buffers are small), and it is serialized among the rows that share
# a buffer. ``GROUP_SIZE_M`` trades the queues (few buffers) against the size
# of the second stage (many buffers); the benchmark page shows where this
# leaves the lock backward.
#
# What replaces it: one partial row per program
# ---------------------------------------------
#
# The deterministic alternative avoids locks entirely. It launches a grid
# sized to the GPU rather than to the input: two programs per SM. Program
# :math:`p` of :math:`P` takes rows :math:`p, p + P, p + 2P, \ldots`, writes
# their :math:`\nabla_x`, and keeps its share of :math:`\nabla_w` and
# :math:`\nabla_b` in registers, in float32. Only when its rows are done does
# it write one partial row, into a buffer that no other program touches. The
# :math:`P` partial rows are then added in a fixed order. Nothing depends on
# scheduling:

fig, ax = plt.subplots(figsize=(9, 4.6))
draw_reduction(ax, rows=8, buffers=3, owner=[r % 3 for r in range(8)],
               stage1="one partial row per program", stage2="fixed-order sum")
ax.set_title("Lock-free reduction: program p owns rows p, p + 3, p + 6, ...")
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
#
# The autograd wiring
# -------------------
#
# A ``torch.autograd.Function`` ties the two launchers together. Its
# ``forward`` flattens the input to rows, launches the forward kernel and
# saves what the backward needs: the rows, the weight and the two per-row
# statistics. Its ``backward`` receives :math:`\nabla_y` and returns one
# gradient per input of ``forward`` (``None`` for ``eps``).

# ln_tutorial:source ln_tutorial_book.plain.LayerNorm
# ln_tutorial:source ln_tutorial_book.plain.layer_norm

# %%
# Checking the gradients
# ----------------------
#
# Now the whole function, forward and backward, against PyTorch's autograd,
# against the float64 formulas and against the package's default backward.
# :math:`\nabla_w` and :math:`\nabla_b` are sums over many rows, so their
# error is measured relative to their norm. Last, the backward is run again on
# the same data and must give identical bits.

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
shape = (4096, 3000) if ON_GPU else (37, 300)
n = shape[-1]
print(f"{'dtype':>9} {'grad':>5} {'ours':>10} {'torch':>10} {'default':>10} {'tol':>8}  ok")
all_ok = True
for dtype, tol in TOL.items():
    x = (-2.3 + 0.5 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
    w = torch.rand(n, device=DEVICE).to(dtype).requires_grad_(True)
    b = torch.rand(n, device=DEVICE).to(dtype).requires_grad_(True)
    dy = (0.1 * torch.randn(shape, device=DEVICE)).to(dtype)
    exact = layer_norm_backward_reference(dy, x.detach(), w.detach())
    ours = torch.autograd.grad(plain.layer_norm(x, w, b), (x, w, b), dy)
    theirs = torch.autograd.grad(torch.nn.functional.layer_norm(x, (n,), w, b), (x, w, b), dy)
    default = torch.autograd.grad(ln_tutorial.layer_norm(x, (n,), w, b), (x, w, b), dy)
    for name, o, t, d, e in zip(("dx", "dw", "db"), ours, theirs, default, exact):
        err, err_torch, err_default = (relative_error(g, e) for g in (o, t, d))
        ok = o.dtype == dtype and err <= tol
        all_ok &= ok
        print(f"{str(dtype)[6:]:>9} {name:>5} {err:>10.2e} {err_torch:>10.2e} {err_default:>10.2e} "
              f"{tol:>8.0e}  {'yes' if ok else 'NO'}")
again = torch.autograd.grad(plain.layer_norm(x, w, b), (x, w, b), dy)
same = all(torch.equal(a, o) for a, o in zip(again, ours))
print("identical gradients when run again:", same)
assert all_ok and same, "the backward does not match the reference"

# %%
# Where the default goes further
# ------------------------------
#
# ``ln_tutorial.layer_norm`` uses the same lock-free idea with more
# machinery: tiles of several rows, loads of the next tiles issued while the
# current one is reduced, a launch table measured on an H100, one launch
# instead of two behind a grid-wide barrier, rows shared by several programs
# when they are too wide for one, and a C++ autograd node that takes the
# Python out of small calls. All of it is on
# `the backward at full speed <05_backward_advanced.html>`_.
#
# Next, `the benchmark <03_benchmark.html>`_: how fast all this is.
#
# References
# ----------
#
# * Jimmy Lei Ba, Jamie Ryan Kiros and Geoffrey E. Hinton, "Layer
#   Normalization", arXiv:1607.06450, 2016.
#   `arxiv.org/abs/1607.06450 <https://arxiv.org/abs/1607.06450>`_
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
