"""Floor 4, the one place that chooses the path of a call -- the default path (:mod:`ln_tutorial.host`)
or a variant (:mod:`ln_tutorial.variants`) -- and how kernels are launched.

A common call (GPU, eager, variants on) goes ``function.layer_norm`` -> the C++ node, which asks
:func:`cpp_forward_plan` once per kind of call what to launch. Calls it declines go
``function.LayerNormFunction`` -> :func:`layer_norm_forward` / :func:`layer_norm_backward`, which
launch what :func:`forward_path` / :func:`backward_path` choose through :func:`runner`.
:func:`ln_tutorial.explain` answers from the same functions.
"""

from typing import NamedTuple, Optional, Tuple

import torch

from ln_tutorial import differentiable, host, variants
from ln_tutorial._common import INTERPRET, cache, compute_dtype, next_power_of_2, stats_dtype, variants_verified
from ln_tutorial.host import STRATEGIES, BackwardPlan, KernelCall
from ln_tutorial.tuning import BackwardConfig, ForwardConfig, table_for
from ln_tutorial.variants import cluster, cooperative, fast_launch, lock, native, one_launch, split


def variants_on() -> bool:
    """The variants may run: switched on (:func:`ln_tutorial.use_variants`) and a verified Triton."""
    return variants.ENABLED and variants_verified()


def cpp_takes_calls() -> bool:
    """Eager deterministic calls go to the C++ node first (it declines what it cannot take)."""
    return native.ENABLED and variants_on() and not fast_launch.hooks_installed()


def runner() -> host.Run:
    """How kernels are launched: the variant that skips Triton's per-call dispatch, or Triton's
    own launch (variants off or unverified, the interpreter, a launch hook installed)."""
    if variants_on() and not INTERPRET and not fast_launch.hooks_installed():
        return fast_launch.run
    return host.run_triton


class ForwardPath(NamedTuple):
    config: ForwardConfig
    why: str
    call: KernelCall


class BackwardPath(NamedTuple):
    config: BackwardConfig
    why: str
    plan: BackwardPlan
    kernels: Tuple[str, ...]  # what runs, in order, with the variant that brings it


def forward_path(m: int, n: int, dtype: torch.dtype, device: int, use_variants: bool) -> ForwardPath:
    """The forward's configuration and kernel for ``m`` rows of ``n`` values of ``dtype`` on ``device``."""
    return _forward_path(n, dtype, device, use_variants, *host.small_call(m, n, dtype.itemsize, device))


@cache
def _forward_path(n, dtype, device, use_variants, small, params_first) -> ForwardPath:
    two_tiles = use_variants and not INTERPRET  # Gluon: GPU only
    choice = host.forward_choice(n, dtype.itemsize, device, two_tiles, small, params_first)
    return ForwardPath(choice.config, choice.why, forward_call(choice.config, dtype, n))


def forward_call(cfg: ForwardConfig, dtype: torch.dtype, n: int) -> KernelCall:
    if not cfg.tail_n:
        return host.forward_call(cfg, dtype, n)
    if INTERPRET:  # it cannot run Gluon: one program per row, in one tile of the next power of two
        return host.forward_call(cfg._replace(block_n=next_power_of_2(cfg.block_n + cfg.tail_n), tail_n=0), dtype, n)
    from ln_tutorial.variants import two_tiles  # Gluon: imported only where the variants run

    return host.kernel_call(two_tiles.layer_norm_fwd_two_tiles_kernel, BLOCK_N=cfg.block_n,
                            COMPUTE=compute_dtype(dtype), TAIL_N=cfg.tail_n, num_warps=cfg.num_warps)  # fmt: skip


def forward_config(n: int, element_size: int, device: int = -1) -> ForwardConfig:
    """The forward configuration that calls with rows of ``n`` values take on ``device``."""
    return host.forward_choice(n, element_size, device, variants_on() and not INTERPRET).config


def backward_config(n: int, element_size: int, device: int = -1) -> BackwardConfig:
    """The backward configuration that calls with rows of ``n`` values take on ``device``."""
    return backward_choice(n, element_size, device, variants_on()).config


def backward_choice(n: int, element_size: int, device: int, use_variants: bool) -> host.Choice:
    """The table's choice, with the programs sharing a row in a cluster where the GPU's table lists
    such rows; unless it shares rows among more programs than the GPU holds at once (or whose launch
    was refused): then the choice without shared rows."""
    choice = host.backward_choice(n, element_size, device, use_variants)
    if choice.config.split and element_size == 2 and device >= 0:
        table = table_for(device)
        row_bytes = next_power_of_2(n) * element_size
        if cluster.takes(n, device, table.backward_cluster.get(row_bytes)):
            why = f"shared rows traded in a thread-block cluster: {table.evidence[('backward_cluster', row_bytes)]}"
            return host.Choice(table.backward_cluster[row_bytes], why)
    if choice.config.split and not split.fits(choice.config, n, device):
        cfg, why = host.backward_choice(n, element_size, device, False)
        return host.Choice(cfg, why + " (the shared-row configuration does not fit on this GPU)")
    return choice


