"""Launch configurations for the shapes furthest from the targets (run 28).

Predictions: a fused forward over a whole 128 KB row (65536 bf16) spills (64 fp32
values per thread at 32 warps is the whole register budget): slower than the looped
kernel (82 % end to end). Other loop steps and warps: within a few percent. The
wide backward is bound by 5 units of traffic (at most 60 % of copy): other
configurations move it by a few percent at most. The current tables' entries come
first in each list; they are also the kernel-level numbers (launcher called
directly, no autograd) to set against the end-to-end benchmark.
"""

from ln_tutorial.launch import BackwardConfig as B, ForwardConfig as F

VARIANTS = {}
CASES = [
    ("forward", 2048, 65536, [F(True, 1, 16384, 32), F(False, 1, 65536, 32), F(True, 1, 8192, 16),
                              F(True, 1, 32768, 32), F(True, 1, 16384, 16)]),
    ("forward", 4096, 32768, [F(False, 1, 32768, 32), F(False, 1, 32768, 16), F(True, 1, 16384, 32)]),
    ("forward", 16384, 4096, [F(False, 1, 4096, 8)]),
    ("forward", 65536, 1024, [F(False, 4, 1024, 4)]),
    ("backward", 16384, 4096, [B(False, 2, 4096, 8, 1, 3)]),
    ("backward", 16384, 8192, [B(False, 1, 8192, 16, 1, 3)]),
    ("backward", 8192, 16384, [B(False, 1, 16384, 8, 1, 1, True), B(False, 1, 16384, 16, 1, 1, True),
                               B(False, 1, 16384, 8, 1, 2, True)]),
    ("backward", 4096, 32768, [B(True, 16, 8192, 16, 1, 3), B(True, 16, 4096, 8, 1, 3), B(True, 16, 16384, 32, 1, 3),
                               B(True, 32, 8192, 16, 1, 3), B(True, 8, 8192, 16, 1, 4)]),
    ("backward", 2048, 65536, [B(True, 16, 8192, 16, 1, 3), B(True, 16, 16384, 32, 1, 3), B(True, 16, 4096, 8, 1, 3)]),
    ("backward", 65536, 1024, [B(False, 4, 1024, 4, 1, 4)]),
]  # fmt: skip
