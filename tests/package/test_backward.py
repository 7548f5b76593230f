"""Backward: both dW/dB strategies, gradcheck, determinism, non-contiguous gradients."""

import pytest
import torch
import torch.nn.functional as F
import triton

from conftest import DEVICE
from helpers import check_against_torch, leaf
from ln_tutorial import kernels, _common, dispatch, host, tuning, layer_norm
from ln_tutorial.variants import cluster, cooperative, fast_launch, one_launch, split
from ln_tutorial_book.reference import layer_norm_backward_reference

gpu = pytest.mark.gpu
STRATEGIES = ["deterministic", "lock"]


@pytest.fixture
def no_clusters(monkeypatch):
    """The split kernel's own exchange (records in global memory) where a GPU's table trades in clusters."""
    monkeypatch.setattr(cluster, "takes", lambda *args: False)


def _affine(n, dtype=torch.float32):
    return torch.randn(n, device=DEVICE, dtype=dtype), torch.randn(n, device=DEVICE, dtype=dtype)


def _backward_inputs(m, n, dtype=torch.float32):
    """Standard-normal x and ∇y (M, N), ``_affine``'s weight and bias, and the forward's mean and rstd
    (which do not depend on the weight and bias)."""
    x, dy = torch.randn(m, n, device=DEVICE, dtype=dtype), torch.randn(m, n, device=DEVICE, dtype=dtype)
    weight, bias = _affine(n, dtype)
    _, mean, rstd = dispatch.layer_norm_forward(x, weight, bias, 1e-5)
    return x, dy, weight, bias, mean, rstd


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((37, 24), id="37x24"),  # more rows than programs: several rows per program
        pytest.param((3, 130), id="3x130"),  # fewer rows than lock groups
        pytest.param((8192, 1024), id="8192x1024", marks=gpu),
        pytest.param((2048, 8191), id="2048x8191", marks=gpu),  # odd N
        pytest.param((512, 8193), id="512x8193", marks=gpu),  # half precision: tiles of 8192 + 1
        pytest.param((1000, 10000), id="1000x10000", marks=gpu),  # half precision: 8192 + 2048, partly masked
        pytest.param((300, 12800), id="300x12800", marks=gpu),  # half precision: 7 programs a row, the last 512 wide
        pytest.param((1024, 16384), id="1024x16384", marks=gpu),  # half precision and float32 shared by programs
    ],
)
def test_strategies_match_reference(shape, dtype, strategy):
    m, n = shape
    x = torch.randn(m, n, device=DEVICE, dtype=dtype)
    if strategy == "lock" and triton.next_power_of_2(n) * x.element_size() > host.MAX_FUSED_FWD_BYTES:
        with pytest.raises(ValueError, match="'lock' backward keeps a whole row"):
            check_against_torch(x, (n,), *_affine(n, dtype), strategy=strategy)
        return
    check_against_torch(x, (n,), *_affine(n, dtype), strategy=strategy)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((5, 70), id="interp"),
        pytest.param((64, 40000), id="wide-40000", marks=gpu),  # rows shared by 10 programs, the last part short
        pytest.param((8, 131072), id="wide-131072", marks=gpu),
    ],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)  # split, split, looped
def test_wide_rows(shape, dtype):
    m, n = shape
    x = torch.randn(m, n, device=DEVICE, dtype=dtype)
    check_against_torch(x, (n,), *_affine(n, dtype))


@gpu
@pytest.mark.parametrize("path", ["C++ node", "Python", "default path"])
@pytest.mark.parametrize("m", [8, 64, 200])
@pytest.mark.parametrize("n", [32768, 65536, 131072, 262144])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_wide_rows_on_every_backward_path(dtype, n, m, path, monkeypatch):
    """Rows of 32 K to 256 K values: the shared-row kernel (launched by the C++ node or from Python) and
    the looped kernels (the default path). Programs sharing a row poll each other's records while they
    are written, so a race shows up in some rows of some runs: three runs, each checked."""
    import ln_tutorial
    from ln_tutorial.variants import native

    monkeypatch.setattr(native, "ENABLED", native.ENABLED and path == "C++ node")
    ln_tutorial.use_variants(path != "default path")
    try:
        for _ in range(3):
            check_against_torch(torch.randn(m, n, device=DEVICE, dtype=dtype), (n,), *_affine(n, dtype))
    finally:
        ln_tutorial.use_variants(True)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("which", ["weight only", "bias only"])
