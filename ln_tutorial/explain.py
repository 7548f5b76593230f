"""``explain``: which kernels a call takes, with which configuration, and why."""

import math
from typing import Sequence, Union

import torch

from ln_tutorial import launch, variants
from ln_tutorial.launcher import INTERPRET
from ln_tutorial.tuning import MAX_FUSED_BWD_BYTES, MAX_FUSED_FWD_BYTES, table_for
from ln_tutorial.variants import native, one_launch, split


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
    table = table_for(index)
    size = dtype.itemsize
    fwd = launch.forward_config(n, size, index)
    bwd = launch.backward_config(n, size, index)
    if bwd.split:
        bwd = split.fit(bwd, n, size, index, chosen=True)
    fwd_kernel = launch.forward_launcher(fwd, dtype).kernel.__name__
    if bwd.split:
        bwd_kernels = ["layer_norm_bwd_split_kernel (variants.split)"]
    elif bwd.looped:
        bwd_kernels = ["layer_norm_bwd_dx_looped_kernel", "layer_norm_bwd_dwdb_kernel", "partial_sum_kernel"]
    elif variants.ENABLED and one_launch.takes(m, n, dtype, index, bwd, True):
        bwd_kernels = ["layer_norm_bwd_one_launch_kernel (variants.one_launch)"]
    else:
        bwd_kernels = ["layer_norm_bwd_persistent_kernel", "partial_sum_kernel"]
    fits = not bwd.looped and not bwd.split
    host = (
        "C++ (variants.native): launches and the autograd node without Python"
        if variants.ENABLED and native.ENABLED and index >= 0 and fits
        else "Python: ln_tutorial.function and ln_tutorial.launch"
    )
    lines = [
        f"layer_norm of {m} rows x {n} columns, {str(dtype).removeprefix('torch.')}, tuning table '{table.name}'"
        + ("" if variants.ENABLED else ", variants off"),
        f"host: {host}",
        f"forward: {fwd_kernel}  {_fields(fwd)}",
        f"  why: {_forward_reason(n, size, fwd, table)}",
        f"backward: {' + '.join(bwd_kernels)}  {_fields(bwd)}",
        f"  why: {_backward_reason(n, size, bwd, table)}",
    ]
    report = Explanation("\n".join(lines))
    report.table, report.host = table.name, host
    report.forward_kernel, report.forward_config = fwd_kernel, fwd
    report.backward_kernels, report.backward_config = bwd_kernels, bwd
    return report


def _fields(cfg) -> str:
    defaults = type(cfg)._field_defaults
    return ", ".join(f"{k}={v}" for k, v in cfg._asdict().items() if defaults.get(k, object()) != v)


def _row_bytes(n: int, size: int) -> int:
    return launch.next_power_of_2(n) * size


def _table_reason(direction: str, n: int, size: int, cfg, table, tiny: str) -> str:
    """Why a row that fits in registers takes ``cfg``: a padded entry, the tiny-row rule, or the table's entry."""
    row_bytes = _row_bytes(n, size)
    kind = (bool(cfg.tail_n), getattr(cfg, "split", False))  # two tiles, shared rows
    for entry in table._asdict()[f"{direction}_padded"].get(row_bytes, ()) if size == 2 else ():
        if n <= entry.longest and (entry.two_tiles, getattr(entry.config, "split", False)) == kind:
            return f"{direction}_padded entry for rows of up to {entry.longest} values: {entry.evidence}"
    if row_bytes < 2048:
        return tiny
    return f"{direction} entry for {row_bytes}-byte rows: {table.evidence.get((direction, row_bytes), '')}"


def _forward_reason(n: int, size: int, cfg, table) -> str:
    row_bytes = _row_bytes(n, size)
    if row_bytes > MAX_FUSED_FWD_BYTES:
        why = table.evidence[("forward_looped", 0)]
        return f"rows of {row_bytes} bytes (padded) exceed {MAX_FUSED_FWD_BYTES}: looped; {why}"
    tiny = "tiny rows: packed several to a program, about 8 KB per program"
    return _table_reason("forward", n, size, cfg, table, tiny)


def _backward_reason(n: int, size: int, cfg, table) -> str:
    if cfg.split and _row_bytes(n, size) > MAX_FUSED_BWD_BYTES:
        why = table.evidence.get(("backward_split", size), "")
        return f"rows past {MAX_FUSED_BWD_BYTES} bytes shared by programs: {why}"
    if cfg.looped:
        return f"rows past {MAX_FUSED_BWD_BYTES} bytes, no split variant: {table.evidence[('backward_looped', 0)]}"
    return _table_reason("backward", n, size, cfg, table, "tiny rows: packed several to a loop step")
