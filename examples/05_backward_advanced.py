"""
Advanced: the backward at full speed
====================================

The backward of the second page gives each program one row at a time and
sums the partial rows with ``torch.sum``. The package's default backward
keeps the same lock-free idea and adds what some shapes need. Each section
says first which shapes it is for; the
`performance notes <../performance.html>`_ have the measurements.

In doing so, you will learn about:

* The lock kernel of the Triton tutorial, and the part of it that takes a lock.

* Tiles of several rows with their loads issued ahead, and the launch table
  that sizes them per GPU model.

* A grid-wide barrier that lets the same programs add up the partial rows,
  in one launch instead of two.

* Rows too wide for one program, shared by several that trade their row sums
  through global memory.

* A C++ autograd node that shortens the host's time per call, which decides
  the time of small inputs.
"""

# %%
# Setting up
# ----------

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: the kernels run on the CPU through Triton's interpreter\n"
          "(TRITON_INTERPRET=1), on small inputs.")

import triton
import triton.language as tl

import ln_tutorial
from ln_tutorial import _common, dispatch, host, tuning
from ln_tutorial_book import plain
from ln_tutorial_book.reference import layer_norm_backward_reference, relative_error

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# How does the lock kernel take its lock?
# ---------------------------------------
#
# *When it matters:* to compare with the Triton tutorial
# (``backward_strategy="lock"``); the package never picks it by itself.
# After writing its row of
# :math:`\nabla_x`, each program adds its row's terms into one of
# ``GROUP_SIZE_M`` shared buffers. ``tl.atomic_cas(lock, 0, 1)`` returns the
# old value, so the loop spins until this program is the one that changed it
# from 0 to 1.
# ``COUNT`` records whether the buffer already holds a partial sum: the first
# program to arrive stores its row instead of adding it to an uninitialized
# buffer, which saves zeroing the buffers first. The barrier before the
# release makes every thread's stores land before the next owner reads.

# ln_tutorial:source ln_tutorial.variants.lock.layer_norm_bwd_lock_kernel from "group = row % GROUP_SIZE_M" to "tl.atomic_xchg(lock, 0)"

# %%
# The tutorial's 2022 page had two bugs, avoided here. Its
# buffers were in the input's dtype, so a float16 model summed
# :math:`\nabla_w` in float16 and rounded away the small terms; here they
# hold float32 sums (float64 for float64 input). And it released the lock
# without the barrier, so the next owner could read a half-written buffer.
# The number of buffers (``ln_tutorial.variants.lock.group_size``) follows
# the tutorial's heuristic, more for short rows, whose programs finish
# quickly and would otherwise spend their time waiting: 256 up to 1024
# values, 128 up to 4096, 96 up to 8192 and 64 past that. A second kernel,
# ``ln_tutorial.kernels.partial_sum_kernel``, adds the buffers in a fixed
# order; the default backward uses it too.
#
# On a GPU, two calls of the lock backward on the same data give different
# :math:`\nabla_w`; the interpreter runs programs one after another, always
# in the same order, so it cannot show the race.

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
# How does one program keep enough loads in flight?
# -------------------------------------------------
#
# *When it matters:* every row that fits in registers (up to 32 KB). Each
# program owns rows and keeps its partial sums of
# :math:`\nabla_w` and :math:`\nabla_b` in registers. The
# default kernel, ``ln_tutorial.kernels.layer_norm_bwd_persistent_kernel``,
# gives each program a contiguous range of rows and walks it ``BLOCK_M``
# rows at a time, so that short rows still put several kilobytes in flight.
# ``load_tile`` returns a tile's :math:`\hat{x}`, :math:`\nabla_y` and
# :math:`w \nabla_y` in the compute precision; ``store_dx_and_accumulate``
# writes its :math:`\nabla_x` and adds it to the running sums. The loop:

# ln_tutorial:source ln_tutorial.kernels.layer_norm_bwd_persistent_kernel from "row_begin = pid" to "store_partial_row(PARTIAL"

