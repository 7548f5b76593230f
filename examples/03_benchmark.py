"""
Layer Normalization, part 3: benchmarks
=======================================

In this tutorial you will measure how fast the layer normalization of the
previous pages is, forward and backward, and compare it with PyTorch and with
other libraries' kernels.

In doing so, you will learn about:

* Measuring a memory-bound kernel in GB/s, and why a copy of the same size
  is the ceiling to compare with.

* Timing GPU code properly: warm-up, inputs kept out of the L2 cache,
  percentiles rather than a single run.

* Reading the results: where the fused kernels win, where they cannot, and
  what the shapes of real language models ask for.

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
# with the package (with where and when they were measured), and runs the
# benchmark's code on a tiny input through the interpreter only to show that
# it works.

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    print("No CUDA GPU found: showing the recorded GPU results; the kernels run\n"
          "on the CPU through Triton's interpreter (TRITON_INTERPRET=1), on small inputs.")

import matplotlib.pyplot as plt

from ln_tutorial_book import bench, plain

ON_GPU = torch.cuda.is_available()

# %%
# What to measure
# ---------------
#
# A layer norm does a handful of operations per element it reads; a modern
# GPU can do hundreds of operations in the time it takes to fetch one element
# from memory. So its speed is set by memory traffic, and the natural unit is
# bandwidth: bytes moved per second. For an input of :math:`M` rows of
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
# Triton tutorial. Counting only the traffic that any implementation must do
# makes the numbers comparable: a kernel that moves more bytes than necessary
# simply scores lower.
#
# The ceiling is what the memory system can do at all, and it depends on the
# size of the transfer: small copies do not keep the memory busy, and copies
# that fit in L2 never reach it. So the ceiling of a shape is a copy of the
# same size as the measured tensors: for the forward, :math:`x` copied into
# :math:`y` (one tensor read, one written, no arithmetic); for the backward,
# an operation with the backward's own traffic, two tensors of that size read
# and one written (``torch.add(x, dy, out=dx)``). Reads and writes are not
# equally cheap, so a copy with one read per write would be the wrong
# ceiling for the backward. Where a recorded run has no copy of the same
# size, the page falls back to the bandwidth of a 1 GB copy measured in the
# same run. A kernel at 100 % of its ceiling moves its necessary bytes as
# fast as the GPU moves any bytes; it cannot do better without moving fewer.
#
# How it is timed
# ---------------
#
# A kernel of a few microseconds is easy to mismeasure. The benchmark warms
# each function up first (compiling, autotuning, allocating), keeps the
# inputs of successive calls out of the L2 cache, so that every call reads
# from memory as in a real model, repeats the measurement, and records the
# 20th, 50th and 80th percentiles; the plots show the median. For the
# backward, the forward is run once and its graph kept, so only the backward
# is timed. ``python -m ln_tutorial_book.bench --help`` and the
# `Benchmarks <../benchmarks.html>`_ page give the details.

# %%
# The competitors, each a function of ``(x, weight, bias)``:
#
# * ``ln_tutorial``: this package, with the deterministic persistent backward;
# * ``ln_tutorial-lock``: the same forward, with the Triton tutorial's
#   lock-based backward (so it appears in the backward plots only);
# * ``torch``: ``torch.nn.functional.layer_norm``, PyTorch's CUDA kernels;
# * ``torch.compile``: the same call compiled by TorchInductor, which generates
#   its own Triton kernels;
# * ``liger``, ``apex``, ``flash-attn``, ``quack``: the layer norms of
#   Liger-Kernel, NVIDIA Apex, FlashAttention's ops and QuACK, when installed.
#
# Two sets of shapes are measured: the Triton tutorial's sweep (float16,
# :math:`M = 4096`, :math:`N` from 1024 to 15872), and shapes of real language
# models in bfloat16 (hidden sizes from 1024 to 65536, with as many rows as a
# large batch of tokens).

sweep = bench.SETS["tutorial"]
print(f"tutorial sweep, float16: M = {sweep[0][0]}, N = {sweep[0][1]}, {sweep[1][1]}, ..., {sweep[-1][1]}"
      f" ({len(sweep)} sizes)")
print("LLM shapes, bfloat16:", ", ".join(f"{m} x {n}" for m, n in bench.SETS["llm"]))

# %%
# The results
# -----------
#
# On a GPU the next cell measures everything it can import (set
# ``LN_TUTORIAL_BENCH_PROVIDERS`` to a comma-separated list to restrict it).
# Without one it loads the recorded results: the current result of each
# provider and shape stored in ``ln_tutorial_book/data/benchmarks/``.

if ON_GPU:
    wanted = os.environ.get("LN_TUTORIAL_BENCH_PROVIDERS")
    rows = bench.measure(providers=wanted.split(",") if wanted else None, progress=False)
    source = "measured live for this page"
    strays = bench.compare(bench.load_results(), rows)
    print(f"against the recorded results: {len(strays)} points outside the tolerance {bench.TOLERANCE}", *strays,
          sep="\n  ")
else:
    rows = bench.shipped_results()
    source = "recorded results shipped with the package"
if rows:
    print(f"{source}:\n  {bench.provenance(rows)}")
else:
    print("No recorded results are shipped with this version of the package yet.\n"
          "On a GPU, `python -m ln_tutorial_book.bench` measures them and records a CSV.")

# %%
# The forward pass, GB/s against the row length :math:`N`:

if rows:
    ax = bench.plot_sweep(rows, "forward")
    ax.set_xlabel("N (values per row)")
    ax.set_title(f"forward, M = {sweep[0][0]}, float16, GB/s from the median time\n{bench.provenance(rows)}", fontsize=9)
    plt.show()
    print(bench.format_table(rows, "forward"))

# %%
# The backward pass:

if rows:
    ax = bench.plot_sweep(rows, "backward")
    ax.set_xlabel("N (values per row)")
    ax.set_title(f"backward, M = {sweep[0][0]}, float16, GB/s from the median time\n{bench.provenance(rows)}", fontsize=9)
    plt.show()
    print(bench.format_table(rows, "backward"))

# %%
# And the shapes of language models, as a percentage of the copy bandwidth
# (100% would be a kernel as fast as a copy):

if rows:
    for mode in ("forward", "backward"):
        print(bench.llm_table(rows, mode))
        print()

# %%
# What the numbers mean
# ---------------------
#
# One number per provider and direction sums the plots up: its GB/s as a
# percentage of the ceiling of each shape, the median over the shapes of the
# tutorial's sweep, and over the language-model shapes.


def ceiling(rows: list[dict], row: dict) -> float:
    """GB/s of the copy of the same size as ``row``'s tensors, else the run's 1 GB copy."""
    for other in rows:
        if other["provider"] == "copy" and (other["mode"], other["M"], other["N"]) == (row["mode"], row["M"], row["N"]):
            return other["gbps_p50"]
    return row["copy_gbps"]


def percent_of_ceiling(rows: list[dict], provider: str, mode: str, shapes: list) -> str:
    values = sorted(100 * r["gbps_p50"] / ceiling(rows, r) for r in rows
                    if (r["provider"], r["mode"]) == (provider, mode) and (r["M"], r["N"]) in shapes
                    and r["gbps_p50"] and ceiling(rows, r))
    return f"{values[len(values) // 2]:.0f} %" if values else "-"


if rows:
    columns = [("forward", "tutorial"), ("backward", "tutorial"), ("forward", "llm"), ("backward", "llm")]
    print(f"{'provider':>17}" + "".join(f"{f'{mode}, {name}':>20}" for mode, name in columns))
    for provider in dict.fromkeys(r["provider"] for r in rows if r["provider"] != "copy"):
        print(f"{provider:>17}" + "".join(f"{percent_of_ceiling(rows, provider, mode, bench.SETS[name]):>20}"
                                          for mode, name in columns))

# %%
# Read the table, and the plots, against the ceiling rather than against each
# other:
#
# * **The forward** of a fused kernel reads :math:`x` once and writes
#   :math:`y` once, like the copy, so the best implementations come close to
#   100 %. The gap that remains is the cost of the reductions, which make
#   every program wait for a whole row before it can write.
#
# * **The backward** is where the implementations differ most. Besides
#   :math:`\nabla_x` it must produce :math:`\nabla_w` and :math:`\nabla_b`, a
#   reduction over all rows. The lock-based strategy (``ln_tutorial-lock``)
#   reads and writes a partial row under a lock for every input row; the
#   lock-free strategy writes one partial row per program, so its traffic
#   stays close to the necessary :math:`3MNs` bytes. Implementations that
#   compute :math:`\nabla_w` and :math:`\nabla_b` in a separate pass over
#   :math:`x` and :math:`\nabla_y` move about :math:`5MNs` bytes and can reach
#   at most about 60 % of the ceiling.
#
# * **Short rows** (the left of the sweep) are the hard case for everyone: a
#   row of 1024 float16 values is 2 KB, too little work per program unless a
#   program takes several rows, and the time of the host shows. Before every
#   timed call the GPU must have been handed the work; a provider whose Python
#   takes longer than its kernels leaves the GPU waiting, and the wait counts.
#
# * **Wide rows** (hidden sizes of 32768 and more, in the language-model
#   columns) no longer fit in registers; `the forward <04_forward_advanced.html>`_
#   and `the backward at full speed <05_backward_advanced.html>`_ show what the
#   default does about them.
#
# The numbers depend on the GPU, the driver and the versions of PyTorch and
# Triton, which is why each plot carries its provenance. The
# `Benchmarks <../benchmarks.html>`_ page lists every recorded run, and the
# `performance notes <../performance.html>`_ explain the tuning behind them.
#
# A tiny run on this machine
# --------------------------
#
# Timing the interpreter would say nothing about a GPU, but the benchmark's
# providers can still be run, to show that the code path this page uses
# works. Here the package's two backward strategies, the plain kernels of the
# first two pages and PyTorch are called exactly as the benchmark calls them,
# on a small input, and must agree:

providers = bench.available_providers(["ln_tutorial", "ln_tutorial-lock", "torch"])
providers["plain"] = plain.layer_norm
device = "cuda" if ON_GPU else "cpu"
m, n = (64, 512) if not ON_GPU else (4096, 4096)
x = (-2.3 + 0.5 * torch.randn(m, n, device=device)).requires_grad_(True)
weight = torch.rand(n, device=device, requires_grad=True)
bias = torch.rand(n, device=device, requires_grad=True)
dy = 0.1 * torch.randn(m, n, device=device)
results = {}
for name, fn in providers.items():
    y = fn(x, weight, bias)
    y.backward(dy)
    results[name] = [t.detach().clone() for t in (y, x.grad, weight.grad, bias.grad)]
    x.grad = weight.grad = bias.grad = None
for name, tensors in results.items():
    diffs = [(a - b).abs().max().item() for a, b in zip(tensors, results["torch"])]
    print(f"{name:>17}: max |difference to torch| in y, dx, dw, db: " + ", ".join(f"{d:.1e}" for d in diffs))
    assert all(d < 1e-3 for d in diffs)

# %%
# To measure on your own GPU and record the results with their provenance:
#
# .. code-block:: bash
#
#    python -m ln_tutorial_book.bench --help                # where it records, and the options
#    python -m ln_tutorial_book.bench                       # everything
#    python -m ln_tutorial_book.bench --modes backward --providers ln_tutorial torch --no-save
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
# * NVIDIA, "NVIDIA H100 Tensor Core GPU Architecture" whitepaper, 2022 (the
#   memory system behind the recorded results).
#
# * Jimmy Lei Ba, Jamie Ryan Kiros and Geoffrey E. Hinton, "Layer
#   Normalization", arXiv:1607.06450, 2016.
#   `arxiv.org/abs/1607.06450 <https://arxiv.org/abs/1607.06450>`_
