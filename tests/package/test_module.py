"""LayerNorm module parity with torch.nn.LayerNorm; torch.compile and CUDA graphs on the GPU."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE
from ln_tutorial import LayerNorm, dispatch, layer_norm
from ln_tutorial._common import SUPPORTED_DTYPES
from ln_tutorial.variants import fast_launch

gpu = pytest.mark.gpu


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({}, id="default"),
        pytest.param({"elementwise_affine": False}, id="no-affine"),
        pytest.param({"bias": False}, id="no-bias"),  # the bias-free (PaLM) variant
        pytest.param({"eps": 1e-3}, id="eps"),
    ],
)
def test_module_matches_torch_module(kwargs):
    theirs = torch.nn.LayerNorm(24, device=DEVICE, **kwargs)
    if theirs.weight is not None:
        torch.nn.init.normal_(theirs.weight)
    if theirs.bias is not None:
        torch.nn.init.normal_(theirs.bias)
    ours = LayerNorm(24, device=DEVICE, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    assert isinstance(ours, torch.nn.LayerNorm)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    x = torch.randn(3, 5, 24, device=DEVICE)
    torch.testing.assert_close(ours(x), theirs(x))


def test_module_grads_match_torch_module():
    theirs = torch.nn.LayerNorm((4, 6), device=DEVICE)
    ours = LayerNorm((4, 6), device=DEVICE)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(5, 4, 6, device=DEVICE)
    for module in (ours, theirs):
        module(x).pow(2).sum().backward()
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad)


def test_module_dtype_and_strategy_attribute():
    module = LayerNorm(16, dtype=torch.float64, device=DEVICE, backward_strategy="lock")
    assert module.weight.dtype == torch.float64
    assert "backward_strategy='lock'" in repr(module)
    module.backward_strategy = "deterministic"
    x = torch.randn(4, 16, dtype=torch.float64, device=DEVICE, requires_grad=True)
    module(x).sum().backward()
    assert x.grad is not None


@gpu
def test_torch_compile_fullgraph():
    x = torch.randn(256, 1000, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(1000, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(1000, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    leaves = (x, weight, bias)

    def step(x, weight, bias):
        return layer_norm(x * 2, (1000,), weight, bias).float().square().mean()

    compiled = torch.compile(step, fullgraph=True)
    compiled(*leaves).backward()
    grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    step(*leaves).backward()
    for ours, eager in zip(grads, (t.grad for t in leaves)):
        torch.testing.assert_close(ours, eager)


@gpu
def test_cuda_graph_capture_forward_and_backward():
    module = LayerNorm(512, device=DEVICE)
    x = torch.randn(64, 512, device=DEVICE, requires_grad=True)
    dy = torch.randn(64, 512, device=DEVICE)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up compiles the kernels outside the capture
        module(x).backward(dy)
    torch.cuda.current_stream().wait_stream(stream)
    module.zero_grad(set_to_none=False)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = module(x)
        y.backward(dy)
    for _ in range(2):
        x.data.copy_(torch.randn_like(x))
        module.zero_grad(set_to_none=False)
        graph.replay()
        torch.cuda.synchronize()
        expected = torch.nn.functional.layer_norm(x.detach(), (512,), module.weight.detach(), module.bias.detach())
        torch.testing.assert_close(y, expected)


@gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("strategy", ["deterministic", "lock"])
def test_input_on_another_gpu_than_the_current_one(strategy):
    """Kernels launch on the input's GPU, not on the current device (left at cuda:0)."""
    assert torch.cuda.current_device() == 0
    fast_launch._compiled.clear()
    x = torch.randn(300, 1000, device="cuda:1", requires_grad=True)
    weight = torch.randn(1000, device="cuda:1", requires_grad=True)
    bias = torch.randn(1000, device="cuda:1", requires_grad=True)
    dy = torch.randn(300, 1000, device="cuda:1")
    y = layer_norm(x, (1000,), weight, bias, backward_strategy=strategy)
    y.backward(dy)
    # Run elsewhere, the kernels would still compute the right numbers, reading
    # cuda:1's memory over the interconnect: check where they were launched.
    assert {key[1] for key in fast_launch._compiled} == {1}
    grads = [t.grad for t in (x, weight, bias)]
    for t in (x, weight, bias):
        t.grad = None
    F.layer_norm(x, (1000,), weight, bias).backward(dy)
    torch.testing.assert_close(y, F.layer_norm(x, (1000,), weight, bias))
    for ours, theirs in zip(grads, (x.grad, weight.grad, bias.grad)):
        assert ours.device == torch.device("cuda:1")
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


@gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_launchers_called_directly_on_another_gpu():
    """The launchers themselves (not only ``layer_norm``) launch on their tensors' GPU."""
    fast_launch._compiled.clear()
    x, dy = torch.randn(300, 1000, device="cuda:1"), torch.randn(300, 1000, device="cuda:1")
    weight, bias = torch.randn(1000, device="cuda:1"), torch.randn(1000, device="cuda:1")
    y, mean, rstd = dispatch.layer_norm_forward(x, weight, bias, 1e-5)
    dx, dw, db = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    assert {key[1] for key in fast_launch._compiled} == {1}
    torch.testing.assert_close(y, F.layer_norm(x, (1000,), weight, bias))
    assert dx.device == dw.device == db.device == torch.device("cuda:1")



@pytest.mark.parametrize("post_norm", [False, True], ids=["pre-norm", "post-norm"])
def test_compiled_model_gets_torchs_graphs(post_norm):
    """Under torch.compile a model with ln_tutorial.LayerNorm hands Inductor the forward and backward
    graphs of the same model with torch.nn.LayerNorm, op for op, under bfloat16 autocast: the same
    kernels are generated, so the compiled step costs what torch's does (the performance page times it)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def ops(graphs):
        def compiler(gm, example_inputs):
            graphs.append([str(node.target) for node in gm.graph.nodes if node.op == "call_function"])
            return make_boxed_func(gm.forward)

        return compiler

    class Block(torch.nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.norm, self.up, self.drop = norm(32), torch.nn.Linear(32, 32), torch.nn.Dropout(0.1)

        def forward(self, x):
            if post_norm:
                return self.norm(x + self.drop(self.up(x)))
            return x + self.drop(self.up(self.norm(x)))

    captured = []
    for norm in (torch.nn.LayerNorm, LayerNorm):
        graphs = []
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torch.compile(Block(norm).to(DEVICE), fullgraph=True,
                              backend=aot_autograd(fw_compiler=ops(graphs), bw_compiler=ops(graphs)))  # fmt: skip
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):  # as tools/train_step.py
            loss = model(torch.randn(4, 8, 32, device=DEVICE, requires_grad=True)).float().sum()
        loss.backward()
        captured.append(graphs)
    assert len(captured[0]) == 2 and "aten.native_layer_norm.default" in captured[0][0]
    assert captured[1] == captured[0]


def test_compiled_model_checks_torchs_guards():
    """A compiled model checks its guards before every call, on the host, which sets the pace of a
    compiled step. With ln_tutorial.LayerNorm it checks as many per module as with torch.nn.LayerNorm,
    and only a few more in all (the names of the compiled path itself), however many norms it holds."""

    def guards(norm, blocks):
        torch._dynamo.reset()
        model = torch.nn.Sequential(*[torch.nn.Sequential(norm(32), torch.nn.Linear(32, 32)) for _ in range(blocks)])
        return len(torch._dynamo.explain(model.to(DEVICE))(torch.randn(4, 32, device=DEVICE)).out_guards)

    theirs, ours = {n: guards(torch.nn.LayerNorm, n) for n in (2, 6)}, {n: guards(LayerNorm, n) for n in (2, 6)}
    assert theirs[6] > theirs[2] > 0
    assert ours[6] - theirs[6] == ours[2] - theirs[2] <= 12  # the path's own names: 7 on torch 2.13, 11 on 2.11


def test_compiled_module_refuses_bad_input_as_in_eager_mode():
    """The compiled module's shortcut past the checks takes only inputs they would pass."""
    wide_floats = {d for d in vars(torch).values() if isinstance(d, torch.dtype) and d.is_floating_point and d.itemsize > 1}
    assert wide_floats == set(SUPPORTED_DTYPES)  # the shortcut's test of the dtype
    model = torch.compile(LayerNorm(8).to(DEVICE), backend="eager")
    with pytest.raises(ValueError, match="normalized_shape"):
        model(torch.randn(2, 9, device=DEVICE))
    for dtype in (torch.int32, torch.float8_e4m3fn):  # a floating-point dtype the kernels do not read
        with pytest.raises(TypeError, match="input dtype"):
            model(torch.ones(2, 8, device=DEVICE).to(dtype))
