"""
Advanced: the backward at full speed
====================================

The backward of the second page gives each program one row at a time and
sums the partial rows with ``torch.sum``. The package's default backward
keeps the same lock-free idea and adds what some shapes need: tiles of
several rows with their loads issued ahead, launch tables measured per GPU
model, and three variants: one launch instead of two, rows shared by several
programs, and a C++ autograd node. This page also shows the lock kernel of the Triton tutorial.
Each section says first which shapes it is for and what it gains; the
`performance notes <../performance.html>`_ have the measurements.
"""

# %%
# Setting up
# ----------

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: the kernels run on the CPU through Triton's interpreter\n"
          "(TRITON_INTERPRET=1), on small inputs.")

import triton
import triton.language as tl

import ln_tutorial
from ln_tutorial import launch, plain, tuning
from ln_tutorial.reference import layer_norm_backward_reference, relative_error

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# The lock kernel
# ---------------
#
# *When it matters:* to compare with the Triton tutorial; the package never
# picks it by itself (``backward_strategy="lock"``). Compared with the
# tutorial's 2022 page, it accumulates the partial sums in float32 whatever
# the input dtype, handles a missing weight or bias, addresses rows through
# strides with 64-bit offsets, and places a barrier before it releases the
# lock. ``tl.atomic_cas(lock, 0, 1)`` returns the old value, so the loop spins
# until this program is the one that changed it from 0 to 1. ``COUNT`` records
# whether the buffer already holds a partial sum; the first program to arrive
# stores its row instead of adding it to the garbage of an uninitialized
# buffer, which saves zeroing the buffers beforehand. The number of buffers
# follows the tutorial's heuristic, more for short rows, whose programs finish
# quickly and would otherwise spend their time waiting: 256 up to 1024
# values, 128 up to 4096, and 96 past that, where the tutorial drops to 64
# past 8192.

# ln_tutorial:source ln_tutorial.variants.lock.group_size
# ln_tutorial:source ln_tutorial.variants.lock.layer_norm_bwd_lock_kernel

# %%
# The second stage reads the partial rows and adds them, always in the same
# order. The partial rows of :math:`\nabla_w` and :math:`\nabla_b` are stacked
# in one buffer, and the grid has two axes: a narrow slice of columns, and
# which of the two gradients. The default backward below uses the same kernel.

# ln_tutorial:source ln_tutorial.kernels.add_partial_rows
# ln_tutorial:source ln_tutorial.kernels.partial_sum_kernel

# %%
# On a GPU, two calls of the lock backward on the same data give different
# :math:`\nabla_w`. (The interpreter runs programs one after another, always
# in the same order, so on a CPU the runs agree and the race for the locks
# cannot be seen.)

M, N = (4096, 4096) if ON_GPU else (48, 256)
x = (-2.3 + 0.5 * torch.randn(M, N, device=DEVICE)).requires_grad_(True)
w = torch.rand(N, device=DEVICE, requires_grad=True)
b = torch.rand(N, device=DEVICE, requires_grad=True)
dy = 0.1 * torch.randn(M, N, device=DEVICE)
runs = [torch.autograd.grad(ln_tutorial.layer_norm(x, (N,), w, b, backward_strategy="lock"), w, dy)[0]
        for _ in range(5)]
distinct = len({tuple(r.tolist()) for r in runs})
print(f"lock strategy: {distinct} different dw out of 5 runs"
      + ("" if ON_GPU else " (interpreter: programs run in a fixed order)"))
dw_exact = layer_norm_backward_reference(dy, x.detach(), w.detach())[1]
print(f"lock strategy, dw: relative error {relative_error(runs[0], dw_exact):.1e}")

# %%
# Tiles, stages and reloads: the default kernel
# ---------------------------------------------
#
# *When it matters:* every row that fits in registers (up to 32 KB). The
# default kernel gives each program a contiguous range of rows and walks it
# ``BLOCK_M`` rows at a time, so that short rows still put several kilobytes
# in flight. Its helpers load a tile and return :math:`\hat{x}`,
# :math:`\nabla_y` and :math:`w \nabla_y` in the compute precision, write a
# tile's :math:`\nabla_x` while adding its terms to the running sums, and
# write a program's partial row at the end:

