"""Run 139: the one-exchange Gluon kernel at padded half-precision rows, against the package's choice.

    PYTHONPATH=$PWD python tools/runs/run139/padded_configs.py
"""

import torch
import triton
from triton.testing import do_bench

from ln_tutorial import launch
from ln_tutorial.launch import ForwardConfig, forward_config, layer_norm_forward

SIZES = [(4096, n) for n in (4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192, 8704, 9216, 9728, 10240, 10752,
                             11264, 11776, 12288)] + [(16384, 5120), (16384, 10240)]


def variants(n):
    block = launch.next_power_of_2(n)
    out = {"package": forward_config(n, 2)}
    for warps in (8, 16, 32):
        if block // warps >= 256:
            out[f"one-exchange {warps}w"] = ForwardConfig(False, 1, block, warps, one_exchange=True)
    return out


def gbps(ms, moved):
    return moved / (ms * 1e-3) / 1e9


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
torch.manual_seed(0)
for round_ in range(3):
    for m, n in SIZES:
        dtype = torch.float16 if m == 4096 else torch.bfloat16
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.rand(n, device="cuda", dtype=dtype)
        b = torch.rand(n, device="cuda", dtype=dtype)
        moved = 2 * x.numel() * x.element_size()
        y_copy = torch.empty_like(x)
        line = []
        q = do_bench(lambda: y_copy.copy_(x), warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])
        line.append(f"copy {gbps(q[1], moved):.0f}")
        if round_ == 0:
            exact = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        for name, cfg in variants(n).items():
            q = do_bench(lambda: layer_norm_forward(x, w, b, 1e-5, cfg), warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])
            text = f"{name} {gbps(q[1], moved):.0f} ({gbps(q[2], moved):.0f}-{gbps(q[0], moved):.0f})"
            if round_ == 0:
                text += f" err {(layer_norm_forward(x, w, b, 1e-5, cfg)[0].double() - exact).abs().max().item():.2e}"
            line.append(text)
        print(f"round {round_} {m}x{n} {str(dtype)[6:]} [{forward_config(n, 2)}]: " + "; ".join(line), flush=True)
