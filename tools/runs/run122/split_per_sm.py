"""Run 122: more columns per SM for the split backward (three or five programs per SM) (see PREDICTION.md).

    python tools/runs/run122/split_per_sm.py

Candidates timed at the launcher (``launch.layer_norm_backward`` with a given
configuration), L2 flushed, three rounds, candidates interleaved within each shape.
"""

import torch
from triton.testing import do_bench

from ln_tutorial import bench, launch

CANDIDATES = {  # name: (columns per program, warps, programs per SM)
    "2048/4w/4": (2048, 4, 4),
    "4096/8w/2": (4096, 8, 2),
    "4096/4w/3": (4096, 4, 3),
    "2048/4w/5": (2048, 4, 5),
    "4096/4w/4": (4096, 4, 4),
}
SHAPES = [(8192, 16384, torch.bfloat16), (4096, 32768, torch.bfloat16), (2048, 65536, torch.bfloat16)]

if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    copy = bench.copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    for round_ in range(3):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n, dtype in SHAPES:
            x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
            w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
            dy = 0.1 * torch.randn_like(x)
            _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
            print(f"{m}x{n} {str(dtype)[6:]}: package's choice {tuple(launch.backward_config(n, x.element_size()))}")
            for name, (block_n, warps, per_sm) in CANDIDATES.items():
                cfg = launch.BackwardConfig(False, 1, block_n, warps, per_sm, split=True)
                registers = launch._split_registers(cfg)
                run = lambda cfg=cfg: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg)  # noqa: E731
                try:
                    run()
                    torch.cuda.synchronize()
                except RuntimeError as error:
                    print(f"  {name}: {str(error)[-70:]}", flush=True)
                    continue
                q = do_bench(run, warmup=50, rep=200, quantiles=[0.2, 0.5, 0.8])
                gbps = [3 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 for ms in q]
                plan = launch._backward_plan(m, n, dtype, x.get_device(), "deterministic", cfg, True, True)
                compiled = list(plan.main.compiled.values())[-1][5]
                print(f"  {name} (cap {registers}, used {compiled.n_regs}, spills {compiled.n_spills}): {gbps[1]:.0f} GB/s ({100 * gbps[1] / copy:.1f} % of copy; p20 {gbps[0]:.0f}, "
                      f"p80 {gbps[2]:.0f})", flush=True)  # fmt: skip
