"""Run 139, second part: the one-exchange kernel with a row in two tiles (a power of two and a
power-of-two tail) at padded half-precision rows, against the package's choice and one padded tile.

    PYTHONPATH=$PWD python tools/runs/run139/two_tiles.py
"""

import torch
import triton
from triton.testing import do_bench

from ln_tutorial import launch
from ln_tutorial.launch import ForwardConfig, forward_config, layer_norm_forward

SWEEP = (1536, 2560, 3072, 3584, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8704, 9216, 9728, 10240, 10752, 11264,
         11776)  # fmt: skip
SIZES = [(4096, n) for n in SWEEP] + [(16384, n) for n in (3072, 5120, 9216, 10240, 11264)]


def variants(n):
    block = launch.next_power_of_2(n)
    head = block // 2
    tail = launch.next_power_of_2(n - head)
    out = {"package": forward_config(n, 2)}
    if block >= 16384:
        out["one tile 16w"] = ForwardConfig(False, 1, block, 16, one_exchange=True)
    for warps in (4, 8, 16):
        if head // warps >= 256 and tail >= 32 * warps and head // warps <= 1024:
            out[f"two tiles {warps}w"] = ForwardConfig(False, 1, head, warps, one_exchange=True, tail_n=tail)
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
        q = do_bench(lambda: y_copy.copy_(x), warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])
        line = [f"copy {gbps(q[1], moved):.0f}"]
        if round_ == 0:
            exact = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
            mean_exact, var_exact = x.double().mean(1), x.double().var(1, unbiased=False)
        for name, cfg in variants(n).items():
            q = do_bench(lambda: layer_norm_forward(x, w, b, 1e-5, cfg), warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])
            text = f"{name} {gbps(q[1], moved):.0f} ({gbps(q[2], moved):.0f}-{gbps(q[0], moved):.0f})"
            if round_ == 0:
                y, mean, rstd = layer_norm_forward(x, w, b, 1e-5, cfg)
                again = layer_norm_forward(x, w, b, 1e-5, cfg)
                same = all(torch.equal(a, c) for a, c in zip((y, mean, rstd), again))
                text += (f" y err {(y.double() - exact).abs().max().item():.2e}"
                         f" mean err {(mean.double() - mean_exact).abs().max().item():.1e}"
                         f" rstd rel err {(rstd.double() * (var_exact + 1e-5).sqrt() - 1).abs().max().item():.1e}"
                         f" same bits {same}")  # fmt: skip
            line.append(text)
        print(f"round {round_} {m}x{n} {str(dtype)[6:]}: " + "; ".join(line), flush=True)
