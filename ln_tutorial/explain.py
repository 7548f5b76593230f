"""``explain``: which kernels a call takes, with which configuration, and why."""

import math
from typing import Sequence, Union

import torch

from ln_tutorial import launch, variants
from ln_tutorial.launcher import INTERPRET
from ln_tutorial.tuning import table_for
from ln_tutorial.variants import native, one_launch


class Explanation(str):
    """A readable report (it is a ``str``) with the parts as attributes: ``table``, ``host``,
    ``forward_kernel``, ``forward_config``, ``backward_kernels``, ``backward_config``."""


def explain(
    shape: Union[int, Sequence[int]],
    dtype: torch.dtype = torch.float16,
    device: Union[int, str, torch.device, None] = None,
    normalized_dims: int = 1,
) -> Explanation:
    """Say which path ``layer_norm`` takes for an input of ``shape`` and ``dtype``, with a weight and a bias.

    ``device``: the CUDA device (default: the current one; the interpreter's
    table without a GPU). ``normalized_dims``: how many trailing dimensions are
    normalized together.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype not in launch.SUPPORTED_DTYPES:
        raise TypeError(f"explain: dtype {dtype} is not supported; expected float16, bfloat16, float32 or float64")
    if not 1 <= normalized_dims <= len(shape) or any(d < 1 for d in shape):
        raise ValueError(f"explain: shape {list(shape)} with normalized_dims={normalized_dims} has no rows to normalize")
    n = math.prod(shape[len(shape) - normalized_dims :])
    m = math.prod(shape) // n
    index = -1 if INTERPRET or not torch.cuda.is_available() else torch.device("cuda", device).index
    if index is None:
        index = torch.cuda.current_device()
    table, size = table_for(index), dtype.itemsize
    forward = launch._forward_config(n, size, index, variants.ENABLED)
    backward = launch.backward_choice(n, size, index, variants.ENABLED)
    fwd, bwd = forward.config, backward.config
    fwd_kernel = launch.forward_launcher(fwd, dtype).kernel.__name__
    if bwd.split:
        bwd_kernels = ["layer_norm_bwd_split_kernel (variants.split)"]
    elif bwd.looped:
        bwd_kernels = ["layer_norm_bwd_dx_looped_kernel", "layer_norm_bwd_dwdb_kernel", "partial_sum_kernel"]
    elif variants.ENABLED and one_launch.takes(m, n, dtype, index, bwd, True):
        bwd_kernels = ["layer_norm_bwd_one_launch_kernel (variants.one_launch)"]
    else:
        bwd_kernels = ["layer_norm_bwd_persistent_kernel", "partial_sum_kernel"]
    in_cpp = variants.ENABLED and native.ENABLED and index >= 0
    host = (
        "C++ (variants.native): the forward's launch and an autograd node"
        + (" that hands the looped kernels to Python" if bwd.looped else " that launches the backward")
        if in_cpp
        else "Python: ln_tutorial.function and ln_tutorial.launch"
    )
    lines = [
        f"layer_norm of {m} rows x {n} columns, {str(dtype).removeprefix('torch.')}, tuning table '{table.name}'"
        + ("" if variants.ENABLED else ", variants off"),
        f"host: {host}",
        f"forward: {fwd_kernel}  {_fields(fwd)}",
        f"  why: {forward.why}",
        f"backward: {' + '.join(bwd_kernels)}  {_fields(bwd)}",
        f"  why: {backward.why}",
    ]
    report = Explanation("\n".join(lines))
    report.table, report.host = table.name, host
    report.forward_kernel, report.forward_config = fwd_kernel, fwd
    report.backward_kernels, report.backward_config = bwd_kernels, bwd
    return report


def _fields(cfg) -> str:
    defaults = type(cfg)._field_defaults
    return ", ".join(f"{k}={v}" for k, v in cfg._asdict().items() if defaults.get(k, object()) != v)
