"""Run 53: what a C++ backward node would buy (an experiment; the package is unchanged).

The notes' claim: the backward at the tutorial's small sizes is timed on the host,
mostly by Python on the autograd engine's thread (our Function.backward: about 90 us
there, the engine's two thread switches about as much again), and a backward node in
C++ that launches the compiled kernel would close the gap to PyTorch's own backward.
backward_node.cpp is such a node for the one-launch backward: the forward runs the
package's Python launcher, then attaches the node to y; the node allocates dx, the
partial rows and dW/dB and launches the same compiled kernel with cuLaunchKernelEx.

Prediction: host time per iteration of do_bench's loop falls from ~200 us to ~110 us
(torch's ~115), and at 4096 x 1024 .. 4096 the events then time the kernel: 2-4x the
GB/s of the Python path, at or above torch's. Gradients: the same bits as the package's.
"""

import os
import statistics
import time

import torch
import torch.nn.functional as F
import triton
from torch.utils.cpp_extension import load

from ln_tutorial import launch, layer_norm

here = os.path.dirname(os.path.abspath(__file__))
start = time.time()
ext = load(
    name="ln_backward_node", sources=[os.path.join(here, "backward_node.cpp")],
    extra_include_paths=[os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "include")],
    extra_ldflags=["-ldl"], verbose=False,
)  # fmt: skip
print(f"built in {time.time() - start:.0f} s", flush=True)
KINDS = {"constexpr": "c", "i32": "i", "i1": "c"}


def node_plan(x, w, b, mean, rstd, dy):
    """The compiled one-launch kernel for these tensors, and how the node must lay out its arguments."""
    m, n = x.shape
    cfg = launch.backward_config(n, x.element_size())
    plan = launch._backward_plan(m, n, x.dtype, x.get_device(), "deterministic", cfg, True, True)
    assert plan.reduce is None, "one launch only"
    dx = torch.empty_like(x)
    partial = torch.empty((2, plan.programs, n), device="cuda")
    dw, db = torch.empty_like(w), torch.empty_like(b)
    barrier = launch._grid_barrier(x.get_device(), torch._C._cuda_getCurrentRawStream(x.get_device()))
    args = (dy, x, w, mean, rstd, dx, partial, dw, db, barrier, dy.stride(0), x.stride(0), n, m, n,
            plan.rows_per_program)  # fmt: skip
    compiled = plan.main.kernel[(plan.programs,)](*args, **plan.main.meta)
    assert compiled.metadata.global_scratch_size == 0 and compiled.metadata.profile_scratch_size == 0
    names = plan.main.kernel.arg_names[: len(args)]
    kinds = "".join("p" if compiled.src.signature[k].startswith("*") else KINDS[compiled.src.signature[k]]
                    for k in names)  # fmt: skip
    num_warps, _, shared = compiled.packed_metadata
    return dict(function=compiled.function, threads=32 * num_warps, shared=shared, programs=plan.programs,
                rows_per_program=plan.rows_per_program, kinds=kinds, barrier=barrier)  # fmt: skip


def with_cpp_node(x, w, b, plan):
    y, mean, rstd = launch.layer_norm_forward(x.detach(), w.detach(), b.detach(), 1e-5)
    ext.attach(y, x, w, b, mean, rstd, plan["function"], plan["threads"], plan["shared"], plan["programs"],
               plan["rows_per_program"], plan["kinds"], torch._C._cuda_getCurrentRawStream(0), plan["barrier"])  # fmt: skip
    return y


def loop(y, dy, params, iters=600):
    """do_bench's backward loop by hand: host time per iteration, median time between the events."""
    cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for _ in range(30):
        y.backward(dy, retain_graph=True)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for i in range(iters):
        for p in params:
            p.grad = None
        cache.zero_()
        starts[i].record()
        y.backward(dy, retain_graph=True)
        ends[i].record()
    host = (time.perf_counter() - begin) / iters * 1e6
    torch.cuda.synchronize()
    return host, statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
for n in (1024, 2048, 3072, 4096, 8192):
    m = 4096
    x = (-2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.float16)).requires_grad_()
    w = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
    b = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
    dy = 0.1 * torch.randn(m, n, device="cuda", dtype=torch.float16)
    _, mean, rstd = launch.layer_norm_forward(x.detach(), w.detach(), b.detach(), 1e-5)
    plan = node_plan(x.detach(), w.detach(), b.detach(), mean, rstd, dy)
    ys = {"python Function": layer_norm(x, (n,), w, b), "C++ node": with_cpp_node(x, w, b, plan),
          "torch": F.layer_norm(x, (n,), w, b)}  # fmt: skip
    grads = {}
    for name, y in ys.items():
        x.grad = w.grad = b.grad = None
        y.backward(dy, retain_graph=True)
        grads[name] = (x.grad.clone(), w.grad.clone(), b.grad.clone())
    same = all(torch.equal(a, c) for a, c in zip(grads["python Function"], grads["C++ node"]))
    print(f"N={n}: kinds {plan['kinds']}, C++ node gradients bitwise equal to the package's: {same}", flush=True)
    moved = 3 * m * n * 2
    for round_ in range(2):
        for name, y in ys.items():
            host, gpu = loop(y, dy, (x, w, b))
            print(f"  round {round_} {name:<16} host {host:6.1f} us/iter, events {gpu:6.1f} us "
                  f"= {moved / (gpu * 1e-6) / 1e9:6.0f} GB/s", flush=True)