@pytest.mark.parametrize(
    "config",
    [
        None,  # the table's choice: the persistent kernel
        tuning.BackwardConfig(looped=True, block_m=2, block_n=32, num_warps=1, programs_per_sm=1, num_stages=2),  # forced wide-row kernels, loop step 32
    ],
    ids=["persistent", "looped"],
)
def test_one_parameter_gradient(which, config, strategy):
    """One parameter: the partial buffer holds one set, which the kernels must find at offset 0."""
    if strategy == "lock" and config is not None:
        pytest.skip("the lock strategy has no wide-row kernels")
    m, n = 37, 100
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    weight, bias = (weight, None) if which == "weight only" else (None, bias)
    dx, dw, db = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, strategy, config)
    exact_dx, exact_dw, exact_db = layer_norm_backward_reference(dy, x, weight)
    assert (dw is None) == (weight is None) and (db is None) == (bias is None)
    for name, ours, exact in (("dx", dx, exact_dx), ("dw", dw, exact_dw), ("db", db, exact_db)):
        if ours is not None:
            torch.testing.assert_close(ours.double(), exact, atol=1e-4, rtol=1e-5, msg=name)


def test_launchers_are_shared_across_row_counts():
    """Plans are cached per shape, but the compiled-kernel launchers only per configuration:
    a new number of rows must not start from Triton's slow first-call dispatch again."""
    n = 48
    weight, bias = _affine(n)
    for m in (9, 10):  # the first call may make the launchers of this configuration
        x = torch.randn(m, n, device=DEVICE, requires_grad=True)
        layer_norm(x, (n,), weight, bias).sum().backward()
        if m == 9:
            made = host._kernel_call.cache_info().currsize
    assert host._kernel_call.cache_info().currsize == made


