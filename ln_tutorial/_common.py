"""Floor 0, what every other module uses: the interpreter flag, the Triton versions the variants were
verified on, one cache rule, integer helpers and the accumulation dtypes. It imports nothing of the package."""

import functools
import os
import re
import struct
import warnings
from typing import Tuple

import torch
import triton
import triton.language as tl

#: True when Triton runs kernels on the CPU through its interpreter. Triton reads the variable when
#: kernels are decorated, so it is read once, here.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

TRITON_VERSION = tuple(int(v) for v in re.match(r"(\d+)\.(\d+)", triton.__version__).groups())
#: Triton releases on which the GPU suite passed with every variant on (H100 and H200). The variants
#: reach into Triton's internals (its compiled launcher, its launch ABI, Gluon, cooperative launches,
#: the layouts behind a spin loop), so on any other release only the default path runs.
VERIFIED_TRITONS = ((3, 6), (3, 9))

#: Entries each cache keeps (launch configurations, compiled kernels, plans, per-stream states): the
#: least recently used go past that, and are worked out again if they come back.
CACHE_SIZE = 256
cache = functools.lru_cache(maxsize=CACHE_SIZE)


def variants_verified() -> bool:
    """True where the variants may run: the interpreter, or a GPU with a verified Triton.
    Elsewhere warns once, naming the version."""
    if INTERPRET or TRITON_VERSION in VERIFIED_TRITONS:
        return True
    _warn_unverified()
    return False


@functools.lru_cache(maxsize=1)
def _warn_unverified() -> None:
    verified = ", ".join(f"{a}.{b}" for a, b in VERIFIED_TRITONS)
    warnings.warn(
        f"ln_tutorial: Triton {triton.__version__} is not one its variants were verified on ({verified}); "
        "every call takes the default kernels with Triton's own launch",
        stacklevel=4,
    )


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)``. (``triton.cdiv`` is a JIT function: calling it from Python costs microseconds.)"""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), without ``triton.next_power_of_2``'s call overhead."""
    return 1 << (n - 1).bit_length()


def split_eps(eps: float) -> Tuple[float, float]:
    """eps as a float32 value plus the remainder: Triton passes Python floats as float32."""
    eps_hi = struct.unpack("f", struct.pack("f", eps))[0]
    return eps_hi, eps - eps_hi


def compute_dtype(dtype: torch.dtype):
    """The kernels' accumulation dtype for inputs of ``dtype``: float64 for float64, else float32."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the row statistics (mean, rstd) and of the dW/dB partial rows: the accumulation dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@cache
def sm_count(device: int) -> int:
    """SMs of CUDA device ``device``; -1 (the CPU) is the interpreter, where a few programs exercise a grid."""
    if device >= 0:
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4
