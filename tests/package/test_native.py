"""The C++ extension (ln_tutorial.native): its forward takes the common call and gives the Python
path's bits; its backward node is taken where rows fit in registers (one launch or two), gives the
Python backward's bits, and hands everything it cannot launch by itself back to Python."""

import pytest
import torch

from helpers import run_without_interpreter
from ln_tutorial import dispatch, layer_norm
from ln_tutorial.variants import cluster, native

pytestmark = pytest.mark.gpu
NODE, FUNCTION = "LayerNormBackward", "LayerNormFunctionBackward"


def _launches():
    """Kernels launched from C++ so far: (forwards, backwards)."""
    return native.extension().launches()


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


def test_node_is_taken_where_rows_fit_in_registers(monkeypatch):
    x, w, b = _leaves(256, 512)
    dy = torch.randn_like(x)
    assert _backward(x, w, b, dy)[0] == NODE
    assert _backward(x, w, b, dy, backward_strategy="lock")[0] == FUNCTION
    big = _leaves(8192, 4096, torch.float32)  # 128 MB: two launches, both from the node
    assert _backward(*big, torch.randn_like(big[0]))[0] == NODE
    wide = _leaves(4, 40000)  # 80 KB rows: programs that share each row, launched by the node too
    launched = _launches()[1]
    with monkeypatch.context() as patch:  # (where a GPU's table trades such rows in a cluster, Python launches them)
        patch.setattr(cluster, "takes", lambda *args: False)
        assert _backward(*wide, torch.randn_like(wide[0]))[0] == NODE and _launches()[1] == launched + 1
    clustered = _leaves(4, 40001, torch.bfloat16)  # a kind of call the node has not been asked about yet
    if dispatch.backward_config(40001, 2, 0).cluster:
        assert _backward(*clustered, torch.randn_like(clustered[0]))[0] == NODE
        assert _launches()[1] == launched + 1  # the cluster kernel, launched from Python: still the wide call's one
    assert _backward(x, None, None, dy)[0] == NODE  # no dW/dB: the node hands the backward to Python
    widest = _leaves(4, 5000, torch.float64)  # 64 KB rows of float64: the looped kernels, from Python
    assert _backward(*widest, torch.randn_like(widest[0]))[0] == NODE
    assert _launches()[1] == launched + 1
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
        (1, 8192, torch.float32, "wb", None),  # one row, 32 KB wide: the widest row of one tile
        (4096, 9216, torch.float16, "wb", None),  # 72 MB: two launches (persistent kernel, then the sums)
        (8192, 4096, torch.float32, "w", None),  # 128 MB, weight only: two launches
    ],
)
def test_node_gives_the_python_backwards_bits(monkeypatch, m, n, dtype, params, param_dtype):
    x, w, b = _leaves(m, n, dtype, params, param_dtype)
    dy = torch.randn_like(x)
    _backward(x, w, b, dy)  # the first call compiles the kernels
    launched = _launches()
    name, *node = _backward(x, w, b, dy)
    assert name == NODE and _launches() == (launched[0] + 1, launched[1] + 1)  # launched without Python
    monkeypatch.setattr(native, "ENABLED", False)
    _, *python = _backward(x, w, b, dy)
    for got, want in zip(node, python):
        assert (got is None and want is None) or torch.equal(got, want)


def test_node_launches_first_in_a_fresh_process():
    """The engine's device thread may have no current CUDA context when the node is the first to
    launch there (nothing else ran on it yet): the node must make one current (a fresh process)."""
    code = (
        "import torch\n"
        "from ln_tutorial import layer_norm\nfrom ln_tutorial.variants import native\n"
        "x = torch.randn(64, 256, device='cuda').requires_grad_()\n"
        "w, b = torch.ones(256, device='cuda', requires_grad=True), torch.zeros(256, device='cuda', requires_grad=True)\n"
        "y = layer_norm(x, (256,), w, b)\n"
        "assert y.grad_fn.name() == 'LayerNormBackward'\n"
        "y.backward(torch.ones_like(y))\n"
        "assert native.extension().launches() == (1, 1), native.extension().launches()\n"
        "torch.testing.assert_close(b.grad, torch.full_like(b, 64.0))\n"
    )
    run_without_interpreter(code)


