"""Floor 2, the default path on the host: input checks, launch configurations from the tuning table,
allocation and the launches of the default kernels, on 2-D views (``M`` rows of ``N`` elements, the
last dimension contiguous). ``run`` launches a :class:`KernelCall`: Triton's own launch
(:func:`run_triton`) or the faster one of :mod:`ln_tutorial.variants.fast_launch`, as
:mod:`ln_tutorial.dispatch` decides.
"""

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import torch

from ln_tutorial import kernels
from ln_tutorial._common import SUPPORTED_DTYPES, cache, cdiv, compute_dtype, next_power_of_2, sm_count, split_eps, stats_dtype
from ln_tutorial.tuning import MAX_FUSED_BWD_BYTES, MAX_FUSED_FWD_BYTES, BackwardConfig, ForwardConfig, table_for

#: ``"deterministic"`` (persistent grid, per-program partial sums, fixed-order reduction) and
#: ``"lock"`` (the Triton tutorial's).
STRATEGIES = ("deterministic", "lock")

DWDB_BLOCK_N = 256  # columns per program of the wide-row dW/dB kernel
REDUCE_BLOCK_N, REDUCE_BLOCK_P = 32, 128  # tile of the final dW/dB reduction
SMALL_BYTES_PER_SM = 32768  # less (padded) input per SM than this: a call lasts about one program (see small_call)
FEW_ROWS_PER_SM = 4  # fewer rows per SM than this: no other row's loads hide those of w and b


class KernelCall(NamedTuple):
    """A kernel with its compile-time arguments; ``names``: its run-time arguments, in its signature's order."""

    kernel: object
    meta: tuple  # (name, value) pairs
    names: tuple


@cache
def _kernel_call(kernel, meta: tuple) -> KernelCall:
    return KernelCall(kernel, meta, tuple(name for name in kernel.arg_names if name not in dict(meta)))


def kernel_call(kernel, **meta) -> KernelCall:
    """The :class:`KernelCall` of ``kernel`` with compile-time arguments ``meta``."""
    return _kernel_call(kernel, tuple(meta.items()))


def run_triton(call: KernelCall, grid: tuple, args: dict) -> None:
    """``kernel[grid](...)``: Triton's own launch, arguments taken by name from ``args``."""
    call.kernel[grid](*[args[name] for name in call.names], **dict(call.meta))


Run = Callable[[KernelCall, tuple, dict], None]


class Choice(NamedTuple):
    """A launch configuration and why: the table entry or rule it comes from, with its evidence."""

    config: object  # ForwardConfig or BackwardConfig
    why: str