def test_forced_looped_backward_kernels():
    """Wide-row kernels on a small row (loop step 32), against the tutorial's formulas."""
    m, n = 6, 100
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    for num_stages in (1, 2):
        cfg = tuning.BackwardConfig(looped=True, block_m=2, block_n=32, num_warps=1, programs_per_sm=1, num_stages=num_stages)
        dx, dw, db = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
        for name, ours, exact in zip(("dx", "dw", "db"), (dx, dw, db), layer_norm_backward_reference(dy, x, weight)):
            torch.testing.assert_close(ours.double(), exact, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize(
    "num_stages, reload, tail_n",
    [
        (1, False, 0),
        (3, False, 0),
        (1, True, 0),
        (2, False, 16),  # rows of 40 as tiles of 32 + 16, the second partly masked
        (1, True, 16),  # the same, both tiles read twice
    ],
)
def test_persistent_backward_pipelining(num_stages, reload, tail_n):
    """Several loop steps per program, the last one partly masked, with and without pipelining,
    holding each tile across the row sums or reading it again, the row in one tile or two."""
    sms = _common.sm_count(torch.empty(0, device=DEVICE).get_device())
    m, n = 3 * 2 * sms + 1, 40
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    cfg = tuning.BackwardConfig(looped=False, block_m=2, block_n=32 if tail_n else 64, num_warps=4, programs_per_sm=1, num_stages=num_stages, reload=reload, tail_n=tail_n)
    dx, dw, db = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
    for name, ours, exact in zip(("dx", "dw", "db"), (dx, dw, db), layer_norm_backward_reference(dy, x, weight)):
        torch.testing.assert_close(ours.double(), exact, atol=1e-4, rtol=1e-5, msg=name)


@pytest.mark.parametrize("element_size", [2, 4, 8])
def test_backward_tiles_cover_the_row(element_size):
    """Every row length gets tiles that cover the whole row, or (rows too wide for them) programs
    that share it (half precision and float32; float64 takes the looped kernels); a second tile only
    where it saves lanes. Half-precision rows of 12289 to 16384 values are shared too. Without shared
    rows (a refused split) the wide rows loop and those of 12289 to 16384 take one tile."""
    for n in [*range(1, 20000, 97), 8192, 8193, 12288, 12289, 16383, 16384]:
        wide = triton.next_power_of_2(n) * element_size > host.MAX_FUSED_BWD_BYTES
        cfg = dispatch.backward_config(n, element_size)
        assert cfg.split == (wide and element_size != 8 or element_size == 2 and 12288 < n <= 16384), n
        assert cfg.looped == (wide and element_size == 8), n
        unshared = host.backward_choice(n, element_size, -1, False).config
        assert not unshared.split and unshared.looped == wide, n
        assert unshared == cfg or cfg.split, n
        for c in (cfg, unshared):
            if not (c.split or c.looped):
                assert c.block_n + c.tail_n >= n, n
                assert c.tail_n == 0 or c.block_n + c.tail_n < triton.next_power_of_2(n), n
    assert dispatch.backward_config(9216, 2).tail_n == 1024  # 8192 + 1024


@pytest.mark.parametrize("which", ["weight and bias", "weight only", "neither"])
@pytest.mark.parametrize(
    "block_m, per_sm",
    [
        (1, 1),
        (2, 3),  # two rows per tile; the last group's last tile has one row
    ],
)
def test_split_backward(block_m, per_sm, which):
    """Rows shared by programs of 32 columns (on a GPU, 4 per row of 100, the last one holding 4
    columns), several tiles per group, each group's row sums traded through RECORDS;
    the same bits on a second run.
    The interpreter runs it with one program per row (a program would wait forever for a later one)."""
    device = torch.empty(0, device=DEVICE).get_device()
    sms = _common.sm_count(device)
    m, n = 5 * sms * per_sm + 1, 100
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    weight, bias = {"weight and bias": (weight, bias), "weight only": (weight, None), "neither": (None, None)}[which]
    cfg = tuning.BackwardConfig(looped=False, block_m=block_m, block_n=32, num_warps=1, programs_per_sm=per_sm, split=True)
    first = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
    second = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
    exact = layer_norm_backward_reference(dy, x, weight)
    for name, ours, again, reference in zip(("dx", "dw", "db"), first, second, exact):
        if name == "dw" and weight is None or name == "db" and bias is None:
            assert ours is None, name
            continue
        torch.testing.assert_close(ours.double(), reference, atol=1e-4, rtol=1e-5, msg=name)
        assert torch.equal(ours, again), name


def _plan(m, n, config, has_dw=True, has_db=True, dtype=torch.float32):
    """The deterministic backward's plan for rows on DEVICE (``.reduce is None``: one launch)."""
    device = torch.empty(0, device=DEVICE).get_device()
    return dispatch.backward_path(m, n, dtype, device, has_dw, has_db, True, config).plan


def _assert_replays_match(graph, captured, eager, replays):
    """Each replay of ``graph``, its outputs ``captured`` zeroed before, gives ``eager``'s bits."""
    for _ in range(replays):
        for t in captured:
            t.zero_()
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(captured, eager):
            assert torch.equal(a, b)


def test_backward_launch_count():
    """On a GPU, inputs up to one_launch.MAX_BYTES take one launch (the dW/dB sums after a
    grid-wide barrier); larger ones take two, and so does everything under the interpreter,
    which runs programs one after another: a barrier there would wait forever."""
    n = 1024
    cfg = dispatch.backward_config(n, 4)
    largest_small = one_launch.MAX_BYTES // (n * 4)
    assert (_plan(largest_small, n, cfg).reduce is None) == (not _common.INTERPRET)
    assert _plan(largest_small + 1, n, cfg).reduce is not None
    assert _plan(64, n, cfg._replace(one_launch=False)).reduce is not None
    assert _plan(64, n, cfg, has_dw=False, has_db=False).main.kernel is kernels.layer_norm_bwd_persistent_kernel


@gpu
@pytest.mark.parametrize("which", ["weight and bias", "weight only", "bias only"])
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((4096, 1024), id="4096x1024"),
        pytest.param((1000, 8191), id="1000x8191"),  # odd N: a short last column block
        pytest.param((5, 8192), id="5x8192"),  # fewer rows than programs; tiles read twice (32 KB rows)
    ],
)
def test_one_launch_matches_two_launches(shape, which):
    """The one-launch backward: dx the same bits as with two launches, dW/dB the same partial
    rows added in another order (as accurate), every rerun the same bits."""
    m, n = shape
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    weight, bias = {"weight and bias": (weight, bias), "weight only": (weight, None), "bias only": (None, bias)}[which]
    cfg = dispatch.backward_config(n, 4)
    assert _plan(m, n, cfg, weight is not None, bias is not None).reduce is None  # one launch
    one = [dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg) for _ in range(2)]
    two = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg._replace(one_launch=False))
    exact = layer_norm_backward_reference(dy, x, weight)
    assert torch.equal(one[0][0], two[0])
    for name, a, again, b, e in zip(("dx", "dw", "db"), *one, two, exact):
        assert (a is None) == (b is None) == (again is None), name
        if a is not None:
            assert torch.equal(a, again), name
            for result in (a, b):
                torch.testing.assert_close(result.double(), e, atol=1e-4, rtol=1e-5, msg=name)


