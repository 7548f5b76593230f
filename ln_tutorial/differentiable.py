"""The backward in torch operations, for gradients that are themselves differentiated (grad mode on in
the backward: ``create_graph=True``), which the kernels' numbers cannot carry. ``eps`` is not saved: the
forward's ``rstd`` stands in, since ``c = 1 / rstd² - var`` is a constant like ``eps`` and
``1 / sqrt(var(x) + c)`` has the real ``rstd``'s value and derivatives of every order at this ``x``.
"""

from typing import Optional, Tuple

import torch


def layer_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], rstd: torch.Tensor
) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """``dx, dw, db`` of a layer norm over the last dimension of ``x``, differentiable in ``dy``, ``x`` and ``weight``.

    ``rstd`` holds one value per row of ``x``; a missing weight or bias gets None.
    """
    n = x.shape[-1]
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    x_rows, dy_rows = x.reshape(-1, n).to(compute), dy.reshape(-1, n).to(compute)
    centred = x_rows - x_rows.mean(dim=-1, keepdim=True)
    var = (centred * centred).mean(dim=-1, keepdim=True)
    var_plus_eps = rstd.detach().to(compute).reshape(-1, 1).reciprocal().square()
    rstd_of_x = torch.rsqrt(var + (var_plus_eps - var.detach()))
    x_hat = centred * rstd_of_x
    w_dy = dy_rows if weight is None else dy_rows * weight.to(compute)
    c1 = (x_hat * w_dy).mean(dim=-1, keepdim=True)
    c2 = w_dy.mean(dim=-1, keepdim=True)
    dx = ((w_dy - (x_hat * c1 + c2)) * rstd_of_x).to(x.dtype).reshape(x.shape)
    dw = None if weight is None else (dy_rows * x_hat).sum(dim=0).to(weight.dtype)
    db = None if bias is None else dy_rows.sum(dim=0).to(bias.dtype)
    return dx, dw, db

