"""Run 112: registers, spills, layouts and barriers of the package's forward and of ``groups`` on this GPU.

    python tools/runs/run112/diagnose.py
"""

import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_kernels import variant  # noqa: E402
from warp_groups import VARIANTS  # noqa: E402

from ln_tutorial import kernels, launch  # noqa: E402

for name, module in [("package", kernels), ("groups", variant("groups", VARIANTS["groups"]))]:
    launch.kernels = module
    launch._forward_launcher.cache_clear()
    for m, n in [(4096, 32768), (16384, 8192), (65536, 1024)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.ones(n, device="cuda", dtype=x.dtype), torch.zeros(n, device="cuda", dtype=x.dtype)
        launch.layer_norm_forward(x, w, b, 1e-5)
        cfg = launch.forward_config(n, 2)
        launcher = launch._forward_launcher(cfg, x.dtype)
        compiled = list(launcher.compiled.values())[-1][-1]
        ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
        print(f"{name} {m}x{n} {tuple(cfg)}: registers {compiled.n_regs}, spills {compiled.n_spills}, "
              f"shared {compiled.metadata.shared} B, bar.sync {ptx.count('bar.sync')}, shfl {ptx.count('shfl.sync')}, "
              f"ld.shared {ptx.count('ld.shared')}, st.shared {ptx.count('st.shared')}")
        for layout in sorted(set(re.findall(r"#ttg\.blocked<\{[^}]*\}>", ttgir))):
            print("   ", layout)
        print("    convert_layout:", ttgir.count("convert_layout"))
