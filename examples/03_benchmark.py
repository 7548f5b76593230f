"""
Layer Normalization, part 3: benchmarks
=======================================

In this tutorial you will measure how fast the layer normalization of the
previous pages is, forward and backward, and compare it with the package's
default path, with PyTorch and with other libraries' kernels.

In doing so, you will learn about:

* Measuring a memory-bound kernel in GB/s, against the one limit that
  holds: the memory bandwidth of the GPU's datasheet.

* Timing GPU code properly: warm-up, inputs kept out of the L2 cache, GPU
  time without the host's, medians of interleaved repetitions.

* Reading the results: where the fused kernels win, where they cannot, and
  what the shapes of language models ask for.

The standalone
`layer_norm_triton.py <../_downloads/standalone/layer_norm_triton.py>`_
has a small version of this benchmark, with its plot.
"""

# %%
# Setting up
# ----------
#
# On a GPU this page measures live, which takes a few minutes. Without a GPU
# there is nothing to time: it shows the results recorded on a GPU and shipped
# with the package, and runs the benchmark's providers on a tiny input
# through the interpreter only to show that they work.

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: showing the recorded GPU results; the kernels run\n"
          "on the CPU through Triton's interpreter (TRITON_INTERPRET=1), on small inputs.")

import matplotlib.pyplot as plt

from ln_tutorial_book import bench

ON_GPU = torch.cuda.is_available()

# %%
# What to measure
# ---------------
#
# A layer norm does a handful of operations per element it reads, and a GPU
# can do hundreds in the time it takes to fetch one element from memory: its
# speed is set by memory traffic, counted in bytes per second. For :math:`M` rows of
# :math:`N` elements of :math:`s` bytes, the forward must read :math:`x` and
# write :math:`y`, and the backward must read :math:`x` and
# :math:`\nabla_y` and write :math:`\nabla_x`:
#
# .. math::
#
#    \text{GB/s}_{\text{forward}} = \frac{2\,M N s}{t}, \qquad
#    \text{GB/s}_{\text{backward}} = \frac{3\,M N s}{t}.
#
# The weight, bias, mean and rstd are :math:`O(N + M)` and left out, as in the
# Triton tutorial. Only the traffic any implementation must do is counted: a
# kernel that moves more bytes simply scores lower.
#
# **The ceiling** is the bandwidth of the GPU's memory from its datasheet:
# 3350 GB/s for an H100 SXM, 4800 GB/s for an H200. No kernel moves bytes
# faster, and none reaches it: each run measures a 1 GB copy, drawn below the
# datasheet in the plots. At each shape it also times a copy of the same bytes
# (the provider ``copy``: ``x.clone()`` for the forward; for the backward
# ``torch.add(x, dy)``, two tensors read and one written): a reference, one of
# PyTorch's kernels, not a limit; a layer norm may beat it.
#
# How it is timed
# ---------------
#
# Each function is warmed up (compiling, autotuning, allocating), and
# successive calls cycle through enough copies of the inputs that none finds
# them in the L2 cache. **What the plots show is
# GPU time**: the replay of a CUDA graph of many calls, divided by the number
# of calls: no host time is in it. The providers take turns at each shape,
# the measurement is repeated ten times, and the plots draw the median with a
# band from the 20th to the 80th percentile. Within one run, medians less
# than 5 % apart are a tie. A backward is timed alone, on a kept graph. The
# host's time, which decides small calls, is recorded apart and compared on
# the `performance <../performance.html>`_ page.
#
# The competitors, each a function of ``(x, weight, bias)``:
#
# * ``plain``: the kernels of the first two pages (rows up to 32 KB);
# * ``ln_tutorial``: the package's default, with its persistent backward;
# * ``ln_tutorial-lock``: the same forward with the Triton tutorial's
#   lock-based backward (so it is in the backward plots only);
# * ``torch`` (PyTorch's CUDA kernels) and ``torch.compile`` (TorchInductor's
#   generated Triton kernels);
# * ``liger``, ``quack`` (without a bias), ``apex``, ``flash-attn``: the
#   layer norms of Liger-Kernel, QuACK, NVIDIA Apex and FlashAttention, where
#   installed.
#
# Two sets of shapes: the Triton tutorial's sweep (float16, :math:`M = 4096`,
# :math:`N` from 1024 to 15872) and shapes of language models in bfloat16.

sweep = bench.SETS["tutorial"]
print(f"tutorial sweep, float16: M = {sweep[0][0]}, N = {sweep[0][1]}, {sweep[1][1]}, ..., {sweep[-1][1]}")
print("LLM shapes, bfloat16:", ", ".join(f"{m} x {n}" for m, n in bench.SETS["llm"]))

