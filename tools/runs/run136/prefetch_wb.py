"""Run 136: the cluster kernel with w and b prefetched into L1 (before its trade, or elsewhere).

    PYTHONPATH=$PWD python tools/runs/run136/prefetch_wb.py [variant names]
"""

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from ln_tutorial import kernels_gluon, launch

PREFETCH = '''
    gl.inline_asm_elementwise("prefetch.global.L1 [$1];\\n mov.u32 $0, 0;", "=r,l",
                              [(W + vectors).to(gl.int64, bitcast=True)], dtype=gl.int32, is_pure=False, pack=1)
    gl.inline_asm_elementwise("prefetch.global.L1 [$1];\\n mov.u32 $0, 0;", "=r,l",
                              [(B + vectors).to(gl.int64, bitcast=True)], dtype=gl.int32, is_pure=False, pack=1)
'''
VECTORS = '''
    per_vector: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [WARPS, 1], [1, 0])
    vector_groups = gl.arange(0, WARPS, layout=gl.SliceLayout(1, per_vector))
    vectors = start + vector_groups[:, None] * GROUP + gl.arange(0, GROUP // VEC, layout=gl.SliceLayout(0, per_vector))[None, :] * VEC
'''
TRADE = "    sum_0, m2_0, sum_1, m2_1 = gl.inline_asm_elementwise(\n        _CLUSTER_TRADE,"
LOADED = "    x = gl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(COMPUTE)\n\n    n_g = gl.minimum(gl.maximum(N - start"
START = "    cols = start + groups[:, None] * GROUP + gl.arange(0, GROUP, layout=gl.SliceLayout(0, tile))[None, :]\n"
VARIANTS = {
    "before the trade": [(TRADE, VECTORS + PREFETCH + TRADE)],
    "before the x loads": [(START, START + VECTORS + PREFETCH)],
    "after the x loads": [(LOADED, LOADED.split("\n\n")[0] + "\n" + VECTORS + PREFETCH + "\n    n_g = gl.minimum(gl.maximum(N - start")],
}
VARIANTS = {name: VARIANTS[name] for name in sys.argv[1:]} if sys.argv[1:] else VARIANTS


def variant(name, replacements):
    source = Path(kernels_gluon.__file__).read_text()
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"kernels_gluon_{name.replace(' ', '_')}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def forward(kernel, x, w, b):
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    launcher = launch._launcher(kernel, cluster=2, BLOCK_M=1, PREFETCH_AHEAD=0, BLOCK_N=65536, COMPUTE=tl.float32,
                                num_warps=32)
    launcher((m,), x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, 1e-5, 0.0)
    return y, mean, rstd


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
kernels = {"package": kernels_gluon.layer_norm_fwd_cluster_kernel}
kernels.update({name: variant(name, r).layer_norm_fwd_cluster_kernel for name, r in VARIANTS.items()})
torch.manual_seed(0)
for round_ in range(3):
    for dtype in (torch.bfloat16, torch.float16):
        x = -2.3 + 0.5 * torch.randn(2048, 65536, device="cuda", dtype=dtype)
        w = torch.rand(65536, device="cuda", dtype=dtype)
        b = torch.rand(65536, device="cuda", dtype=dtype)
        out = forward(kernels["package"], x, w, b)
        moved = 4 * x.numel()
        line = []
        for name, kernel in kernels.items():
            same = all(torch.equal(a, c) for a, c in zip(forward(kernel, x, w, b), out))
            q = do_bench(lambda: forward(kernel, x, w, b), warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
            line.append(f"{name} {moved / (q[1] * 1e-3) / 1e9:.0f} (p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, "
                        f"p80 {moved / (q[2] * 1e-3) / 1e9:.0f}) same bits {same}")
        print(f"round {round_} 2048x65536 {str(dtype)[6:]}: " + "; ".join(line), flush=True)
