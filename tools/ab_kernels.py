"""A/B of kernel source edits in one lease: variants of ``kernels.py`` timed side by side.

Each variant is ``kernels.py`` with some text replaced, imported as its own module;
the launchers are pointed at it and timed at a few shapes and configurations
(L2 flushed), with the largest difference to the package's own result printed as
a check that the edit computes the same thing:

    python tools/ab_kernels.py EXPERIMENT.py

``EXPERIMENT.py`` defines ``VARIANTS = {name: [(old_text, new_text), ...]}`` and
``CASES = [(mode, M, N, [launch configurations]), ...]``. The experiments behind
docs/performance.md are in the git history next to their logs (tools/runs/).
"""

import importlib.util
import runpy
import sys
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

from ln_tutorial import kernels, launch


def variant(name, replacements):
    """``kernels.py`` with each ``(old, new)`` text replaced, as an importable module."""
    source = Path(kernels.__file__).read_text()
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"kernels_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kernels_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def time_cases(cases, variants, dtype=torch.bfloat16):
    """Time each ``(mode, M, N, configs)`` case with every variant (``dtype``, L2 flushed)."""
    for mode, m, n, configs in cases:
        x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
        w, b = torch.rand(n, device="cuda", dtype=dtype), torch.rand(n, device="cuda", dtype=dtype)
        dy = 0.1 * torch.randn_like(x)
        y_ref, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd) if mode == "backward" else (y_ref,)
        moved = (2 if mode == "forward" else 3) * m * n * x.element_size()
        for name, module in variants.items():
            launch.kernels = module
            launch._forward_launcher.cache_clear()  # the cached launchers hold the previous module's kernels
            launch._backward_plan.cache_clear()
            for c in configs:
                if mode == "forward":
                    run = lambda c=c: launch.layer_norm_forward(x, w, b, 1e-5, config=c)[:1]
                else:
                    run = lambda c=c: launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
                try:
                    out = run()
                    torch.cuda.synchronize()
                except Exception as exc:  # a configuration that does not compile (shared memory, registers)
                    print(f"{mode} {m}x{n} {str(dtype)[6:]} {name:<10} {tuple(c)}: failed: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                err = max(((a.float() - r.float()).abs().max() / r.float().abs().max()).item() for a, r in zip(out, ref))
                do_bench(run, warmup=100, rep=50)
                q = do_bench(run, warmup=25, rep=150, quantiles=[0.2, 0.5, 0.8])
                print(f"{mode} {m}x{n} {str(dtype)[6:]} {name:<10} {tuple(c)}: {moved / (q[1] * 1e-3) / 1e9:6.0f} GB/s "
                      f"(p20 {moved / (q[0] * 1e-3) / 1e9:.0f}, p80 {moved / (q[2] * 1e-3) / 1e9:.0f})"
                      f"  max rel. diff to default {err:.1e}", flush=True)  # fmt: skip
        launch.kernels = kernels
        launch._forward_launcher.cache_clear()
        launch._backward_plan.cache_clear()


if __name__ == "__main__":
    experiment = runpy.run_path(sys.argv[1])
    variants = {name: variant(name, replacements) for name, replacements in experiment["VARIANTS"].items()}
    time_cases(experiment["CASES"], {"package": kernels, **variants})
