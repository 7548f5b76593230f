"""``LayerNorm``: a drop-in ``torch.nn.LayerNorm`` that runs the Triton kernels."""

import torch

from ln_tutorial.function import layer_norm


class LayerNorm(torch.nn.LayerNorm):
    """:class:`torch.nn.LayerNorm` with the forward and backward of :func:`ln_tutorial.layer_norm`.

    Same constructor, parameters and ``state_dict`` keys as the parent, so a
    ``torch.nn.LayerNorm`` checkpoint loads as is. ``backward_strategy``
    (``"deterministic"`` or ``"lock"``) may also be changed after construction.
    """

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
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)
        self.backward_strategy = backward_strategy

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return layer_norm(
            input, self.normalized_shape, self.weight, self.bias, self.eps, backward_strategy=self.backward_strategy
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backward_strategy={self.backward_strategy!r}"
