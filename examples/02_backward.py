"""
Layer Normalization, part 2: the backward pass
==============================================

In this tutorial you will derive the gradients of layer normalization and
write the kernels that compute them: one that produces the input gradient row
by row, and a parallel reduction that sums the weight and bias gradients over
all rows.

In doing so, you will learn about:

* Deriving a vector-Jacobian product by hand, and checking it numerically.

* Implementing a backward pass in Triton, fused into as few memory passes as
  possible.

* Parallel reductions across programs: with locks and shared buffers, as in
  the Triton tutorial, and without them, with a persistent grid whose result
  is the same bit for bit on every run.

* What goes wrong with locks: non-determinism, low-precision partial sums and
  the race that a missing barrier lets in.

* A grid-wide barrier, safe only under a cooperative launch, that lets the
  same programs finish the reduction without a second launch.

* Rows too wide for one program: several programs share each row and trade
  their parts of the row sums through global memory.
"""

# %%
# Setting up
# ----------
#
# As on the first page: without a GPU, the kernels run through Triton's
# interpreter on small inputs.

from __future__ import annotations

import functools
import os
from typing import NamedTuple

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
from ln_tutorial import launch
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
# Strategy 1: locked buffers (the Triton tutorial)
# ------------------------------------------------
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
# In the first stage, rows of the same colour share a buffer, so their
# programs queue on its lock; rows of different colours proceed in parallel.
# The number of buffers trades contention (few buffers, long queues) against
# the work and memory of the second stage (many buffers). The tutorial's
# heuristic, kept in the package, gives short rows more buffers, because their
# programs finish quickly and would otherwise spend their time waiting:

# ln_tutorial:source ln_tutorial.launch.lock_group_size

# %%
# Here is the package's version of that kernel. Compared with the tutorial, it
# accumulates the partial sums in float32 whatever the input dtype, handles a
# missing weight or bias, addresses rows through strides with 64-bit offsets,
# and places a barrier before it releases the lock (the pitfalls below say
# why).

# ln_tutorial:source ln_tutorial.kernels.layer_norm_bwd_lock_kernel

# %%
# Reading it from the top: the first half is the :math:`\nabla_x` formula
# above, line for line (``w_dy`` is :math:`g`, ``c1`` and ``c2`` are the two
# row reductions, masked lanes are zeroed so that they add nothing). The second
# half takes buffer ``row % GROUP_SIZE_M``: ``tl.atomic_cas(lock, 0, 1)``
# returns the old value, so the loop spins until this program is the one that
# changed it from 0 to 1. ``COUNT`` records whether the buffer already holds a
# partial sum; the first program to arrive stores its row instead of adding it
# to the garbage of an uninitialized buffer, which saves zeroing the buffers
# beforehand. ``tl.atomic_xchg(lock, 0)`` releases the lock.
#
# The second stage reads the ``GROUP_SIZE_M`` partial rows and adds them,
# always in the same order. The partial rows of :math:`\nabla_w` and
# :math:`\nabla_b` are stacked in one buffer, and the grid has two axes: a
# narrow slice of columns, and which of the two gradients. Both strategies on
# this page share this kernel, and its body is a function of its own, which the
# one-launch kernel further down calls too:

# ln_tutorial:source ln_tutorial.kernels.add_partial_rows
# ln_tutorial:source ln_tutorial.kernels.partial_sum_kernel

# %%
# ``ln_tutorial.layer_norm`` runs this strategy when asked for it with
# ``backward_strategy="lock"``:

M, N = (4096, 4096) if ON_GPU else (48, 256)
x = (-2.3 + 0.5 * torch.randn(M, N, device=DEVICE)).requires_grad_(True)
w = torch.rand(N, device=DEVICE, requires_grad=True)
b = torch.rand(N, device=DEVICE, requires_grad=True)
dy = 0.1 * torch.randn(M, N, device=DEVICE)

ln_tutorial.layer_norm(x, (N,), w, b, backward_strategy="lock").backward(dy)
dx_exact, dw_exact, db_exact = layer_norm_backward_reference(dy, x.detach(), w.detach())
for name, got, exact in (("dx", x.grad, dx_exact), ("dw", w.grad, dw_exact), ("db", b.grad, db_exact)):
    print(f"lock strategy, {name}: relative error {relative_error(got, exact):.1e}")

