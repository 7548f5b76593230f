"""Forward parity: y of ln_tutorial vs torch in the same dtype vs a float64 reference."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, ON_GPU
from helpers import assert_as_accurate_as_torch, check_against_torch, run_without_interpreter
from ln_tutorial import kernels, _common, dispatch, host, tuning, layer_norm
from ln_tutorial._common import INTERPRET
from ln_tutorial_book.reference import layer_norm_reference
from ln_tutorial.variants import fast_launch

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
gpu = pytest.mark.gpu
needs_gluon = pytest.mark.skipif(_common.TRITON_VERSION < (3, 6), reason="the Gluon kernels need Triton 3.6 or later")

SHAPES = [
    pytest.param((16, 64), id="pow2"),
    pytest.param((7, 33), id="odd-N"),  # N not a power of two: masked tail
    pytest.param((5, 300), id="N300"),  # several rows per program, partial last block
    pytest.param((4, 2), id="N2"),  # the smallest row with a non-zero x̂
    pytest.param((1, 1000), id="M1"),  # a single row
    pytest.param((4096, 4096), id="4096x4096", marks=gpu),
    pytest.param((1000, 12345), id="1000x12345", marks=gpu),  # odd, between table rows
    pytest.param((300, 9000), id="300x9000", marks=gpu),  # half precision: two tiles, 8192 + 1024 (Gluon)
    pytest.param((129, 4100), id="129x4100", marks=gpu),  # half precision: 4096 + a tail holding 4 values
    pytest.param((777, 1300), id="777x1300", marks=gpu),  # half precision: a padded 4 KB row per program
    pytest.param((50, 32768), id="50x32768", marks=gpu),  # half precision: the Gluon kernel, 64 KB rows
    pytest.param((64, 65536), id="64x65536", marks=gpu),  # widest fused row
    pytest.param((16, 100003), id="16x100003", marks=gpu),  # looped path, prime N
]


def _cancelling_rows(m, n, dtype):
    """``m`` rows where one-pass variance formulas cancel: a mean of 1000 (row 0), an outlier of
    1e4 in the first column (row 1), a constant row (row 2); the rest ordinary."""
    x = torch.randn(m, n, device=DEVICE)
    x[0] += 1000
    x[1, 0] = 1e4
    x[2] = 3.0
    return x.to(dtype)


def _assert_statistics_match_float64(x, mean, rstd):
    exact = x.double()
    torch.testing.assert_close(mean.double(), exact.mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(exact.var(-1, unbiased=False) + 1e-5), rtol=1e-5, atol=0)


def _params(n, dtype, affine="both"):
    weight = torch.randn(n, device=DEVICE, dtype=dtype) if affine in ("both", "weight") else None
    bias = torch.randn(n, device=DEVICE, dtype=dtype) if affine in ("both", "bias") else None
    return weight, bias


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_grads_match_reference(shape, dtype):
    m, n = shape
    x = torch.randn(m, n, device=DEVICE, dtype=dtype) * 3 + 1  # non-zero mean
    check_against_torch(x, (n,), *_params(n, dtype))


@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_partial_affine(affine):
    x = torch.randn(9, 48, device=DEVICE)
    check_against_torch(x, (48,), *_params(48, torch.float32, affine))


@pytest.mark.parametrize("affine", ["both", "none", "weight", "bias"])
@pytest.mark.parametrize("n", [1024, 3000, 8192])
def test_small_inputs_take_one_row_a_program(n, affine):
    """Under SMALL_BYTES_PER_SM of padded rows a SM: one row a program, more warps, and w and b loaded
    with x where the rows are also fewer than FEW_ROWS_PER_SM a SM; one more row past each bound and
    that ends. The results are as accurate as torch's either way."""
    device = torch.cuda.current_device() if ON_GPU else -1
    sms = _common.sm_count(device)
    limit = host.SMALL_BYTES_PER_SM * sms // (_common.next_power_of_2(n) * 2)  # the first row count not small
    few = min(limit, host.FEW_ROWS_PER_SM * sms)  # the first row count without w and b loaded early

    def config(m):
        return dispatch.forward_path(m, n, torch.float16, device, False).config

    table = dispatch.forward_config(n, 2, device)
    assert config(few - 1).block_m == 1 and config(few - 1).params_first and config(few - 1) != table
    assert config(limit - 1).block_m == 1 and config(limit - 1).params_first == (few == limit)
    assert config(limit) == table and not table.params_first
    for m in {few - 1, limit - 1}:
        x = torch.randn(m, n, device=DEVICE, dtype=torch.float16) * 3 + 1
        check_against_torch(x, (n,), *_params(n, torch.float16, affine))