@gpu
def test_one_launch_backward_in_a_cuda_graph():
    """A cooperative launch records into a CUDA graph, the barrier's state is made during capture
    (a new stream), and every replay gives the eager result."""
    m, n = 4096, 1024
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    assert _plan(m, n, dispatch.backward_config(n, 4)).reduce is None  # one launch
    eager = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    _assert_replays_match(graph, captured, eager, 2)


@gpu
def test_refused_cooperative_launch_falls_back_to_two_launches():
    """More programs than the GPU holds at once: the driver refuses the cooperative launch,
    and the backward takes two launches instead, now and for later calls."""
    m, n = 8192, 1024
    cfg = tuning.BackwardConfig(looped=False, block_m=1, block_n=n, num_warps=4, programs_per_sm=64, num_stages=1)  # 64 programs per SM: more than fit
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n)
    got = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
    assert (x.get_device(), cfg) in cooperative.refused
    assert _plan(m, n, cfg).reduce is not None  # and later calls plan two launches
    two = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg._replace(one_launch=False))
    for a, b in zip(got, two):
        assert torch.equal(a, b)


@pytest.mark.parametrize("block_m, warps", [(1, 4), (1, 8), (2, 4), (2, 1)])
def test_records_tile_fits_a_warp_or_holds_no_copies(block_m, warps):
    """The shared-row poll sums only values whose flags it checked: a row of up to 32 parts, one row a
    tile, polls a record a part (all in one warp: each warp checks what it sums); else a tile of at
    least one record a thread (no copies of a record)."""
    cfg = tuning.BackwardConfig(False, block_m, 2048, warps, 2, split=True)
    for parts in (2, 3, 8, 17, 32, 33, 64, 100, 128, 512):
        width = split.records_block(parts, cfg)
        assert width >= parts and width & (width - 1) == 0, parts
        if parts <= 32 and block_m == 1:
            assert width <= 32, parts
        else:
            assert width * block_m >= 32 * warps, parts


@gpu
@pytest.mark.parametrize(
    "n, dtype",
    [
        (12800, torch.bfloat16),  # padded half-precision row: one 16384-wide tile instead
        (40000, torch.float32),  # wide row: the looped kernels instead
    ],
)
def test_refused_split_falls_back_to_rows_not_shared(n, dtype, no_clusters):
    """Where the driver refused the split kernel's grid (a share of the GPU taken, say), the
    package's choice becomes its configuration without shared rows, with the same results."""
    device = torch.empty(0, device=DEVICE).get_device()
    cfg = dispatch.backward_config(n, dtype.itemsize, device)
    assert cfg.split
    x, dy, weight, bias, mean, rstd = _backward_inputs(64, n, dtype)
    shared = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    cooperative.refused.add((device, cfg))
    try:
        assert not split.fits(cfg, n, device)
        fallback = dispatch.backward_config(n, dtype.itemsize, device)
        assert fallback == host.backward_choice(n, dtype.itemsize, device, False).config
        assert not fallback.split and fallback.looped == (dtype == torch.float32)
        unshared = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
        # a configuration the caller gives is launched as given (here the refusal was only recorded)
        given = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
        assert all(torch.equal(a, b) for a, b in zip(shared, given))
    finally:
        cooperative.refused.discard((device, cfg))
    exact = layer_norm_backward_reference(dy, x, weight)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for name, a, b, reference in zip(("dx", "dw", "db"), shared, unshared, exact):
        scale = reference.abs().max()
        torch.testing.assert_close(a.double() / scale, reference / scale, atol=tol, rtol=0, msg=name)
        torch.testing.assert_close(b.double() / scale, reference / scale, atol=tol, rtol=0, msg=name)


