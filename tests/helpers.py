"""Test helpers: accuracy comparisons (about as accurate as PyTorch in the same dtype), module loading."""

import importlib.util
import os
import subprocess
import sys

import torch

from conftest import FLOOR
from ln_tutorial_book.reference import relative_error


def assert_as_accurate_as_torch(name, ours, theirs, exact, dtype):
    """Pass when our error against ``exact`` is at most 2x PyTorch's plus a floor.

    ``ours`` and ``theirs`` are computed in the same dtype; ``exact`` in float64.
    """
    assert ours.dtype == theirs.dtype, f"{name}: dtype {ours.dtype}, torch gives {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{name}: shape {tuple(ours.shape)}, torch gives {tuple(theirs.shape)}"
    assert torch.isfinite(ours).all(), f"{name}: non-finite values"
    ours_err = relative_error(ours.detach(), exact.detach())
    torch_err = relative_error(theirs.detach(), exact.detach())
    bound = 2 * torch_err + FLOOR[dtype]
    assert ours_err <= bound, f"{name}: error {ours_err:.3e} > {bound:.3e} (torch: {torch_err:.3e})"


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def forward_backward(fn, x, normalized_shape, weight, bias, dy, **kwargs):
    """Run ``fn`` (a layer_norm) forward and backward on fresh leaves; return y and the grads."""
    x = leaf(x)
    weight = None if weight is None else leaf(weight)
    bias = None if bias is None else leaf(bias)
    y = fn(x, normalized_shape, weight, bias, **kwargs)
    y.backward(dy)
    return y, x.grad, None if weight is None else weight.grad, None if bias is None else bias.grad


def check_against_torch(x, normalized_shape, weight=None, bias=None, dy=None, strategy="deterministic"):
    """Compare y, dx, dw, db of ln_tutorial and torch (same dtypes) with a float64 reference."""
    import torch.nn.functional as F

    from ln_tutorial import layer_norm
    from ln_tutorial_book.reference import layer_norm_reference

    if dy is None:
        dy = torch.randn_like(x)
    ours = forward_backward(layer_norm, x, normalized_shape, weight, bias, dy, backward_strategy=strategy)
    theirs = forward_backward(F.layer_norm, x, normalized_shape, weight, bias, dy)
    as64 = [None if t is None else t.double() for t in (weight, bias)]
    exact = forward_backward(layer_norm_reference, x.double(), normalized_shape, *as64, dy.double())
    for name, o, t, e in zip(("y", "dx", "dw", "db"), ours, theirs, exact):
        if e is None:
            assert o is None, f"{name}: expected no gradient"
            continue
        assert_as_accurate_as_torch(name, o, t, e, x.dtype)
    return ours


def load_module(name, path):
    """Import a file that is not on the path (docs/build.py, a Sphinx extension) as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_without_interpreter(code: str) -> None:
    """Run ``code`` in a fresh Python without TRITON_INTERPRET (read once, at import); fail if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
