"""Host side: input checks, the launch-configuration table, allocation, launches.

The launchers take 2-D views (``M`` rows of ``N`` elements) whose last
dimension is contiguous; :mod:`ln_tutorial.function` builds those views.
"""

import functools
import os
import re
import struct
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import triton
import triton.language as tl

from ln_tutorial import kernels

#: True when Triton runs kernels on the CPU through its interpreter.
#: Triton reads the variable when kernels are decorated, so it is read once here.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
#: True when Triton's Gluon dialect is the one ``kernels_gluon`` is written for (3.6 and later:
#: Gluon is experimental and changed between releases; 3.5 lacks ``gl.num_warps``).
GLUON = tuple(map(int, re.match(r"(\d+)\.(\d+)", triton.__version__).groups())) >= (3, 6)

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: The two backward strategies, ``"deterministic"`` (persistent grid, per-program
#: partial sums, fixed-order reduction) and ``"lock"`` (the Triton tutorial's).
STRATEGIES = ("deterministic", "lock")

# Rows up to these sizes (in bytes of input) are kept whole in registers; wider
# rows take the looped kernels (the forward; float64 in the backward) or are shared
# by programs (the backward: BACKWARD_WIDE). 64 KB of half-precision input is 128 KB of
# float32 values: half the register file of an SM. The backward also holds
# dW/dB partial sums, so its limit is lower.
MAX_FUSED_FWD_BYTES = 65536
MAX_FUSED_BWD_BYTES = 32768
DWDB_BLOCK_N = 256  # columns per program of the wide-row dW/dB kernel
# Inputs up to this size take the one-launch backward: there the GPU waits for the
# host's second launch; past it the GPU is the bottleneck and two launches measured
# 1-3 % faster end to end.
ONE_LAUNCH_MAX_BYTES = 64 * 2**20
REDUCE_BLOCK_N, REDUCE_BLOCK_P = 32, 128  # tile of the final dW/dB reduction


class ForwardConfig(NamedTuple):
    looped: bool  # two sweeps over a row too wide for registers
    block_m: int  # rows per program (fused) -- 1 when looped
    block_n: int  # power of two covering the row, or the loop step
    num_warps: int
    prefetch_ahead: int = 0  # fused: also bring the rows of program pid + this into L2
    one_exchange: bool = False  # fused, one row: the Gluon kernel, row sums crossing between warps once
    cluster: int = 1  # one_exchange: each row shared by the 2 programs of a thread-block cluster (sm_90+)
    tail_n: int = 0  # one_exchange: a second tile of this width (a power of two) for the columns past block_n


class BackwardConfig(NamedTuple):
    looped: bool  # wide rows: dx kernel with two sweeps, separate dW/dB kernel
    block_m: int  # rows per loop step
    block_n: int  # power of two covering the row, or the loop step
    num_warps: int
    programs_per_sm: int  # persistent grid size = SMs * programs_per_sm
    num_stages: int = 1  # tiles in flight per program (software pipelining)
    reload: bool = False  # read each tile twice rather than hold it across the row sums
    one_launch: bool = True  # persistent kernel on a GPU: the same launch adds up dW/dB (split kernels always do)
    tail_n: int = 0  # a second tile of this width (a power of two) for the columns past block_n
    split: bool = False  # wide rows: cdiv(N, block_n) programs share each row, block_n columns each


# Measured on an H100 with tools/tune.py, keyed by the padded row size in bytes: (rows per
# program, warps) for the forward, (rows per loop step, warps, programs per SM, tiles in flight,
# reload) for the backward. Short rows are packed several to a program so that each program moves
# enough bytes to hide memory latency; long rows get more warps, but past about 32 values per
# thread the extra warps only add reduction overhead. In the backward's loop over its rows, tiles
# in flight > 1 let Triton issue the loads of the next tiles while the current one is reduced and
# stored; at 32 KB rows the tile is read a second time (from L2) instead of being held in
# registers across the row sums.
FORWARD_TABLE = {2048: (8, 4), 4096: (2, 8), 8192: (2, 16), 16384: (1, 16), 32768: (1, 8), 65536: (1, 32)}
# Wider rows loop over 16384-element steps with 32 warps: faster than 8192 with 16 warps
# (1526 against 1303 GB/s at 2048 x 65536 bfloat16).
FORWARD_LOOPED = ForwardConfig(True, 1, 16384, 32)
# Rows of 8 KB (padded): each program also prefetches into L2 the rows of the program 264 later,
# whose loads then come from L2: up to 5 % faster at 4096 x 3072 ... 16384 x 4096, within 1 % in
# float32. Shorter and longer rows lost or did not move.
FORWARD_PREFETCH = {8192: 264}
# Half-precision rows held whole by one program of many warps, by padded row bytes: the Gluon
# kernel, whose warps trade the row sums once instead of twice, with these warps (about 2 % faster
# at 4096 x 32768; 16 warps rather than 8 at 32 KB rows). 16 KB rows and less: no gain.
FORWARD_ONE_EXCHANGE = {65536: 32, 32768: 16}
# Half-precision rows of exactly 65536 values (128 KB), by row bytes: each row shared by the two
# programs of a thread-block cluster, 32 warps each, trading their halves' sums through each
# other's shared memory (about 4 % faster than the looped kernel at 2048 x 65536; clusters of 4 or
# 8 smaller programs were slower). Padded rows of that size loop: the second half would idle.
# Needs clusters, so sm_90 or later; elsewhere the looped kernel.
FORWARD_CLUSTER = {131072: 32}
# Half-precision rows of 4097 to 8191 and 8193 to 12287 values (16 and 32 KB padded), by padded
# row bytes: [(warps, the longest row)]. The Gluon kernel holds such a row as two tiles, half the
# padded width and a power-of-two tail (9728 = 8192 + 2048, 1536 of them used), instead of one
# padded tile, whose idle lanes cost more (up to 11 % at 4608, level at 6144 and 6656). Shorter
# padded rows lost (1536-3584).
FORWARD_TWO_TILES = {16384: [(8, 8191)], 32768: [(8, 10240), (16, 12287)]}
# Half-precision rows that the table's power-of-two tiles pad, by padded row bytes:
# [(configuration, the longest row it takes)], used where FORWARD_TWO_TILES does not apply.
# - 1025 to 1792 values: one row per program with 4 warps (kernels 1 to 9 % shorter);
#   unpadded 2048-value rows keep the table's two rows and 8 warps.
# - 2049 to 4095: 8 warps rather than 16 (up to 14 % faster at 2560).
# - 4097 to 6656: 8 warps rather than 16 (up to 13 % faster at 4608; longer rows not measured).
# - 8193 to 12287: a quarter to a half of the lanes would idle; a loop over 2048-value steps
#   idles none (up to 15 % faster; at 16384 the fused kernel wins).
FORWARD_PADDED = {
    4096: [(ForwardConfig(False, 1, 2048, 4), 1792)],
    8192: [(ForwardConfig(False, 2, 4096, 8, FORWARD_PREFETCH[8192]), 4095)],
    16384: [(ForwardConfig(False, 1, 8192, 8), 6656)],
    32768: [(ForwardConfig(True, 1, 2048, 8), 12287)],
}
BACKWARD_TABLE = {
    2048: (4, 4, 1, 4, False), 4096: (4, 8, 1, 3, False), 8192: (2, 8, 1, 3, False), 16384: (1, 16, 1, 3, False),
    32768: (1, 8, 1, 1, True),
}  # fmt: skip
BACKWARD_LOOPED = BackwardConfig(True, 16, 16384, 32, 1, 3)
# Rows too wide for one program, by element size: shared by programs of 2048 columns, which trade
# their row sums; about 1.45x the looped kernels in half precision, 2x in float32 at 8192 x 16384.
# Half precision: 4 warps, 4 per SM. float32: 8 warps, 2 per SM (4 warps and 4 per SM do not
# fit). float64 rows loop: the trade carries float32 sums.
BACKWARD_SPLIT = BackwardConfig(False, 1, 2048, 4, 4, split=True)
BACKWARD_WIDE = {2: BACKWARD_SPLIT, 4: BackwardConfig(False, 1, 2048, 8, 2, split=True)}
# Half-precision rows that 2048-column parts would share among more than 16 programs: parts of
# 4096 columns, 8 warps, 2 per SM, so half as many programs wait for each row's sums (about 4 %
# faster at 2048 x 65536; at 8192 x 16384 it was slower, so those rows keep BACKWARD_SPLIT).
BACKWARD_SPLIT_WIDEST = BackwardConfig(False, 1, 4096, 8, 2, split=True)
# Half-precision rows of 8193 to 16384 values, by the longest row each entry takes: up to 12288
# values an 8192-wide tile plus a power-of-two tail (9216 = 8192 + 1024), faster there than both
# the padded tile and the split kernel; past that the split kernel, which prefetches its next
# tile, also at 16384 itself.
# An entry: (rows per loop step, warps, programs per SM, tiles in flight, reload, two tiles),
# or a whole configuration.
BACKWARD_PADDED = {32768: [((1, 8, 1, 3, False, True), 12288), (BACKWARD_SPLIT, 16384)]}


def _padded_entry(table: dict, n: int, row_bytes: int, element_size: int):
    """The entry of ``FORWARD_PADDED`` or ``BACKWARD_PADDED`` for a half-precision row of ``n`` values, or None."""
    if element_size == 2:
        for entry, longest in table.get(row_bytes, ()):
            if n <= longest:
                return entry
    return None


@functools.lru_cache(maxsize=None)
def forward_config(n: int, element_size: int) -> ForwardConfig:
    """Launch configuration of the forward for rows of ``n`` elements."""
    block_n = next_power_of_2(n)
    row_bytes = block_n * element_size
    gluon_half = element_size == 2 and GLUON  # the Gluon kernels take half-precision rows only
    if gluon_half and n == block_n and row_bytes in FORWARD_CLUSTER:
        return ForwardConfig(False, 1, block_n, FORWARD_CLUSTER[row_bytes], one_exchange=True, cluster=2)
    if row_bytes > MAX_FUSED_FWD_BYTES:
        return FORWARD_LOOPED
    if gluon_half and n != block_n:
        for num_warps, longest in FORWARD_TWO_TILES.get(row_bytes, ()):
            if n <= longest:
                head = block_n // 2  # every lane holds at least one of the tail's columns
                tail = max(next_power_of_2(n - head), 32 * num_warps)
                return ForwardConfig(False, 1, head, num_warps, one_exchange=True, tail_n=tail)
    padded = _padded_entry(FORWARD_PADDED, n, row_bytes, element_size)
    if padded is not None:
        return padded
    if row_bytes < 2048:  # tiny rows: pack them into ~8 KB tiles
        return ForwardConfig(False, min(64, 8192 // row_bytes), block_n, 4)
    if gluon_half and row_bytes in FORWARD_ONE_EXCHANGE:
        return ForwardConfig(False, 1, block_n, FORWARD_ONE_EXCHANGE[row_bytes], one_exchange=True)
    block_m, num_warps = FORWARD_TABLE[row_bytes]
    return ForwardConfig(False, block_m, block_n, num_warps, FORWARD_PREFETCH.get(row_bytes, 0))


@functools.lru_cache(maxsize=None)
def backward_config(n: int, element_size: int, share_rows: bool = True) -> BackwardConfig:
    """Launch configuration of the backward for rows of ``n`` elements.

    ``share_rows=False``: one whose programs do not share rows, for where the
    split kernel's grid was refused (see :func:`_split_config`).
    """
    block_n = next_power_of_2(n)
    row_bytes = block_n * element_size
    if row_bytes > MAX_FUSED_BWD_BYTES:
        if not share_rows:
            return BACKWARD_LOOPED
        if element_size == 2 and n > 16 * BACKWARD_SPLIT.block_n:
            return BACKWARD_SPLIT_WIDEST
        return BACKWARD_WIDE.get(element_size, BACKWARD_LOOPED)
    padded = _padded_entry(BACKWARD_PADDED, n, row_bytes, element_size)
    if isinstance(padded, BackwardConfig):  # a configuration as it is; without shared rows, the table's tile
        if share_rows or not padded.split:
            return padded
    elif padded is not None:
        block_m, num_warps, per_sm, stages, reload, two_tiles = padded
        head = block_n // 2 if two_tiles else block_n
        tail = next_power_of_2(n - head) if two_tiles else 0
        return BackwardConfig(False, block_m, head, num_warps, per_sm, stages, reload, tail_n=tail)
    if row_bytes < 2048:
        return BackwardConfig(False, min(32, 8192 // row_bytes), block_n, 4, 2, 3)
    block_m, num_warps, per_sm, stages, reload = BACKWARD_TABLE[row_bytes]
    return BackwardConfig(False, block_m, block_n, num_warps, per_sm, stages, reload)


def lock_group_size(n: int) -> int:
    """GROUP_SIZE_M of the Triton tutorial: more buffers for short rows."""
    if n <= 1024:
        return 256
    if n <= 4096:
        return 128
    return 96


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)``. (``triton.cdiv`` is a JIT function: calling it from Python costs microseconds.)"""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), without ``triton.next_power_of_2``'s call overhead."""
    return 1 << (n - 1).bit_length()


# --- launching -----------------------------------------------------------------------------
# ``kernel[grid](...)`` runs Triton's general dispatch in Python on every call:
# binding and specializing each argument, hashing, looking up the cache. On the
# H100 machine this project measured it at 35 us per launch, seven times the
# 4.9 us the forward kernel itself takes at 4096 x 1024: small layer norms were
# bound by Python, not memory. A ``Launcher`` keys compiled kernels by exactly
# the properties Triton specializes on and calls the compiled launcher directly.


def _launch_arguments(args, device: int) -> Tuple[list, list]:
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
    every launch: one loop with the commonest cases first (as fast as the key
    alone, where two comprehensions cost a microsecond more).
    """
    key, values = [], []
    for a in args:
        if a.__class__ is int:
            key.append((a % 16 == 0, a < 2**31) if a > 1 else a)
            values.append(a)
        elif a is None or a.__class__ is float:
            key.append(a)
            values.append(a)
        else:
            if a.get_device() != device:
                devices = sorted({str(t.device) for t in args if isinstance(t, torch.Tensor)})
                raise ValueError(f"layer_norm: the tensors of one launch must be on one GPU; got tensors on {devices}")
            address = a.data_ptr()
            key.append((a.dtype, address % 16 == 0))
            values.append(address)
    return key, values


def _hooks_installed() -> bool:
    """True while a launch hook (a profiler, say) is installed: it needs Triton's own launch path.

    Triton 3.x keeps the hooks in a ``HookChain`` that is never None; it is
    empty unless someone added a hook.
    """
    hook = triton.knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


class Launcher:
    """``kernel[grid](*args, **meta)`` for one kernel and fixed compile-time ``meta``.

    Made once per configuration (``_launcher``), so that a launch hashes only
    what changes from call to call: the device and the arguments' specialization.
    With ``cluster`` > 1 each program of the grid is a cluster of that many
    programs (Triton's launcher multiplies the grid's first axis and asks the
    driver for the clusters); the kernel is compiled for one program.
    """

    def __init__(self, kernel, meta: dict, cluster: int = 1):
        self.kernel, self.meta, self.cluster = kernel, meta, cluster
        self.compiled: dict = {}  # (device, *specialization) -> what the direct launch needs

    def __call__(self, grid: Tuple[int, ...], *args) -> None:
        # Triton's own launch runs the hooks, but knows nothing of clusters compiled for one program.
        if INTERPRET or (_hooks_installed() and self.cluster == 1):
            self.kernel[grid](*args, **self.meta)
            return
        device = args[0].get_device()  # every kernel's first argument is a tensor
        if device < 0:
            raise ValueError(
                "layer_norm: the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1, set before "
                f"importing ln_tutorial, to run them on the CPU); got a tensor on {args[0].device}"
            )
        if device != torch._C._cuda_getDevice():
            with torch.cuda.device(device):  # Triton compiles and launches for the current device
                return self(grid, *args)
        entry, values = self.entry(args, device)
        run, function, packed_metadata, constexprs, _, _ = entry
        # The arguments Triton's own launch passes: grid, stream (torch's raw getter,
        # as Triton uses), function, metadata, launch metadata and the enter/exit
        # hooks (none installed), then the kernel's, tensors as addresses.
        run(
            grid[0], grid[1] if len(grid) > 1 else 1, 1, torch._C._cuda_getCurrentRawStream(device), function,
            packed_metadata, None, None, None, *values, *constexprs,
        )  # fmt: skip

    def entry(self, args, device: int) -> Tuple[tuple, list]:
        """The compiled kernel for these arguments (compiled now if new), and the arguments as it takes them.

        The entry: Triton's compiled launcher, the kernel's handle, its packed
        metadata (warps, CTAs, shared memory), the compile-time arguments' values,
        :func:`_argument_kinds`, and the compiled kernel itself, which unloads its
        module (and so invalidates the handle) when it is freed.
        ``device`` is the current CUDA device.
        """
        specialization, values = _launch_arguments(args, device)
        key = (device, *specialization)
        entry = self.compiled.get(key)
        if entry is None:
            compiled = self.kernel.warmup(*args, grid=(1,), **self.meta)  # compiles without launching
            constexprs = tuple(self.meta[name] for name in self.kernel.arg_names[len(args) :])
            kinds = _argument_kinds(compiled, len(args))
            num_warps, _, shared = compiled.packed_metadata  # (warps, programs per cluster, shared memory)
            packed_metadata = (num_warps, self.cluster, shared)
            entry = (compiled.run, compiled.function, packed_metadata, constexprs, kinds, compiled)
            self.compiled[key] = entry
        return entry, values


def _argument_kinds(compiled, count: int) -> str:
    """How a compiled kernel takes its first ``count`` arguments, for launches made without Triton.

    One letter each: ``p`` a pointer, ``i`` an int32, ``l`` an int64, ``f`` a
    float32, ``c`` a compile-time constant (not passed), ``?`` anything else.
    The C++ extension (:mod:`ln_tutorial.native`) lays out its parameters by
    it; it passes no scratch memory, so a kernel that needs some is all ``?``.
    """
    if compiled.metadata.global_scratch_size or compiled.metadata.profile_scratch_size:
        return "?" * count
    letters = {"i32": "i", "i64": "l", "fp32": "f", "constexpr": "c"}
    kinds = list(compiled.src.signature.values())[:count]
    return "".join("p" if kind.startswith("*") else letters.get(kind, "?") for kind in kinds)


_launchers: dict = {}


def _launcher(kernel, cluster: int = 1, **meta) -> Launcher:
    """The one ``Launcher`` of ``kernel`` with compile-time arguments ``meta``, launched in clusters
    of ``cluster`` programs along the grid's first axis."""
    key = (kernel, cluster, *meta.items())
    if key not in _launchers:
        _launchers[key] = Launcher(kernel, meta, cluster)
    return _launchers[key]


@functools.lru_cache(maxsize=None)
def _sm_count(device: int) -> int:
    """SMs of CUDA device ``device``; -1 (the CPU) is the interpreter."""
    if device >= 0:
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: a few programs are enough to exercise the grid


@functools.lru_cache(maxsize=64)
def _split_eps(eps: float) -> Tuple[float, float]:
    """eps as a float32 value plus the remainder: Triton passes Python floats as float32."""
    eps_hi = struct.unpack("f", struct.pack("f", eps))[0]
    return eps_hi, eps - eps_hi


def _compute_dtype(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _torch_compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_inputs(
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
) -> Tuple[int, ...]:
    """Validate arguments of :func:`ln_tutorial.layer_norm`; return the shape as a tuple.

    Raises ``TypeError`` for unsupported dtypes and ``ValueError`` for shapes
    or devices that do not fit together, each naming the problem.
    """
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"layer_norm: input must be a torch.Tensor, got {type(input).__name__}")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    elif type(normalized_shape) is not tuple or not all(type(d) is int for d in normalized_shape):
        normalized_shape = tuple(int(d) for d in normalized_shape)  # torch.Size, lists, numpy ints
    if input.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"layer_norm: input dtype {input.dtype} is not supported; expected float16, bfloat16, float32 or float64"
        )
    if len(normalized_shape) == 0:
        raise ValueError("layer_norm: normalized_shape must name at least one dimension")
    if tuple(input.shape[input.dim() - len(normalized_shape) :]) != normalized_shape or input.dim() < len(
        normalized_shape
    ):
        raise ValueError(
            f"layer_norm: normalized_shape {list(normalized_shape)} does not match the trailing "
            f"dimensions of input of shape {list(input.shape)}"
        )
    params = [(name, p) for name, p in (("weight", weight), ("bias", bias)) if p is not None]
    for name, param in params:
        if not isinstance(param, torch.Tensor):
            raise TypeError(f"layer_norm: {name} must be a torch.Tensor or None, got {type(param).__name__}")
        if tuple(param.shape) != normalized_shape:
            raise ValueError(
                f"layer_norm: {name} has shape {list(param.shape)}, expected normalized_shape {list(normalized_shape)}"
            )
        if param.device != input.device:
            raise ValueError(f"layer_norm: {name} is on {param.device} but input is on {input.device}")
        if param.dtype != input.dtype and not (
            param.dtype == torch.float32 and input.dtype in (torch.float16, torch.bfloat16)
        ):
            raise TypeError(
                f"layer_norm: {name} dtype {param.dtype} with input dtype {input.dtype} is not supported; "
                "parameters must have the input's dtype, or be float32 with a float16/bfloat16 input"
            )
    if len(params) == 2 and weight.dtype != bias.dtype:
        raise TypeError(f"layer_norm: weight dtype {weight.dtype} differs from bias dtype {bias.dtype}")
    return normalized_shape


def layer_norm_forward(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    config: Optional[ForwardConfig] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalize the rows of ``x`` (M, N); return ``y`` (M, N), ``mean`` and ``rstd`` (M,)."""
    m, n = x.shape
    y = x.new_empty((m, n))
    stats_dtype = _torch_compute_dtype(x.dtype)
    # Two allocations, not one split in two: outputs of a torch.library op must not alias.
    mean = x.new_empty((m,), dtype=stats_dtype)
    rstd = x.new_empty((m,), dtype=stats_dtype)
    if m == 0 or n == 0:
        return y, mean, rstd
    cfg = config or forward_config(n, x.element_size())
    if cfg.cluster > 1 and not INTERPRET and x.is_cuda and not _has_clusters(x.get_device()):
        cfg = FORWARD_LOOPED
    kernel = _forward_launcher(cfg, x.dtype)
    tensors = (x, y, weight, bias, mean, rstd)
    if cfg.looped:  # one row per program
        kernel((m,), *tensors, x.stride(0), y.stride(0), n, *_split_eps(eps))
    else:  # block_m rows per program
        kernel((cdiv(m, cfg.block_m),), *tensors, x.stride(0), y.stride(0), m, n, *_split_eps(eps))
    return y, mean, rstd


@functools.lru_cache(maxsize=None)
def _forward_launcher(cfg: ForwardConfig, dtype: torch.dtype) -> Launcher:
    """The forward kernel ``cfg`` selects, with its compile-time arguments."""
    meta = dict(BLOCK_N=cfg.block_n, COMPUTE=_compute_dtype(dtype), num_warps=cfg.num_warps)
    if cfg.looped:
        return _launcher(kernels.layer_norm_fwd_looped_kernel, **meta)
    prefetch_ahead = 0 if INTERPRET or cfg.block_n < 16 else cfg.prefetch_ahead  # the interpreter runs no PTX
    # The interpreter cannot run Gluon: it runs the Triton kernel, which computes the same function.
    # The interpreter has no clusters either: there each program takes a whole row, in one tile.
    if not cfg.one_exchange or INTERPRET:
        if cfg.tail_n:
            meta["BLOCK_N"] = next_power_of_2(cfg.block_n + cfg.tail_n)
        return _launcher(kernels.layer_norm_fwd_kernel, BLOCK_M=cfg.block_m, PREFETCH_AHEAD=prefetch_ahead, **meta)
    from ln_tutorial import kernels_gluon  # only with a Triton whose Gluon it is written for

    meta.update(BLOCK_M=cfg.block_m, PREFETCH_AHEAD=prefetch_ahead)
    if cfg.cluster > 1:
        return _launcher(kernels_gluon.layer_norm_fwd_cluster_kernel, cluster=cfg.cluster, **meta)
    return _launcher(kernels_gluon.layer_norm_fwd_one_exchange_kernel, TAIL_N=cfg.tail_n, **meta)


@functools.lru_cache(maxsize=None)
def _has_clusters(device: int) -> bool:
    """Whether CUDA device ``device`` launches thread-block clusters (compute capability 9.0 or later)."""
    return torch.cuda.get_device_capability(device) >= (9, 0)


def layer_norm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    strategy: str = "deterministic",
    config: Optional[BackwardConfig] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Gradients of the layer norm: ``dx`` (M, N), ``dw`` and ``db`` (N,) or None.

    ``dw``/``db`` are returned only for a weight/bias that exists, in its dtype.
    """
    m, n = x.shape
    if dy.stride(-1) != 1:  # the kernels need contiguous rows; row strides are free
        dy = dy.contiguous()
    cfg = config or backward_config(n, x.element_size())
    device = x.get_device()
    if cfg.split:
        cfg = _split_config(cfg, n, x.element_size(), device, chosen=config is None)
    has_dw, has_db = weight is not None, bias is not None
    plan = _backward_plan(m, n, x.dtype, device, strategy, cfg, has_dw, has_db)
    dx = x.new_empty((m, n))
    params = [p for p in (weight, bias) if p is not None]
    if m == 0 or n == 0:  # a sum over no rows is zero
        return dx, *(None if p is None else torch.zeros_like(p) for p in (weight, bias))

    # Only what the first launch needs comes before it: every microsecond of
    # Python before it is a microsecond the GPU may wait (docs/performance.md).
    # The kernels find the dB partial rows after the dW ones, so one buffer, no views.
    partial = mean.new_empty((len(params), plan.programs, n))
    row_tensors = (dy, x, weight, mean, rstd, dx)  # the kernels' first six arguments
    strides = (dy.stride(0), x.stride(0), n)  # dx is contiguous
    grads = None  # dW/dB, once a launch has added up the partial rows
    if strategy == "lock":  # one row per program, `programs` locked buffers
        partial_rows = partial.unbind(0)
        lock_and_count = torch.zeros((2, plan.programs), dtype=torch.int32, device=x.device)
        plan.main(
            (m,), *row_tensors, partial_rows[0] if has_dw else None, partial_rows[-1] if has_db else None,
            *lock_and_count, *strides, n,
        )  # fmt: skip
    elif cfg.split:  # `programs` groups of `parts` programs, rows_per_program rows per group
        if plan.reduce is None:  # one launch: records and barrier kept for the stream, never zero-filled
            grads = [torch.empty_like(p) for p in params]  # separate allocations, as below
            barrier, records = _split_state(device, torch._C._cuda_getCurrentRawStream(device), m * plan.parts * 2)
        else:
            barrier, records = None, torch.zeros((m, plan.parts, 2), dtype=torch.int64, device=x.device)
        outs = grads or [dx]  # (no gradient to add up: the kernel writes none)
        try:
            plan.main((plan.programs * plan.parts,), *row_tensors, partial, outs[0], outs[-1], barrier, records,
                      *strides, m, n, plan.rows_per_program)  # fmt: skip
        except RuntimeError as error:
            if config is not None:  # the caller's configuration is kept: its refusal is the caller's to see
                raise
            _remember_refusal(error, device, cfg)  # the configuration without shared rows from now on
            return layer_norm_backward(dy, x, weight, bias, mean, rstd, strategy, config)
    elif plan.reduce is None:  # persistent, and the same programs add up dW/dB after a grid-wide barrier
        grads = [torch.empty_like(p) for p in params]  # separate allocations, as below
        barrier = _grid_barrier(device, torch._C._cuda_getCurrentRawStream(device))
        try:
            arguments = _one_launch_arguments(row_tensors, partial, grads, barrier, strides, m, n, plan)
            plan.main((plan.programs,), *arguments)
        except RuntimeError as error:
            _remember_refusal(error, device, cfg)  # two launches from now on
            return layer_norm_backward(dy, x, weight, bias, mean, rstd, strategy, config)
    elif not cfg.looped:  # persistent: `programs` programs, rows_per_program rows each
        plan.main((plan.programs,), *_persistent_arguments(row_tensors, partial, strides, m, n, plan))
    else:  # wide rows: dx one row per program, then dW/dB on a (column block, row group) grid
        plan.main((m,), *row_tensors, *strides, n)
        if params:
            plan.dwdb(
                (cdiv(n, DWDB_BLOCK_N), plan.programs), dy, x, mean, rstd, partial, dy.stride(0), x.stride(0), m, n,
                plan.rows_per_program,
            )  # fmt: skip
    if not params:
        return dx, None, None
    if grads is None:
        # Second stage: add the partial rows in a fixed order, dW/dB in parallel programs.
        # Separate allocations: outputs of the torch.library backward op must not alias.
        grads = [torch.empty_like(p) for p in params]
        plan.reduce((cdiv(n, REDUCE_BLOCK_N), len(params)), *_reduce_arguments(partial, grads, n, plan))
    return dx, grads[0] if has_dw else None, grads[-1] if has_db else None


# The backward kernels' arguments before their compile-time ones, in order, for
# the launches here and the C++ backward node's (which passes the same arguments
# in the same order, csrc/layer_norm.cpp). ``grads`` holds dW and/or dB: the
# kernels' DW and DB are its first and last, the same tensor when there is one.


def _one_launch_arguments(row_tensors, partial, grads, barrier, strides, m: int, n: int, plan) -> tuple:
    return (*row_tensors, partial, grads[0], grads[-1], barrier, *strides, m, n, plan.rows_per_program)


def _persistent_arguments(row_tensors, partial, strides, m: int, n: int, plan) -> tuple:
    return (*row_tensors, partial, *strides, m, n, plan.rows_per_program)


def _reduce_arguments(partial, grads, n: int, plan) -> tuple:
    return partial, grads[0], grads[-1], plan.programs, n


class BackwardPlan(NamedTuple):
    programs: int  # dW/dB partial rows: persistent programs, row groups or lock buffers
    rows_per_program: int  # rows each of them adds up
    parts: int  # programs that share each row (split configurations; else 1)
    main: Launcher  # the persistent, lock or split kernel, or the wide rows' dx kernel
    dwdb: Optional[Launcher]  # wide rows: the kernel of the dW/dB partial rows
    reduce: Optional[Launcher]  # second stage: adds the partial rows (None: main does it)


@functools.lru_cache(maxsize=256)
def _backward_plan(
    m: int, n: int, dtype: torch.dtype, device: int, strategy: str, cfg: BackwardConfig, has_dw: bool, has_db: bool
) -> BackwardPlan:
    """Grid and kernels of the backward, worked out once per shape (and checked then)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"layer_norm: unknown backward strategy {strategy!r}; expected one of {STRATEGIES}")
    compute = _compute_dtype(dtype)
    programs, rows_per_program = _backward_grid(m, n, device, cfg, strategy)
    parts = cdiv(n, cfg.block_n) if cfg.split and strategy != "lock" else 1
    reduce = _launcher(
        kernels.partial_sum_kernel, BLOCK_P=min(REDUCE_BLOCK_P, next_power_of_2(programs)), BLOCK_N=REDUCE_BLOCK_N,
        num_warps=4,
    )  # fmt: skip
    if strategy == "lock":
        block_n = next_power_of_2(n)
        if block_n * dtype.itemsize > MAX_FUSED_FWD_BYTES:
            raise ValueError(
                f"layer_norm: the 'lock' backward keeps a whole row in registers and supports rows of at "
                f"most {MAX_FUSED_FWD_BYTES} bytes, got {n} elements of {dtype.itemsize} bytes; "
                "use backward_strategy='deterministic'"
            )
        main = _launcher(
            kernels.layer_norm_bwd_lock_kernel, GROUP_SIZE_M=programs, BLOCK_N=block_n, COMPUTE=compute,
            num_warps=min(32, max(4, block_n // 512)),
        )  # fmt: skip
        dwdb = None
    elif cfg.split:
        # The interpreter has no PTX for the prefetch, and runs programs one at a time (no cooperative
        # grid, no barrier): there dW/dB take a second launch and the records are zeroed for each call.
        gpu_only = {} if INTERPRET else {"launch_cooperative_grid": True, "maxnreg": _split_registers(cfg)}
        reduce_meta = _reduce_blocks(n, has_dw + has_db, programs * parts, programs, cfg.num_warps)
        main = _launcher(
            kernels.layer_norm_bwd_split_kernel, HAS_DW=has_dw, HAS_DB=has_db, SPLIT=parts,
            SPLIT_BLOCK=next_power_of_2(parts), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, COMPUTE=compute,
            PREFETCH=not INTERPRET and cfg.block_n >= 16, ONE_LAUNCH=not INTERPRET, num_warps=cfg.num_warps,
            **reduce_meta, **gpu_only,
        )  # fmt: skip
        reduce = reduce if INTERPRET else None
        dwdb = None
    elif not cfg.looped:
        meta = dict(
            HAS_DW=has_dw, HAS_DB=has_db, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, COMPUTE=compute,
            NUM_STAGES=cfg.num_stages, RELOAD=cfg.reload, TAIL_N=cfg.tail_n, num_warps=cfg.num_warps,
        )  # fmt: skip
        # One launch needs every program resident at once (a cooperative launch); the
        # interpreter runs programs one after another, so a barrier would never open there.
        small = m * n * dtype.itemsize <= ONE_LAUNCH_MAX_BYTES
        refused = (device, cfg) in _cooperative_refused
        if cfg.one_launch and (has_dw or has_db) and small and not INTERPRET and not refused:
            main = _launcher(
                kernels.layer_norm_bwd_one_launch_kernel, **meta,
                **_reduce_blocks(n, has_dw + has_db, programs, programs, cfg.num_warps), launch_cooperative_grid=True,
            )  # fmt: skip
            reduce = None
        else:
            main = _launcher(kernels.layer_norm_bwd_persistent_kernel, **meta)
        dwdb = None
    else:
        main = _launcher(
            kernels.layer_norm_bwd_dx_looped_kernel, BLOCK_N=cfg.block_n, COMPUTE=compute, num_warps=cfg.num_warps
        )
        dwdb = _launcher(
            kernels.layer_norm_bwd_dwdb_kernel, HAS_DW=has_dw, HAS_DB=has_db, BLOCK_M=cfg.block_m,
            BLOCK_N=DWDB_BLOCK_N, COMPUTE=compute, NUM_STAGES=cfg.num_stages, num_warps=4,
        )  # fmt: skip
    return BackwardPlan(programs, rows_per_program, parts, main, dwdb, reduce)


def _reduce_blocks(n: int, sets: int, programs: int, partial_rows: int, num_warps: int) -> dict:
    """Tile of the dW/dB reduction that one-launch kernels do after their barrier: column blocks
    of about one per program (M = 0 has no programs), each step 32 values per thread (the
    second kernel has many small programs instead)."""
    block_n = min(1024, max(REDUCE_BLOCK_N, next_power_of_2(cdiv(n * sets, max(programs, 1)))))
    block_p = min(next_power_of_2(partial_rows), max(1, 1024 * num_warps // block_n))
    return dict(REDUCE_BLOCK_P=block_p, REDUCE_BLOCK_N=block_n)


def _split_registers(cfg: BackwardConfig) -> int:
    """Registers per thread that let ``cfg.programs_per_sm`` split programs share an SM.

    An SM has 65536 registers on every NVIDIA GPU since Kepler; a warp's come
    in steps of 8 per thread. Without the cap the prefetch's addresses took the
    half-precision kernel past 128, and its grid was refused.
    """
    threads = cfg.programs_per_sm * cfg.num_warps * 32
    return min(255, 65536 // threads // 8 * 8)


#: (device, configuration) whose one-launch or split backward the driver refused: too many programs.
_cooperative_refused: set = set()


def _remember_refusal(error: RuntimeError, device: int, cfg: BackwardConfig) -> None:
    """Re-raise ``error`` unless the driver refused a cooperative launch: more programs than
    the GPU can hold at once (a share of it taken, say). Then remember ``cfg`` as refused on
    ``device``; its calls take a path without a cooperative grid from then on."""
    if "cooperative launch" not in str(error):
        raise error
    _cooperative_refused.add((device, cfg))
    _backward_plan.cache_clear()


def _split_config(cfg: BackwardConfig, n: int, element_size: int, device: int, chosen: bool) -> BackwardConfig:
    """``cfg`` (split), made to fit: where its programs cannot all be resident, the configuration
    without shared rows (the 16384-wide tile for a padded half-precision row, else the looped kernels).

    ``chosen``: the package chose ``cfg``, so it may change it; a configuration
    the caller gave is kept, and a grid too large fails at the launch.
    The interpreter runs programs one after another, so a program would wait
    forever for a later one: there each row has a single part.
    """
    if INTERPRET:
        return cfg._replace(block_n=next_power_of_2(n))
    too_many = cdiv(n, cfg.block_n) > _sm_count(device) * cfg.programs_per_sm
    if chosen and (too_many or (device, cfg) in _cooperative_refused):
        return backward_config(n, element_size, share_rows=False)
    return cfg


@functools.lru_cache(maxsize=None)
def _grid_barrier(device: int, stream: int) -> torch.Tensor:
    """The state of ``kernels.grid_barrier`` for launches on one stream of one GPU.

    Launches on a stream run one after another, so they can share it; each
    leaves it ready for the next. Zeroed once, here.
    """
    return torch.zeros(2, dtype=torch.int32, device=device)


#: Split launches after which ``_split_state`` zeroes a stream's records again, long before
#: the barrier's generation, which tags them (modulo 2**31), could come round to an old tag.
SPLIT_RECORDS_LIFETIME = 1 << 30
#: Streams whose split records are kept, the most recently used ones, so that a program that
#: makes streams as it goes does not keep their records forever.
SPLIT_STATE_STREAMS = 16
_split_states: dict = {}  # (device, stream) -> (barrier, records, launches), least recently used first


def _split_state(device: int, stream: int, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The one-launch split kernel's barrier and records for launches on one stream of one GPU.

    Launches on a stream run one after another, so they can share them. Records
    are tagged with the barrier's generation (see the kernel), so they are
    zeroed only when they grow, and again every ``SPLIT_RECORDS_LIFETIME``
    launches; the barrier leaves itself ready for the next launch. A stream
    dropped from the ``SPLIT_STATE_STREAMS`` kept starts again from zeroed
    tensors; its old ones are freed to that stream, after its launches.
    """
    barrier, records, launches = _split_states.pop((device, stream), (None, None, 0))
    if barrier is None:
        barrier = torch.zeros(2, dtype=torch.int32, device=device)
    if records is None or records.numel() < size or launches >= SPLIT_RECORDS_LIFETIME:
        records, launches = torch.zeros(size, dtype=torch.int64, device=device), 0
    _split_states[(device, stream)] = (barrier, records, launches + 1)  # now the most recently used
    if len(_split_states) > SPLIT_STATE_STREAMS:
        del _split_states[next(iter(_split_states))]
    return barrier, records


def _backward_grid(m: int, n: int, device: int, cfg: BackwardConfig, strategy: str) -> Tuple[int, int]:
    """Number of dW/dB partial rows (programs or lock groups) and rows per program."""
    if strategy == "lock":
        return min(lock_group_size(n), m), 1  # every buffer gets at least one row
    if cfg.split:  # groups of cdiv(N, block_n) programs, each group a band of rows
        groups = max(1, _sm_count(device) * cfg.programs_per_sm // cdiv(n, cfg.block_n))
        rows_per_group = cdiv(cdiv(m, groups), cfg.block_m) * cfg.block_m
        return cdiv(m, rows_per_group), rows_per_group
    if cfg.looped:  # (column block, row group) grid: about 4 programs per SM in all
        target = cdiv(4 * _sm_count(device), cdiv(n, DWDB_BLOCK_N))
    else:
        target = _sm_count(device) * cfg.programs_per_sm
    rows_per_program = max(cfg.block_m, cdiv(m, target))
    return cdiv(m, rows_per_program), rows_per_program