def test_three_d_input():
    x = torch.randn(3, 5, 40, device=DEVICE, dtype=torch.bfloat16)
    check_against_torch(x, (40,), *_params(40, torch.bfloat16))


def test_multi_dim_normalized_shape():
    x = torch.randn(2, 3, 4, 5, device=DEVICE)
    weight, bias = torch.randn(4, 5, device=DEVICE), torch.randn(4, 5, device=DEVICE)
    check_against_torch(x, (4, 5), weight, bias)


def test_normalized_shape_as_int():
    x = torch.randn(6, 10, device=DEVICE)
    torch.testing.assert_close(layer_norm(x, 10), F.layer_norm(x, (10,)))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: torch.randn(8, 96, device=DEVICE)[:, :64], id="row-strided"),  # no copy
        pytest.param(lambda: torch.randn(64, 8, device=DEVICE).t(), id="transposed"),  # column-major
        pytest.param(lambda: torch.randn(8, 128, device=DEVICE)[:, ::2], id="col-strided"),
        pytest.param(lambda: torch.randn(1, 64, device=DEVICE).expand(8, 64), id="broadcast-rows"),
        pytest.param(lambda: torch.randn(4, 6, 64, device=DEVICE).transpose(0, 1), id="3d-permuted"),
    ],
)
def test_non_contiguous_input(make):
    x = make()
    check_against_torch(x, (x.shape[-1],), *_params(x.shape[-1], torch.float32))


def test_empty_batch():
    x = torch.randn(0, 32, device=DEVICE, requires_grad=True)
    weight = torch.randn(32, device=DEVICE, requires_grad=True)
    y = layer_norm(x, (32,), weight)
    assert y.shape == (0, 32)
    y.sum().backward()
    assert x.grad.shape == (0, 32)
    assert torch.equal(weight.grad, torch.zeros(32, device=DEVICE))