def test_node_hands_other_gradients_to_python(monkeypatch):
    x, w, b = _leaves(1024, 1024)
    dy = torch.randn(1024, 1024, device="cuda", dtype=torch.float16).t()  # not contiguous
    _backward(x, w, b, dy)
    launched = _launches()[1]
    name, *node = _backward(x, w, b, dy)
    assert name == NODE and _launches()[1] == launched
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


def _forward_both_ways(monkeypatch, x, w, b, dy, **kwargs):
    """y and the gradients from C++ (with the number of forwards it launched), then from Python."""
    normalized_shape, results = (x.shape[-1],), []
    for enabled in (True, False):
        monkeypatch.setattr(native, "ENABLED", enabled)
        leaves = [None if t is None else t.detach().requires_grad_(t.requires_grad) for t in (x, w, b)]
        layer_norm(*leaves[:1], normalized_shape, *leaves[1:], **kwargs)  # compiles, makes the plan
        launched = _launches()[0]
        y = layer_norm(leaves[0], normalized_shape, *leaves[1:], **kwargs)
        forwards = _launches()[0] - launched
        if y.requires_grad:
            y.backward(dy)
        grads = [None if t is None or not t.requires_grad else t.grad for t in leaves]
        results.append((forwards, y, grads))
    return results


@pytest.mark.parametrize(
    "shape, dtype, params, grad",
    [
        ((4096, 1024), torch.float16, "wb", True),  # the tutorial's smallest sweep point
        ((2, 3, 640), torch.bfloat16, "wb", True),  # batch x sequence x hidden: y and dx keep the shape
        ((3, 40000), torch.float16, "wb", False),  # 80 KB rows: the looped forward, which takes no M
        ((3, 40000), torch.float16, "wb", True),  # the same with a gradient: the shared-row backward
        ((3, 5000), torch.float64, "wb", True),  # 64 KB float64 rows: the node's backward is Python's (looped)
        ((300, 2000), torch.float16, "wb32", True),  # float32 parameters with a half input
        ((100, 777), torch.float64, "w", True),  # float64: eps split in two float32 halves
        ((64, 256), torch.float32, "", True),  # no parameters: no dW/dB to sum, the node's backward is Python's
        ((1, 16384), torch.bfloat16, "wb", False),  # one row (M is a constant of the kernel), no gradient
        ((5,), torch.float32, "b", True),  # one dimension: one row
    ],
)
def test_forward_gives_the_python_paths_bits(monkeypatch, shape, dtype, params, grad):
    x = torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(grad)
    n, param_dtype = shape[-1], torch.float32 if "32" in params else dtype
    w = torch.rand(n, device="cuda", dtype=param_dtype).requires_grad_(grad) if "w" in params else None
    b = torch.randn(n, device="cuda", dtype=param_dtype).requires_grad_(grad) if "b" in params else None
    (forwards, *ours), (_, *python) = _forward_both_ways(monkeypatch, x, w, b, torch.randn_like(x), eps=1e-6)
    assert forwards == 1
    assert ours[0].shape == x.shape and ours[0].requires_grad == grad
    assert torch.equal(ours[0], python[0])
    for got, want in zip(ours[1], python[1]):
        assert (got is None and want is None) or torch.equal(got, want)


