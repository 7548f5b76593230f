"""Does the data change the speed? The same kernels on the tutorial's data and on plain randn."""
import torch
from triton.testing import do_bench
from ln_tutorial import launch
for mode, m, n in [("forward", 16384, 8192), ("backward", 8192, 16384), ("backward", 16384, 4096)]:
    for name, make_x, make_w in [("randn x, randn w", lambda: torch.randn(m, n), lambda: torch.randn(n)),
                                 ("tutorial x, rand w", lambda: -2.3 + 0.5 * torch.randn(m, n), lambda: torch.rand(n)),
                                 ("randn x, rand w", lambda: torch.randn(m, n), lambda: torch.rand(n)),
                                 ("tutorial x, randn w", lambda: -2.3 + 0.5 * torch.randn(m, n), lambda: torch.randn(n))]:
        x = make_x().to("cuda", torch.bfloat16); w = make_w().to("cuda", torch.bfloat16); b = make_w().to("cuda", torch.bfloat16)
        if mode == "forward":
            fn = lambda: launch.layer_norm_forward(x, w, b, 1e-5)
        else:
            dy = (0.1 * torch.randn(m, n)).to("cuda", torch.bfloat16)
            _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
            fn = lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd)
        ms = do_bench(fn, warmup=100, return_mode="median")
        print(f"{mode} {m}x{n} {name:<22} {(2 if mode=='forward' else 3)*m*n*2/(ms*1e-3)/1e9:7.0f} GB/s", flush=True)