@gpu
@pytest.mark.parametrize(
    "n, dtype",
    [
        (32768, torch.bfloat16),  # 2048 columns, 4 warps, 4 per SM
        (65536, torch.bfloat16),  # the same, 32 programs per row
        (32768, torch.float32),  # 2048 columns, 8 warps, 2 per SM
    ],
)
def test_split_registers_let_its_programs_fit(n, dtype, no_clusters):
    """The split kernel, with its prefetch, keeps to the register cap: ``programs_per_sm`` programs
    fit on an SM's 65536 registers, and the cooperative grid is accepted (a configuration the caller
    gives is never replaced, so a refusal would raise here)."""
    device = torch.empty(0, device=DEVICE).get_device()
    m = 2 * _common.sm_count(device)
    cfg = dispatch.backward_config(n, dtype.itemsize)
    assert cfg.split
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n, dtype)
    dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd, config=cfg)
    plan = _plan(m, n, cfg, dtype=dtype)
    entries = [entry for key, entry in fast_launch._compiled.items() if key[0] == plan.main]
    assert entries  # every specialization compiled so far (other tests share the kernel) fits
    for entry in entries:
        assert entry[5].n_regs * cfg.num_warps * 32 * cfg.programs_per_sm <= 65536


@gpu
def test_split_records_from_earlier_launches_never_count(monkeypatch, no_clusters):
    """The one-launch split backward keeps its records for the stream and never zero-fills them:
    each launch tags its records with its barrier generation. Records left by earlier launches, of
    this size and of others (more rows: stale records past this call's; other widths: other parts
    at each address), must not pass for this launch's: the same bits on every call, also when
    the records were just zeroed, and the right gradients."""
    n = 16384  # bfloat16: 8 parts of 2048 columns
    x, dy, weight, bias, mean, rstd = _backward_inputs(300, n, torch.bfloat16)
    plan = _plan(300, n, dispatch.backward_config(n, 2), dtype=x.dtype)
    assert plan.parts == 8 and plan.reduce is None  # shared rows, one launch
    first = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    for m, width in [(900, n), (37, 40000), (2000, 65536)]:  # stale records of other shapes in the same buffer
        other = torch.randn(m, width, device=DEVICE, dtype=torch.bfloat16)
        _, m_mean, m_rstd = dispatch.layer_norm_forward(other, None, None, 1e-5)
        dispatch.layer_norm_backward(torch.randn_like(other), other, None, None, m_mean, m_rstd)
    later = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    monkeypatch.setattr(split, "RECORDS_LIFETIME", 1)  # zeroed again at the next call
    zeroed = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    for a, b, c in zip(first, later, zeroed):
        assert torch.equal(a, b) and torch.equal(a, c)
    exact = layer_norm_backward_reference(dy, x, weight)
    for name, ours, reference in zip(("dx", "dw", "db"), first, exact):
        err = (ours.double() - reference).abs().max() / reference.abs().max()
        assert err < 2e-2, name  # bfloat16 outputs


@gpu
def test_split_backward_in_a_cuda_graph(no_clusters):
    """The split kernel records into a CUDA graph with its stream's barrier and records made during
    capture: every replay, each a new barrier generation and so a new "written" flag over the last
    replay's records, gives the eager result; so does an eager call on that stream afterwards."""
    m, n = 300, 40000  # bfloat16: rows shared by 20 programs of 2048 columns
    x, dy, weight, bias, mean, rstd = _backward_inputs(m, n, torch.bfloat16)
    assert _plan(m, n, dispatch.backward_config(n, 2), dtype=x.dtype).reduce is None
    eager = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=stream):
        captured = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    _assert_replays_match(graph, captured, eager, 3)
    with torch.cuda.stream(stream):
        after = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    torch.cuda.synchronize()
    for a, b in zip(after, eager):
        assert torch.equal(a, b)


@gpu
def test_split_state_keeps_the_recent_streams(monkeypatch):
    """The split kernel's barrier and records are kept for the CACHE_SIZE most recently used
    streams; one dropped and used again starts from zeroed tensors."""
    device = torch.empty(0, device=DEVICE).get_device()
    monkeypatch.setattr(split, "_states", {})
    first, _ = split.records_state(device, 1, 8)
    assert split.records_state(device, 1, 8)[0] is first  # kept while recently used
    for stream in range(2, 2 + split.CACHE_SIZE):
        split.records_state(device, stream, 8)
    assert len(split._states) == split.CACHE_SIZE and (device, 1) not in split._states
    again, records = split.records_state(device, 1, 8)
    assert again is not first and not again.any() and not records.any()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("affine", [True, False])
