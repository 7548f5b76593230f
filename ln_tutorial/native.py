"""The backward of small inputs as a C++ autograd node (``csrc/backward_node.cpp``).

At the tutorial's small sizes the backward is timed on the host: the autograd
engine calls a Python ``Function.backward`` on its device thread, and that
Python (allocations, the launch's arguments) takes longer than the kernel
(docs/performance.md, runs 51 and 53). Where the backward is one launch,
``layer_norm`` gives its output a C++ node instead, which allocates and
launches the same compiled kernel without Python and hands every other case
back to the Python backward. The gradients are the same bits either way.

The node is compiled with :func:`torch.utils.cpp_extension.load` the first
time it is needed (a C++ compiler and ninja are needed; it takes about 20 s
and is cached). If that fails, a warning says so and ``layer_norm`` keeps
the Python backward. ``LN_TUTORIAL_NATIVE=0`` turns the node off.
"""

import functools
import os
import threading
import warnings
from pathlib import Path
from typing import Optional

import torch
import triton
from torch.autograd import forward_ad

from ln_tutorial import launch

#: False turns the C++ node off (the Python ``autograd.Function`` everywhere).
ENABLED = os.environ.get("LN_TUTORIAL_NATIVE", "1") != "0" and not launch.INTERPRET

_extension = None  # the compiled module, or False after a failed build
_build_lock = threading.Lock()


def extension():
    """The compiled node's module, built on first use; None if it cannot be built."""
    global _extension
    if _extension is None:
        with _build_lock:
            if _extension is None:
                _extension = _build()
    return _extension or None


def _build():
    from torch.utils.cpp_extension import load

    try:
        module = load(
            name="ln_tutorial_backward_node",
            sources=[str(Path(__file__).parent / "csrc" / "backward_node.cpp")],
            extra_include_paths=[str(Path(triton.__file__).parent / "backends" / "nvidia" / "include")],
            extra_ldflags=["-ldl"],
        )
    except Exception as error:  # no compiler, no ninja, headers that do not match
        warnings.warn(
            f"ln_tutorial: the C++ backward node could not be built ({type(error).__name__}: {error}); "
            "small backwards run in Python, which is slower on the host",
            stacklevel=3,
        )
        return False
    module.set_python_backward(_python_backward)
    return module


@torch.autograd.function.once_differentiable
def _python_backward(saved, dy):
    """What the node hands back: the package's Python backward (saved = x, weight, bias, mean, rstd)."""
    x, weight, bias, mean, rstd = saved
    if dy is None:  # no gradient reached y: zeros, as autograd.Function materializes them
        dy = torch.zeros_like(x)
    return launch.layer_norm_backward(dy, x, weight, bias, mean, rstd)


def backward_plan(x: torch.Tensor, weight, bias, strategy: str) -> Optional[launch.BackwardPlan]:
    """The one-launch plan of this input's backward if the node can take it, else None."""
    if not ENABLED or strategy != "deterministic" or (weight is None and bias is None):
        return None
    if not torch.is_grad_enabled() or forward_ad._current_level >= 0:  # no graph, or forward-mode AD
        return None
    tensors = [t for t in (x, weight, bias) if t is not None]
    if not any(t.requires_grad for t in tensors) or any(t.data_ptr() % 16 for t in tensors):
        return None
    m, n = x.shape
    if m == 0 or n == 0:
        return None
    cfg = launch.backward_config(n, x.element_size())
    plan = launch._backward_plan(m, n, x.dtype, x.get_device(), strategy, cfg, weight is not None, bias is not None)
    if plan.reduce is not None or extension() is None:  # two launches: the GPU, not the host, decides there
        return None
    return plan


def layer_norm(x, weight, bias, eps: float, plan: launch.BackwardPlan) -> torch.Tensor:
    """The forward, its output given the C++ node as grad_fn (``plan`` from :func:`backward_plan`)."""
    device = x.get_device()
    if device != torch._C._cuda_getDevice():  # Triton compiles and launches for the current device
        with torch.cuda.device(device):
            return layer_norm(x, weight, bias, eps, plan)
    y, mean, rstd = launch.layer_norm_forward(x, weight, bias, eps)  # plain kernels: no graph recorded
    stream = torch._C._cuda_getCurrentRawStream(device)
    dtypes = [None if p is None else p.dtype for p in (weight, bias)]
    node_plan = _node_plan(plan, device, stream, *x.shape, x.stride(0), x.dtype, *dtypes)
    extension().attach(y, x, weight, bias, mean, rstd, node_plan)
    return y


@functools.lru_cache(maxsize=256)
def _node_plan(
    plan: launch.BackwardPlan, device: int, stream: int, m: int, n: int, row_stride: int, dtype, weight_dtype, bias_dtype
):
    """The node's ``Plan``: the compiled kernel (compiled now if new) and how to launch it.

    Besides these arguments the kernel depends only on its tensors' alignment,
    which :func:`backward_plan` and the node check. Empty tensors (address 0,
    so aligned) of the right dtypes stand in for the node's tensors.
    """

    def like(tensor_dtype):
        return None if tensor_dtype is None else torch.empty(0, dtype=tensor_dtype, device=device)

    x, stats = like(dtype), like(launch._torch_compute_dtype(dtype))
    weight = like(weight_dtype)
    grads = [p for p in (weight, like(bias_dtype)) if p is not None]
    barrier = launch._grid_barrier(device, stream)
    # dy and dx stand in as x, the partial rows as the statistics; dy is contiguous (the node checks)
    row_tensors, strides = (x, x, weight, stats, stats, x), (n, row_stride, n)
    args = launch._one_launch_arguments(row_tensors, stats, grads, barrier, strides, m, n, plan)
    (_, function, (num_warps, _, shared), _, kinds, _), _ = plan.main.entry(args, device)
    if "?" in kinds:  # a kernel the node cannot launch: it calls the Python backward
        function, kinds = 0, "c" * len(args)
    return extension().Plan(function, 32 * num_warps, shared, plan.programs, plan.rows_per_program, kinds, stream,
                            barrier)  # fmt: skip
