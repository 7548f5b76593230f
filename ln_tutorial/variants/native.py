"""Variant: small calls in C++ (``csrc/layer_norm.cpp``), the forward's launch and the backward node.

**Takes** eager calls with the variants on: a CUDA tensor with contiguous rows
(cast to float32 first under autocast) and the deterministic backward; the
node launches the backward itself where rows are held in registers (by one
program or shared by several) and a weight or bias is given, and hands the
others to the Python backward.
**Gains** host time per call, which decides the time of small layer norms
(the performance page measures it). **Else** the Python path of
:mod:`ln_tutorial.function`, with the same results bit for bit.


At small sizes the host, not the GPU, decides a layer norm's time: in Python
the checks, allocations and launch arguments of a forward take longer than
its kernel, and so does a Python ``Function.backward`` on the autograd
engine's thread. The extension allocates ``y`` and the row statistics,
launches the compiled forward kernel and, when a gradient will be needed,
gives ``y`` a C++ autograd node that launches the backward kernels without
Python. Every other call, and every gradient the node cannot take as it is,
goes to the Python code, which handles (and checks) every case.

The extension is compiled with :func:`torch.utils.cpp_extension.load` at the
first call with a CUDA tensor (a C++ compiler and ninja are needed; it takes
about 20 s and is cached). If that fails, a warning says so and
``layer_norm`` stays in Python. ``LN_TUTORIAL_NATIVE=0`` turns it off.
"""

import os
import threading
import warnings
from pathlib import Path

import torch
import triton

from ln_tutorial import differentiable, launch
from ln_tutorial.launcher import INTERPRET, Launcher
from ln_tutorial.variants import one_launch, split

#: False keeps every call in Python (the ``autograd.Function`` of :mod:`ln_tutorial.function`).
ENABLED = os.environ.get("LN_TUTORIAL_NATIVE", "1") != "0" and not INTERPRET

_extension = None  # the compiled module, or False after a failed build
_build_lock = threading.Lock()


def extension():
    """The compiled module, built on first use; None if it cannot be built."""
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
            name="ln_tutorial_native",
            sources=[str(Path(__file__).parent / "csrc" / "layer_norm.cpp")],
            extra_include_paths=[str(Path(triton.__file__).parent / "backends" / "nvidia" / "include")],
            extra_cflags=["-O3"],  # load() compiles without optimisation unless told
            extra_ldflags=["-ldl"],
        )
    except Exception as error:  # no compiler, no ninja, headers that do not match
        warnings.warn(
            f"ln_tutorial: the C++ extension could not be built ({type(error).__name__}: {error}); "
            "layer_norm stays in Python, which is slower on the host",
            stacklevel=4,
        )
        return False
    module.set_python_side(_python_backward, forward_plan)
    return module


def _first_forward(input, normalized_shape, weight, bias, eps):
    """``layer_norm(input, normalized_shape, weight, bias, eps)`` in C++ for the common call, else None.

    The first call with a CUDA tensor builds the extension; from then on
    ``forward`` is the extension's own function (or, if it could not be built,
    always None).
    """
    global forward
    if not (isinstance(input, torch.Tensor) and input.is_cuda):
        return None
    module = extension()
    forward = module.forward if module is not None else _python_path
    return forward(input, normalized_shape, weight, bias, eps)


def _python_path(*args):
    return None


#: ``layer_norm``'s call in C++, or None where the Python code must take it (see :func:`_first_forward`).
forward = _first_forward


def _python_backward(saved, dy):
    """What the node hands back: the package's Python backward (saved = x, weight, bias, mean, rstd).

    With grad mode on (``create_graph=True``) the gradients carry their own graph.
    """
    x, weight, bias, mean, rstd = saved
    if dy is None:  # no gradient reached y: zeros, as autograd.Function materializes them
        dy = torch.zeros_like(x)
    if torch.is_grad_enabled():
        return differentiable.layer_norm_backward(dy, x, weight, bias, rstd)
    return launch.layer_norm_backward(dy, x, weight, bias, mean, rstd)