# %%
# Three details, measured on an H100:
#
# * The loop is a ``tl.range(..., num_stages=NUM_STAGES)``: with more than
#   one stage, Triton issues the loads of the next tiles while the current
#   one is still being reduced and stored.
#
# * The weight is loaded again for every tile (it comes from L1): held in
#   registers for the whole loop, it made 32 KB rows spill. For those rows
#   even that is not enough: with ``RELOAD`` the kernel reads the tile a
#   second time after the sums, from L2 (the first read asks L2 to keep it,
#   the second lets it go). On narrower rows the second read only costs
#   time, so the table turns it on for 32 KB rows alone.
#
# * With ``TAIL_N`` the kernel holds a padded row as two tiles: a float16 row
#   of 9216 values becomes 8192 + 1024 columns instead of one 16384-wide
#   tile. ``TAIL_N`` is a compile-time constant, so for ``TAIL_N = 0`` the
#   ``if`` blocks vanish.
#
# Which tile for which row?
# -------------------------
#
# A launch table gives, by padded row size in bytes, the fields of
# ``ln_tutorial.tuning.BackwardConfig``: rows per loop step, warps, programs
# per SM, stages and reload. The model is the forward's with two changes.
# The backward holds more per column (:math:`\hat{x}`, :math:`w \nabla_y`
# and two running sums, in float32), so fewer values fit per thread. And its
# grid is *persistent*: programs per SM times the number of SMs, one wave,
# each program looping over its rows. The H100's table
# (``ln_tutorial/data/tuning/``), computed in float16:

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
# flight, the wider ones three, and 32 KB rows one, reloading.
# ``ln_tutorial.dispatch.backward_config`` picks the entry for a row length,
# and ``ln_tutorial.explain`` says which one and why.
#
# How can the same programs add up the partial rows?
# --------------------------------------------------
#
# *When it matters:* inputs up to ``MAX_BYTES`` (64 MB), in the variant
# ``ln_tutorial/variants/one_launch.py``. On a small input the persistent
# kernel finishes before the host has launched the second stage, and the GPU
# waits for it. So up to ``MAX_BYTES`` the same programs add up the partial
# rows themselves, once every program has written its own: they first wait
# at a grid-wide barrier. Each program adds one to a counter; the last to
# arrive resets the counter for the next launch and moves a generation
# number on, and the others spin until they see the new generation.

# ln_tutorial:source ln_tutorial.variants.cooperative.grid_barrier

# %%
# The barrier needs every program of the grid on the GPU at once: a
# *cooperative* launch (Triton's ``launch_cooperative_grid=True``) promises
# it, or fails when the grid is too large; the package then remembers the
# refusal and takes two launches for that configuration, as the interpreter,
# which runs the programs one after another, always does. The kernel is the persistent kernel, called as
# a function, then the barrier and a share of the second stage:

# ln_tutorial:source ln_tutorial.variants.one_launch.layer_norm_bwd_one_launch_kernel from "layer_norm_bwd_persistent_kernel("

# %%
# The barrier's counters stay on the GPU, one pair per stream
# (``grid_barrier_state``), each launch leaving them ready for the next. Past ``MAX_BYTES``
# two launches measured slightly faster, and so they did for rows of 4097 to
# 8192 half-precision values at 256 and 1024 rows on both GPUs: the table
# entries for rows that pad to 16 KB (float32 rows of 2049 to 4096 values
# too) say ``"one_launch": false``. The partial rows are the same
# either way; the one-launch kernel adds them in wider blocks, so
# :math:`\nabla_w` and :math:`\nabla_b` can differ from the two-launch sums
# in the last bit, while :math:`\nabla_x` is identical. Each path, run again,
# gives the same bits.
#
# How do several programs share a row?
# ------------------------------------
#
# *When it matters:* rows of more than 32 KB, and by the table's choice
# half-precision rows of 12289 to 16384 values. A row and its partial sums no
# longer fit in one SM's registers. The looped kernels
# (``layer_norm_bwd_dx_looped_kernel`` and ``layer_norm_bwd_dwdb_kernel``)
# read :math:`x` and :math:`\nabla_y` twice from memory. Half-precision and
# float32 rows take the variant ``ln_tutorial/variants/split.py`` instead:
# ``SPLIT`` programs share each row, each holding ``BLOCK_N`` of its columns
# (and their partial sums) for all the rows of its group. Only :math:`c_1`
# and :math:`c_2` need the whole row, and they are sums: each program adds
# its part, writes it to global memory, and reads the others' parts. (float64
# rows loop, because the trade carries float32 sums.)
#
# Each part of a sum travels, once per row, in one 64-bit word with a
# "written" flag in its upper half, and the word is written atomically: a
# program that reads the flag reads the sum with it, so there is no flag to
# order against the data, no fence and no barrier. The two sums go through one ``tl.reduce`` with a combine function
# (``add_pair``), which exchanges both between warps at once where two
# ``tl.sum`` calls would exchange twice.

