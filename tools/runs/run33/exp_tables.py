"""The table's entries for 2 KB and 8 KB rows against their neighbours, once more (run 33).

Prediction: tools/tune.py chose these entries in run 16/17; a second look in
one lease moves none of them by more than the run-to-run spread (about 1 %).
Each case lists the table's entry first.
"""

from ln_tutorial.launch import BackwardConfig as B, ForwardConfig as F

VARIANTS = {}
CASES = [
    ("forward", 65536, 1024, [F(False, 4, 1024, 4), F(False, 8, 1024, 4), F(False, 8, 1024, 8), F(False, 2, 1024, 2),
                              F(False, 4, 1024, 2), F(False, 16, 1024, 8)]),
    ("forward", 16384, 4096, [F(False, 1, 4096, 8), F(False, 1, 4096, 4), F(False, 2, 4096, 8), F(False, 2, 4096, 16),
                              F(False, 1, 4096, 16)]),
    ("backward", 65536, 1024, [B(False, 4, 1024, 4, 1, 4), B(False, 8, 1024, 4, 1, 4), B(False, 4, 1024, 8, 1, 4),
                               B(False, 8, 1024, 8, 1, 3), B(False, 4, 1024, 4, 2, 4), B(False, 2, 1024, 4, 2, 4)]),
    ("backward", 16384, 4096, [B(False, 2, 4096, 8, 1, 3), B(False, 1, 4096, 8, 1, 3), B(False, 2, 4096, 8, 2, 3),
                               B(False, 4, 4096, 8, 1, 3), B(False, 2, 4096, 16, 1, 3), B(False, 1, 4096, 4, 2, 3)]),
]  # fmt: skip
