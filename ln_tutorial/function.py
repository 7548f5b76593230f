"""``layer_norm``, the differentiable entry point: the C++ node first where it takes the call, else
:class:`LayerNormFunction` (a plain ``torch.autograd.Function``: the dispatch of a custom operator
costs more host time than a small layer norm costs the GPU); under ``torch.compile``, torch's own
layer norm (:func:`compiled_layer_norm`). Inputs the kernels cannot read as they are go to
:func:`torch.nn.functional.layer_norm`, which handles each of them.
"""

import math
import numbers
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from torch.autograd import forward_ad

from ln_tutorial import dispatch, host
from ln_tutorial._common import INTERPRET
from ln_tutorial.variants import native


class LayerNormFunction(torch.autograd.Function):
    """Eager-mode autograd: ``y`` for ``x`` (M, N), gradients from the saved statistics."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, strategy):
        y, mean, rstd = dispatch.layer_norm_forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.strategy = strategy
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, _, _ = ctx.saved_tensors
        dx, dw, db = dispatch.python_backward(ctx.saved_tensors, dy, ctx.strategy)
        return dx, dw if weight is not None else None, db if bias is not None else None, None, None


def check_options(backward_strategy: str, eps: float, caller: str = "layer_norm") -> None:
    """Raise ``ValueError`` naming the argument unless ``backward_strategy`` and ``eps`` are accepted values."""
    if backward_strategy not in host.STRATEGIES:
        raise ValueError(f"{caller}: unknown backward_strategy {backward_strategy!r}; expected one of {host.STRATEGIES}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 <= eps < math.inf:
        raise ValueError(f"{caller}: eps must be a finite number >= 0, got {eps!r}")


def _kernels_cannot_read(*tensors: Optional[torch.Tensor]) -> bool:
    """True when (input, weight, bias) are not plain memory the kernels can read: a subclass
    (``DTensor``, ...), a ``torch.func`` wrapper, a meta input, or forward-mode AD's dual tensors."""
    if forward_ad._current_level >= 0:  # inside forward_ad.dual_level(): tangents the kernels would drop
        return True
    if isinstance(tensors[0], torch.Tensor) and tensors[0].is_meta:  # meta parameters alone: check_inputs names them
        return True
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    return any(isinstance(t, torch.Tensor) and (type(t) not in _PLAIN_TENSORS or wrapped(t)) for t in tensors)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_HALF = (torch.float16, torch.bfloat16)


def _as_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """A (M, n) view of ``t`` with contiguous rows; copies only when no such view exists."""
    rows = t if t.dim() == 2 and t.shape[1] == n else t.reshape(-1, n)
    return rows if rows.stride(-1) == 1 or n == 1 else rows.contiguous()


def _flat_param(p: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if p is None or (p.dim() == 1 and p.stride(0) == 1):
        return p
    return p.reshape(-1).contiguous()


def layer_norm(
    input: torch.Tensor,
    normalized_shape: Union[int, Sequence[int]],
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
    *,
    backward_strategy: str = "deterministic",
) -> torch.Tensor:
    """Layer normalization over the trailing ``normalized_shape`` dimensions: the signature and result of
    :func:`torch.nn.functional.layer_norm`, differentiable in ``input``, ``weight`` and ``bias``.

    Args:
        input: ``(*, *normalized_shape)``, float16, bfloat16, float32 or float64, any strides.
        normalized_shape: the trailing dimensions normalized together.
        weight, bias: ``normalized_shape`` or None; the input's dtype, or float32 with a half-precision
            input (the output keeps the input's dtype, the gradients the parameters').
        eps: added to the variance before the square root.
        backward_strategy: ``"deterministic"`` (default: the same bits on every run for the same GPU
            model, SM count, shape and settings: variants on or off, the Triton version, a cooperative
            launch granted or refused) or ``"lock"`` (the Triton tutorial's locked buffers).

    CUDA tensors run the Triton kernels, and CPU tensors when ``TRITON_INTERPRET=1`` was set before
    import; other CPU tensors, and tensors the kernels cannot read (``DTensor``, ``torch.func``
    transforms, meta tensors, forward-mode AD), :func:`torch.nn.functional.layer_norm`. Gradients of
    gradients (``create_graph=True``) are supported.
    """
    if torch.compiler.is_compiling():  # checked while Dynamo traces: it guards the names the checks read
        check_options(backward_strategy, eps)
        return compiled_layer_norm(input, host.check_inputs(input, normalized_shape, weight, bias), weight, bias, eps)
    if backward_strategy == "deterministic" and dispatch.cpp_takes_calls():
        y = native.forward(input, normalized_shape, weight, bias, eps)  # None: not a call it takes
        if y is not None:
            return y
    check_options(backward_strategy, eps)
    if _kernels_cannot_read(input, weight, bias):
        return F.layer_norm(input, normalized_shape, weight, bias, eps)
    if isinstance(input, torch.Tensor) and input.is_cuda and torch.is_autocast_enabled("cuda"):
        # Autocast runs torch's layer_norm in float32 on CUDA, half-precision tensors cast first; do the same
        # (the C++ forward above does it in C++).
        input, weight, bias = (t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF else t
                               for t in (input, weight, bias))  # fmt: skip
    normalized_shape = host.check_inputs(input, normalized_shape, weight, bias)
    if not (input.is_cuda or (INTERPRET and input.device.type == "cpu")):
        return F.layer_norm(input, normalized_shape, weight, bias, eps)
    args = (_as_rows(input, math.prod(normalized_shape)), _flat_param(weight), _flat_param(bias), float(eps))
    y = LayerNormFunction.apply(*args, backward_strategy)
    return y if y.shape == input.shape else y.view(input.shape)


def compiled_layer_norm(input, normalized_shape, weight, bias, eps):
    """Under ``torch.compile``: torch's layer norm, which Inductor fuses with the casts, residual adds and
    dropout around it (a compiled step gains more from that than from separate kernels: the performance
    page). Float32 parameters with a half input compute in float32, as in eager mode. Reads no global but
    ``F``: Dynamo guards each name it reads, on the host before every call of the compiled model."""
    if (weight is not None and weight.dtype != input.dtype) or (bias is not None and bias.dtype != input.dtype):
        # torch's CUDA kernel takes one dtype
        return F.layer_norm(input.float(), normalized_shape, weight, bias, eps).to(input.dtype)
    return F.layer_norm(input, normalized_shape, weight, bias, eps)