# ln_tutorial:source ln_tutorial.variants.split.written_record
# ln_tutorial:source ln_tutorial.variants.split.publish_row_sums from "record = RECORDS"

# %%
# A program that needs the whole-row sums polls the records with volatile
# loads (from L2 every time) until every part carries this launch's flag, and
# adds the parts in the same order in every program:

# ln_tutorial:source ln_tutorial.variants.split.whole_row_sums from "parts = tl.arange"

# %%
# Where a value is held by several threads, Triton adds one of the copies,
# which need not be the copy whose flag was checked. So the tile of records
# (``records_block``) is as wide as the row has parts where that is at most
# 32 and a tile holds one row: every warp then holds all of a row's records
# and adds the very values it checked. Wider tiles have at least one record
# a thread, and no copies.

# %%
# Each program publishes a tile's sums one tile before it needs the others':
# while they catch up, it is loading and summing its next tile. Those loads
# come from L2: one step earlier, ``prefetch_tile`` asked L2 for them with a
# PTX prefetch in Triton's inline assembly
# (``ln_tutorial.variants.split.prefetch_to_l2``), which holds no
# registers and is never waited on. The interpreter has no PTX, so there
# ``PREFETCH`` is off. The loop of
# ``ln_tutorial.variants.split.layer_norm_bwd_split_kernel``:

# ln_tutorial:source ln_tutorial.variants.split.layer_norm_bwd_split_kernel from "rows = row_begin + tl.arange" to "x, dy, rows, row_mask, mask = x_next"

# %%
# On a GPU the split kernel then ends like the one-launch kernel: a grid-wide
# barrier, and each program adds up a share of the partial rows. The
# barrier's generation number, plus one, is also the launch's "written" flag:
# every program reads it before any can pass the barrier that moves it on.
# Records left by earlier launches carry earlier flags, so they need no
# zeroing for each call. In the interpreter the flag is 1, the records are zeroed for
# each call and a second kernel adds the partial rows.
#
# The programs of a group wait for each other, so the launch is cooperative.
# If the driver refuses it, or a row has more parts than the GPU holds
# programs, ``ln_tutorial.dispatch.backward_choice`` takes the configuration
# without shared rows. In the interpreter, where a program would wait
# forever for a later one, each row has one part.
#
# How wide a part? Narrow parts put more programs on each row and fewer
# columns in each program's registers. Each GPU's table has a
# ``backward_split`` entry per element size. On the H100
# parts of 2048 columns won; wider parts for the widest half-precision rows
# gained less there than two recordings of the same code differ. The H200
# needs more bytes in flight per SM, and its table, tuned there, takes wider
# parts for 2-byte values:

for gpu in ("nvidia-h100-80gb-hbm3", "nvidia-h200"):
    table = tuning.load(gpu)
    print(gpu)
    for size, cfg in table.backward_split.items():
        print(f"{size}-byte values: parts of {cfg.block_n} columns, {cfg.num_warps} warps, "
              f"{cfg.programs_per_sm} programs per SM ({table.evidence[('backward_split', size)]})")

