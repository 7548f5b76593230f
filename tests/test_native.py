"""The C++ backward node (ln_tutorial.native): taken where the backward is one launch, the same bits
as the Python backward, and the Python backward wherever the node cannot launch by itself."""

import pytest
import torch

from helpers import run_without_interpreter
from ln_tutorial import layer_norm, native

pytestmark = pytest.mark.gpu
NODE, FUNCTION = "LayerNormBackward", "LayerNormFunctionBackward"


def _leaves(m, n, dtype=torch.float16, params="wb", param_dtype=None):
    x = torch.randn(m, n, device="cuda", dtype=dtype).requires_grad_()
    param_dtype = param_dtype or dtype
    w = torch.rand(n, device="cuda", dtype=param_dtype).requires_grad_() if "w" in params else None
    b = torch.randn(n, device="cuda", dtype=param_dtype).requires_grad_() if "b" in params else None
    return x, w, b


def _backward(x, w, b, dy, **kwargs):
    """grad_fn's name, then the gradients of x, w and b (None for a missing parameter)."""
    leaves = [t for t in (x, w, b) if t is not None]
    for t in leaves:
        t.grad = None
    y = layer_norm(x, (x.shape[-1],), w, b, **kwargs)
    y.backward(dy)
    return y.grad_fn.name(), *(None if t is None else t.grad.clone() for t in (x, w, b))


def test_node_is_taken_where_the_backward_is_one_launch(monkeypatch):
    x, w, b = _leaves(256, 512)
    dy = torch.randn_like(x)
    assert _backward(x, w, b, dy)[0] == NODE
    assert _backward(x, w, b, dy, backward_strategy="lock")[0] == FUNCTION
    assert _backward(x, None, None, dy)[0] == FUNCTION  # no dW/dB: no grid-wide sum to make
    big = _leaves(8192, 4096, torch.float32)  # 128 MB: two launches, the GPU decides
    assert _backward(*big, torch.randn_like(big[0]))[0] == FUNCTION
    with torch.no_grad():
        assert layer_norm(x, (512,), w, b).grad_fn is None
    monkeypatch.setattr(native, "ENABLED", False)
    assert _backward(x, w, b, dy)[0] == FUNCTION


@pytest.mark.parametrize(
    "m, n, dtype, params, param_dtype",
    [
        (4096, 1024, torch.float16, "wb", None),  # the tutorial's smallest sweep point
        (512, 8192, torch.bfloat16, "w", None),  # weight only: the bias's kernel arguments are constants
        (37, 24, torch.float32, "b", None),  # bias only, a row shorter than a tile
        (300, 2000, torch.float16, "wb", torch.float32),  # mixed precision: float32 parameters
        (100, 777, torch.float64, "wb", None),  # float64: float64 sums
        (1, 16384, torch.bfloat16, "wb", None),  # one row, 32 KB wide
    ],
)
def test_node_gives_the_python_backwards_bits(monkeypatch, m, n, dtype, params, param_dtype):
    x, w, b = _leaves(m, n, dtype, params, param_dtype)
    dy = torch.randn_like(x)
    _backward(x, w, b, dy)  # the first call compiles the kernels
    launched = native.extension().launches()
    name, *node = _backward(x, w, b, dy)
    assert name == NODE and native.extension().launches() == launched + 1  # launched without Python
    monkeypatch.setattr(native, "ENABLED", False)
    _, *python = _backward(x, w, b, dy)
    for got, want in zip(node, python):
        assert (got is None and want is None) or torch.equal(got, want)


def test_node_launches_first_in_a_fresh_process():
    """The engine's device thread may have no current CUDA context when the node is the first to
    launch there (nothing else ran on it yet): the node must make one current (a fresh process)."""
    code = (
        "import torch\n"
        "from ln_tutorial import layer_norm, native\n"
        "x = torch.randn(64, 256, device='cuda').requires_grad_()\n"
        "w, b = torch.ones(256, device='cuda', requires_grad=True), torch.zeros(256, device='cuda', requires_grad=True)\n"
        "y = layer_norm(x, (256,), w, b)\n"
        "assert y.grad_fn.name() == 'LayerNormBackward'\n"
        "y.backward(torch.ones_like(y))\n"
        "assert native.extension().launches() == 1, native.extension().launches()\n"
        "torch.testing.assert_close(b.grad, torch.full_like(b, 64.0))\n"
    )
    run_without_interpreter(code)


def test_node_hands_other_gradients_to_python(monkeypatch):
    x, w, b = _leaves(1024, 1024)
    dy = torch.randn(1024, 1024, device="cuda", dtype=torch.float16).t()  # not contiguous
    _backward(x, w, b, dy)
    launched = native.extension().launches()
    name, *node = _backward(x, w, b, dy)
    assert name == NODE and native.extension().launches() == launched
    monkeypatch.setattr(native, "ENABLED", False)
    _, *python = _backward(x, w, b, dy)
    assert all(torch.equal(a, c) for a, c in zip(node, python))


def test_node_keeps_autograds_checks():
    x, w, b = _leaves(64, 256)
    y = layer_norm(x, (256,), w, b)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):  # saved tensors freed after a backward
        y.sum().backward()
    y = layer_norm(x, (256,), w, b)
    with torch.no_grad():
        w.add_(1.0)  # a saved tensor changed in place
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_node_in_a_cuda_graph():
    """Forward and backward captured together, as whole-network capture does: replays equal eager."""
    x, w, b = _leaves(2048, 1024)
    dy = torch.randn_like(x)
    _, *eager = _backward(x, w, b, dy)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on the capture's stream, as torch.cuda.graph asks
        for _ in range(2):
            _backward(x, w, b, dy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    for t in (x, w, b):
        t.grad = None
    with torch.cuda.graph(graph):
        layer_norm(x, (1024,), w, b).backward(dy)
    captured = [x.grad, w.grad, b.grad]
    for _ in range(2):
        for t in captured:
            t.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(a, c) for a, c in zip(captured, eager))
