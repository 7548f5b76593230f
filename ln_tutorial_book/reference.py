"""A pure-PyTorch layer norm that follows the tutorial's formulas literally, in float64 by default:
the "exact" answer the kernels are compared with, in tests, examples and checks.
"""

from typing import Optional, Sequence, Tuple

import torch


def layer_norm_reference(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
    compute_dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``y = x̂ * w + b`` with ``x̂ = (x - mean) / sqrt(var + eps)``, in ``compute_dtype``; differentiable:
    autograd through it gives reference gradients."""
    dims = tuple(range(-len(normalized_shape), 0))
    x = x.to(compute_dtype)
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)  # biased, as in LayerNorm
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight.to(compute_dtype)
    if bias is not None:
        y = y + bias.to(compute_dtype)
    return y


def layer_norm_backward_reference(
    dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], eps: float = 1e-5
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The vector-Jacobian products of the tutorial, for 2-D ``x`` and ``dy`` (M, N), in float64.

    ``dx = (w·dy - (x̂·c1 + c2)) · rstd`` with ``c1 = mean(x̂·w·dy)``,
    ``c2 = mean(w·dy)``; ``dw = Σ dy·x̂`` and ``db = Σ dy`` over the rows.
    """
    x, dy = x.double(), dy.double()
    n = x.shape[-1]
    mean = x.mean(dim=-1, keepdim=True)
    rstd = 1.0 / torch.sqrt(((x - mean) ** 2).mean(dim=-1, keepdim=True) + eps)
    x_hat = (x - mean) * rstd
    w_dy = dy * (weight.double() if weight is not None else 1.0)
    c1 = (x_hat * w_dy).sum(dim=-1, keepdim=True) / n
    c2 = w_dy.sum(dim=-1, keepdim=True) / n
    dx = (w_dy - (x_hat * c1 + c2)) * rstd
    return dx, (dy * x_hat).sum(dim=0), dy.sum(dim=0)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``‖actual - expected‖ / ‖expected‖`` in float64 (0 when both are zero)."""
    diff = torch.linalg.vector_norm((actual.double() - expected.double()).flatten())
    norm = torch.linalg.vector_norm(expected.double().flatten())
    return float(diff / norm) if norm > 0 else float(diff)


__all__ = ["layer_norm_reference", "layer_norm_backward_reference", "relative_error"]