# %%
# Can the parts trade without global memory?
# ------------------------------------------
#
# *When it matters:* half-precision rows of 12289 to 65536 values on a
# Hopper GPU whose table lists them (both tables list them all). The
# programs that share a row can be the
# programs of one thread-block cluster, which reach each other's shared
# memory. ``ln_tutorial/variants/cluster.py`` launches them so: each
# program stores its part of the two sums straight into the others' shared
# memory (PTX ``st.async``, which counts the bytes on an mbarrier there)
# and waits on its own mbarrier. No record goes through L2 and no program
# polls. Triton 3.6 has no operation for another program's shared memory,
# so the trade is inline PTX; eight slots, one per row in flight, let a
# program run a few rows ahead of the others.
#
# The loop also keeps more loads in flight. It is a ``tl.range`` with
# ``num_stages``, which Triton pipelines: each row's loads are issued
# ``num_stages - 1`` passes ahead as asynchronous copies into shared
# memory, where they hold no registers while in flight. (A tile prefetched
# into registers, as the split kernel does, allows one row ahead: the
# compiler copies it into the next pass's registers, and that copy waits
# for the loads to land.) Each pass sends the sums of the row it loads and
# awaits those of the row before, whose tile it kept. A cluster is placed
# only where all its programs fit at once inside one group of SMs, so on
# the H100 15 clusters of 8 programs run (120 of 132 SMs); the grid has as
# many clusters as the driver says fit. The loop of
# ``layer_norm_bwd_cluster_kernel``:

# ln_tutorial:source ln_tutorial.variants.cluster.layer_norm_bwd_cluster_kernel from "for r in tl.range" to "i += 1"

# %%
# Each table lists the row sizes where clusters won an A/B against the
# split kernel; elsewhere the split kernel runs:

for gpu in ("nvidia-h100-80gb-hbm3", "nvidia-h200"):
    table = tuning.load(gpu)
    print(gpu)
    for row_bytes, cfg in table.backward_cluster.items():
        print(f"{row_bytes}-byte rows: parts of {cfg.block_n} columns, {cfg.num_warps} warps, "
              f"{cfg.programs_per_sm} programs per SM ({table.evidence[('backward_cluster', row_bytes)]})")

# %%
# Why is there a C++ autograd node?
# ---------------------------------
#
# *When it matters:* small inputs, where the host's time per call is longer
# than the kernels'. PyTorch's autograd engine calls the backward on a thread
# of its own, and a backward written in Python pays for its Python there. So
# for the common call (a CUDA tensor with contiguous rows) ``layer_norm``
# runs in C++
# (``ln_tutorial/variants/csrc/layer_norm.cpp``, loaded by
# ``ln_tutorial/variants/native.py`` and compiled on first use): it launches
# the forward kernel and gives the output a small autograd node that launches
# these same compiled kernels where a weight or a bias is given; anything
# else (the looped kernels, a strided gradient, double backward, another
# stream) it hands back to ``layer_norm_backward``. The results are the same
# bits either way.
#
# Which path does a call take?
# ----------------------------
#
# ``ln_tutorial.dispatch.layer_norm_backward`` chooses: the lock kernel, the
# persistent kernel in one launch or two, the split or cluster kernel, or
# the looped kernels. With ``ln_tutorial.use_variants(False)`` (or
# ``LN_TUTORIAL_VARIANTS=0``) it takes the default kernels alone. Here is
# what the default picks for a few row lengths, what ``ln_tutorial.explain``
# says for one shape, and a last check against the plain backward of the
# second page.

print(f"{'N':>7} {'dtype':>9} {'BLOCK_M':>8} {'BLOCK_N':>8} {'warps':>6} {'per SM':>7} {'stages':>7} "
      f"{'reload':>7} {'TAIL_N':>7} {'looped':>7} {'split':>6}")
for n in (768, 1024, 4096, 8192, 9216, 12800, 16384, 32768):
    for dtype in (torch.float16, torch.float32):
        cfg = dispatch.backward_config(n, torch.empty(0, dtype=dtype).element_size())
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
