"""``LayerNorm``: a drop-in ``torch.nn.LayerNorm`` that runs the Triton kernels."""

import numbers

import torch

from ln_tutorial._common import SUPPORTED_DTYPES
from ln_tutorial.function import check_options, compiled_layer_norm, layer_norm
from ln_tutorial.host import is_trailing_shape


class LayerNorm(torch.nn.LayerNorm):
    """:class:`torch.nn.LayerNorm` with the forward and backward of :func:`ln_tutorial.layer_norm`: the
    parent's constructor, parameters and ``state_dict`` keys (its checkpoints load as they are), and a
    ``backward_strategy`` (``"deterministic"`` or ``"lock"``) that may be changed after construction."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        backward_strategy: str = "deterministic",
    ):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        if not all(isinstance(d, numbers.Integral) and d >= 0 for d in shape):
            raise ValueError(f"LayerNorm: normalized_shape must be integers >= 0, got {normalized_shape!r}")
        if dtype is not None and dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"LayerNorm: dtype {dtype} is not supported; expected one of {SUPPORTED_DTYPES}")
        check_options(backward_strategy, eps, "LayerNorm")
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)
        self.backward_strategy = backward_strategy

    @property
    def backward_strategy(self) -> str:
        return self._backward_strategy

    @backward_strategy.setter
    def backward_strategy(self, value: str) -> None:
        check_options(value, self.eps, "LayerNorm")
        self._backward_strategy = value

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        shape = self.normalized_shape
        # Under torch.compile, an input it takes goes straight to torch's layer norm: the checks read names
        # that Dynamo would guard, on the host before every call (the module's shape and eps were checked
        # when it was built). Any other input is checked, and refused, as in eager mode. The floating-point
        # dtypes wider than a byte are SUPPORTED_DTYPES, tested without reading a global Dynamo would guard.
        if torch.compiler.is_compiling() and (
            input.dtype.is_floating_point and input.dtype.itemsize > 1 and is_trailing_shape(input, shape)
        ):
            return compiled_layer_norm(input, shape, self.weight, self.bias, self.eps)
        return layer_norm(input, shape, self.weight, self.bias, self.eps, backward_strategy=self.backward_strategy)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backward_strategy={self.backward_strategy!r}"