def test_gradcheck_float64(strategy, affine):
    x = torch.randn(6, 10, device=DEVICE, dtype=torch.float64, requires_grad=True)
    params = [leaf(p) for p in _affine(10, torch.float64)] if affine else [None, None]
    assert torch.autograd.gradcheck(
        lambda x, *p: layer_norm(x, (10,), *p, backward_strategy=strategy), (x, *params)
    )


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((300, 96), id="interp"),
        pytest.param((4096, 1024), id="4096x1024", marks=gpu),  # one launch
        pytest.param((16384, 4096), id="16384x4096", marks=gpu),  # two launches
        pytest.param((1024, 12800), id="1024x12800", marks=gpu),  # rows shared by programs
    ],
)
def test_deterministic_gradients_are_bitwise_equal(shape):
    m, n = shape
    x = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)
    weight, bias = _affine(n, torch.bfloat16)
    dy = torch.randn_like(x)
    runs = [_grads(x, weight, bias, dy) for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def _grads(x, weight, bias, dy, strategy="deterministic"):
    x, weight, bias = leaf(x), leaf(weight), leaf(bias)
    layer_norm(x, (x.shape[-1],), weight, bias, backward_strategy=strategy).backward(dy)
    return x.grad, weight.grad, bias.grad


@pytest.mark.parametrize(
    "make_dy",
    [
        pytest.param(lambda m, n: torch.randn(n, m, device=DEVICE).t(), id="transposed"),
        pytest.param(lambda m, n: torch.randn(m, 2 * n, device=DEVICE)[:, ::2], id="col-strided"),
        pytest.param(lambda m, n: torch.randn(m, n + 8, device=DEVICE)[:, :n], id="row-strided"),
        pytest.param(lambda m, n: torch.randn(1, n, device=DEVICE).expand(m, n), id="broadcast-rows"),
    ],
)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_non_contiguous_upstream_gradient(make_dy, strategy):
    m, n = 10, 48
    x = torch.randn(m, n, device=DEVICE)
    check_against_torch(x, (n,), *_affine(n), dy=make_dy(m, n), strategy=strategy)


def test_gradient_of_sum_uses_expanded_ones():
    x = leaf(torch.randn(7, 20, device=DEVICE))
    weight = leaf(torch.randn(20, device=DEVICE))
    layer_norm(x, (20,), weight).sum().backward()  # dy = ones, strides (0, 0)
    x_ref, w_ref = leaf(x), leaf(weight)
    F.layer_norm(x_ref, (20,), w_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(weight.grad, w_ref.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_n1_gradients_are_zero(dtype):
    """x̂ = 0 for N = 1, so dx = dw = 0 up to rounding (the relative-error tests cannot scale to 0)."""
    x = leaf(torch.randn(4, 1, device=DEVICE, dtype=dtype))
    weight, bias = leaf(torch.randn(1, device=DEVICE, dtype=dtype)), leaf(torch.randn(1, device=DEVICE, dtype=dtype))
    dy = torch.randn(4, 1, device=DEVICE, dtype=dtype)
    layer_norm(x, (1,), weight, bias).backward(dy)
    # dx = (w·dy - c2)·rstd: a fused multiply-add may keep w·dy unrounded, leaving one
    # rounding error of w·dy, scaled by rstd = 1/sqrt(eps).
    ulp = torch.finfo(dtype).eps * (weight * dy).abs().max() / 1e-5**0.5
    assert x.grad.abs().max() <= 2 * ulp
    assert weight.grad.abs().max() <= 2 * ulp
    torch.testing.assert_close(bias.grad, dy.sum(0))


def test_lock_strategy_rejects_rows_it_cannot_hold():
    n = host.MAX_FUSED_FWD_BYTES // 4 + 1  # float32
    x = torch.randn(1, n, device=DEVICE, requires_grad=True)
    y = layer_norm(x, (n,), backward_strategy="lock")
    with pytest.raises(ValueError, match="lock"):
        y.sum().backward()


@gpu
def test_lock_strategy_is_correct_under_contention():
    """Many rows per lock group on a real GPU: a missing barrier or lost update shows here."""
    x = torch.randn(65536, 256, device=DEVICE)
    check_against_torch(x, (256,), *_affine(256), strategy="lock")


def test_only_needed_gradients():
    x = torch.randn(5, 16, device=DEVICE, requires_grad=True)
    weight = torch.randn(16, device=DEVICE)  # no requires_grad
    layer_norm(x, (16,), weight).sum().backward()
    assert weight.grad is None and x.grad is not None




@gpu
def test_more_than_2_31_elements():
    """M·N > 2**31: offsets must be 64-bit. Compared with torch on the whole tensor (about 30 GB)."""
    m, n = 2**31 // 4096 + 64, 4096
    x = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)
    weight, bias = _affine(n, torch.bfloat16)
    dy = torch.randn_like(x)
    ours = _grads(x, weight, bias, dy)
    x_ref, w_ref, b_ref = leaf(x), leaf(weight), leaf(bias)
    y_ref = F.layer_norm(x_ref, (n,), w_ref, b_ref)
    y_ref.backward(dy)
    y = layer_norm(x, (n,), weight, bias)
    tail = slice(m - 64, m)  # rows whose elements lie beyond 2**31
    torch.testing.assert_close(y[tail], y_ref[tail], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(ours[0][tail], x_ref.grad[tail], atol=2e-2, rtol=2e-2)
    for name, a, b in (("dw", ours[1], w_ref.grad), ("db", ours[2], b_ref.grad)):
        assert (a.float() - b.float()).norm() / b.float().norm() < 1e-2, name


@gpu
@pytest.mark.parametrize("which", ["weight and bias", "weight only", "neither"])
@pytest.mark.parametrize("shape", [(300, 12800), (200, 16384), (64, 32768), (37, 40000), (1, 65536), (64, 65536)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cluster_backward(dtype, shape, which, monkeypatch):
    """Where a GPU's table trades half-precision shared rows in a cluster: the cluster kernel runs, as
    accurate as torch, bit for bit the same from run to run and in a CUDA graph, and within rounding
    of the split kernel's own exchange (its parts are other sums)."""
    m, n = shape
    device = torch.empty(0, device=DEVICE).get_device()
    has_w, has_b = which != "neither", which == "weight and bias"
    path = dispatch.backward_path(m, n, dtype, device, has_w, has_b, True)
    if not path.config.cluster:
        pytest.skip(f"{torch.cuda.get_device_name()}: no cluster entry for rows of {n} values")
    assert path.kernels == ("layer_norm_bwd_cluster_kernel (variants.cluster)",)
    weight, bias = _affine(n, dtype)
    weight, bias = (weight if has_w else None), (bias if has_b else None)
    check_against_torch(torch.randn(m, n, device=DEVICE, dtype=dtype), (n,), weight, bias)
    x, dy, _, _, mean, rstd = _backward_inputs(m, n, dtype)
    eager = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    again = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    for a, b in zip(eager, again):
        assert (a is None and b is None) or torch.equal(a, b)
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=stream):
        captured = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    _assert_replays_match(graph, [t for t in captured if t is not None], [t for t in eager if t is not None], 2)
    monkeypatch.setattr(cluster, "takes", lambda *args: False)
    assert dispatch.backward_path(m, n, dtype, device, has_w, has_b, True).config.split
    shared = dispatch.layer_norm_backward(dy, x, weight, bias, mean, rstd)
    for a, b in zip(eager, shared):
        if b is not None:
            torch.testing.assert_close(a.float(), b.float(), rtol=0.02, atol=0.02 * b.float().abs().max().item())


def test_clusters_only_on_a_gpu():
    """The interpreter (and a GPU without clusters) never takes the cluster kernel: the tables' cluster
    entries are half-precision shared rows of 32 to 128 KB, parsed as shared-row configurations."""
    table = tuning.load(tuning.INTERPRETER_TABLE)
    assert table.backward_cluster and set(table.backward_cluster) <= {32768, 65536, 131072}
    for row_bytes, cfg in table.backward_cluster.items():
        assert cfg.split and cfg.cluster and row_bytes // 2 // cfg.block_n <= cluster.MAX_CLUSTER
        assert not cluster.takes(row_bytes // 2, -1, cfg)
    assert not tuning.generic_table().backward_cluster
    if DEVICE == "cpu":
        for n in (16384, 32768, 65536):
            assert not dispatch.backward_config(n, 2).cluster
