"""The home-made launcher: launches a compiled Triton kernel without Triton's per-call dispatch.

``kernel[grid](...)`` runs Triton's general dispatch in Python on every call:
binding and specializing each argument, hashing, looking up the cache. On the
H100 (Triton 3.6) that dispatch costs more host time than a small layer norm
costs the GPU (the performance page measures it), so in eager mode a
:class:`Launcher` keys the compiled kernels by exactly the properties Triton
specializes on and calls the compiled launcher directly. The C++ extension
(:mod:`ln_tutorial.variants.native`) launches the same compiled kernels.

Arguments are passed by name: a kernel's own signature is the one place their
order is written. With the variants off (:mod:`ln_tutorial.variants`), under
the interpreter, while a launch hook is installed, and inside
``torch.compile`` (through :func:`torch.library.wrap_triton`) every launch is
Triton's own.
"""

import functools
import os
import re
from typing import Tuple

import torch
import triton

from ln_tutorial import variants

#: True when Triton runs kernels on the CPU through its interpreter.
#: Triton reads the variable when kernels are decorated, so it is read once here.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
#: True when Triton's Gluon dialect is the one ``variants.two_tiles`` is written for (3.6 and later).
GLUON = tuple(map(int, re.match(r"(\d+)\.(\d+)", triton.__version__).groups())) >= (3, 6)


def hooks_installed() -> bool:
    """True while a launch hook (a profiler, say) is installed: it needs Triton's own launch path.

    Triton 3.x keeps the hooks in a ``HookChain`` that is never None; it is
    empty unless someone added a hook.
    """
    hook = triton.knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


class Launcher:
    """``kernel[grid](**args, **meta)`` for one kernel and fixed compile-time ``meta``.

    Made once per configuration (:func:`launcher`), so that a launch hashes only
    what changes from call to call: the device and the arguments' specialization.
    """

    def __init__(self, kernel, meta: dict):
        self.kernel, self.meta = kernel, meta
        #: The kernel's run-time arguments, in its signature's order: its schema.
        self.names = tuple(name for name in kernel.arg_names if name not in meta)
        self.compiled: dict = {}  # (device, *specialization) -> what the direct launch needs

    def __call__(self, grid: Tuple[int, ...], args: dict, traced: bool = False) -> None:
        """Launch on ``grid`` with the run-time arguments ``args`` (a dict that may hold more)."""
        values = [args[name] for name in self.names]
        if traced:  # inside a torch.library.triton_op: torch.compile sees the kernel
            torch.library.wrap_triton(self.kernel)[grid](*values, **self.meta)
            return
        if INTERPRET or not variants.ENABLED or hooks_installed():
            self.kernel[grid](*values, **self.meta)
            return
        device = values[0].get_device()  # every kernel's first argument is a tensor
        if device < 0:
            raise ValueError(
                "layer_norm: the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1, set before "
                f"importing ln_tutorial, to run them on the CPU); got a tensor on {values[0].device}"
            )
        if device != torch._C._cuda_getDevice():
            with torch.cuda.device(device):  # Triton compiles and launches for the current device
                return self(grid, args)
        entry, addresses = self.entry(values, device)
        run, function, packed_metadata, constexprs, _, _ = entry
        # The arguments Triton's own launch passes: grid, stream (torch's raw getter,
        # as Triton uses), function, metadata, launch metadata and the enter/exit
        # hooks (none installed), then the kernel's, tensors as addresses.
        run(
            grid[0], grid[1] if len(grid) > 1 else 1, 1, torch._C._cuda_getCurrentRawStream(device), function,
            packed_metadata, None, None, None, *addresses, *constexprs,
        )  # fmt: skip

    def entry(self, values: list, device: int) -> Tuple[tuple, list]:
        """The compiled kernel for these argument values (compiled now if new), and the values as it takes them.

        The entry: Triton's compiled launcher, the kernel's handle, its packed
        metadata (warps, CTAs, shared memory), the compile-time arguments' values,
        :func:`argument_kinds`, and the compiled kernel itself, which unloads its
        module (and so invalidates the handle) when it is freed.
        ``device`` is the current CUDA device.
        """
        specialization, addresses = _specialize(values, device)
        key = (device, *specialization)
        entry = self.compiled.get(key)
        if entry is None:
            compiled = self.kernel.warmup(*values, grid=(1,), **self.meta)  # compiles without launching
            constexprs = tuple(self.meta[name] for name in self.kernel.arg_names[len(values) :])
            kinds = argument_kinds(compiled, len(values))
            entry = (compiled.run, compiled.function, compiled.packed_metadata, constexprs, kinds, compiled)
            self.compiled[key] = entry
        return entry, addresses


def _specialize(values: list, device: int) -> Tuple[list, list]:
    """What Triton specializes the arguments on, and the arguments as its compiled launcher takes them.

    Tensors are passed as their addresses: given a tensor, Triton's launcher
    calls its ``data_ptr`` method and asks the driver whether the address is
    device memory, for every tensor of every launch; an integer it takes as is.
    That check is made here instead, and stricter: every tensor must be on
    GPU ``device``.

    What Triton specializes on (see triton.runtime.jit), argument by argument:
    an int above 1, whether it is a multiple of 16 and fits in 32 bits (0 and 1
    become constants, so they count by value); None and floats, their value; a
    tensor, its dtype and whether its address is 16-byte aligned. This runs on
    every launch: one loop with the commonest cases first.
    """
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
    """How a compiled kernel takes its first ``count`` arguments, for launches made without Triton.

    One letter each: ``p`` a pointer, ``i`` an int32, ``l`` an int64, ``f`` a
    float32, ``c`` a compile-time constant (not passed), ``?`` anything else.
    The C++ extension (:mod:`ln_tutorial.variants.native`) lays out its parameters by
    it; it passes no scratch memory, so a kernel that needs some is all ``?``.
    """
    if compiled.metadata.global_scratch_size or compiled.metadata.profile_scratch_size:
        return "?" * count
    letters = {"i32": "i", "i64": "l", "fp32": "f", "constexpr": "c"}
    kinds = list(compiled.src.signature.values())[:count]
    return "".join("p" if kind.startswith("*") else letters.get(kind, "?") for kind in kinds)


_launchers: dict = {}


def launcher(kernel, **meta) -> Launcher:
    """The one :class:`Launcher` of ``kernel`` with compile-time arguments ``meta``."""
    key = (kernel, *meta.items())
    if key not in _launchers:
        _launchers[key] = Launcher(kernel, meta)
    return _launchers[key]


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    """SMs of CUDA device ``device``; -1 (the CPU) is the interpreter."""
    if device >= 0:
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: a few programs are enough to exercise the grid