# %%
# The results
# -----------
#
# On a GPU the next cell measures every provider it can import (set
# ``LN_TUTORIAL_BENCH_PROVIDERS`` to a comma-separated list to restrict it).
# Without one it loads the run recorded on a GPU and shipped in
# ``ln_tutorial_book/data/benchmarks/``: one run, every provider interleaved.

if ON_GPU:
    wanted = os.environ.get("LN_TUTORIAL_BENCH_PROVIDERS")
    rows = bench.measure(providers=wanted.split(",") if wanted else None, progress=False)
    print(f"{len(bench.compare(bench.load_results(), rows))} points differ from the recorded run by more "
          f"than {bench.TOLERANCE}")
else:
    rows = bench.shipped_results()
print(bench.provenance(rows) if rows else "No recorded results are shipped with this version yet.")

# %%
# The forward pass, GB/s against the row length :math:`N` (every point of
# both directions is listed on the `Benchmarks <../benchmarks.html>`_ page):

if rows:
    bench.plot_sweep(rows, "forward")
    plt.show()

# %%
# The backward pass:

if rows:
    bench.plot_sweep(rows, "backward")
    plt.show()

# %%
# What the numbers mean
# ---------------------
#
# One number per provider and direction sums the plots up: the median, over
# the sweep and over the language-model shapes, of its GB/s as a percentage
# of the datasheet bandwidth. The copy's line says how much of it moving
# bytes alone reaches.

if rows:
    print(bench.share_table(rows))
    above = bench.above_copy(rows)
    print(f"\npoints faster than the copy of the same bytes by more than {bench.NOISE:.0%}: {len(above)}")
    for point in above:
        print(f"  {point['provider']} {point['mode']} {point['M']} x {point['N']}: {point['gbps']:.0f} GB/s, "
              f"copy {point['copy']:.0f} GB/s")

# %%
# * **The forward** of a fused kernel moves the bytes of the copy, so the
#   best implementations come close to it; the reductions, which make each
#   program wait for a whole row before it can write, cost the rest. A point
#   listed above as faster than the copy is one where PyTorch's copy kernel
#   is the slower of two kernels moving the same bytes; no recorded point
#   passes the datasheet bandwidth (the test suite checks every one).
#
# * **The backward** is where the implementations differ most. Besides
#   :math:`\nabla_x` it must produce :math:`\nabla_w` and :math:`\nabla_b`. The
#   lock-based strategy reads and writes a partial row under a lock for every
#   input row, and its rows queue; the lock-free strategy writes one partial
#   row per program, so its traffic stays close to the necessary
#   :math:`3MNs` bytes. Implementations that compute :math:`\nabla_w` and
#   :math:`\nabla_b` in a separate pass over :math:`x` and :math:`\nabla_y`
#   move about :math:`5MNs` bytes, so they can score at most 60 % of the
#   datasheet bandwidth.
#
# * **Short and wide rows** need more than the kernels of pages 1 and 2. A
#   2 KB row is too little for one program to keep the memory busy, which is
#   why ``ln_tutorial`` packs several rows into a program and ``plain`` does
#   not; and past 32 KB a row no longer fits in registers in the backward
#   (past 64 KB in the forward), so ``plain`` stops at 32 KB in both
#   directions. The advanced pages
#   show what the default does for both.
#
# The numbers depend on the GPU, the driver and the versions of PyTorch and
# Triton, so each plot names the GPU, the versions, the date and the commit
# of the one run it draws.
#
# The providers run on a CPU too, through the interpreter, and the test suite
# checks there that each agrees with PyTorch; only their timings need a GPU.
#
# To measure on your own GPU and record one run with its provenance:
#
# .. code-block:: bash
#
#    python -m ln_tutorial_book.bench --help    # the providers, shapes and options
#    python -m ln_tutorial_book.bench           # everything, into ./ln_tutorial_bench.csv
#
# References
# ----------
#
# * The Triton documentation's layer normalization tutorial, whose benchmark
#   (GB/s of the backward against PyTorch and Apex, :math:`M = 4096`,
#   float16) this page extends.
#   `triton-lang.org <https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html>`_
#
# * Samuel Williams, Andrew Waterman and David Patterson, "Roofline: An
#   Insightful Visual Performance Model for Multicore Architectures",
#   Communications of the ACM 52(4), 2009 (why bandwidth bounds such kernels).
#
# * NVIDIA, "NVIDIA H100 Tensor Core GPU" and "NVIDIA H200 Tensor Core GPU"
#   datasheets (memory bandwidth 3.35 TB/s for the H100 SXM, 4.8 TB/s for the
#   H200), and the "NVIDIA H100 Tensor Core GPU Architecture" whitepaper, 2022.