# ln_tutorial:source ln_tutorial.kernels.reciprocal
# ln_tutorial:source ln_tutorial.kernels.tile_terms
# ln_tutorial:source ln_tutorial.kernels.load_tile
# ln_tutorial:source ln_tutorial.kernels.store_dx_and_accumulate
# ln_tutorial:source ln_tutorial.kernels.store_partial_row
# ln_tutorial:source ln_tutorial.kernels.layer_norm_bwd_persistent_kernel

# %%
# Compared with the plain kernel, ``dw_acc`` and ``db_acc`` are ``BLOCK_M``
# by ``BLOCK_N`` tiles of running sums, and three details come from
# measurements on an H100:
#
# * The loop is a ``tl.range(..., num_stages=NUM_STAGES)`` rather than a
#   plain ``range``: with more than one stage, Triton issues the loads of the
#   next tiles while the current one is still being reduced and stored, so
#   the memory system always has requests in flight. Rows of 2 to 16 KB
#   gain the most from it.
#
# * The weight is loaded again for every tile (it comes from L1) instead of
#   once before the loop: a copy held in registers for the whole loop made
#   32 KB rows spill. For those rows even that is not enough: with
#   ``RELOAD`` the kernel reads the tile a second time after the sums, from
#   L2 (the first read asks L2 to keep it, the second lets it go). On
#   narrower rows the second read only costs time, so the table turns it on
#   for 32 KB rows alone.
#
# * With ``TAIL_N`` the kernel holds a padded row as two tiles: a float16 row
#   of 9216 values becomes 8192 + 1024 columns instead of one 16384-wide
#   tile, 44 % of whose lanes would idle. ``TAIL_N`` is a compile-time
#   constant, so for ``TAIL_N = 0`` the ``if`` blocks vanish.
#
# The launch table and its model
# ------------------------------
#
# The table gives, by padded row size in bytes: rows per loop step, warps,
# programs per SM, stages and reload. The model is the forward's with two
# changes. The backward holds more per column (:math:`\hat{x}`,
# :math:`w \nabla_y` and two running sums, in float32), so fewer values fit
# per thread. And its grid is *persistent*: programs per SM times the number
# of SMs, one wave by construction, each program looping over its rows. Its
# bytes in flight per program are ``BLOCK_M`` rows times the stages, in two
# tensors. The H100's table (``ln_tutorial/data/tuning/``), computed in
# float16:

# ln_tutorial:source ln_tutorial.tuning.BackwardConfig

# %%

table = tuning.load("nvidia-h100-80gb-hbm3")
print(f"{'row bytes':>9} {'BLOCK_M':>8} {'warps':>6} {'per SM':>7} {'stages':>7} {'reload':>7} "
      f"{'accumulators per thread':>24} {'bytes in flight':>16}")
for row_bytes, cfg in table.backward.items():
    per_thread = 2 * cfg.block_m * row_bytes // 2 // (32 * cfg.num_warps)
    in_flight = 2 * cfg.block_m * row_bytes * cfg.num_stages
    print(f"{row_bytes:>9} {cfg.block_m:>8} {cfg.num_warps:>6} {cfg.programs_per_sm:>7} {cfg.num_stages:>7} "
          f"{cfg.reload!s:>7} {per_thread:>24} {in_flight:>16}")

# %%
# Every row size runs one program per SM. Rows of 2 and 4 KB take four rows
# per step, 8 KB rows two and wider rows one; 2 KB rows keep four tiles in
# flight, the wider ones three, and 32 KB rows one, reloading. The choice for
# a given row length:

# ln_tutorial:source ln_tutorial.launch.backward_config
# ln_tutorial:source ln_tutorial.launch._backward_config
# ln_tutorial:source ln_tutorial.launch.backward_grid

# %%
# One launch instead of two
# ~~~~~~~~~~~~~~~~~~~~~~~~~
#
# *When it matters:* inputs up to ``MAX_BYTES`` (64 MB), where the GPU
# finishes before the host could launch a second kernel. This is a variant,
# ``ln_tutorial/variants/one_launch.py``.
# On a small input the persistent kernel is done in a few microseconds, and
# the GPU then waits for the host to launch the second stage: launching a
# kernel from Python costs tens of microseconds (the performance notes
# measure it). Up to ``MAX_BYTES`` of input the same programs
# therefore add up the partial rows themselves. They may only start once every
# program has written its partial row, so they first wait at a grid-wide
# barrier: each program adds one to a counter; the last to arrive resets the
# counter for the next launch and moves a generation number on, and the
# others spin until they see the new generation.