# %%
# Pitfalls of the lock-based reduction
# ------------------------------------
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
# On the GPU, the same happens between two calls of the backward with the lock
# strategy. (The interpreter runs programs one after another, always in the
# same order, so on a CPU the two runs agree and the race for the locks cannot
# be seen.)


def weight_grad(strategy: str) -> torch.Tensor:
    """dw of one backward of the current x, w, b, dy."""
    w.grad = None
    ln_tutorial.layer_norm(x, (x.shape[-1],), w, b, backward_strategy=strategy).backward(dy)
    return w.grad.clone()


runs = [weight_grad("lock") for _ in range(5)]
distinct = len({tuple(r.tolist()) for r in runs})
print(f"lock strategy: {distinct} different dw out of 5 runs"
      + ("" if ON_GPU else " (interpreter: programs run in a fixed order)"))

# %%
# **2. Low-precision partial sums.** The tutorial allocated its buffers in the
# dtype of the input, so a float16 model accumulated :math:`\nabla_w` in
# float16: each buffer receives :math:`M / \mathrm{GROUP\_SIZE\_M}` rows, and
# with 11 bits of mantissa every addition rounds away digits of the small
# terms. The package keeps the buffers in float32 and rounds once, at the end.
# The difference, for 16384 rows of 512 columns added into 96 buffers, as
# that kernel would do it:

terms = (0.1 * torch.randn(16384, 512)) * torch.randn(16384, 512)  # dy * x_hat
exact = terms.double().sum(0)
for buffer_dtype in (torch.float16, torch.float32):
    buffers = torch.zeros(96, 512, dtype=buffer_dtype)
    for r in range(16384):
        buffers[r % 96] += terms[r].to(buffer_dtype)
    result = buffers.float().sum(0)
    print(f"{str(buffer_dtype)[6:]:>8} partial sums: relative error {relative_error(result, exact):.1e}")

# %%
# **3. A race without a barrier.** A Triton program is many threads, and each
# stores its own part of the buffer row. Nothing in the language makes all
# those stores finish before the thread that releases the lock does so; if the
# release comes first, the next program can take the lock and read a buffer
# row that is still half written, and some rows' contributions are lost. The
# tutorial's kernel had no barrier there, and such lost updates are rare
# enough to pass a test and show up as a wrong gradient later. The package's
# kernel calls ``tl.debug_barrier()`` before ``tl.atomic_xchg(lock, 0)``: every
# thread of the program waits there until all have stored. (Here again the
# interpreter cannot help: it runs each program as a whole, so there is no race
# to see.)
#
# **4. Waiting.** With short rows, a program spends more time queueing for a
# lock than computing; more buffers help, at the price of a larger second
# stage. Those buffers also make the memory traffic grow with
# ``GROUP_SIZE_M``, which is why the Triton tutorial's backward falls well
# short of the copy bandwidth (see the benchmark page).
#
# Strategy 2: a deterministic persistent reduction
# ------------------------------------------------
#
# The package's default avoids locks entirely. It launches a *persistent* grid
# sized to the GPU rather than to the input: one or two programs per SM. Each
# program owns a contiguous range of rows, loops over them ``BLOCK_M`` rows at a
# time, writes their :math:`\nabla_x`, and keeps its share of
# :math:`\nabla_w` and :math:`\nabla_b` in registers, in float32. Only when its
# rows are done does it write one partial row, into a buffer that no other
# program touches. The second kernel is the same as before: it adds the
# partial rows, always in the same order. Nothing depends on scheduling, so the
# result is the same bit for bit on every run:

fig, ax = plt.subplots(figsize=(9, 4.6))
rows_per_program = 3
draw_reduction(ax, rows=8, buffers=3, owner=[r // rows_per_program for r in range(8)],
               stage1="one partial row per program", stage2="fixed-order sum")
ax.set_title("Persistent reduction: program p owns rows [3p, 3p + 3), no locks")
plt.show()

# %%
# The kernel works on tiles of ``BLOCK_M`` rows. A small helper loads a tile and
# returns :math:`\hat{x}`, :math:`\nabla_y` and :math:`w \nabla_y` in the
# compute precision, together with the rows' rstd:

# ln_tutorial:source ln_tutorial.kernels.load_tile

# %%
# and another writes a program's partial sums at the end:

# ln_tutorial:source ln_tutorial.kernels.store_partial_row

# %%
# The kernel itself:

# ln_tutorial:source ln_tutorial.kernels.layer_norm_bwd_persistent_kernel

# %%
# The differences from the lock kernel are few. ``rows_per_program`` and the
# ``for`` loop replace the one-row-per-program grid. ``dw_acc`` and ``db_acc``
# are ``BLOCK_M`` by ``BLOCK_N`` tiles of running sums that never leave the
# registers until the end, so the partial-sum traffic is one row per program
# instead of one read and one write per input row.
#
# Three details come from measurements on an H100. The loop is a
# ``tl.range(..., num_stages=NUM_STAGES)`` rather than a plain ``range``: with
# more than one stage, Triton issues the loads of the next tiles while the
# current one is still being reduced and stored, so the memory system always
# has requests in flight. With three or four stages the backward gained 10 to
# 30 % on rows of 2 to 16 KB. The weight is loaded again for every tile (it
# comes from L1) instead of once before the loop: a copy held in registers for
# the whole loop made 32 KB rows spill. And for 32 KB rows even that is not
# enough: :math:`\hat{x}` and :math:`w \nabla_y`, held across the two row
# sums next to the accumulators, need more registers than a thread has. With
# ``RELOAD`` the kernel reads the tile a second time after the sums, from L2
# (the first read asks L2 to keep it, the second lets it go), which took
# 8192 × 16384 from 1674 to 2184 GB/s. On narrower rows the second read only
# costs time, so the table turns it on for 32 KB rows alone.
#
# One more: a row whose power of two is much wider than itself. A float16 row
# of 9216 values would sit in a 16384-wide tile, 44 % of whose lanes load
# nothing yet hold registers and do the arithmetic. With ``TAIL_N`` the
# kernel holds such a row as two tiles, ``BLOCK_N`` = 8192 and ``TAIL_N`` =
# 1024 wide, adds both tiles' terms into the same :math:`c_1` and
# :math:`c_2`, and keeps a second pair of accumulators for the tail's
# columns. ``TAIL_N`` is a compile-time constant, so for ``TAIL_N = 0`` the
# ``if`` blocks vanish and the kernel is the one-tile kernel. On the H100 this
# took half-precision rows of 8704 to 12288 values from 1594–1847 GB/s to
# 2161–2463 (``BACKWARD_PADDED`` below).
#
# The launcher chooses the grid: enough programs to fill the GPU, each with at
# least ``BLOCK_M`` rows. On the interpreter there is no SM count, so it
# pretends there are four SMs, which still exercises the loop and the second
# stage.

# ln_tutorial:source ln_tutorial.launch._backward_grid

# %%
# Grid and kernels are worked out once per shape, and the arguments checked
# then, by ``_backward_plan``:

# ln_tutorial:source ln_tutorial.launch.BackwardPlan
# ln_tutorial:source ln_tutorial.launch._backward_plan

# %%
# One launch instead of two
# ~~~~~~~~~~~~~~~~~~~~~~~~~
#
# On a small input the persistent kernel is done in a few microseconds, and
# the GPU then waits for the host to launch the second stage: launching a
# kernel from Python costs tens of microseconds (the performance notes
# measure it). Up to ``ONE_LAUNCH_MAX_BYTES`` of input the same programs
# therefore add up the partial rows themselves. They may only start once every
# program has written its partial row, so they first wait at a grid-wide
# barrier: each program adds one to a counter; the last to arrive resets the
# counter for the next launch and moves a generation number on, and the
# others spin until they see the new generation.

# ln_tutorial:source ln_tutorial.kernels.grid_barrier

# %%
# A barrier like this is only safe when every program of the grid is on the
# GPU at the same time. Normally nothing promises that: programs that do not
# fit wait until others finish, and here the others would wait for them
# forever. A *cooperative* launch (Triton's ``launch_cooperative_grid=True``)
# makes the promise, or fails when the grid is too large; ``layer_norm_backward``
# then falls back to two launches, for this call and the later ones. The persistent grid has one or two programs per
# SM, so on an H100 it always fits. Triton's interpreter runs the programs
# one after another, so there the barrier would never open: it always takes
# two launches. The kernel is the persistent kernel, called as a function,
# followed by the barrier and a share of the second stage, in column blocks
# wide enough that each program has about one:

# ln_tutorial:source ln_tutorial.kernels.layer_norm_bwd_one_launch_kernel
# ln_tutorial:source ln_tutorial.launch._reduce_blocks

# %%
# The barrier's two counters live on the GPU between launches, one pair per
# stream: launches on one stream run one after another and each leaves the
# pair ready for the next; two streams could overlap, so they get a pair each.

# ln_tutorial:source ln_tutorial.launch._grid_barrier

# %%
# Past ``ONE_LAUNCH_MAX_BYTES`` the GPU's work is longer than the host's, and
# two launches measured slightly faster. The partial rows are the same either
# way; the one-launch kernel adds them in wider blocks, so
# :math:`\nabla_w` and :math:`\nabla_b` can differ from the two-launch sums in
# the last bit, while :math:`\nabla_x` is identical. Each path, run again,
# gives the same bits.
#
# Rows too wide for one program
# -----------------------------
#
# Past ``MAX_FUSED_BWD_BYTES`` of input (32 KB: the backward holds two rows
# and the partial sums, so its limit is lower than the forward's) a row and
# its :math:`\nabla_w`, :math:`\nabla_b` partial sums no longer fit in one
# SM's registers. One way out is to loop: a :math:`\nabla_x` kernel that
# sweeps each row twice, like the wide forward, and a separate kernel for the
# partial rows on a (column block, row group) grid. That reads :math:`x` and
# :math:`\nabla_y` twice from memory, 5 units of traffic where 3 are needed:
# about half of copy speed. Half-precision and float32 rows take another way
# (float64 rows loop, because the trade below carries float32 sums): ``SPLIT``
# programs share each row, each holding ``BLOCK_N`` of its columns (and their
# partial sums) for all the rows of its group. Only :math:`c_1` and
# :math:`c_2` need the whole row, and they are sums: each program adds its
# part, writes it to global memory, and reads the others' parts.
#
# The trade must be cheap, because it happens once per row. Each part of a
# sum travels in one 64-bit word together with a "written" flag in its upper
# half, and the word is written atomically: a program that reads the flag
# reads the sum with it, so there is no flag to order against the data, no
# fence and no barrier. (Which flag counts as "written" is the subject of the
# next cell.)
# And each program publishes a tile's sums one tile before it needs the
# others': while they catch up, it is loading and summing its next tile. Those
# loads come from L2, because one step earlier the program asked L2 for them
# with a PTX prefetch (Triton's inline assembly): nothing is held in
# registers for it and nothing waits on it (``prefetch_rows``, shown on the
# forward page). The interpreter has no PTX, so there ``PREFETCH`` is off.
#
# The two sums of a part are independent, but two ``tl.sum`` calls would each
# end in their own exchange between warps, through shared memory and a
# barrier. ``tl.reduce`` takes a tuple and a combine function (``add_pair``)
# and exchanges both at once.

# ln_tutorial:source ln_tutorial.kernels.load_raw_tile
# ln_tutorial:source ln_tutorial.kernels.add_pair
# ln_tutorial:source ln_tutorial.kernels.written_record
# ln_tutorial:source ln_tutorial.kernels.publish_row_sums
# ln_tutorial:source ln_tutorial.kernels.whole_row_sums
# ln_tutorial:source ln_tutorial.kernels.prefetch_tile
# ln_tutorial:source ln_tutorial.kernels.layer_norm_bwd_split_kernel

# %%
# On a GPU the split kernel ends like the one-launch persistent kernel: a
# grid-wide barrier, then each program adds up a share of the partial rows.
# The barrier's generation number, which moves on once per launch, also gives
# each launch its own "written" flag: the generation plus one, read by every
# program before any can pass the barrier that changes it. A record left by
# an earlier launch carries an earlier flag and does not count, so the
# records need no zeroing: they are kept per stream, next to the barrier
# (for the ``SPLIT_STATE_STREAMS`` most recently used streams), and zeroed
# only when a call needs more of them, or after
# ``SPLIT_RECORDS_LIFETIME`` launches, long before the generation (counted
# modulo :math:`2^{31}`) could come round to an old flag. Two launches and a
# zero-filled buffer for each call cost 1–3 % more at the widest shapes on
# the H100 (performance notes, run 116). In the interpreter the flag is 1,
# the records are zeroed for each call and a second kernel adds the partial
# rows.

# ln_tutorial:source ln_tutorial.launch.SPLIT_RECORDS_LIFETIME
# ln_tutorial:source ln_tutorial.launch.SPLIT_STATE_STREAMS
# ln_tutorial:source ln_tutorial.launch._split_state

# %%
# The programs of a group wait for each other, so all of them must be resident
# at once: the launch is cooperative, and a grid that does not fit is refused
# by the driver rather than left to hang. When the package chose the
# configuration, a refusal (or a row with more parts than the GPU holds
# programs) sends the call to the configuration it would take without shared
# rows: the looped kernels, or one 16384-wide tile for the padded rows of the
# next section. The interpreter runs programs one after another, so a program
# would wait forever for a later one: there each row has one part.
#
# How wide a part? Narrow parts put more programs on each row and fewer
# columns in each program's registers. On the H100 2048 columns won up to
# rows of 32768 half-precision values; past that a row would have more than
# 16 parts waiting for each other's sums, and parts of 4096 columns (8 warps,
# 2 programs per SM) read 4 % faster at 2048 × 65536
# (``BACKWARD_SPLIT_WIDEST``).

# ln_tutorial:source ln_tutorial.launch.BackwardConfig
# ln_tutorial:source ln_tutorial.launch.BACKWARD_SPLIT
# ln_tutorial:source ln_tutorial.launch.BACKWARD_WIDE
# ln_tutorial:source ln_tutorial.launch.BACKWARD_SPLIT_WIDEST
# ln_tutorial:source ln_tutorial.launch._split_config
# ln_tutorial:source ln_tutorial.launch._remember_refusal

# %%
# ``layer_norm_backward`` ties it together: the lock kernel, the persistent
# kernel in one launch or two, the split kernel (one launch on a GPU), or the
# looped kernels. Except in the one-launch cases the same second stage adds
# the partial rows. The
# persistent, split and looped kernels take the partial buffer whole and find
# the :math:`\nabla_b` rows after the :math:`\nabla_w` ones
# (``store_partial_row`` above): splitting it into two views on the host would
# cost more time than the small kernels it feeds.

# ln_tutorial:source ln_tutorial.launch.layer_norm_backward

# %%
# One cost is left on the host. ``layer_norm`` is differentiated by PyTorch's
# autograd engine, which calls the backward on a thread of its own; a backward
# written in Python pays for its Python there, and at small sizes that takes
# longer than the kernel. So for the common call (a CUDA tensor with
# contiguous rows, a weight or a bias, rows held in registers) ``layer_norm``
# runs in C++ (``ln_tutorial/csrc/layer_norm.cpp``, compiled on first use):
# it launches the forward kernel and gives the output a small autograd node
# that allocates :math:`\nabla_x`, the partial rows and the gradients and
# launches these same compiled kernels (one launch, or two past
# ``ONE_LAUNCH_MAX_BYTES``); anything unusual (a strided gradient, double
# backward, another stream) it hands back to ``layer_norm_backward``. The
# results are the same bits either way; the performance notes measure the
# difference.

# %%
# The backward's configurations come from a table measured like the forward's
# (rows per loop step, warps, programs per SM, stages and reload, by padded row
# size in bytes), with overrides for half-precision rows of 8193 to 16384
# values: up to 12288 two tiles, and from 12289 on the split kernel of the
# previous section. Its 2048-column parts leave fewer lanes idle than one
# 16384-wide tile (at 12800 values, 11 % against 22 %), and with its prefetch
# it is ahead even where that tile fits exactly, at 16384:

# ln_tutorial:source ln_tutorial.launch.BACKWARD_TABLE
# ln_tutorial:source ln_tutorial.launch.BACKWARD_PADDED
# ln_tutorial:source ln_tutorial.launch.backward_config

# %%
# Here is what it picks for a few row lengths:

print("MAX_FUSED_BWD_BYTES =", launch.MAX_FUSED_BWD_BYTES, " ONE_LAUNCH_MAX_BYTES =", launch.ONE_LAUNCH_MAX_BYTES)
print(f"{'N':>7} {'dtype':>9} {'BLOCK_M':>8} {'BLOCK_N':>8} {'warps':>6} {'per SM':>7} {'stages':>7} "
      f"{'reload':>7} {'TAIL_N':>7} {'looped':>7} {'split':>6}")
for n in (768, 1024, 4096, 8192, 9216, 12800, 16384, 32768):
    for dtype in (torch.float16, torch.float32):
        cfg = launch.backward_config(n, torch.empty(0, dtype=dtype).element_size())
        print(f"{n:>7} {str(dtype)[6:]:>9} {cfg.block_m:>8} {cfg.block_n:>8} {cfg.num_warps:>6} "
              f"{cfg.programs_per_sm:>7} {cfg.num_stages:>7} {cfg.reload!s:>7} {cfg.tail_n:>7} {cfg.looped!s:>7} "
              f"{cfg.split!s:>6}")

# %%
# Checking the gradients
# ----------------------
#
# Now both strategies, in every dtype, against PyTorch's autograd and against
# the float64 formulas. As on the forward page, the tolerance follows the
# dtype; :math:`\nabla_w` and :math:`\nabla_b` are sums over many rows, so
# their error is measured relative to their norm. Last, the default strategy
# is run repeatedly on the same data and must give identical bits.

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
shape = (1151, 8192) if ON_GPU else (37, 300)
print(f"shape {shape}")
print(f"{'strategy':<14} {'dtype':>9} {'grad':>5} {'ours':>10} {'torch':>10} {'tol':>8}  ok")
all_ok = True
for strategy in ("deterministic", "lock"):
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        n = shape[-1]
        x = (-2.3 + 0.5 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
        w = torch.rand(n, device=DEVICE).to(dtype).requires_grad_(True)
        b = torch.rand(n, device=DEVICE).to(dtype).requires_grad_(True)
        dy = (0.1 * torch.randn(shape, device=DEVICE)).to(dtype)
        exact = layer_norm_backward_reference(dy, x.detach(), w.detach())
        ln_tutorial.layer_norm(x, (n,), w, b, backward_strategy=strategy).backward(dy)
        ours = [t.grad for t in (x, w, b)]
        for t in (x, w, b):
            t.grad = None
        torch.nn.functional.layer_norm(x, (n,), w, b).backward(dy)
        theirs = [t.grad for t in (x, w, b)]
        for name, o, t, e in zip(("dx", "dw", "db"), ours, theirs, exact):
            err, err_torch = relative_error(o, e), relative_error(t, e)
            ok = o.dtype == dtype and err <= TOL[dtype]
            all_ok &= ok
            print(f"{strategy:<14} {str(dtype)[6:]:>9} {name:>5} {err:>10.2e} {err_torch:>10.2e} "
                  f"{TOL[dtype]:>8.0e}  {'yes' if ok else 'NO'}")

x = torch.randn(shape, device=DEVICE, requires_grad=True)
w = torch.rand(shape[-1], device=DEVICE, requires_grad=True)
b = torch.rand(shape[-1], device=DEVICE, requires_grad=True)
dy = torch.randn(shape, device=DEVICE)
same = all(torch.equal(weight_grad("deterministic"), weight_grad("deterministic")) for _ in range(2))
print("deterministic strategy, identical dw over repeated runs:", same)
assert all_ok and same, "the backward does not match the reference"
print("backward pass: all checks passed")

# %%
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
#   introduced the ``GROUP_SIZE_M`` lock-based reduction shown above.
#   `triton-lang.org <https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html>`_
#
# * David Goldberg, "What Every Computer Scientist Should Know About
#   Floating-Point Arithmetic", ACM Computing Surveys 23(1), 1991 (why the
#   order of additions matters).
#
# * PyTorch documentation, "Reproducibility", on the operations whose results
#   depend on scheduling.
#   `pytorch.org/docs/stable/notes/randomness.html <https://pytorch.org/docs/stable/notes/randomness.html>`_