def forward_plan(device, stream, m, n, row_stride, dtype, weight_dtype, bias_dtype, needs_node):
    """What the C++ forward launches for a new kind of call; None: the Python code takes such calls.

    Called by the extension, once per kind. Besides these arguments the
    kernels depend only on their tensors' alignment, which the C++ checks (16
    bytes). Empty tensors (address 0, so aligned) stand in for the tensors.
    """
    with torch.cuda.device(device):  # Triton compiles for the current device
        # without a plan of its own, the node hands the backward to Python
        node = _backward_plan(device, stream, m, n, row_stride, dtype, weight_dtype, bias_dtype) if needs_node else None
        cfg = launch.forward_config(n, dtype.itemsize, device)
        x, stats = _row_stand_ins(dtype, device)
        weight, bias = _stand_in(weight_dtype, device), _stand_in(bias_dtype, device)
        args = launch.forward_arguments(x, x, weight, bias, stats, stats, row_stride, n, m, n, 1e-5)
        programs = m if cfg.looped or cfg.tail_n else launch.cdiv(m, cfg.block_m)
        module = extension()
        kernel = _kernel(launch.forward_launcher(cfg, dtype), args, module.FORWARD_ARGUMENTS, device, (programs, 1))
        return None if kernel is None else module.ForwardPlan(kernel, node)


def _backward_plan(device, stream, m, n, row_stride, dtype, weight_dtype, bias_dtype):
    """The node's kernels; None for the looped kernels of the widest rows, or no dW/dB to add up
    (the Python backward)."""
    if weight_dtype is None and bias_dtype is None:
        return None
    cfg = launch.backward_config(n, dtype.itemsize, device)
    if cfg.looped:  # three launches, and the GPU rather than the host decides there
        return None
    plan = launch.backward_plan(m, n, dtype, device, cfg, weight_dtype is not None, bias_dtype is not None, True)
    x, stats = _row_stand_ins(dtype, device)
    grads = [g for g in (_stand_in(weight_dtype, device), _stand_in(bias_dtype, device)) if g is not None]
    barrier = one_launch.grid_barrier_state(device, stream)
    # the split kernel's records, with a barrier of their own (see split.records_state)
    records = torch.zeros(m * plan.parts * 2, dtype=torch.int64, device=device) if cfg.split else None
    # dy and dx stand in as x, the partial rows as the statistics; dy is contiguous (the node checks)
    args = launch.backward_arguments(x, x, _stand_in(weight_dtype, device), stats, stats, x, n, row_stride, m, n)
    args.update(PARTIAL=stats, OUT0=grads[0], OUT1=grads[-1], BARRIER=barrier, RECORDS=records,
                rows_per_program=plan.rows_per_program, P=plan.programs)  # fmt: skip
    names = extension().BACKWARD_ARGUMENTS
    reduce = None
    if plan.reduce is not None:
        reduce = _kernel(plan.reduce, args, names, device, (launch.cdiv(n, launch.REDUCE_BLOCK_N), len(grads)))
        if reduce is None:
            return None
    kernel = _kernel(plan.main, args, names, device, (plan.programs * plan.parts, 1))
    if kernel is None:
        return None
    return extension().BackwardPlan(kernel, reduce, plan.programs, plan.rows_per_program, stream, barrier, records,
                                    split.RECORDS_LIFETIME)  # fmt: skip


def _row_stand_ins(dtype, device: int):
    """Stand-ins for row tensors (x, y, dy, dx) and for the statistics (and partial rows)."""
    return _stand_in(dtype, device), _stand_in(launch.torch_compute_dtype(dtype), device)


def _stand_in(dtype, device: int):
    return None if dtype is None else torch.empty(0, dtype=dtype, device=device)


def _kernel(kernel: Launcher, args: dict, names: list, device: int, grid: tuple):
    """The extension's ``Kernel`` for ``kernel`` (compiled now if new); None if it cannot launch it.

    ``names``: the arguments the extension passes, in the order of its values; the kernel's
    own signature says which of them it takes, in which order.
    """
    if not set(kernel.names) <= set(names):
        return None
    (_, function, (num_warps, _, shared), _, kinds, _), _ = kernel.entry([args[name] for name in kernel.names], device)
    if "?" in kinds:
        return None
    slots = [names.index(name) for name in kernel.names]
    return extension().Kernel(function, 32 * num_warps, shared, *grid, kinds, slots)
