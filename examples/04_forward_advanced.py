"""
Advanced: the forward at full speed
===================================

The forward kernel of the first page holds one row per program. The
package's default forward computes the same function and adds what some
shapes need: several rows per program, launch tables measured per GPU
model, a kernel for rows too wide for the registers, and on a GPU a variant
for particular row lengths. Each section says first which shapes it is for
and what it gains; the `performance notes <../performance.html>`_ have the
measurements. Read this page after the core path, or skip it.
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
    print("No CUDA GPU found: the kernels run on the CPU through Triton's interpreter "
          "(TRITON_INTERPRET=1), on small inputs.")

import triton
import triton.language as tl

import ln_tutorial
from ln_tutorial import _common, dispatch, tuning
from ln_tutorial._common import cache
from ln_tutorial_book import bench, plain

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
torch.manual_seed(0)

# %%
# Several rows per program
# ------------------------
#
# *When it matters:* rows of a few kilobytes and less. One row of 256 float16
# values is 512 bytes, far too little for one program: a GPU hides the
# latency of its memory only if enough bytes are in flight at once. The
# default kernel therefore normalizes ``BLOCK_M`` consecutive rows per
# program, as a ``BLOCK_M`` by ``BLOCK_N`` tile of addresses (``rows[:, None]``
# and ``cols[None, :]``). It also accepts a missing weight or bias (``if W is
# not None`` is decided at compile time, so the bias-free kernel contains no
# bias load) and float64 inputs (``COMPUTE``).

# ln_tutorial:source ln_tutorial.kernels.reciprocal
# ln_tutorial:source ln_tutorial.kernels.layer_norm_fwd_kernel

# %%
# One detail differs from the plain kernel: both sums are multiplied by
# ``inv_n``, the :math:`1/N` that ``reciprocal`` computes once per program. Triton's ``/`` on float32 is a fast division
# that may be off by a couple of units in the last place: harmless almost
# everywhere, but it would make :math:`x - \mathrm{mean}` slightly non-zero
# for a row of one element. ``tl.div_rn`` rounds correctly, so :math:`1/N`
# is exactly 1 when :math:`N = 1`. Calling ``tl.div_rn`` once per row sum
# instead cost bandwidth on the H100: even one scalar per row is not free
# inside a kernel this tight.
#
# The launch table and its model
# ------------------------------
#
# *When it matters:* always; it is the default's choice of ``BLOCK_M`` and
# warps. The tables are data, one file per GPU model in
# ``ln_tutorial/data/tuning/``, each entry with the evidence for it. The H100's
# entries are the fastest configurations a sweep found there,
# keyed by the size of a padded row in bytes (a float32 row of 4096 values and
# a float16 row of 8192 values occupy the same registers and move the same
# memory). A model explains them. A program of ``num_warps`` warps spreads its
# tile over ``32 * num_warps`` threads, each holding
# ``BLOCK_M * BLOCK_N / (32 * num_warps)`` float32 values in registers; its
# bytes in flight are ``BLOCK_M`` rows. A program should move several
# kilobytes, or the memory waits on it; a thread should hold few enough
# values that it does not spill and that the SM runs several programs at
# once. The grid has :math:`M / \mathrm{BLOCK\_M}` programs; divided by the
# programs the SMs hold at once, that is the number of *waves*, and a last
# wave that is mostly empty leaves SMs idle. A GPU without a table gets
# ``tuning.generic_table()``, built from this model. A table
# (``tuning.Table``) maps padded row bytes to a ``ForwardConfig`` and keeps
# the evidence for each entry. The H100's table, computed in float16:

# ln_tutorial:source ln_tutorial.tuning.ForwardConfig

# %%

table = tuning.load("nvidia-h100-80gb-hbm3")
print(f"{'row bytes':>9} {'BLOCK_M':>8} {'warps':>6} {'values per thread':>18} {'bytes per program':>18}")
for row_bytes, cfg in table.forward.items():
    values = cfg.block_m * row_bytes // 2 // (32 * cfg.num_warps)
    print(f"{row_bytes:>9} {cfg.block_m:>8} {cfg.num_warps:>6} {values:>18} {cfg.block_m * row_bytes:>18}")
print("evidence for 8 KB rows:", table.evidence[("forward", 8192)])

# %%
# Rows of 2 KB get eight rows per program, rows of 4 and 8 KB two, and wider
# rows one: every program moves at least 8 KB. More warps mean fewer values
# per thread and more loads in flight, but also more threads that must
# combine their partial sums in each reduction, which is why the warps do not
# simply grow with the row. Rows shorter than 2 KB are packed into tiles of
# about 8 KB, up to 64 rows (``dispatch.forward_config`` returns the
# configuration of this choice):

# ln_tutorial:source ln_tutorial.host.forward_choice

# %%
# Small inputs
# ------------
#
# *When it matters:* calls with less than 32 KB of rows (padded) per SM,
# about 4 MiB on an H100 or an H200: 256 rows of up to 8192 half-precision
# values, or 1024 of 2048 (``host.small_call``). The table's entries are
# measured on thousands of rows, where the memory is busy and each program's
# latency hides behind the other programs' work. With a small input there are
# a few programs per SM, and a call lasts about as long as one program: its
# loads, its two sums and its stores, one after the other. Such a call takes
# one row per program, in one tile, with 4 warps for rows under 4 KB and 8
# for wider ones (``host.forward_choice``). Where there are also fewer than
# four rows per SM,
# rows of up to 16 KB load :math:`w` and :math:`b` together with :math:`x`
# (``PARAMS_FIRST`` in the kernel above), so that their latency passes while
# :math:`x` arrives instead of after the sums. With more rows the early loads
# hold registers that the next rows' :math:`x` needs: 2048 rows of 1024
# values take 2 to 3 % longer with them on both GPUs, and 16384 rows of 8192
# take 6 % longer on the H200, so the table's entries keep them after the sums.
#
# What it gains, measured here: the GPU time of one call of 256 rows in
# float16 (median of the benchmark's timer), with the table's entry and with
# the small-input configuration (at 6144 values the table's entry is the two
# tiles of the next section).

index = torch.cuda.current_device() if ON_GPU else -1
rows, timer = (256, "gpu_us_p50") if ON_GPU else (4, "host_us_p50")


def forward_us(n, cfg):
    def call(x, w, b):
        return dispatch.layer_norm_forward(x, w, b, 1e-5, config=cfg)[0]

    return bench.time_provider(call, "forward", rows, n, torch.float16, device=DEVICE.type)[timer]


print(f"float16, {rows} rows" + ("" if ON_GPU else ", interpreter (host time)"))
print(f"{'N':>6} {'table':>10} {'small':>10}")
for n in (1024, 4096, 6144, 8192):
    table_cfg = dispatch.forward_config(n, 2, index)
    small_cfg = dispatch.forward_path(rows, n, torch.float16, index, ON_GPU).config
    print(f"{n:>6} {forward_us(n, table_cfg):>7.2f} µs {forward_us(n, small_cfg):>7.2f} µs")

# %%
# Padded rows and two tiles
# --------------------------
#
# *When it matters:* half-precision rows whose length is not a power of two,
# on a GPU. A row of 9216 float16 values sits in a tile 16384 wide: 44 % of
# the lanes load nothing yet hold registers. For such rows the table's
# ``forward_padded`` entries come first (fewer warps, one row per program, or
# a loop over steps of 2048 or 4096 values, which idles few lanes).
#
# On an H100, with Triton 3.6 or 3.9 (the versions the package verifies its
# variants on), padded half-precision rows of 4097
# to 12288 values take a variant written in Gluon, Triton's lower-level
# dialect (``ln_tutorial/variants/two_tiles.py``); the H200's table keeps it
# to 10240 values, past which the loop is faster there. It holds a row as two tiles, half
# the padded width and then a power-of-two tail: fewer lanes idle than in one
# tile, and nothing is read twice as in the loop. Each warp sums its own
# columns and the warps trade their sums once. Triton's interpreter cannot
# run Gluon, so on the CPU these rows take the kernels of this page, which
# compute the same function. ``ln_tutorial.use_variants(False)`` (or
# ``LN_TUTORIAL_VARIANTS=0``) sends every GPU call there too.
#
# *What did not pay:* the same one exchange for whole rows of 32 and 64 KB,
# and a row of 65536 half-precision values shared by the two programs of a
# thread-block cluster. Each gained under 5 %, the spread of two recordings
# of the same code, so neither is in the package.
#
# Here is what the default picks for a few row lengths, on this machine:

print(f"{'N':>7} {'dtype':>9} {'BLOCK_M':>8} {'BLOCK_N':>8} {'TAIL_N':>7} {'warps':>6} {'looped':>7}")
for n in (128, 768, 1024, 1536, 2560, 4096, 8192, 9216, 16384, 32768, 65536):
    for dtype in (torch.float16, torch.float32):
        cfg = dispatch.forward_config(n, torch.empty(0, dtype=dtype).element_size(), index)
        tiles = f"{cfg.block_m:>8} {cfg.block_n:>8} {cfg.tail_n:>7}"
        print(f"{n:>7} {str(dtype)[6:]:>9} {tiles} {cfg.num_warps:>6} {cfg.looped!s:>7}")

# %%
# ``TAIL_N`` above zero is the two-tile variant. ``ln_tutorial.explain`` says
# the same for one shape, with the table's reason:

print(ln_tutorial.explain((4096, 9216), torch.float16))

# %%
# The host side
# -------------
#
# *When it matters:* small inputs, where the host's time per call shows. The
# default path's host code (``ln_tutorial/host.py``) allocates the outputs
# and launches the kernel of the configuration on one program per
# ``BLOCK_M`` rows. Triton passes a Python float to a kernel as float32,
# which would round :math:`\epsilon` for float64 inputs, so it splits it into
# its float32 value and the remainder. The arguments go by name, in a dict:
# each kernel takes those of its own signature, so one dict serves every
# kernel. ``run`` is Triton's own ``kernel[grid](...)`` on the default path;
# ``ln_tutorial/dispatch.py`` passes the fast-launch variant instead, which
# skips Triton's general per-call dispatch once a kernel is compiled.

# ln_tutorial:source ln_tutorial._common.split_eps
# ln_tutorial:source ln_tutorial.host.layer_norm_forward
# ln_tutorial:source ln_tutorial.host.forward_arguments
# ln_tutorial:source ln_tutorial.host.forward_call

# %%
# Wide rows
# ---------
#
# *When it matters:* rows of more than 64 KB, and on the H100 and H200 rows
# of 64 KB (on the H200, 32 KB too). A row in registers is fast, but
# registers are finite: an SM has 256 KB of them, shared by all the programs
# it runs, and the kernel converts every value to float32, so a row of 64 KB
# of float16 input already needs 128 KB. Past ``MAX_FUSED_FWD_BYTES`` the
# kernel would spill to slow local memory, so ``forward_config`` returns
# the table's ``forward_looped`` entry, which selects a second kernel. It walks each row in
# steps of ``BLOCK_N`` elements, twice:

# ln_tutorial:source ln_tutorial.kernels.layer_norm_fwd_looped_kernel from "inv_n = reciprocal"

# %%
# The first sweep cannot centre the values (the mean is not known yet), so it
# sums :math:`x - s` and :math:`(x - s)^2` around a *shift* :math:`s`: each
# lane :math:`j` takes its own value in the row's first block. A lane that
# holds :math:`c_j` of the row's values then knows their mean :math:`m_j` and
# their sum of squared deviations :math:`M_j`, and the formula of Chan, Golub
# and LeVeque (1983) joins the lanes:
#
# .. math::
#
#    N \, \mathrm{Var}[x] = \sum_j \left( M_j + c_j \, (m_j - \mathrm{mean})^2 \right) .
#
# Each shift is a value of the row, so :math:`x - s` is small and the squares
# do not cancel as in the plain one-pass formula. No sum has to finish before
# the sweep starts, and ``N`` is a compile-time constant here: the compiler
# knows how many steps a sweep takes and that only the last may be partial,
# so it issues every load of the sweep at once, unmasked. The kernel is
# compiled once per row width, as Inductor's are. A 64 KB row held in
# registers leaves an SM one row's loads in flight at a time, so on the H100
# and H200 the tables loop those rows too (``ln_tutorial.explain`` prints the
# entry's measurement). The second sweep reads the row again to write
# :math:`y`. The row is still in the L2 cache at that point, and the loads
# say so: the first sweep loads with ``eviction_policy="evict_last"`` (keep
# these lines in the cache), the second with ``"evict_first"`` (they will
# not be needed again), so the re-read costs little memory traffic.
#
# A launch configuration can also be passed explicitly, which lets us run the
# looped kernel on a small input, with a step of 128 elements, and compare it
# with the plain kernel of the first page on rows whose offset would defeat
# the plain one-pass formula:

wide = 1000.0 + torch.randn(8, 1000, device=DEVICE)
ones, zeros = torch.ones(1000, device=DEVICE), torch.zeros(1000, device=DEVICE)
looped_cfg = tuning.ForwardConfig(looped=True, block_m=1, block_n=128, num_warps=4)
y_looped, _, _ = dispatch.layer_norm_forward(wide, None, None, 1e-5, config=looped_cfg)
y_plain, _, _ = plain.layer_norm_forward(wide, ones, zeros, 1e-5)
print("looped kernel against the plain kernel, max |difference|:", (y_looped - y_plain).abs().max().item())
assert torch.allclose(y_looped, y_plain, atol=1e-3)  # float32 holds 1000 + x to about 6e-5

# %%
# References
# ----------
#
# * Tony F. Chan, Gene H. Golub and Randall J. LeVeque, "Algorithms for
#   Computing the Sample Variance: Analysis and Recommendations", The American
#   Statistician 37(3), 1983.
#
# * Triton's documentation on Gluon, its lower-level dialect.
