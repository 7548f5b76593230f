"""The default path on the host: input checks, launch configurations, allocation, launches.

The launchers take 2-D views (``M`` rows of ``N`` elements) whose last
dimension is contiguous; :mod:`ln_tutorial.function` builds those views.
Configurations come from the GPU's tuning table (:mod:`ln_tutorial.tuning`);
where a specialised variant (:mod:`ln_tutorial.variants`) is measured to pay,
the call takes it instead, unless the variants are off.
"""

import functools
import struct
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import triton.language as tl

from ln_tutorial import kernels, variants
from ln_tutorial.launcher import GLUON, INTERPRET, Launcher, launcher, sm_count
from ln_tutorial.tuning import MAX_FUSED_BWD_BYTES, MAX_FUSED_FWD_BYTES, BackwardConfig, ForwardConfig, table_for
from ln_tutorial.variants import lock, one_launch, split

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: The two backward strategies, ``"deterministic"`` (persistent grid, per-program
#: partial sums, fixed-order reduction) and ``"lock"`` (the Triton tutorial's).
STRATEGIES = ("deterministic", "lock")

DWDB_BLOCK_N = 256  # columns per program of the wide-row dW/dB kernel
REDUCE_BLOCK_N, REDUCE_BLOCK_P = 32, 128  # tile of the final dW/dB reduction


class Choice(NamedTuple):
    """A launch configuration and why: the table entry or rule it comes from, with its evidence."""

    config: object  # ForwardConfig or BackwardConfig
    why: str


def forward_config(n: int, element_size: int, device: int = -1) -> ForwardConfig:
    """Launch configuration of the forward for rows of ``n`` elements on CUDA device ``device``."""
    return _forward_config(n, element_size, device, variants.ENABLED).config


@functools.lru_cache(maxsize=None)
def _forward_config(n: int, element_size: int, device: int, use_variants: bool) -> Choice:
    table = table_for(device)
    block_n = next_power_of_2(n)
    row_bytes = block_n * element_size
    if row_bytes > MAX_FUSED_FWD_BYTES:
        why = f"rows of {row_bytes} bytes (padded) exceed {MAX_FUSED_FWD_BYTES}: looped"
        return Choice(table.forward_looped, f"{why}; {table.evidence[('forward_looped', 0)]}")
    if element_size == 2:  # rows a power-of-two tile pads: the table's entries for them, first match
        two_tiles = use_variants and GLUON and not INTERPRET  # Gluon runs on a GPU only
        for entry in table.forward_padded.get(row_bytes, ()):
            if n <= entry.longest and (two_tiles or not entry.two_tiles):
                cfg = entry.config
                if entry.two_tiles:  # every lane holds at least one of the tail's columns
                    head = block_n // 2
                    cfg = cfg._replace(block_n=head, tail_n=max(next_power_of_2(n - head), 32 * cfg.num_warps))
                return Choice(cfg, f"forward_padded entry for rows of up to {entry.longest} values: {entry.evidence}")
    if row_bytes < 2048:  # tiny rows: pack them into ~8 KB tiles
        cfg = ForwardConfig(False, min(64, 8192 // row_bytes), block_n, 4)
        return Choice(cfg, "tiny rows: packed several to a program, about 8 KB per program")
    why = f"forward entry for {row_bytes}-byte rows: {table.evidence.get(('forward', row_bytes), '')}"
    return Choice(table.forward[row_bytes]._replace(block_n=block_n), why)


def backward_config(n: int, element_size: int, device: int = -1, share_rows: bool = True) -> BackwardConfig:
    """Launch configuration of the backward for rows of ``n`` elements on CUDA device ``device``.

    ``share_rows=False``: one whose programs do not share rows (no split variant).
    """
    return backward_choice(n, element_size, device, share_rows and variants.ENABLED).config


def backward_choice(n: int, element_size: int, device: int, share_rows: bool) -> Choice:
    """The table's choice, unless it shares rows among more programs than can be resident on the
    GPU (or whose launch was refused): then the choice without shared rows."""
    choice = _backward_config(n, element_size, device, share_rows)
    if choice.config.split and not split.fits(choice.config, n, device):
        return _backward_config(n, element_size, device, False)
    return choice


@functools.lru_cache(maxsize=None)
def _backward_config(n: int, element_size: int, device: int, share_rows: bool) -> Choice:
    table = table_for(device)
    block_n = next_power_of_2(n)
    row_bytes = block_n * element_size
    if row_bytes > MAX_FUSED_BWD_BYTES:
        if share_rows and element_size in table.backward_split:
            why = table.evidence.get(("backward_split", element_size), "")
            why = f"rows past {MAX_FUSED_BWD_BYTES} bytes shared by programs: {why}"
            return Choice(table.backward_split[element_size]._replace(split=True), why)
        why = f"rows past {MAX_FUSED_BWD_BYTES} bytes, not shared: {table.evidence[('backward_looped', 0)]}"
        return Choice(table.backward_looped, why)
    if element_size == 2:
        for entry in table.backward_padded.get(row_bytes, ()):
            if n <= entry.longest and (share_rows or not entry.config.split):
                cfg = entry.config
                if entry.two_tiles:
                    cfg = cfg._replace(block_n=block_n // 2, tail_n=next_power_of_2(n - block_n // 2))
                return Choice(cfg, f"backward_padded entry for rows of up to {entry.longest} values: {entry.evidence}")
    if row_bytes < 2048:
        return Choice(BackwardConfig(False, min(32, 8192 // row_bytes), block_n, 4, 2, 3),
                      "tiny rows: packed several to a loop step")  # fmt: skip
    why = f"backward entry for {row_bytes}-byte rows: {table.evidence.get(('backward', row_bytes), '')}"
    return Choice(table.backward[row_bytes]._replace(block_n=block_n), why)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)``. (``triton.cdiv`` is a JIT function: calling it from Python costs microseconds.)"""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), without ``triton.next_power_of_2``'s call overhead."""
    return 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=64)
def split_eps(eps: float) -> Tuple[float, float]:
    """eps as a float32 value plus the remainder: Triton passes Python floats as float32."""
    eps_hi = struct.unpack("f", struct.pack("f", eps))[0]
    return eps_hi, eps - eps_hi


def compute_dtype(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def torch_compute_dtype(dtype: torch.dtype) -> torch.dtype:
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
    traced: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalize the rows of ``x`` (M, N); return ``y`` (M, N), ``mean`` and ``rstd`` (M,).

    ``traced``: inside ``torch.compile`` (the default path, launched through ``wrap_triton``).
    """
    m, n = x.shape
    y = x.new_empty((m, n))
    stats_dtype = torch_compute_dtype(x.dtype)
    # Two allocations, not one split in two: outputs of a torch.library op must not alias.
    mean = x.new_empty((m,), dtype=stats_dtype)
    rstd = x.new_empty((m,), dtype=stats_dtype)
    if m == 0 or n == 0:
        return y, mean, rstd
    device = x.get_device()
    cfg = config or _forward_config(n, x.element_size(), device, variants.ENABLED and not traced).config
    args = forward_arguments(x, y, weight, bias, mean, rstd, x.stride(0), n, m, n, eps)
    programs = m if cfg.looped or cfg.tail_n else cdiv(m, cfg.block_m)
    forward_launcher(cfg, x.dtype)((programs,), args, traced)
    return y, mean, rstd


def forward_arguments(x, y, weight, bias, mean, rstd, stride_x: int, stride_y: int, m: int, n: int, eps: float) -> dict:
    """The forward kernels' arguments by name: every kernel takes those of its signature."""
    eps_hi, eps_lo = split_eps(eps)
    return dict(X=x, Y=y, W=weight, B=bias, MEAN=mean, RSTD=rstd, stride_x=stride_x, stride_y=stride_y, M=m, N=n,
                eps=eps_hi, eps_lo=eps_lo)  # fmt: skip


@functools.lru_cache(maxsize=None)
def forward_launcher(cfg: ForwardConfig, dtype: torch.dtype) -> Launcher:
    """The forward kernel ``cfg`` selects, with its compile-time arguments."""
    meta = dict(BLOCK_N=cfg.block_n, COMPUTE=compute_dtype(dtype), num_warps=cfg.num_warps)
    if cfg.looped:
        return launcher(kernels.layer_norm_fwd_looped_kernel, **meta)
    if cfg.tail_n and INTERPRET:  # the interpreter cannot run Gluon: one tile of the next power of two
        meta["BLOCK_N"] = next_power_of_2(cfg.block_n + cfg.tail_n)
    elif cfg.tail_n:
        from ln_tutorial.variants import two_tiles  # only with a Triton whose Gluon it is written for

        return launcher(two_tiles.layer_norm_fwd_two_tiles_kernel, TAIL_N=cfg.tail_n, **meta)
    return launcher(kernels.layer_norm_fwd_kernel, BLOCK_M=cfg.block_m, **meta)


def layer_norm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    strategy: str = "deterministic",
    config: Optional[BackwardConfig] = None,
    traced: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Gradients of the layer norm: ``dx`` (M, N), ``dw`` and ``db`` (N,) or None.

    ``dw``/``db`` are returned only for a weight/bias that exists, in its dtype.
    ``traced``: inside ``torch.compile`` (the default path, launched through ``wrap_triton``).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"layer_norm: unknown backward strategy {strategy!r}; expected one of {STRATEGIES}")
    m, n = x.shape
    if dy.stride(-1) != 1:  # the kernels need contiguous rows; row strides are free
        dy = dy.contiguous()
    dx = x.new_empty((m, n))
    params = [p for p in (weight, bias) if p is not None]
    if m == 0 or n == 0:  # a sum over no rows is zero
        return dx, *(None if p is None else torch.zeros_like(p) for p in (weight, bias))
    args = backward_arguments(dy, x, weight, mean, rstd, dx, dy.stride(0), x.stride(0), m, n)
    if strategy == "lock":
        dw, db = lock.backward(args, weight, bias, traced)
        return dx, dw, db
    device = x.get_device()
    use_variants = variants.ENABLED and not traced
    cfg = config or backward_choice(n, x.element_size(), device, use_variants).config
    plan = backward_plan(m, n, x.dtype, device, cfg, weight is not None, bias is not None, use_variants)
    # Only what the first launch needs comes before it: every microsecond of
    # Python before it is a microsecond the GPU may wait.
    # The kernels find the dB partial rows after the dW ones, so one buffer, no views.
    args.update(PARTIAL=mean.new_empty((len(params), plan.programs, n)), P=plan.programs,
                rows_per_program=plan.rows_per_program)  # fmt: skip
    grads = None  # dW/dB, once a launch has added up the partial rows
    try:
        if cfg.split:
            grads = split.run(plan, args, params, device, cfg)
        elif plan.reduce is None:
            grads = one_launch.run(plan, args, params, device, cfg)
        elif cfg.looped:  # wide rows: dx one row per program, then dW/dB on a (column block, row group) grid
            plan.main((m,), args, traced)
            if params:
                plan.dwdb((cdiv(n, DWDB_BLOCK_N), plan.programs), args, traced)
        else:  # persistent: `programs` programs, rows_per_program rows each
            plan.main((plan.programs,), args, traced)
    except one_launch.Refused:  # the GPU cannot hold the grid (a share of it taken): a plan without it
        if config is not None and cfg.split:  # the caller's configuration is kept: its refusal is the caller's
            raise
        backward_plan.cache_clear()
        return layer_norm_backward(dy, x, weight, bias, mean, rstd, strategy, config)
    if not params:
        return dx, None, None
    if grads is None:
        # Second stage: add the partial rows in a fixed order, dW/dB in parallel programs.
        # Separate allocations: outputs of the torch.library backward op must not alias.
        grads = [torch.empty_like(p) for p in params]
        args.update(OUT0=grads[0], OUT1=grads[-1])
        plan.reduce((cdiv(n, REDUCE_BLOCK_N), len(params)), args, traced)
    return dx, grads[0] if weight is not None else None, grads[-1] if bias is not None else None


def backward_arguments(dy, x, weight, mean, rstd, dx, stride_dy: int, stride_x: int, m: int, n: int) -> dict:
    """The backward kernels' row arguments by name (dx is contiguous): each kernel takes those of its signature."""
    return dict(DY=dy, X=x, W=weight, MEAN=mean, RSTD=rstd, DX=dx, stride_dy=stride_dy, stride_x=stride_x,
                stride_dx=n, M=m, N=n)  # fmt: skip


class BackwardPlan(NamedTuple):
    programs: int  # dW/dB partial rows: persistent programs or row groups
    rows_per_program: int  # rows each of them adds up
    parts: int  # programs that share each row (split configurations; else 1)
    main: Launcher  # the persistent or split kernel, or the wide rows' dx kernel
    dwdb: Optional[Launcher]  # wide rows: the kernel of the dW/dB partial rows
    reduce: Optional[Launcher]  # second stage: adds the partial rows (None: main does it)


@functools.lru_cache(maxsize=256)
def backward_plan(
    m: int, n: int, dtype: torch.dtype, device: int, cfg: BackwardConfig, has_dw: bool, has_db: bool, use_variants: bool
) -> BackwardPlan:
    """Grid and kernels of the deterministic backward, worked out once per shape."""
    compute = compute_dtype(dtype)
    if cfg.split:
        return BackwardPlan(*split.plan(m, n, compute, device, cfg, has_dw, has_db))
    programs, rows_per_program = backward_grid(m, n, device, cfg)
    reduce = reduce_launcher(programs)
    dwdb = None
    if cfg.looped:
        main = launcher(
            kernels.layer_norm_bwd_dx_looped_kernel, BLOCK_N=cfg.block_n, COMPUTE=compute, num_warps=cfg.num_warps
        )
        dwdb = launcher(
            kernels.layer_norm_bwd_dwdb_kernel, HAS_DW=has_dw, HAS_DB=has_db, BLOCK_M=cfg.block_m,
            BLOCK_N=DWDB_BLOCK_N, COMPUTE=compute, NUM_STAGES=cfg.num_stages, num_warps=4,
        )  # fmt: skip
    else:
        meta = dict(
            HAS_DW=has_dw, HAS_DB=has_db, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, COMPUTE=compute,
            NUM_STAGES=cfg.num_stages, RELOAD=cfg.reload, TAIL_N=cfg.tail_n, num_warps=cfg.num_warps,
        )  # fmt: skip
        main = launcher(kernels.layer_norm_bwd_persistent_kernel, **meta)
        if use_variants and one_launch.takes(m, n, dtype, device, cfg, has_dw or has_db):
            main, reduce = one_launch.launcher_for(meta, n, has_dw + has_db, programs, cfg), None
    return BackwardPlan(programs, rows_per_program, 1, main, dwdb, reduce)


def reduce_launcher(partial_rows: int) -> Launcher:
    """The second stage's kernel, adding up ``partial_rows`` partial rows per column."""
    return launcher(
        kernels.partial_sum_kernel, BLOCK_P=min(REDUCE_BLOCK_P, next_power_of_2(partial_rows)),
        BLOCK_N=REDUCE_BLOCK_N, num_warps=4,
    )  # fmt: skip


def backward_grid(m: int, n: int, device: int, cfg: BackwardConfig) -> Tuple[int, int]:
    """Number of dW/dB partial rows (programs) and rows per program."""
    if cfg.looped:  # (column block, row group) grid: about 4 programs per SM in all
        target = cdiv(4 * sm_count(device), cdiv(n, DWDB_BLOCK_N))
    else:
        target = sm_count(device) * cfg.programs_per_sm
    rows_per_program = max(cfg.block_m, cdiv(m, target))
    return cdiv(m, rows_per_program), rows_per_program
