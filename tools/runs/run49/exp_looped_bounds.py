"""Looped forward at 2048 x 65536: what bounds it? (run 49; both variants compute wrong results on purpose)

The looped forward reaches 82 % of copy end to end (2448 GB/s at the launcher).
Two upper bounds, each variant dropping one part of the work:
"no_reread": the second sweep does not read x again (it normalizes zeros): if
this is much faster, holding part of the row in registers would pay; if not,
the re-read from L2 is not what costs.
"one_sweep": no first sweep (statistics from the first block alone): one read and one write per row,
the best any design with this grid and loop can do.
Prediction: no_reread ~2600 GB/s, one_sweep ~2800 GB/s (the fused kernel's 93 %).
"""

from ln_tutorial.launch import ForwardConfig as F

SECOND_SWEEP_LOAD = (
    '        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(COMPUTE)\n'
)
FIRST_SWEEP = """    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        # evict_last: keep the row in L2 for the second sweep"""
VARIANTS = {
    "no_reread": [(SECOND_SWEEP_LOAD, "        x = tl.zeros([BLOCK_N], dtype=COMPUTE)\n")],
    "one_sweep": [(FIRST_SWEEP, """    for start in range(0, 0, BLOCK_N):
        mask = start + cols < N""")],
}
CASES = [("forward", 2048, 65536, [F(True, 1, 16384, 32), F(True, 1, 8192, 16)])]