@cache
def forward_choice(n: int, element_size: int, device: int, two_tiles: bool, small: bool = False,
                   params_first: bool = False) -> Choice:  # fmt: skip
    """The forward's configuration for rows of ``n`` elements on CUDA device ``device`` (-1: the
    interpreter); ``two_tiles``: the table's two-tile entries may be taken (a variant); ``small`` and
    ``params_first``: :func:`small_call` of the call (latency-bound: the table is tuned on many rows)."""
    table = table_for(device)
    block_n = next_power_of_2(n)
    row_bytes = block_n * element_size
    if row_bytes > MAX_FUSED_FWD_BYTES:
        why = f"rows of {row_bytes} bytes (padded) exceed {MAX_FUSED_FWD_BYTES}: looped"
        return Choice(table.forward_looped, f"{why}; {table.evidence[('forward_looped', 0)]}")
    padded = table.forward_padded.get(row_bytes, ())
    padded = [e for e in padded if n <= e.longest and not (e.two_tiles and (small or not two_tiles))]
    if element_size == 2 and padded:  # rows a power-of-two tile pads: the table's entries for them, first match
        cfg, why = padded[0].config, f"forward_padded entry for rows of up to {padded[0].longest} values: "
        why += padded[0].evidence
        if padded[0].two_tiles:  # every lane holds at least one of the tail's columns
            tail_n = max(next_power_of_2(n - block_n // 2), 32 * cfg.num_warps)
            return Choice(cfg._replace(block_n=block_n // 2, tail_n=tail_n), why)
    elif row_bytes < 2048:  # tiny rows: pack them into ~8 KB tiles
        cfg = ForwardConfig(looped=False, block_m=min(64, 8192 // row_bytes), block_n=block_n, num_warps=4)
        return Choice(cfg, "tiny rows: packed several to a program, about 8 KB per program")
    else:
        cfg = table.forward[row_bytes]
        cfg = cfg if cfg.looped else cfg._replace(block_n=block_n)  # a looped entry's step is its own
        why = f"forward entry for {row_bytes}-byte rows: {table.evidence.get(('forward', row_bytes), '')}"
    if small and not cfg.looped:  # one row a program, one tile; w and b early where no other row hides them
        warps, first = 4 if row_bytes < 4096 else 8, params_first and row_bytes <= 16384
        cfg = cfg._replace(block_m=1, num_warps=warps, params_first=first)
        why = f"small input: {warps} warps a row"
    return Choice(cfg, why + (", w and b loaded with x" if cfg.params_first else ""))


def small_call(m: int, n: int, element_size: int, device: int) -> Tuple[bool, bool]:
    """Whether ``m`` rows of ``n`` values leave the SMs short of work (less than ``SMALL_BYTES_PER_SM``
    of padded rows a SM), and whether they are also fewer than ``FEW_ROWS_PER_SM`` rows a SM."""
    sms = sm_count(device)
    small = m * next_power_of_2(n) * element_size < SMALL_BYTES_PER_SM * sms
    return small, small and m < FEW_ROWS_PER_SM * sms


@cache
def backward_choice(n: int, element_size: int, device: int, share_rows: bool) -> Choice:
    """The backward's configuration for rows of ``n`` elements; ``share_rows``: the table's entries
    whose rows are shared by programs may be taken (a variant)."""
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
        cfg = BackwardConfig(looped=False, block_m=min(32, 8192 // row_bytes), block_n=block_n, num_warps=4,
                             programs_per_sm=2, num_stages=3)  # fmt: skip
        return Choice(cfg, "tiny rows: packed several to a loop step")
    why = f"backward entry for {row_bytes}-byte rows: {table.evidence.get(('backward', row_bytes), '')}"
    return Choice(table.backward[row_bytes]._replace(block_n=block_n), why)


def check_inputs(input: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor],
                 bias: Optional[torch.Tensor]) -> Tuple[int, ...]:  # fmt: skip
    """Validate the arguments of :func:`ln_tutorial.layer_norm`; return the shape as a tuple.
    ``TypeError`` for types and dtypes, ``ValueError`` for shapes and devices, each naming the argument."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"layer_norm: input must be a torch.Tensor, got {type(input).__name__}")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    elif type(normalized_shape) is not tuple or not all(type(d) is int for d in normalized_shape):
        normalized_shape = tuple(int(d) for d in normalized_shape)  # torch.Size, lists, numpy ints
    if input.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"layer_norm: input dtype {input.dtype} is not supported; {_DTYPES}")
    if not normalized_shape:
        raise ValueError("layer_norm: normalized_shape must name at least one dimension")
    if not is_trailing_shape(input, normalized_shape):
        raise ValueError(f"layer_norm: normalized_shape {list(normalized_shape)} does not match the trailing "
                         f"dimensions of input of shape {list(input.shape)}")  # fmt: skip
    params = [(name, p) for name, p in (("weight", weight), ("bias", bias)) if p is not None]
    for name, param in params:
        if not isinstance(param, torch.Tensor):
            raise TypeError(f"layer_norm: {name} must be a torch.Tensor or None, got {type(param).__name__}")
        if tuple(param.shape) != normalized_shape:
            raise ValueError(f"layer_norm: {name} has shape {list(param.shape)}, expected normalized_shape "
                             f"{list(normalized_shape)}")  # fmt: skip
        if param.device != input.device:
            raise ValueError(f"layer_norm: {name} is on {param.device} but input is on {input.device}")
        if param.dtype != input.dtype and not (param.dtype == torch.float32 and input.dtype in _HALF):
            raise TypeError(f"layer_norm: {name} dtype {param.dtype} with input dtype {input.dtype} is not supported; "
                            "parameters must have the input's dtype, or be float32 with a float16/bfloat16 input")  # fmt: skip
    if len(params) == 2 and weight.dtype != bias.dtype:
        raise TypeError(f"layer_norm: weight dtype {weight.dtype} differs from bias dtype {bias.dtype}")
    return normalized_shape


def is_trailing_shape(input: torch.Tensor, normalized_shape: Tuple[int, ...]) -> bool:
    """Whether ``normalized_shape`` is the input's trailing dimensions."""
    n = len(normalized_shape)
    return input.dim() >= n and input.shape[input.dim() - n :] == normalized_shape


_DTYPES = "expected float16, bfloat16, float32 or float64"
_HALF = (torch.float16, torch.bfloat16)


def forward_arguments(x, y, weight, bias, mean, rstd, stride_x: int, stride_y: int, m: int, n: int, eps: float) -> dict:
    """The forward kernels' arguments by name: every kernel takes those of its signature."""
    eps_hi, eps_lo = split_eps(eps)
    return dict(X=x, Y=y, W=weight, B=bias, MEAN=mean, RSTD=rstd, stride_x=stride_x, stride_y=stride_y, M=m, N=n,
                eps=eps_hi, eps_lo=eps_lo)  # fmt: skip


def forward_call(cfg: ForwardConfig, dtype: torch.dtype, n: int) -> KernelCall:
    """The default forward kernel that ``cfg`` selects for rows of ``n`` values, with its compile-time
    arguments (the looped kernel's include ``n``: it compiles once per row width)."""
    meta = dict(BLOCK_N=cfg.block_n, COMPUTE=compute_dtype(dtype), num_warps=cfg.num_warps)
    if cfg.looped:
        return kernel_call(kernels.layer_norm_fwd_looped_kernel, N=n, **meta)
    return kernel_call(kernels.layer_norm_fwd_kernel, BLOCK_M=cfg.block_m, PARAMS_FIRST=cfg.params_first, **meta)


def forward_grid(m: int, cfg: ForwardConfig) -> tuple:
    """Programs of the forward: one per row when looped or in two tiles, else one per ``block_m`` rows."""
    return (m if cfg.looped or cfg.tail_n else cdiv(m, cfg.block_m),)


def layer_norm_forward(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    cfg: ForwardConfig,
    call: KernelCall,
    run: Run,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalize the rows of ``x`` (M, N) with ``call`` in configuration ``cfg``; return ``y`` (M, N),
    ``mean`` and ``rstd`` (M,)."""
    m, n = x.shape
    y = x.new_empty((m, n))
    mean = x.new_empty((m,), dtype=stats_dtype(x.dtype))
    rstd = x.new_empty((m,), dtype=stats_dtype(x.dtype))
    if m and n:
        run(call, forward_grid(m, cfg), forward_arguments(x, y, weight, bias, mean, rstd, x.stride(0), n, m, n, eps))
    return y, mean, rstd


def backward_arguments(dy, x, weight, mean, rstd, dx, stride_dy: int, stride_x: int, m: int, n: int) -> dict:
    """The backward kernels' row arguments by name (dx is contiguous): each kernel takes those of its signature."""
    return dict(DY=dy, X=x, W=weight, MEAN=mean, RSTD=rstd, DX=dx, stride_dy=stride_dy, stride_x=stride_x,
                stride_dx=n, M=m, N=n)  # fmt: skip


class BackwardPlan(NamedTuple):
    programs: int  # dW/dB partial rows: persistent programs or row groups
    rows_per_program: int  # rows each of them adds up
    parts: int  # programs that share each row (shared-row configurations; else 1)
    main: KernelCall  # the persistent, one-launch or shared-row kernel, or the wide rows' dx kernel
    dwdb: Optional[KernelCall]  # wide rows: the kernel of the dW/dB partial rows
    reduce: Optional[KernelCall]  # second stage: adds the partial rows (None: main does it)


@cache
def backward_plan(m: int, n: int, dtype: torch.dtype, device: int, cfg: BackwardConfig, has_dw: bool,
                  has_db: bool) -> BackwardPlan:  # fmt: skip
    """Grid and kernels of the default deterministic backward, worked out once per shape."""
    compute = compute_dtype(dtype)
    programs, rows_per_program = backward_grid(m, n, device, cfg)
    dwdb = None
    if cfg.looped:
        main = kernel_call(
            kernels.layer_norm_bwd_dx_looped_kernel, BLOCK_N=cfg.block_n, COMPUTE=compute, num_warps=cfg.num_warps
        )
        dwdb = kernel_call(
            kernels.layer_norm_bwd_dwdb_kernel, HAS_DW=has_dw, HAS_DB=has_db, BLOCK_M=cfg.block_m,
            BLOCK_N=DWDB_BLOCK_N, COMPUTE=compute, NUM_STAGES=cfg.num_stages, num_warps=4,
        )  # fmt: skip
    else:
        main = kernel_call(kernels.layer_norm_bwd_persistent_kernel, **persistent_meta(cfg, compute, has_dw, has_db))
    return BackwardPlan(programs, rows_per_program, 1, main, dwdb, reduce_call(programs))


def persistent_meta(cfg: BackwardConfig, compute, has_dw: bool, has_db: bool) -> dict:
    """The persistent kernel's compile-time arguments (the one-launch variant takes them too)."""
    return dict(HAS_DW=has_dw, HAS_DB=has_db, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, COMPUTE=compute,
                NUM_STAGES=cfg.num_stages, RELOAD=cfg.reload, TAIL_N=cfg.tail_n, num_warps=cfg.num_warps)  # fmt: skip


def reduce_call(partial_rows: int) -> KernelCall:
    """The second stage's kernel, adding up ``partial_rows`` partial rows per column."""
    return kernel_call(
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


def backward_setup(dy, x, weight, bias, mean, rstd):
    """``dx`` (allocated) and the backward's arguments by name; None for the arguments of an empty input."""
    m, n = x.shape
    if dy.stride(-1) != 1:  # the kernels need contiguous rows; row strides are free
        dy = dy.contiguous()
    dx = x.new_empty((m, n))
    if m == 0 or n == 0:
        return dx, None
    return dx, backward_arguments(dy, x, weight, mean, rstd, dx, dy.stride(0), x.stride(0), m, n)


def add_plan_arguments(args: dict, plan: BackwardPlan, sets: int) -> None:
    """The partial rows' buffer (the dB rows after the dW ones: one buffer, no views) and the grid's numbers."""
    args.update(PARTIAL=args["MEAN"].new_empty((sets, plan.programs, args["N"])), P=plan.programs,
                rows_per_program=plan.rows_per_program)  # fmt: skip


def run_backward_plan(plan: BackwardPlan, args: dict, cfg: BackwardConfig, sets: int, run: Run) -> None:
    """Launch the default path's first stage: dx and the dW/dB partial rows."""
    if cfg.looped:  # dx one row per program, then dW/dB on a (column block, row group) grid
        run(plan.main, (args["M"],), args)
        if sets:
            run(plan.dwdb, (cdiv(args["N"], DWDB_BLOCK_N), plan.programs), args)
    else:  # persistent: `programs` programs, rows_per_program rows each
        run(plan.main, (plan.programs,), args)


def add_partial_rows(plan: BackwardPlan, args: dict, params: list, run: Run) -> list:
    """Second stage: the partial rows added in a fixed order, dW/dB in parallel programs."""
    grads = [torch.empty_like(p) for p in params]
    args.update(OUT0=grads[0], OUT1=grads[-1])
    run(plan.reduce, (cdiv(args["N"], REDUCE_BLOCK_N), len(params)), args)
    return grads