def backward_path(m: int, n: int, dtype: torch.dtype, device: int, has_dw: bool, has_db: bool,
                  use_variants: bool, config: Optional[BackwardConfig] = None) -> BackwardPath:  # fmt: skip
    """The backward's configuration, plan and kernels (``config``: the caller's configuration instead)."""
    if config is None:
        cfg, why = backward_choice(n, dtype.itemsize, device, use_variants)
    else:
        cfg, why = config, "the caller's configuration"
    one = use_variants and not (cfg.split or cfg.looped)
    one = one and one_launch.takes(m, n, dtype, device, cfg, has_dw or has_db)
    return _backward_path(m, n, dtype, device, cfg, why, has_dw, has_db, one)


@cache
def _backward_path(m, n, dtype, device, cfg, why, has_dw, has_db, one) -> BackwardPath:
    compute = compute_dtype(dtype)
    if cfg.cluster:
        return BackwardPath(cfg, why, cluster.plan(m, n, compute, device, cfg, has_dw, has_db),
                            ("layer_norm_bwd_cluster_kernel (variants.cluster)",))  # fmt: skip
    if cfg.split:
        plan = split.plan(m, n, compute, device, cfg, has_dw, has_db)
        kernels = ("layer_norm_bwd_split_kernel (variants.split)",) + (("partial_sum_kernel",) if plan.reduce else ())
        return BackwardPath(cfg, why, plan, kernels)
    plan = host.backward_plan(m, n, dtype, device, cfg, has_dw, has_db)
    if one:
        call = one_launch.call_for(host.persistent_meta(cfg, compute, has_dw, has_db), n, has_dw + has_db,
                                   plan.programs, cfg)  # fmt: skip
        return BackwardPath(cfg, why, plan._replace(main=call, reduce=None),
                            ("layer_norm_bwd_one_launch_kernel (variants.one_launch)",))  # fmt: skip
    if cfg.looped:
        return BackwardPath(cfg, why, plan, ("layer_norm_bwd_dx_looped_kernel", "layer_norm_bwd_dwdb_kernel",
                                             "partial_sum_kernel"))  # fmt: skip
    return BackwardPath(cfg, why, plan, ("layer_norm_bwd_persistent_kernel", "partial_sum_kernel"))


def layer_norm_forward(x, weight, bias, eps: float, config: Optional[ForwardConfig] = None):
    """``y``, ``mean``, ``rstd`` of the rows of ``x`` (M, N); ``config``: the caller's configuration."""
    _check_device(x)
    m, n = x.shape
    if config is not None:
        return host.layer_norm_forward(x, weight, bias, eps, config, forward_call(config, x.dtype, n), runner())
    path = forward_path(m, n, x.dtype, x.get_device(), variants_on())
    return host.layer_norm_forward(x, weight, bias, eps, path.config, path.call, runner())


def layer_norm_backward(dy, x, weight, bias, mean, rstd, strategy: str = "deterministic",
                        config: Optional[BackwardConfig] = None):  # fmt: skip
    """Gradients of the layer norm: ``dx`` (M, N), ``dw`` and ``db`` (N,) in the parameters' dtype, or None."""
    if strategy not in STRATEGIES:
        raise ValueError(f"layer_norm: unknown backward strategy {strategy!r}; expected one of {STRATEGIES}")
    _check_device(x)
    dx, args = host.backward_setup(dy, x, weight, bias, mean, rstd)
    params = [p for p in (weight, bias) if p is not None]
    if args is None:  # a sum over no rows is zero
        return dx, *(None if p is None else torch.zeros_like(p) for p in (weight, bias))
    run = runner()
    if strategy == "lock":
        return (dx, *lock.backward(args, weight, bias, run))
    m, n = x.shape
    device = x.get_device()
    use_variants = variants_on()
    while True:  # a refused cooperative launch is remembered, so the next path is another
        path = backward_path(m, n, x.dtype, device, weight is not None, bias is not None, use_variants, config)
        host.add_plan_arguments(args, path.plan, len(params))
        try:
            if path.config.cluster:
                grads = cluster.run(path.plan, args, params, device, path.config)
            elif path.config.split:
                grads = split.run(path.plan, args, params, device, path.config, run)
            elif path.plan.reduce is None:
                grads = one_launch.run(path.plan, args, params, device, path.config, run)
            else:
                host.run_backward_plan(path.plan, args, path.config, len(params), run)
                grads = None
            break
        except cooperative.Refused:
            if config is not None and config.split:  # the caller's configuration: its refusal is the caller's
                raise
    if not params:
        return dx, None, None
    if grads is None:
        grads = host.add_partial_rows(path.plan, args, params, run)
    return dx, grads[0] if weight is not None else None, grads[-1] if bias is not None else None


