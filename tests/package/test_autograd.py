"""Every autograd feature of torch's layer_norm: second order, torch.func, forward-mode AD, tensor subclasses.

Each either agrees with torch or raises an error naming the problem; none is silently wrong.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import forward_ad
from torch.utils._pytree import tree_map

from conftest import DEVICE
from helpers import assert_as_accurate_as_torch, leaf
from ln_tutorial import LayerNorm, layer_norm
from ln_tutorial_book.reference import layer_norm_reference

N = 16  # a short row keeps the interpreter quick


def _params(dtype, affine=True):
    if not affine:
        return None, None
    return torch.randn(N, device=DEVICE, dtype=dtype), torch.randn(N, device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
def test_gradgradcheck_float64(affine):
    x = leaf(torch.randn(3, N, device=DEVICE, dtype=torch.float64))
    params = [None if p is None else leaf(p) for p in _params(torch.float64, affine)]
    inputs = (x, *[p for p in params if p is not None])

    def fn(x, *p):
        weight, bias = p if affine else (None, None)
        return layer_norm(x, (N,), weight, bias)

    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


def test_gradgradcheck_module_float64():
    norm = LayerNorm(N, device=DEVICE, dtype=torch.float64)
    torch.nn.init.normal_(norm.weight)
    x = leaf(torch.randn(2, 3, N, device=DEVICE, dtype=torch.float64))  # leading dimensions: a 3-D input
    assert torch.autograd.gradgradcheck(lambda x, w, b: torch.func.functional_call(norm, {"weight": w, "bias": b}, x),
                                        (x, leaf(norm.weight), leaf(norm.bias)))  # fmt: skip


def _hessian_vector_products(fn, x, weight, bias, dy, v):
    """``d/d(x, w) <grad_x(<y, dy>), v>``: the Hessian-vector products a gradient penalty needs."""
    x, weight, bias = leaf(x), leaf(weight), leaf(bias)
    y = fn(x, (N,), weight, bias)
    (dx,) = torch.autograd.grad(y, x, dy, create_graph=True)
    assert dx.grad_fn is not None, "dx carries no graph: second-order terms would be dropped"
    return torch.autograd.grad(dx, (x, weight, bias), v, allow_unused=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_hessian_vector_products(dtype):
    x = torch.randn(8, N, device=DEVICE, dtype=dtype) * 3 + 1
    weight, bias = _params(dtype)
    dy, v = torch.randn_like(x), torch.randn_like(x)
    ours = _hessian_vector_products(layer_norm, x, weight, bias, dy, v)
    theirs = _hessian_vector_products(F.layer_norm, x, weight, bias, dy, v)
    exact = _hessian_vector_products(layer_norm_reference, *(t.double() for t in (x, weight, bias, dy, v)))
    for name, o, t, e in zip(("d2x", "d2w"), ours, theirs, exact):
        assert_as_accurate_as_torch(name, o, t.to(o.dtype), e, dtype)
    assert ours[2] is None and theirs[2] is None  # dx does not depend on the bias


def test_gradient_penalty_matches_torch():
    """A WGAN-GP-style penalty: the norm of the input gradient, differentiated in the weight."""

    def penalty(fn):
        x = leaf(torch.randn(4, N, device=DEVICE, dtype=torch.float64))
        weight, bias = (leaf(p) for p in _params(torch.float64))
        (dx,) = torch.autograd.grad(fn(x, (N,), weight, bias).sin().sum(), x, create_graph=True)
        return torch.autograd.grad((dx.norm() - 1) ** 2, (weight, bias))

    torch.manual_seed(1)
    ours = penalty(layer_norm)
    torch.manual_seed(1)
    theirs = penalty(F.layer_norm)
    for o, t in zip(ours, theirs):
        torch.testing.assert_close(o, t)


def test_first_order_keeps_the_kernels():
    """Without create_graph the gradients come from the kernels and carry no graph."""
    x = leaf(torch.randn(4, N, device=DEVICE))
    (dx,) = torch.autograd.grad(layer_norm(x, (N,)), x, torch.randn_like(x))
    assert dx.grad_fn is None


@pytest.mark.parametrize("transform", ["grad", "vmap", "jacrev", "jacfwd", "jvp", "hessian"])
def test_torch_func(transform):
    x = torch.randn(3, N, device=DEVICE, dtype=torch.float64)
    weight, bias = _params(torch.float64)
    t = torch.randn_like(x)

    def run(fn):
        f = lambda x: fn(x, (N,), weight, bias)  # noqa: E731
        if transform == "grad":
            return torch.func.grad(lambda x: f(x).sin().sum())(x)
        if transform == "vmap":
            return torch.func.vmap(f)(x)
        if transform == "jvp":
            return torch.func.jvp(f, (x,), (t,))[1]
        if transform == "hessian":
            return torch.func.hessian(lambda x: f(x).sin().sum())(x[0])
        return getattr(torch.func, transform)(f)(x)

    torch.testing.assert_close(run(layer_norm), run(F.layer_norm))


def test_forward_mode_ad():
    x, t = torch.randn(3, N, device=DEVICE, dtype=torch.float64), torch.randn(3, N, device=DEVICE, dtype=torch.float64)
    weight, bias = _params(torch.float64)
    tangents = []
    for fn in (layer_norm, F.layer_norm):
        with forward_ad.dual_level():
            y = fn(forward_ad.make_dual(x, t), (N,), weight, bias)
            tangents.append(forward_ad.unpack_dual(y).tangent)
    assert tangents[0] is not None
    torch.testing.assert_close(*tangents)


class _Wrapper(torch.Tensor):
    """A minimal ``__torch_dispatch__`` subclass whose memory is not where the wrapper's data pointer says."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, _Wrapper) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: _Wrapper(t) if isinstance(t, torch.Tensor) else t, out)


