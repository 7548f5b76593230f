"""Layer normalization in Triton, forward and backward, in one file.

The kernels of the tutorial's core path, written to be read: one row per
program in the forward, and a backward whose weight and bias gradients are
summed without locks, so that they come out the same bit for bit on every run
(same GPU model, SM count and shape). ``ln_tutorial.layer_norm`` is the
package's faster default; this file is the one to copy into a project. It
needs only torch, triton and matplotlib.

Run it as a script to check it against PyTorch and to measure it::

    python layer_norm_triton.py

Without a CUDA GPU the kernels run on the CPU through Triton's interpreter, on
small inputs, and the timings say nothing about a GPU.
"""

from __future__ import annotations

import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels below are decorated

import triton
import triton.language as tl

# A row is held whole in registers, converted to float32. The backward keeps
# four float32 values per column (x_hat, w * dy and the two running sums), so
# rows stop at 32 KB of input: 16384 half-precision or 8192 float32 values.
MAX_ROW_BYTES = 32768


@triton.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride may pass 2**31
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    inv_n = tl.div_rn(tl.full([], 1.0, tl.float32), tl.full([], N, tl.float32))  # exact 1/N: a float32 "/" is approximate
    mean = tl.sum(x, axis=0) * inv_n
    xc = tl.where(mask, x - mean, 0.0)  # centred first: no cancellation in the variance
    var = tl.sum(xc * xc, axis=0) * inv_n
    rstd = 1 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    b = tl.load(B + cols, mask=mask).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@triton.jit