# ln_tutorial:source ln_tutorial.variants.one_launch.grid_barrier

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

# ln_tutorial:source ln_tutorial.variants.one_launch.layer_norm_bwd_one_launch_kernel
# ln_tutorial:source ln_tutorial.variants.one_launch.reduce_blocks

# %%
# The barrier's two counters live on the GPU between launches, one pair per
# stream: launches on one stream run one after another and each leaves the
# pair ready for the next; two streams could overlap, so they get a pair each.

# ln_tutorial:source ln_tutorial.variants.one_launch.grid_barrier_state

# %%
# Past ``MAX_BYTES`` the GPU's work is longer than the host's, and
# two launches measured slightly faster. The partial rows are the same either
# way; the one-launch kernel adds them in wider blocks, so
# :math:`\nabla_w` and :math:`\nabla_b` can differ from the two-launch sums in
# the last bit, while :math:`\nabla_x` is identical. Each path, run again,
# gives the same bits.
#
# Rows too wide for one program
# -----------------------------
#
# *When it matters:* rows of more than 32 KB (hidden sizes of 16384
# half-precision values and more).
# Past ``MAX_FUSED_BWD_BYTES`` of input (32 KB: the backward holds two rows
# and the partial sums, so its limit is lower than the forward's) a row and
# its :math:`\nabla_w`, :math:`\nabla_b` partial sums no longer fit in one
# SM's registers. One way out is to loop: a :math:`\nabla_x` kernel that
# sweeps each row twice, like the wide forward, and a separate kernel for the
# partial rows on a (column block, row group) grid. That reads :math:`x` and
# :math:`\nabla_y` twice from memory, 5 units of traffic where 3 are needed:
# about half of copy speed. Half-precision and float32 rows take another way
# (float64 rows loop, because the trade below carries float32 sums), in a
# variant (``ln_tutorial/variants/split.py``): ``SPLIT`` programs share each row, each holding ``BLOCK_N`` of its columns (and their
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
# registers for it and nothing waits on it (``prefetch_rows``, shown on
# `the forward at full speed <04_forward_advanced.html>`_). The interpreter
# has no PTX, so there ``PREFETCH`` is off.
#
# The two sums of a part are independent, but two ``tl.sum`` calls would each
# end in their own exchange between warps, through shared memory and a
# barrier. ``tl.reduce`` takes a tuple and a combine function (``add_pair``)
# and exchanges both at once.

# ln_tutorial:source ln_tutorial.variants.split.load_raw_tile
# ln_tutorial:source ln_tutorial.variants.split.add_pair
# ln_tutorial:source ln_tutorial.variants.split.written_record
# ln_tutorial:source ln_tutorial.variants.split.publish_row_sums
# ln_tutorial:source ln_tutorial.variants.split.whole_row_sums
# ln_tutorial:source ln_tutorial.variants.prefetch.prefetch_tile
# ln_tutorial:source ln_tutorial.variants.split.layer_norm_bwd_split_kernel

# %%
# On a GPU the split kernel ends like the one-launch persistent kernel: a
# grid-wide barrier, then each program adds up a share of the partial rows.
# The barrier's generation number, which moves on once per launch, also gives
# each launch its own "written" flag: the generation plus one, read by every
# program before any can pass the barrier that changes it. A record left by
# an earlier launch carries an earlier flag and does not count, so the
# records need no zeroing: they are kept per stream, next to the barrier
# (for the ``STATE_STREAMS`` most recently used streams; the C++ node keeps
# a barrier and records of its own for each kind of call), and zeroed
# only when a call needs more of them, or after
# ``RECORDS_LIFETIME`` launches, long before the generation (counted
# modulo :math:`2^{31}`) could come round to an old flag. Two launches and a
# zero-filled buffer for each call measured slower at the widest shapes on
# the H100. In the interpreter the flag is 1,
# the records are zeroed for each call and a second kernel adds the partial
# rows.

# ln_tutorial:source ln_tutorial.variants.split.RECORDS_LIFETIME
# ln_tutorial:source ln_tutorial.variants.split.STATE_STREAMS
# ln_tutorial:source ln_tutorial.variants.split.records_state

