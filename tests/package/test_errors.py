"""Bad input raises at once, with a message that names the problem."""

import pytest
import torch

from conftest import DEVICE
from helpers import run_without_interpreter
from ln_tutorial import LayerNorm, dispatch, layer_norm


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8, torch.complex64], ids=str)
def test_unsupported_input_dtype(dtype):
    x = torch.ones(4, 8, device=DEVICE, dtype=dtype)
    with pytest.raises(TypeError, match=f"input dtype {dtype}"):
        layer_norm(x, (8,))


@pytest.mark.parametrize(
    "x_dtype, p_dtype",
    [
        (torch.float32, torch.float16),  # half parameters with a float32 input
        (torch.float32, torch.float64),
        (torch.float16, torch.bfloat16),
        (torch.bfloat16, torch.float64),
    ],
    ids=str,
)
def test_unsupported_parameter_dtype(x_dtype, p_dtype):
    with pytest.raises(TypeError, match="weight dtype"):
        layer_norm(_x(4, 8, dtype=x_dtype), (8,), torch.ones(8, device=DEVICE, dtype=p_dtype))


def test_weight_and_bias_dtypes_differ():
    x = _x(4, 8, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="differs from bias dtype"):
        layer_norm(x, (8,), torch.ones(8, device=DEVICE), torch.zeros(8, device=DEVICE, dtype=torch.bfloat16))


@pytest.mark.parametrize("name", ["weight", "bias"])
def test_parameter_shape(name):
    kwargs = {name: torch.ones(7, device=DEVICE)}
    with pytest.raises(ValueError, match=f"{name} has shape \\[7\\], expected normalized_shape \\[8\\]"):
        layer_norm(_x(4, 8), (8,), **kwargs)


@pytest.mark.parametrize("normalized_shape", [(7,), (5, 8), (2, 4, 8)])
def test_normalized_shape_does_not_match(normalized_shape):
    with pytest.raises(ValueError, match="does not match the trailing dimensions"):
        layer_norm(_x(4, 8), normalized_shape)


def test_empty_normalized_shape():
    with pytest.raises(ValueError, match="at least one dimension"):
        layer_norm(_x(4, 8), ())


def test_parameters_on_another_device():
    with pytest.raises(ValueError, match="weight is on meta"):
        layer_norm(_x(4, 8), (8,), torch.ones(8, device="meta"))


def test_unknown_backward_strategy():
    with pytest.raises(ValueError, match="unknown backward_strategy 'atomic'"):
        layer_norm(_x(4, 8), (8,), backward_strategy="atomic")


def test_input_not_a_tensor():
    with pytest.raises(TypeError, match="input must be a torch.Tensor"):
        layer_norm([[1.0, 2.0]], (2,))


def test_module_rejects_wrong_width():
    with pytest.raises(ValueError, match="does not match"):
        LayerNorm(16, device=DEVICE)(_x(4, 8))


@pytest.mark.parametrize("eps", ["1e-5", -1e-5, float("nan"), float("inf"), None, True], ids=repr)
def test_bad_eps(eps):
    with pytest.raises(ValueError, match=r"eps must be a finite number >= 0"):
        layer_norm(_x(4, 8), (8,), eps=eps)
    with pytest.raises(ValueError, match=r"LayerNorm: eps must be a finite number >= 0"):
        LayerNorm(8, eps=eps)


def test_module_checks_backward_strategy_when_given():
    with pytest.raises(ValueError, match=r"LayerNorm: unknown backward_strategy 'bogus'; expected one of"):
        LayerNorm(300, backward_strategy="bogus")
    norm = LayerNorm(8)
    with pytest.raises(ValueError, match="unknown backward_strategy 'atomic'"):
        norm.backward_strategy = "atomic"
    assert norm.backward_strategy == "deterministic"


@pytest.mark.parametrize("normalized_shape", [-3, (4, -1), (2.5,), "8"], ids=repr)
def test_module_checks_normalized_shape(normalized_shape):
    with pytest.raises(ValueError, match="LayerNorm: normalized_shape must be integers >= 0"):
        LayerNorm(normalized_shape)


@pytest.mark.parametrize("dtype", [torch.int32, torch.complex64, torch.float8_e4m3fn], ids=str)
def test_module_checks_dtype(dtype):
    with pytest.raises(TypeError, match=f"LayerNorm: dtype {dtype} is not supported"):
        LayerNorm(8, dtype=dtype)


@pytest.mark.gpu
def test_launcher_rejects_tensors_on_other_devices():
    """The launcher passes addresses, not tensors, to Triton: a CPU tensor among them must raise, not be read."""
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(ValueError, match=r"one GPU; got tensors on \['cpu', 'cuda:0'\]"):
        dispatch.layer_norm_forward(x, torch.ones(8), None, 1e-5)
    dy, (_, mean, rstd) = torch.randn_like(x), dispatch.layer_norm_forward(x, None, None, 1e-5)
    with pytest.raises(ValueError, match="one GPU"):
        dispatch.layer_norm_backward(dy, x, None, None, mean.cpu(), rstd)


def test_launcher_without_gpu_or_interpreter():
    """Launchers called directly with CPU tensors and no interpreter name the problem (a fresh process)."""
    code = (
        "import pytest, torch\n"
        "from ln_tutorial import _common, dispatch, host, tuning\n"
        "assert not _common.INTERPRET\n"
        "with pytest.raises(ValueError, match='need CUDA tensors'):\n"
        "    dispatch.layer_norm_forward(torch.randn(4, 8), None, None, 1e-5)\n"
    )
    run_without_interpreter(code)