def layer_norm_bwd_kernel(DY, DX, X, W, Mean, Rstd, DW_partial, DB_partial, stride, M, N,
                          BLOCK_N: tl.constexpr):
    # Program p takes rows p, p + P, p + 2P, ... and keeps its share of dw and
    # db in registers; it writes them once, to a row of the partial buffers
    # that no other program touches.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    inv_n = tl.div_rn(tl.full([], 1.0, tl.float32), tl.full([], N, tl.float32))  # exact 1/N: a float32 "/" is approximate
    for row in range(pid, M, tl.num_programs(0)):
        offsets = tl.cast(row, tl.int64) * stride + cols
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offsets, mask=mask, other=0.0).to(tl.float32)
        x_hat = tl.where(mask, (x - tl.load(Mean + row)) * tl.load(Rstd + row), 0.0)
        g = dy * w
        c1 = tl.sum(x_hat * g, axis=0) * inv_n
        c2 = tl.sum(g, axis=0) * inv_n
        dx = (g - (x_hat * c1 + c2)) * tl.load(Rstd + row)
        tl.store(DX + offsets, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * x_hat
        db += dy
    tl.store(DW_partial + pid * N + cols, dw, mask=mask)
    tl.store(DB_partial + pid * N + cols, db, mask=mask)


def launch_config(n: int, element_size: int) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for rows of ``n`` values: the whole row, 8 values a thread up to 16 warps."""
    block_n = triton.next_power_of_2(n)
    if block_n * element_size > MAX_ROW_BYTES:
        raise ValueError(f"rows of {n} values of {element_size} bytes do not fit in registers "
                         f"(at most {MAX_ROW_BYTES} bytes)")
    return block_n, min(max(block_n // 256, 1), 16)


def backward_programs(m: int, device: torch.device) -> int:
    """Two programs per SM, enough to fill the GPU; four under the interpreter."""
    if device.type == "cuda":
        return min(m, 2 * torch.cuda.get_device_properties(device).multi_processor_count)
    return min(m, 4)


def layer_norm_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float):
    """``y, mean, rstd`` of the rows of a 2-D ``x`` with contiguous rows."""
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    block_n, num_warps = launch_config(n, x.element_size())
    layer_norm_fwd_kernel[(m,)](x, y, weight, bias, mean, rstd, x.stride(0), n, eps,
                                BLOCK_N=block_n, num_warps=num_warps)
    return y, mean, rstd


def layer_norm_backward(dy, x, weight, mean, rstd):
    """``dx, dw, db``; dw and db are the partial rows summed in a fixed order."""
    m, n = x.shape
    dx = torch.empty_like(x)
    programs = backward_programs(m, x.device)
    dw_partial = torch.empty(programs, n, dtype=torch.float32, device=x.device)
    db_partial = torch.empty_like(dw_partial)
    block_n, num_warps = launch_config(n, x.element_size())
    layer_norm_bwd_kernel[(programs,)](dy, dx, x, weight, mean, rstd, dw_partial, db_partial,
                                       x.stride(0), m, n, BLOCK_N=block_n, num_warps=num_warps)
    return dx, dw_partial.sum(0).to(weight.dtype), db_partial.sum(0).to(weight.dtype)


class LayerNorm(torch.autograd.Function):
    """Autograd ties the two launchers together: forward saves what backward needs."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        y, mean, rstd = layer_norm_forward(rows, weight, bias, eps)
        ctx.save_for_backward(rows, weight, mean, rstd)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        rows, weight, mean, rstd = ctx.saved_tensors
        dy_rows = dy.reshape(rows.shape).contiguous()
        dx, dw, db = layer_norm_backward(dy_rows, rows, weight, mean, rstd)
        return dx.view(dy.shape), dw, db, None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalization over the last dimension of ``x``, differentiable."""
    return LayerNorm.apply(x, weight, bias, eps)


# ---------------------------------------------------------------------------
# Run as a script: a check against PyTorch, then a small benchmark with a plot.


def check(device: torch.device, m: int, n: int) -> None:
    """Forward and backward against torch.nn.functional.layer_norm, in three dtypes."""
    tolerances = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}
    for dtype, tol in tolerances.items():
        x = (-2.3 + torch.randn(m, n, device=device)).to(dtype).requires_grad_(True)
        w = torch.rand(n, device=device, dtype=dtype, requires_grad=True)
        b = torch.rand(n, device=device, dtype=dtype, requires_grad=True)
        dy = 0.1 * torch.randn(m, n, device=device, dtype=dtype)
        ours = [layer_norm(x, w, b)]
        ours += torch.autograd.grad(ours[0], (x, w, b), dy)
        theirs = [torch.nn.functional.layer_norm(x, (n,), w, b)]
        theirs += torch.autograd.grad(theirs[0], (x, w, b), dy)
        errors = {name: ((a.float() - t.float()).abs().max() / t.float().abs().max()).item()
                  for name, a, t in zip(("y", "dx", "dw", "db"), ours, theirs)}
        print(f"{str(dtype)[6:]:>9}: relative difference to torch "
              + ", ".join(f"{name} {err:.1e}" for name, err in errors.items()))
        assert max(errors.values()) < tol, f"{dtype}: differs from torch by more than {tol}"


def median_ms(fn, on_gpu: bool) -> float:
    """Median time of ``fn`` in milliseconds (L2 flushed between runs on a GPU)."""
    if on_gpu:
        return triton.testing.do_bench(fn, quantiles=[0.5])
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[1]


def benchmark(device: torch.device, m: int, sizes: list[int], dtype: torch.dtype) -> dict:
    """GB/s of forward and backward (ours, torch) and of a copy of the same size, per row length."""
    on_gpu = device.type == "cuda"
    results = {key: [] for key in ("triton forward", "torch forward", "triton backward", "torch backward",
                                   "copy")}
    for n in sizes:
        x = torch.randn(m, n, device=device, dtype=dtype, requires_grad=True)
        w = torch.rand(n, device=device, dtype=dtype, requires_grad=True)
        b = torch.rand(n, device=device, dtype=dtype, requires_grad=True)
        dy = torch.randn(m, n, device=device, dtype=dtype)
        size = x.numel() * x.element_size()  # bytes of one (m, n) tensor
        for name, fn in (("triton", layer_norm), ("torch", lambda *a: torch.nn.functional.layer_norm(
                a[0], (n,), a[1], a[2]))):
            results[f"{name} forward"].append(2 * size / median_ms(lambda: fn(x, w, b), on_gpu) * 1e-6)
            y = fn(x, w, b)
            ms = median_ms(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True), on_gpu)
            results[f"{name} backward"].append(3 * size / ms * 1e-6)  # x and dy read, dx written
        results["copy"].append(2 * size / median_ms(lambda: x.detach().clone(), on_gpu) * 1e-6)
        print(f"N = {n:>6}: " + ", ".join(f"{key} {values[-1]:.3g} GB/s" for key, values in results.items()))
    return results


def plot(sizes: list[int], results: dict, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # write a file; no window needed
    import matplotlib.pyplot as plt

    plt.rcParams["font.family"] = ["DejaVu Sans"]  # tried in turn for each character
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, values in results.items():
        ax.plot(sizes, values, "k--" if key == "copy" else "o-", label=key)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (values per row)")
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot written to {path}")


def main() -> None:
    torch.manual_seed(0)
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda" if on_gpu else "cpu")
    if not on_gpu:
        print("No CUDA GPU: the kernels run on the CPU through Triton's interpreter, on small inputs.")
    check(device, *((4096, 3000) if on_gpu else (37, 300)))
    print("forward and backward match torch")
    m, sizes = (4096, [512, 1024, 2048, 4096, 8192, 16384]) if on_gpu else (16, [128, 256, 512])
    results = benchmark(device, m, sizes, torch.float16)
    where = torch.cuda.get_device_name() if on_gpu else "CPU, Triton interpreter"
    plot(sizes, results, f"layer norm, M = {m}, float16 ({where})", "layer_norm_triton.png")


if __name__ == "__main__":
    main()