def test_forward_takes_rows_of_a_strided_view(monkeypatch):
    """Rows 1536 elements apart (a column slice) need no copy: the kernels take the row stride."""
    x = torch.randn(512, 1536, device="cuda", dtype=torch.float16)[:, :1024].requires_grad_()
    w, b = (torch.rand(1024, device="cuda", dtype=torch.float16).requires_grad_() for _ in range(2))
    dy = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
    (forwards, *ours), (_, *python) = _forward_both_ways(monkeypatch, x, w, b, dy)
    assert forwards == 1 and x.stride(0) == 1536
    assert torch.equal(ours[0], python[0]) and all(torch.equal(a, c) for a, c in zip(ours[1], python[1]))


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize(
    "case",
    [
        "transposed",  # rows not contiguous: Python makes them so
        "two dims normalized",  # normalized_shape of two dimensions
        "integer eps",  # eps=0: Python converts it
        "lock",  # the lock strategy's backward
        "subclass",  # a tensor subclass: its own dispatch
        "misaligned",  # 16-byte alignment, which the compiled kernels assume
    ],
)
def test_forward_leaves_other_calls_to_python(case):
    x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    w = torch.rand(256, device="cuda", dtype=torch.float16)
    shape, kwargs = (256,), {}
    if case == "transposed":
        x = torch.randn(256, 64, device="cuda", dtype=torch.float16).t()
    elif case == "two dims normalized":
        x, w, shape = x.view(64, 16, 16), w.view(16, 16), (16, 16)
    elif case == "integer eps":
        kwargs["eps"] = 0
    elif case == "lock":
        kwargs["backward_strategy"] = "lock"
    elif case == "subclass":
        x = x.as_subclass(_Subclass)
    elif case == "misaligned":
        x = torch.randn(64 * 256 + 1, device="cuda", dtype=torch.float16)[1:].view(64, 256)
    layer_norm(torch.randn(8, 8, device="cuda"), (8,))  # the extension is built
    launched = _launches()[0]
    y = layer_norm(x, shape, w, **kwargs)
    want = torch.nn.functional.layer_norm(x, shape, w, eps=kwargs.get("eps", 1e-5))
    assert _launches()[0] == launched
    assert y.dtype == want.dtype and y.shape == want.shape
    torch.testing.assert_close(y.float(), want.float(), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("amp_dtype", [torch.float16, torch.bfloat16], ids=str)
def test_autocast_call_takes_the_cpp_forward_in_float32(amp_dtype):
    """Under autocast the call is made in float32, as torch's, and then takes the C++ forward and node."""
    x, w, b = _leaves(64, 256)
    layer_norm(torch.randn(8, 8, device="cuda"), (8,))  # the extension is built
    launched = _launches()
    with torch.autocast("cuda", dtype=amp_dtype):
        y = layer_norm(x, (256,), w, b)
        want = torch.nn.functional.layer_norm(x, (256,), w, b)
    assert _launches()[0] == launched[0] + 1
    assert y.dtype == want.dtype == torch.float32
    torch.testing.assert_close(y, want, atol=2e-3, rtol=2e-3)
    dy = torch.randn_like(y)
    ours = torch.autograd.grad(y, (x, w, b), dy)
    assert _launches()[1] == launched[1] + 1
    for o, t in zip(ours, torch.autograd.grad(want, (x, w, b), dy)):
        assert o.dtype == t.dtype
        torch.testing.assert_close(o.float(), t.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("amp_dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("param_dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [1024, 13824], ids=["registers", "looped"])
def test_autocast_parameters_read_as_cast_give_the_casts_bits(monkeypatch, amp_dtype, param_dtype, n):
    """Under autocast the C++ forward reads half-precision parameters as they are; the Python
    path casts them to float32 first: y and every gradient are the same bits. The looped forward
    would sum in another order (its layout follows the parameters' dtype): C++ leaves it to Python."""
    x, w, b = _leaves(64, n, torch.bfloat16, param_dtype=param_dtype)
    with torch.autocast("cuda", dtype=amp_dtype):
        (forwards, *ours), (_, *python) = _forward_both_ways(monkeypatch, x, w, b, torch.randn(64, n, device="cuda"))
    looped = dispatch.forward_config(n, 4, x.get_device()).looped
    assert ("uncast" in dispatch.cpp_declined[(n, torch.float32)]) == looped
    assert forwards == (0 if looped else 1) and ours[0].dtype == torch.float32
    assert torch.equal(ours[0], python[0])
    for got, want in zip(ours[1], python[1]):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_node_of_a_3d_input_hands_a_strided_gradient_to_python(monkeypatch):
    """The node's Python fallback works on (M, N) rows and gives dx back in the input's shape."""
    x, w, b = _leaves(2 * 64, 512)
    x = x.detach().view(2, 64, 512).requires_grad_()
    dy = torch.randn(2, 512, 64, device="cuda", dtype=torch.float16).transpose(1, 2)  # not contiguous
    launched = _launches()[1]
    name, *node = _backward(x, w, b, dy)
    assert name == NODE and _launches()[1] == launched and node[0].shape == x.shape
    monkeypatch.setattr(native, "ENABLED", False)
    _, *python = _backward(x, w, b, dy)
    assert all(torch.equal(a, c) for a, c in zip(node, python))