@pytest.mark.parametrize("wrapped", ["input", "weight"])
def test_dispatch_subclass_goes_to_torch(wrapped):
    x = torch.randn(4, N, device=DEVICE)
    weight, bias = _params(torch.float32)
    args = {"input": x, "weight": weight}
    args[wrapped] = _Wrapper(args[wrapped])
    y = layer_norm(args["input"], (N,), args["weight"], bias)
    assert isinstance(y, _Wrapper)
    torch.testing.assert_close(y.inner, F.layer_norm(x, (N,), weight, bias))


def test_meta_tensor():
    x = torch.empty(5, 7, N, device="meta", dtype=torch.bfloat16)
    y = layer_norm(x, (N,), torch.empty(N, device="meta", dtype=torch.bfloat16))
    assert y.device.type == "meta" and y.shape == x.shape and y.dtype == x.dtype


def test_dtensor(tmp_path):
    """Rows sharded, weight replicated: the result is a DTensor, as torch's (one process, world size 1)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

    dist.init_process_group(store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        mesh = DeviceMesh(DEVICE, [0])
        x, (weight, bias) = torch.randn(8, N, device=DEVICE), _params(torch.float32)
        x_d = distribute_tensor(leaf(x), mesh, [Shard(0)])
        w_d, b_d = (distribute_tensor(p, mesh, [Replicate()]) for p in (weight, bias))
        y = layer_norm(x_d, (N,), w_d, b_d)
        expected = F.layer_norm(x_d, (N,), w_d, b_d)
        assert type(y) is type(expected) and y.placements == expected.placements
        torch.testing.assert_close(y.to_local(), F.layer_norm(x, (N,), weight, bias))
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["weight", "bias"])
def test_parameter_on_another_device(name):
    x = torch.randn(4, N, device="cuda")
    with pytest.raises(ValueError, match=f"{name} is on cpu but input is on cuda"):
        layer_norm(x, (N,), **{name: torch.ones(N)})


@pytest.mark.gpu
def test_double_backward_through_the_native_node():
    """The common CUDA call takes the C++ node; its create_graph backward carries the graph too."""
    from ln_tutorial.variants import native

    x = leaf(torch.randn(64, 256, device="cuda"))
    norm = LayerNorm(256, device="cuda")
    before = native.extension().launches()[0] if native.extension() else None
    y = norm(x)
    if before is not None:
        assert native.extension().launches()[0] == before + 1, "the call did not take the C++ forward"
    (dx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    (dx_torch,) = torch.autograd.grad(F.layer_norm(x, (256,), norm.weight, norm.bias).pow(2).sum(), x, create_graph=True)
    torch.testing.assert_close(dx, dx_torch)
    v = torch.randn_like(x)
    torch.testing.assert_close(torch.autograd.grad(dx, x, v)[0], torch.autograd.grad(dx_torch, x, v)[0])
