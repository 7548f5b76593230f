"""Run 33, second look: the two forward entries that gained about 2 % in exp_tables, timed
again in the opposite order, twice, next to the table's entry (prediction: the gain holds)."""

from ln_tutorial.launch import ForwardConfig as F

VARIANTS = {}
CASES = [
    ("forward", 65536, 1024, [F(False, 8, 1024, 4), F(False, 4, 1024, 4)] * 2),
    ("forward", 16384, 4096, [F(False, 2, 4096, 16), F(False, 1, 4096, 8)] * 2),
    ("forward", 32768, 2048, [F(False, 2, 2048, 8), F(False, 4, 2048, 8), F(False, 4, 2048, 16)]),  # 4 KB rows, the trend
]  # fmt: skip
