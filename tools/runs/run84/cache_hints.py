"""Run 84 (tools/ab_kernels.py): cache hints on the fused forward's load of x and store of y.

    python tools/ab_kernels.py tools/runs/run84/cache_hints.py
"""

from ln_tutorial.launch import forward_config

LOAD = "x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(COMPUTE)"
STORE = "tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)"


def hinted(text, hint):
    return text.replace("mask=mask", f"mask=mask, {hint}")


VARIANTS = {
    "st_evict_first": [(STORE, hinted(STORE, 'eviction_policy="evict_first"'))],
    "st_cs": [(STORE, hinted(STORE, 'cache_modifier=".cs"'))],
    "ld_evict_first": [(LOAD, hinted(LOAD, 'eviction_policy="evict_first"'))],
    "both_evict_first": [(LOAD, hinted(LOAD, 'eviction_policy="evict_first"')),
                         (STORE, hinted(STORE, 'eviction_policy="evict_first"'))],
}  # fmt: skip
CASES = [("forward", m, n, [forward_config(n, 2)])
         for m, n in ((16384, 4096), (65536, 1024), (16384, 8192), (4096, 32768), (4096, 2048), (4096, 6144))]
