"""``explain``: which kernels a call takes, on which host path, with which configuration, and why, from
the functions that choose for the calls themselves (:mod:`ln_tutorial.dispatch`)."""

import math
from typing import Sequence, Union

import torch

from ln_tutorial import dispatch, variants
from ln_tutorial._common import INTERPRET, SUPPORTED_DTYPES, TRITON_VERSION, variants_verified
from ln_tutorial.tuning import table_for
from ln_tutorial.variants import fast_launch, native


class Explanation(str):
    """A readable report (it is a ``str``) with the parts as attributes: ``table``, ``host``,
    ``forward_kernel``, ``forward_config``, ``backward_kernels``, ``backward_config``."""


def explain(
    shape: Union[int, Sequence[int]],
    dtype: torch.dtype = torch.float16,
    device: Union[int, str, torch.device, None] = None,
    normalized_dims: int = 1,
) -> Explanation:
    """Say which path ``layer_norm`` takes for a contiguous input of ``shape`` and ``dtype``, with a weight and a bias.

    ``device``: the CUDA device (default: the current one; the interpreter's
    table without a GPU). ``normalized_dims``: how many trailing dimensions are
    normalized together.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"explain: dtype {dtype} is not supported; expected float16, bfloat16, float32 or float64")
    if not 1 <= normalized_dims <= len(shape) or any(d < 1 for d in shape):
        raise ValueError(f"explain: shape {list(shape)} with normalized_dims={normalized_dims} has no rows to normalize")
    n = math.prod(shape[len(shape) - normalized_dims :])
    m = math.prod(shape) // n
    gpu = torch.cuda.is_available() and not INTERPRET
    index = torch.device("cuda", device).index if gpu else -1
    if gpu and index is None:
        index = torch.cuda.current_device()
    use_variants = dispatch.variants_on()
    forward = dispatch.forward_path(m, n, dtype, index, use_variants)
    backward = dispatch.backward_path(m, n, dtype, index, True, True, use_variants)
    host = _host(n, dtype, gpu, backward)
    lines = [
        f"layer_norm of {m} rows x {n} columns, {str(dtype).removeprefix('torch.')}, tuning table "
        f"'{table_for(index).name}'" + ("" if use_variants else ", variants off"),
        f"host: {host}",
        f"forward: {forward.call.kernel.__name__}  {_fields(forward.config)}",
        f"  why: {forward.why}",
        f"backward: {' + '.join(backward.kernels)}  {_fields(backward.config)}",
        f"  why: {backward.why}",
    ]
    if not gpu and not INTERPRET:
        lines.insert(1, "no GPU and TRITON_INTERPRET unset: a call on this machine runs torch.nn.functional.layer_norm; "
                        "below, what a GPU with this table runs")  # fmt: skip
    report = Explanation("\n".join(lines))
    report.table, report.host = table_for(index).name, host
    report.forward_kernel, report.forward_config = forward.call.kernel.__name__, forward.config
    report.backward_kernels, report.backward_config = list(backward.kernels), backward.config
    return report


def _host(n: int, dtype: torch.dtype, gpu: bool, backward) -> str:
    """The host path of an eager call, and why the C++ node does not take it where it does not."""
    python = "Python (ln_tutorial.function -> dispatch -> host)"
    launch = "the variants' fast launch" if dispatch.runner() is fast_launch.run else "Triton's own launch"
    if INTERPRET or not gpu:
        return f"{python}, Triton's interpreter" if INTERPRET else python
    if not dispatch.cpp_takes_calls():
        why = ("LN_TUTORIAL_NATIVE=0" if not native.ENABLED else "variants off" if not variants.ENABLED
               else f"Triton {'.'.join(map(str, TRITON_VERSION))} not verified" if not variants_verified()
               else "a launch hook is installed")  # fmt: skip
        return f"{python}, {launch} (the C++ node is off: {why})"
    if native._extension is False:
        return f"{python}, {launch} (the C++ extension could not be built)"
    declined = dispatch.cpp_declined.get((n, dtype))
    if declined:
        return f"C++ node for the forward; backward in {python}: {declined}"
    if backward.config.looped:
        return f"C++ node for the forward; backward in {python}: the node hands the looped kernels to Python"
    return "C++ node (variants.native): the forward's launch and an autograd node that launches the backward"


def _fields(cfg) -> str:
    defaults = type(cfg)._field_defaults
    return ", ".join(f"{k}={v}" for k, v in cfg._asdict().items() if defaults.get(k, object()) != v)
