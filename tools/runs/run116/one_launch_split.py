"""Run 116: the split backward in one launch, its records never zero-filled (see PREDICTION.md).

    python tools/runs/run116/one_launch_split.py

``base``: the package as of the commit before the change (a copy in base_ln_tutorial/,
not committed); ``new``: the working tree's package. Both timed at the launcher
(``launch.layer_norm_backward``), L2 flushed, alternating, three rounds; then the new
package end to end as the benchmark times it. Checks: dx, dW, dB of the two agree to
float32 rounding, and the new one gives the same bits on every call, also after
calls of other sizes on the same stream and after a forced re-zeroing of its records.
"""

import importlib
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
base = importlib.import_module("base_ln_tutorial.launch")
from ln_tutorial import bench, launch  # noqa: E402

SHAPES = [(8192, 16384), (4096, 32768), (2048, 65536), (4096, 12800), (4096, 15872)]


def inputs(m, n, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
    w = torch.rand(n, device="cuda", dtype=dtype, generator=g)
    b = torch.rand(n, device="cuda", dtype=dtype, generator=g)
    dy = 0.1 * torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    return dy, x, w, b, mean, rstd


def check():
    for m, n in [(8192, 16384), (300, 40000), (2048, 65536)]:
        args = inputs(m, n)
        old = base.layer_norm_backward(*args)
        first = launch.layer_norm_backward(*args)
        for other in [(17, 20000), (5000, 33000)]:  # other sizes on the same stream between two calls
            launch.layer_norm_backward(*inputs(*other, seed=1))
        again = launch.layer_norm_backward(*args)
        launch.SPLIT_RECORDS_LIFETIME = 1  # force the records to be zeroed again at the next call
        zeroed = launch.layer_norm_backward(*args)
        launch.SPLIT_RECORDS_LIFETIME = 1 << 30
        diffs = [((a.float() - o.float()).abs().max() / o.float().abs().max()).item() for a, o in zip(first, old)]
        same = all(torch.equal(a, f) and torch.equal(z, f) for a, z, f in zip(again, zeroed, first))
        print(f"check {m}x{n}: max rel. diff to base dx {diffs[0]:.1e} dw {diffs[1]:.1e} db {diffs[2]:.1e}; "
              f"same bits on later calls: {same}", flush=True)  # fmt: skip


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    check()
    copy = bench.copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    for round_ in range(3):
        print(f"--- round {round_ + 1}", flush=True)
        for m, n in SHAPES:
            args = inputs(m, n)
            for name, module in (("base", base), ("new", launch)):
                run = lambda module=module: module.layer_norm_backward(*args)  # noqa: E731
                run()
                q = do_bench(run, warmup=50, rep=200, quantiles=[0.2, 0.5, 0.8])
                gbps = [3 * m * n * 2 / (ms * 1e-3) / 1e9 for ms in q]
                print(f"{m}x{n} {name}: {gbps[1]:.0f} GB/s ({100 * gbps[1] / copy:.1f} % of copy; p20 {gbps[0]:.0f}, "
                      f"p80 {gbps[2]:.0f})", flush=True)  # fmt: skip
    print("--- end to end, new package, as the benchmark times it", flush=True)
    provider = bench.available_providers(["ln_tutorial"])["ln_tutorial"]
    for m, n in SHAPES:
        p20, p50, p80 = bench.time_provider(provider, "backward", m, n, torch.bfloat16)
        print(f"{m}x{n} end to end: {p50:.0f} GB/s ({100 * p50 / copy:.1f} % of copy; p20 {p20:.0f}, p80 {p80:.0f})",
              flush=True)  # fmt: skip