def python_backward(saved, dy, strategy: str = "deterministic"):
    """The Python backward, of :class:`function.LayerNormFunction` and of what the C++ node hands back
    (saved = x, weight, bias, mean, rstd). With grad mode on (``create_graph=True``) the gradients
    carry their own graph."""
    x, weight, bias, mean, rstd = saved
    if dy is None:  # no gradient reached y: zeros, as autograd.Function materializes them
        dy = torch.zeros_like(x)
    if torch.is_grad_enabled():
        return differentiable.layer_norm_backward(dy, x, weight, bias, rstd)
    return layer_norm_backward(dy, x, weight, bias, mean, rstd, strategy)


#: (n, dtype) -> why the C++ side gave the Python code calls of that kind ("" when it took them).
cpp_declined: dict = {}


def cpp_forward_plan(device, stream, m, n, row_stride, dtype, weight_dtype, bias_dtype, needs_node):
    """What the C++ forward launches for a new kind of call (None: Python takes such calls), asked once
    per kind. The kernels depend otherwise only on alignment, which the C++ checks: empty (aligned)
    tensors stand in for the tensors."""
    path = forward_path(m, n, dtype, device, True)
    if path.config.looped and dtype == torch.float32 and {weight_dtype, bias_dtype} & {torch.float16, torch.bfloat16}:
        # Python casts them first; read uncast, they set the looped kernel's layout and so its order of sums
        cpp_declined[(n, dtype)] = "the looped forward sums in another order when it reads half parameters uncast"
        return None
    with torch.cuda.device(device):  # Triton compiles for the current device
        node, why = None, ""
        if needs_node:
            node, why = _cpp_backward_plan(device, stream, m, n, row_stride, dtype, weight_dtype, bias_dtype)
        x, stats = _stand_in(dtype, device), _stand_in(stats_dtype(dtype), device)
        weight, bias = _stand_in(weight_dtype, device), _stand_in(bias_dtype, device)
        args = host.forward_arguments(x, x, weight, bias, stats, stats, row_stride, n, m, n, 1e-5)
        grid = (*host.forward_grid(m, path.config), 1)
        kernel, forward_why = native.kernel_for(path.call, args, native.extension().FORWARD_ARGUMENTS, device, grid)
        cpp_declined[(n, dtype)] = forward_why or why
        return None if kernel is None else native.extension().ForwardPlan(kernel, node)


def _cpp_backward_plan(device, stream, m, n, row_stride, dtype, weight_dtype, bias_dtype):
    """The node's kernels, or None and why the node hands the backward to Python."""
    if weight_dtype is None and bias_dtype is None:
        return None, "the C++ node hands backwards without a weight or bias to Python"
    path = backward_path(m, n, dtype, device, weight_dtype is not None, bias_dtype is not None, True)
    if path.config.looped:  # three launches: the GPU rather than the host decides there
        return None, "the C++ node hands the looped kernels of the widest rows to Python"
    if path.config.cluster:
        return None, "the C++ node hands the cluster launches of the widest half-precision rows to Python"
    plan, x, stats = path.plan, _stand_in(dtype, device), _stand_in(stats_dtype(dtype), device)
    grads = [g for g in (_stand_in(weight_dtype, device), _stand_in(bias_dtype, device)) if g is not None]
    barrier = cooperative.grid_barrier_state(device, stream)
    # the split kernel's records, with this node's own lifetime (see split.records_state)
    records = torch.zeros(m * plan.parts * 2, dtype=torch.int64, device=device) if path.config.split else None
    # dy and dx stand in as x, the partial rows as the statistics; dy is contiguous (the node checks)
    args = host.backward_arguments(x, x, _stand_in(weight_dtype, device), stats, stats, x, n, row_stride, m, n)
    args.update(PARTIAL=stats, OUT0=grads[0], OUT1=grads[-1], BARRIER=barrier, RECORDS=records,
                rows_per_program=plan.rows_per_program, P=plan.programs)  # fmt: skip
    names = native.extension().BACKWARD_ARGUMENTS
    reduce = None
    if plan.reduce is not None:
        reduce, why = native.kernel_for(plan.reduce, args, names, device, (-(-n // host.REDUCE_BLOCK_N), len(grads)))
        if reduce is None:
            return None, why
    kernel, why = native.kernel_for(plan.main, args, names, device, (plan.programs * plan.parts, 1))
    if kernel is None:
        return None, why
    return native.extension().BackwardPlan(kernel, reduce, plan.programs, plan.rows_per_program, stream, barrier,
                                           records, split.RECORDS_LIFETIME), ""  # fmt: skip


def _check_device(x: torch.Tensor) -> None:
    if not (x.is_cuda or INTERPRET):
        raise ValueError(
            "layer_norm: the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1, set before importing "
            f"ln_tutorial, to run them on the CPU); got a tensor on {x.device}"
        )


def _stand_in(dtype, device: int):
    return None if dtype is None else torch.empty(0, dtype=dtype, device=device)


native.python_side = (python_backward, cpp_forward_plan)
