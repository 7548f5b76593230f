"""Variant: launch a compiled Triton kernel without Triton's per-call dispatch.

**Takes** eager launches on a GPU while no launch hook is installed. **Gains** host time per call:
``kernel[grid](...)`` binds, specializes and hashes every argument in Python, which costs more than a
small layer norm costs the GPU; here the compiled launcher is called directly (the C++ node launches the
same compiled kernels). **Else** :func:`ln_tutorial.host.run_triton`.
"""

from typing import Tuple

import torch
import triton

from ln_tutorial.host import KernelCall

#: (call, device, *specialization) -> entry. Never dropped: the C++ node holds handles that live as
#: long as their compiled kernel; a configuration has a few specializations.
_compiled: dict = {}


def hooks_installed() -> bool:
    """True while a launch hook is installed (it needs Triton's own launch). Triton 3.x keeps the
    hooks in a ``HookChain`` that is never None, empty unless someone added a hook."""
    hook = triton.knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


def run(call: KernelCall, grid: tuple, args: dict, cluster: int = 1) -> None:
    """Launch ``call`` on ``grid`` with the run-time arguments ``args`` (a dict that may hold more);
    ``cluster`` > 1: each program of the grid's first axis is a cluster of that many programs (the
    kernel is compiled for one; Triton's launcher multiplies the axis and asks the driver for clusters)."""
    values = [args[name] for name in call.names]
    device = values[0].get_device()  # every kernel's first argument is a tensor
    if device < 0:
        raise ValueError(f"layer_norm: the Triton kernels need CUDA tensors; got a tensor on {values[0].device}")
    if device != torch._C._cuda_getDevice():
        with torch.cuda.device(device):  # Triton compiles and launches for the current device
            return run(call, grid, args, cluster)
    entry, addresses = compiled_entry(call, values, device)
    compiled_run, function, (num_warps, _, shared), constexprs, _, _ = entry
    # As Triton's own launch: grid, stream, function, metadata, launch metadata, enter/exit hooks (none),
    # then the kernel's arguments, tensors as addresses.
    compiled_run(
        grid[0], grid[1] if len(grid) > 1 else 1, 1, torch._C._cuda_getCurrentRawStream(device), function,
        (num_warps, cluster, shared), None, None, None, *addresses, *constexprs,
    )  # fmt: skip


def compiled_entry(call: KernelCall, values: list, device: int) -> Tuple[tuple, list]:
    """The compiled kernel for these values on the current device ``device`` (compiled now if new),
    and the values as it takes them. The entry: Triton's compiled launcher, the kernel's handle, its
    packed metadata (warps, CTAs, shared memory), the constants' values, :func:`argument_kinds`, and
    the compiled kernel, which unloads its module (invalidating the handle) when it is freed."""
    specialization, addresses = _specialize(values, device)
    key = (call, device, *specialization)
    entry = _compiled.get(key)
    if entry is None:
        meta = dict(call.meta)
        compiled = call.kernel.warmup(*values, grid=(1,), **meta)  # compiles without launching
        constexprs = tuple(meta[name] for name in call.kernel.arg_names[len(values) :])
        kinds = argument_kinds(compiled, len(values))
        entry = (compiled.run, compiled.function, compiled.packed_metadata, constexprs, kinds, compiled)
        _compiled[key] = entry
    return entry, addresses


def _specialize(values: list, device: int) -> Tuple[list, list]:
    """What Triton specializes the arguments on (triton.runtime.jit: an int above 1, whether it is a
    multiple of 16 and fits in 32 bits, 0 and 1 by value; None and floats by value; a tensor, its dtype
    and 16-byte alignment), and the arguments as its launcher takes them: tensors as addresses, all on
    GPU ``device`` (Triton's launcher would ask the driver about each pointer on every launch)."""
    key, addresses = [], []
    for a in values:
        if a.__class__ is int:
            key.append((a % 16 == 0, a < 2**31) if a > 1 else a)
            addresses.append(a)
        elif a is None or a.__class__ is float:
            key.append(a)
            addresses.append(a)
        else:
            if a.get_device() != device:
                devices = sorted({str(t.device) for t in values if isinstance(t, torch.Tensor)})
                raise ValueError(f"layer_norm: the tensors of one launch must be on one GPU; got tensors on {devices}")
            address = a.data_ptr()
            key.append((a.dtype, address % 16 == 0))
            addresses.append(address)
    return key, addresses


def argument_kinds(compiled, count: int) -> str:
    """How a compiled kernel takes its first ``count`` arguments, one letter each: ``p`` pointer,
    ``i`` int32, ``l`` int64, ``f`` float32, ``c`` constant (not passed), ``?`` anything else. The C++
    node lays out its parameters by it; it passes no scratch memory, so such a kernel is all ``?``."""
    if compiled.metadata.global_scratch_size or compiled.metadata.profile_scratch_size:
        return "?" * count
    letters = {"i32": "i", "i64": "l", "fp32": "f", "constexpr": "c"}
    kinds = list(compiled.src.signature.values())[:count]
    return "".join("p" if kind.startswith("*") else letters.get(kind, "?") for kind in kinds)