# %%
# The programs of a group wait for each other, so all of them must be resident
# at once: the launch is cooperative, and a grid that does not fit is refused
# by the driver rather than left to hang. When the package chose the
# configuration, a refusal (or a row with more parts than the GPU holds
# programs) sends the call to the configuration it would take without shared
# rows: the looped kernels, or one 16384-wide tile for padded half-precision
# rows. The interpreter runs programs one after another, so a program
# would wait forever for a later one: there each row has one part.
#
# How wide a part? Narrow parts put more programs on each row and fewer
# columns in each program's registers. On the H100 parts of 2048 columns won
# (the table's ``backward_split`` entries, one per element size).
# *What did not pay:* parts of 4096 columns for half-precision rows wider
# than 32768 values gained under 5 %, the spread of two recordings of the
# same code, so the package keeps one part width.

# ln_tutorial:source ln_tutorial.variants.split.fit
# ln_tutorial:source ln_tutorial.variants.one_launch.remember_refusal

# %%

for size, cfg in table.backward_split.items():
    print(f"{size}-byte values: parts of {cfg.block_n} columns, {cfg.num_warps} warps, "
          f"{cfg.programs_per_sm} programs per SM ({table.evidence[('backward_split', size)]})")

# %%
# The C++ autograd node
# ---------------------
#
# *When it matters:* small inputs, where the host's time per call is longer
# than the kernels'. ``layer_norm`` is differentiated by PyTorch's autograd
# engine, which calls the backward on a thread of its own; a backward written
# in Python pays for its Python there. So for the common call (a CUDA tensor
# with contiguous rows) ``layer_norm`` runs in C++
# (``ln_tutorial/variants/csrc/layer_norm.cpp``, loaded by
# ``ln_tutorial/variants/native.py`` and compiled on first use): it launches
# the forward kernel and gives the output a small autograd node that launches
# these same compiled kernels where a weight or a bias is given; anything
# else (the looped kernels, a strided gradient, double backward, another
# stream) it hands back to ``layer_norm_backward``.
# The results are the same bits either way.
#
# ``layer_norm_backward`` ties it together: the lock kernel, the persistent
# kernel in one launch or two, the split kernel, or the looped kernels. With
# ``ln_tutorial.use_variants(False)`` (or ``LN_TUTORIAL_VARIANTS=0``) it takes
# the default kernels alone.

# ln_tutorial:source ln_tutorial.launch.layer_norm_backward

# %%
# Here is what the default picks for a few row lengths (``ln_tutorial.explain``
# says it for one shape, with the reason), and a last check: the default
# backward against the plain one of the second page.

print(f"{'N':>7} {'dtype':>9} {'BLOCK_M':>8} {'BLOCK_N':>8} {'warps':>6} {'per SM':>7} {'stages':>7} "
      f"{'reload':>7} {'TAIL_N':>7} {'looped':>7} {'split':>6}")
for n in (768, 1024, 4096, 8192, 9216, 12800, 16384, 32768):
    for dtype in (torch.float16, torch.float32):
        cfg = launch.backward_config(n, torch.empty(0, dtype=dtype).element_size())
        print(f"{n:>7} {str(dtype)[6:]:>9} {cfg.block_m:>8} {cfg.block_n:>8} {cfg.num_warps:>6} "
              f"{cfg.programs_per_sm:>7} {cfg.num_stages:>7} {cfg.reload!s:>7} {cfg.tail_n:>7} {cfg.looped!s:>7} "
              f"{cfg.split!s:>6}")
print(ln_tutorial.explain((4096, 32768), torch.bfloat16))

x = torch.randn(37, 300, device=DEVICE, requires_grad=True)
w = torch.rand(300, device=DEVICE, requires_grad=True)
b = torch.rand(300, device=DEVICE, requires_grad=True)
dy = torch.randn(37, 300, device=DEVICE)
default = torch.autograd.grad(ln_tutorial.layer_norm(x, (300,), w, b), (x, w, b), dy)
plain_grads = torch.autograd.grad(plain.layer_norm(x, w, b), (x, w, b), dy)
for name, d, p in zip(("dx", "dw", "db"), default, plain_grads):
    print(f"{name}: default against plain, max |difference| {(d - p).abs().max().item():.1e}")
    assert torch.allclose(d, p, atol=1e-4)
