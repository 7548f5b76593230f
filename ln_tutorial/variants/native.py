"""Variant: the common call's host side in C++ (``csrc/layer_norm.cpp``): the forward's launch and
the backward as an autograd node.

**Takes** eager deterministic calls on a GPU whose input has contiguous rows; the C++ code declines
the rest (its header comment lists its rules). Its node launches the backward of rows held in
registers (by one program or shared by several) with a weight or bias, and hands the others to the
Python backward. What it launches for a new kind of call is asked of ``dispatch.cpp_forward_plan``
once. **Gains** host time per call, which decides small layer norms and training steps (the
performance page measures both). **Else** the Python path, with the same results bit for bit.

The extension is compiled on first need, which prints one line (about 25 s on the H100 machines,
then cached in ``~/.cache/torch_extensions``); ``python -m ln_tutorial`` builds it ahead. Without a
C++ compiler and ninja a warning says so and calls stay in Python. ``LN_TUTORIAL_NATIVE=0`` turns it off.
"""

import os
import sys
import threading
import time
import warnings
from pathlib import Path

import torch
import triton

from ln_tutorial._common import INTERPRET
from ln_tutorial.host import KernelCall
from ln_tutorial.variants.fast_launch import compiled_entry

#: False keeps every call in Python.
ENABLED = os.environ.get("LN_TUTORIAL_NATIVE", "1") != "0" and not INTERPRET
NAME = "ln_tutorial_native"
SOURCE = Path(__file__).parent / "csrc" / "layer_norm.cpp"

#: The functions the extension calls back (python_backward, forward_plan), given by the dispatcher.
python_side = None
_extension = None  # the compiled module, or False after a failed build
_build_lock = threading.Lock()


def extension():
    """The compiled module, built on first use; None if it cannot be built."""
    global _extension
    if _extension is None:
        with _build_lock:
            if _extension is None:
                _extension = build()
    return _extension or None


def build():
    """Compile (or load the cached build of) the extension; False if it cannot be built."""
    from torch.utils.cpp_extension import _get_build_directory, load

    cached = any(Path(_get_build_directory(NAME, verbose=False)).glob(f"{NAME}*.so"))
    if not cached:
        print(f"ln_tutorial: compiling its C++ extension ({SOURCE.name}) once (about 25 s); cached afterwards",
              file=sys.stderr, flush=True)  # fmt: skip
    start = time.perf_counter()
    try:
        module = load(
            name=NAME,
            sources=[str(SOURCE)],
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
    if not cached:
        print(f"ln_tutorial: C++ extension ready in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    module.set_python_side(*python_side)
    return module


def forward(input, normalized_shape, weight, bias, eps):
    """``layer_norm(input, normalized_shape, weight, bias, eps)`` in C++ for the common call; None
    where the Python path must take it (or the extension cannot be built)."""
    if _extension is None and not (isinstance(input, torch.Tensor) and input.is_cuda):
        return None  # no GPU call yet: nothing to build for
    module = extension()
    return None if module is None else module.forward(input, normalized_shape, weight, bias, eps)


def kernel_for(call: KernelCall, args: dict, names: list, device: int, grid: tuple):
    """The extension's ``Kernel`` for ``call`` (compiled now if new), or why it cannot launch it.

    ``names``: the arguments the extension passes, in the order of its values; the kernel's own
    signature says which of them it takes, in which order.
    """
    if not set(call.names) <= set(names):
        return None, f"{call.kernel.__name__} takes arguments the C++ side does not pass"
    (_, function, (num_warps, _, shared), _, kinds, _), _ = compiled_entry(call, [args[n] for n in call.names], device)
    if "?" in kinds:
        return None, f"{call.kernel.__name__} needs scratch memory or argument types the C++ launch does not pass"
    slots = [names.index(name) for name in call.names]
    return extension().Kernel(function, 32 * num_warps, shared, *grid, kinds, slots), ""