def test_n1_output_is_bias():
    x = torch.randn(5, 1, device=DEVICE)
    bias = torch.randn(1, device=DEVICE)
    assert torch.equal(layer_norm(x, (1,), torch.ones(1, device=DEVICE), bias), bias.expand(5, 1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_mixed_precision_parameters(dtype):
    """float32 weight/bias with a half input: y in the input dtype, dW/dB in float32."""
    x = torch.randn(12, 80, device=DEVICE, dtype=dtype)
    weight, bias = torch.randn(80, device=DEVICE), torch.randn(80, device=DEVICE)
    _, _, dw, db = check_against_torch(x, (80,), weight, bias) if not ON_GPU else _mixed_on_gpu(x, weight, bias)
    assert dw.dtype == db.dtype == torch.float32


def _mixed_on_gpu(x, weight, bias):
    # torch's CUDA layer_norm rejects mixed dtypes, so compare with the reference alone.
    from helpers import forward_backward

    dy = torch.randn_like(x)
    ours = forward_backward(layer_norm, x, (x.shape[-1],), weight, bias, dy)
    exact = forward_backward(layer_norm_reference, x.double(), (x.shape[-1],), weight.double(), bias.double(), dy.double())
    same_dtype = forward_backward(F.layer_norm, x, (x.shape[-1],), weight.to(x.dtype), bias.to(x.dtype), dy)
    for name, o, t, e in zip(("y", "dx", "dw", "db"), ours, same_dtype, exact):
        assert_as_accurate_as_torch(name, o, t.to(o.dtype), e, x.dtype)
    return ours


def test_looped_forward_reads_only_the_row():
    """A float64 row of 8193 to 16383 values is looped in one step longer than the row:
    nothing past the row's end may be read (here: huge values just past it)."""
    buf = torch.full((3, 16384), 1e300, dtype=torch.float64, device=DEVICE)
    buf[:, :9000] = torch.randn(3, 9000, dtype=torch.float64, device=DEVICE)
    x = buf[:, :9000]
    assert dispatch.forward_config(9000, 8).looped
    torch.testing.assert_close(layer_norm(x, (9000,)), F.layer_norm(x, (9000,)))


def test_padded_short_rows_take_their_own_configuration():
    """Half-precision rows of 1025 to 1792 values take one row per program; 2048-value rows,
    and float32 rows of the same bytes, keep the table's entry (the performance page)."""
    assert dispatch.forward_config(1025, 2) == dispatch.forward_config(1792, 2) == tuning.ForwardConfig(looped=False, block_m=1, block_n=2048, num_warps=4)
    assert dispatch.forward_config(1793, 2) == dispatch.forward_config(2048, 2) == tuning.ForwardConfig(looped=False, block_m=2, block_n=2048, num_warps=8)
    assert dispatch.forward_config(1024, 4) == tuning.ForwardConfig(looped=False, block_m=2, block_n=1024, num_warps=8)


@needs_gluon
def test_padded_half_rows_take_two_tiles():
    """Half-precision rows of 4097 to 8191 and 8193 to 12288 values take the Gluon kernel with a
    power-of-two tail tile on a GPU (the H100's table); powers of two, float32 rows, longer rows and
    small inputs do not, and nothing does with the variants off or in the interpreter (no Gluon)."""
    two_tiles = lambda head, warps, tail: tuning.ForwardConfig(looped=False, block_m=1, block_n=head, num_warps=warps, tail_n=tail)  # noqa: E731
    expected = {
        4097: two_tiles(4096, 8, 256),  # the smallest tail: one column per lane
        4608: two_tiles(4096, 8, 512),
        8191: two_tiles(4096, 8, 4096),
        8193: two_tiles(8192, 8, 256),
        10240: two_tiles(8192, 8, 2048),
        10241: two_tiles(8192, 16, 4096),  # a 4096-wide tail: 16 warps
        12288: two_tiles(8192, 16, 4096),
    }
    for n, cfg in expected.items():
        if not INTERPRET:
            assert dispatch.forward_config(n, 2) == cfg, n
        assert not host.forward_choice(n, 2, -1, False).config.tail_n, n  # variants off
        assert not host.forward_choice(n, 2, -1, True, True).config.tail_n, n  # a small input: one tile
    for n, size in ((4096, 2), (8192, 2), (12289, 2), (3584, 2), (4608, 4), (9000, 4)):
        assert not dispatch.forward_config(n, size).tail_n, (n, size)


@pytest.mark.parametrize(
    "n, config, extra_columns",
    [
        # 4096 + a 256-wide tail holding one value; rows apart by more than their width
        pytest.param(4097, tuning.ForwardConfig(looped=False, block_m=1, block_n=4096, num_warps=8, tail_n=256), 40, id="two-tiles"),
    ],
)
def test_gluon_configuration_computes_the_row(n, config, extra_columns):
    """A Gluon configuration normalizes each row: on a GPU the Gluon kernel itself, in the
    interpreter (which cannot run Gluon) the Triton kernel, one program per row in one tile of
    the next power of two."""
    x = (torch.randn(3, n + extra_columns, device=DEVICE) * 2 + 50).to(torch.float16)[:, :n]
    weight, bias = _params(n, torch.float16)
    y, mean, rstd = dispatch.layer_norm_forward(x, weight, bias, 1e-5, config=config)
    _assert_statistics_match_float64(x, mean, rstd)
    torch.testing.assert_close(y, F.layer_norm(x.float(), (n,), weight.float(), bias.float()).half(), atol=4e-3, rtol=4e-3)


def test_eps_is_used():
    x = torch.randn(4, 16, device=DEVICE) * 1e-3
    for eps in (1e-5, 1.0):
        torch.testing.assert_close(layer_norm(x, (16,), eps=eps), F.layer_norm(x, (16,), eps=eps))


def test_forced_looped_forward_kernel():
    """The wide-row kernel, on a row small enough for the interpreter (block 32, 5 loop steps)."""
    x = torch.randn(3, 150, device=DEVICE) + 100  # large mean: the shift must prevent cancellation
    weight, bias = torch.randn(150, device=DEVICE), torch.randn(150, device=DEVICE)
    y, mean, rstd = dispatch.layer_norm_forward(x, weight, bias, 1e-5, config=tuning.ForwardConfig(looped=True, block_m=1, block_n=32, num_warps=1))
    exact = layer_norm_reference(x, (150,), weight, bias)
    assert_as_accurate_as_torch("y", y, F.layer_norm(x, (150,), weight, bias), exact, torch.float32)
    torch.testing.assert_close(mean, x.mean(-1))
    torch.testing.assert_close(rstd, torch.rsqrt(x.var(-1, unbiased=False) + 1e-5))


@gpu
@needs_gluon
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "n",
    [
        pytest.param(8704, id="two-tiles-8192+512"),  # the tail exactly full
        pytest.param(9999, id="two-tiles-8192+2048"),  # odd: the tail partly masked, vectors cut
        pytest.param(12287, id="two-tiles-8192+4096"),  # 16 warps
        pytest.param(4100, id="two-tiles-4096+256"),  # four of the tail's columns used
    ],
)
def test_two_tiles_statistics_do_not_cancel(n, dtype):
    """The Gluon kernel's mean and rstd against float64, on rows where one-pass formulas cancel
    (a mean of 1000, an outlier of 1e4 in the first column), a constant row and ordinary ones,
    rows apart by more than their width; y at most twice the Triton kernel's error against float64
    (a last-bit change of the mean moves y by an ulp in rows near 1000); the same bits on a second call."""
    cfg = dispatch.forward_config(n, 2)
    assert cfg.tail_n
    x = _cancelling_rows(6, n + 24, dtype)[:, :n]
    x[4, -1] = -1e4  # an outlier in the tail, if any
    weight, bias = _params(n, dtype)
    y, mean, rstd = dispatch.layer_norm_forward(x, weight, bias, 1e-5, config=cfg)
    _assert_statistics_match_float64(x, mean, rstd)
    triton = tuning.ForwardConfig(looped=False, block_m=1, block_n=_common.next_power_of_2(n), num_warps=cfg.num_warps)  # one tile of the next power of two
    triton_y, triton_mean, triton_rstd = dispatch.layer_norm_forward(x, weight, bias, 1e-5, config=triton)
    torch.testing.assert_close(mean, triton_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd, triton_rstd, rtol=1e-5, atol=0)
    exact_y = layer_norm_reference(x.double(), (n,), weight.double(), bias.double())
    assert (y.double() - exact_y).abs().max() <= 2 * (triton_y.double() - exact_y).abs().max()
    again = dispatch.layer_norm_forward(x, weight, bias, 1e-5, config=cfg)
    assert all(torch.equal(a, b) for a, b in zip((y, mean, rstd), again))


@gpu
def test_direct_launch_path_is_taken():
    """After the first call, kernels launch through a ``Launcher``'s cache, not Triton's dispatch.

    (In Triton 3.6 the launch hooks are an empty ``HookChain``, never None: a check
    for None sent every launch down the slow path without any test noticing.)
    """
    x = torch.randn(64, 512, device=DEVICE, dtype=torch.float16)
    first = layer_norm(x, (512,))
    cached = [key for key in fast_launch._compiled if key[0].kernel is kernels.layer_norm_fwd_kernel]
    assert cached, "the forward kernel was not cached for direct launches"
    assert not fast_launch.hooks_installed()
    assert torch.equal(layer_norm(x, (512,)), first)  # the direct launch computes the same


@gpu
def test_launch_hooks_see_every_launch():
    """A profiler's launch hook turns the direct path off, so the hook sees each launch."""
    import triton

    seen = []
    hook = triton.knobs.runtime.launch_enter_hook
    record = lambda metadata: seen.append(metadata)  # noqa: E731
    hook.add(record)
    try:
        x = torch.randn(64, 512, device=DEVICE, dtype=torch.float16)
        layer_norm(x, (512,))
        layer_norm(x, (512,))
    finally:
        hook.remove(record)
    assert len(seen) == 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)  # float64: autocast leaves it alone
