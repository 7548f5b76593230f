"""The plain kernels of the core path (ln_tutorial_book/plain.py), and the same file run as the standalone script."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ON_GPU
from helpers import assert_as_accurate_as_torch
from ln_tutorial_book import plain
from ln_tutorial_book.reference import layer_norm_backward_reference, layer_norm_reference

PLAIN = Path(plain.__file__)
SHAPES = [(37, 300), (2, 3, 64)] + ([(4096, 3000), (300, 16384)] if ON_GPU else [])  # N = 1: its own test


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_backward_are_as_accurate_as_torch(device, shape, dtype):
    n = shape[-1]
    x = (-2.3 + 0.5 * torch.randn(shape, device=device)).to(dtype)
    w = torch.rand(n, device=device).to(dtype)
    b = torch.rand(n, device=device).to(dtype)
    dy = (0.1 * torch.randn(shape, device=device)).to(dtype)
    if n * x.element_size() > plain.MAX_ROW_BYTES:  # float32 rows of 16384: past the plain kernel's registers
        with pytest.raises(ValueError, match="do not fit in registers"):
            plain.layer_norm(x, w, b)
        return
    results = {}
    for name, fn in (("ours", lambda *a: plain.layer_norm(*a)),
                     ("torch", lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b))):
        leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
        y = fn(*leaves)
        y.backward(dy)
        results[name] = [y] + [t.grad for t in leaves]
    exact_y = layer_norm_reference(x, (n,), w, b)
    exact_grads = layer_norm_backward_reference(dy.reshape(-1, n), x.reshape(-1, n), w)
    exact = [exact_y, exact_grads[0].reshape(shape), exact_grads[1], exact_grads[2]]
    for i, name in enumerate(("y", "dx", "dw", "db")):
        assert_as_accurate_as_torch(name, results["ours"][i], results["torch"][i].to(dtype), exact[i], dtype)


def test_n1_gradients_are_zero(device):
    """x̂ = 0 for N = 1, so dx = dw = 0 up to rounding (the relative-error test cannot scale to 0)."""
    x, w, b = (torch.randn(shape, device=device, requires_grad=True) for shape in ((5, 1), (1,), (1,)))
    dy = torch.randn(5, 1, device=device)
    plain.layer_norm(x, w, b).backward(dy)
    # dx = (w·dy - c2)·rstd: a fused multiply-add may keep w·dy unrounded, leaving one
    # rounding error of w·dy, scaled by rstd = 1/sqrt(eps).
    ulp = torch.finfo(torch.float32).eps * (w * dy).abs().max() / 1e-5**0.5
    assert x.grad.abs().max() <= 2 * ulp and w.grad.abs().max() <= 2 * ulp
    torch.testing.assert_close(b.grad, dy.sum(0))


def test_backward_is_the_same_bit_for_bit_on_every_run(device):
    x = torch.randn(257, 192, device=device, requires_grad=True)
    w = torch.rand(192, device=device, requires_grad=True)
    b = torch.rand(192, device=device, requires_grad=True)
    dy = torch.randn(257, 192, device=device)
    runs = [torch.autograd.grad(plain.layer_norm(x, w, b), (x, w, b), dy) for _ in range(3)]
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0]))


def test_launch_config_follows_its_model():
    assert plain.launch_config(300, 2) == (512, 2)  # 8 values a thread
    assert plain.launch_config(4096, 4) == (4096, 16)
    assert plain.launch_config(16384, 2) == (16384, 16)  # the largest row: 32 values a thread
    with pytest.raises(ValueError, match="do not fit"):
        plain.launch_config(16385, 2)
    with pytest.raises(ValueError, match="do not fit"):
        plain.launch_config(8193, 4)


def test_the_script_imports_only_torch_triton_matplotlib_and_the_standard_library():
    allowed = {"torch", "triton", "matplotlib", "os", "time", "__future__"}
    for node in ast.walk(ast.parse(PLAIN.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module]
        else:
            continue
        assert {n.split(".")[0] for n in names} <= allowed, names
    assert len(PLAIN.read_text(encoding="utf-8").splitlines()) <= 400


def test_the_script_runs_on_its_own(tmp_path):
    """Copied out of the package, it checks itself against torch and writes its plot."""
    pytest.importorskip("matplotlib")
    script = tmp_path / "layer_norm_triton.py"
    shutil.copy(PLAIN, script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MPLBACKEND"] = "Agg"
    result = subprocess.run([sys.executable, "-I", script.name], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "forward and backward match torch" in result.stdout
    assert (tmp_path / "layer_norm_triton.png").stat().st_size > 0
