"""Run 138: the one-exchange kernel with w and b prefetched into L1 once x is loaded (as run 136).

    PYTHONPATH=$PWD python tools/runs/run138/prefetch_one_exchange.py
"""

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

from ln_tutorial import kernels_gluon, launch

LOADED = '''    x = gl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(COMPUTE)

    n_g = gl.minimum(gl.maximum(N - groups * GROUP, 0), GROUP).to(COMPUTE)'''
PREFETCH = '''    x = gl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(COMPUTE)
    per_vector: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [WARPS, 1], [1, 0])
    vectors = gl.minimum(
        gl.arange(0, WARPS, layout=gl.SliceLayout(1, per_vector))[:, None] * GROUP
        + gl.arange(0, GROUP // VEC, layout=gl.SliceLayout(0, per_vector))[None, :] * VEC,
        N - 1,
    )
    if W is not None:
        _prefetch_to_l1(W + vectors)
    if B is not None:
        _prefetch_to_l1(B + vectors)

    n_g = gl.minimum(gl.maximum(N - groups * GROUP, 0), GROUP).to(COMPUTE)'''


def variant():
    source = Path(kernels_gluon.__file__).read_text()
    assert source.count(LOADED) == 1
    path = Path(tempfile.mkdtemp()) / "kernels_gluon_prefetch.py"
    path.write_text(source.replace(LOADED, PREFETCH))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
prefetching = variant()
torch.manual_seed(0)
for round_ in range(3):
    for m, n, dtype in [(4096, 32768, torch.bfloat16), (4096, 32768, torch.float16), (8192, 16384, torch.bfloat16),
                        (4096, 12800, torch.float16), (4096, 15872, torch.float16)]:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.rand(n, device="cuda", dtype=dtype)
        b = torch.rand(n, device="cuda", dtype=dtype)
        cfg = launch.forward_config(n, 2)
        assert cfg.one_exchange and cfg.cluster == 1
        moved = 4 * x.numel()
        line = []
        results = {}
        for name, module in (("package", kernels_gluon), ("prefetch", prefetching)):
            launcher = launch._launcher(module.layer_norm_fwd_one_exchange_kernel, BLOCK_M=1, PREFETCH_AHEAD=0,
                                        BLOCK_N=cfg.block_n, COMPUTE=launch._compute_dtype(dtype),
                                        num_warps=cfg.num_warps)

            def run(launcher=launcher):
                y = torch.empty_like(x)
                mean = torch.empty(m, device="cuda", dtype=torch.float32)
                rstd = torch.empty_like(mean)
                launcher((m,), x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, 1e-5, 0.0)
                return y, mean, rstd

            results[name] = run()
            q = do_bench(run, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
            line.append(f"{name} {moved / (q[1] * 1e-3) / 1e9:.0f} (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, "
                        f"p80 {moved / (q[2] * 1e-3) / 1e9:.0f})")
        same = all(torch.equal(a, c) for a, c in zip(results["package"], results["prefetch"]))
        print(f"round {round_} {m}x{n} {str(dtype)[6:]} {cfg.num_warps} warps: " + "; ".join(line)
              + f"; same bits {same}", flush=True)