def test_autocast_gives_torch_dtype(dtype):
    device_type = "cuda" if ON_GPU else "cpu"
    x = torch.randn(8, 32, device=DEVICE, dtype=dtype)
    weight = torch.randn(32, device=DEVICE, dtype=dtype)
    with torch.autocast(device_type, dtype=torch.bfloat16):
        ours, theirs = layer_norm(x, (32,), weight), F.layer_norm(x, (32,), weight)
    assert ours.dtype == theirs.dtype
    torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)


def test_cpu_fallback_without_interpreter():
    """Without TRITON_INTERPRET, CPU tensors go to torch's own layer_norm (a fresh process)."""
    code = (
        "import torch, torch.nn.functional as F, ln_tutorial\n"
        "from ln_tutorial import _common, dispatch, host, tuning\n"
        "assert not _common.INTERPRET\n"
        "dispatch.layer_norm_forward = None  # any kernel launch would now fail\n"
        "x = torch.randn(6, 20, dtype=torch.bfloat16, requires_grad=True)\n"
        "w = torch.randn(20, requires_grad=True)  # float32 weight, bf16 input: CPU torch allows it\n"
        "y = ln_tutorial.LayerNorm(20)(x)\n"
        "assert torch.equal(ln_tutorial.layer_norm(x, (20,), w), F.layer_norm(x, (20,), w))\n"
        "ln_tutorial.layer_norm(x, (20,), w).sum().backward()\n"
        "assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.bfloat16\n"
    )
    run_without_interpreter(code)


def test_compiled_kernels_reused_only_for_matching_alignment():
    """Launches reuse a compiled kernel by its specialization (dtype, 16-byte alignment, strides):
    an aligned call first, then the same shape 4 and 12 bytes off alignment, with row stride 80."""
    base = torch.randn(8, 80, device=DEVICE)
    for offset in (0, 1, 3):
        x = base[:, offset : offset + 64]
        check_against_torch(x, (64,), *_params(64, torch.float32))


def test_normalize_whole_2d_input():
    """normalized_shape covering every dimension: one row of M·N elements, output keeps (M, N)."""
    x = torch.randn(3, 7, device=DEVICE)
    check_against_torch(x, (3, 7), torch.randn(3, 7, device=DEVICE), torch.randn(3, 7, device=DEVICE))
