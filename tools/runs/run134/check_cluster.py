"""Run 134: the cluster kernel as the package launches it, against the looped kernel (at the launcher
and end to end through ``layer_norm``), in one lease with the GPU suite.

    PYTHONPATH=$PWD python tools/runs/run134/check_cluster.py
"""

import torch
import triton
from triton.testing import do_bench

from ln_tutorial import bench, launch, layer_norm

print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
print(f"copy {bench.copy_bandwidth():.0f} GB/s (1 GB)", flush=True)
torch.manual_seed(0)
for round_ in range(3):
    for m, n, dtype in [(2048, 65536, torch.bfloat16), (2048, 65536, torch.float16), (4096, 40000, torch.bfloat16)]:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.rand(n, device="cuda", dtype=dtype)
        b = torch.rand(n, device="cuda", dtype=dtype)
        moved = 2 * x.numel() * x.element_size()
        runs = {
            "cluster (package)": lambda: launch.layer_norm_forward(x, w, b, 1e-5),
            "looped": lambda: launch.layer_norm_forward(x, w, b, 1e-5, config=launch.FORWARD_LOOPED),
            "layer_norm end to end": lambda: layer_norm(x, (n,), w, b),
        }
        line = []
        for name, fn in runs.items():
            q = do_bench(fn, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
            line.append(f"{name} {moved / (q[1] * 1e-3) / 1e9:.0f} (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, "
                        f"p80 {moved / (q[2] * 1e-3) / 1e9:.0f})")
        print(f"round {round_} {m}x{n} {str(dtype)[6:]} {launch.forward_config(n, 2)}: " + ", ".join(line), flush=True)
