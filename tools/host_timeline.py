"""Host timeline of one call: where, between the caller and the first kernel launch, the time goes.

    python tools/host_timeline.py [--detail]

The GPU is synchronized before every call, so no launch ever waits for a full
launch queue: every interval below is host time alone. Timestamps are taken in
wrappers around the package's own functions and around Triton's compiled
launcher (``run``), in whichever thread calls them (the backward runs on the
autograd engine's device thread). Printed: the median, over calls, of the time
of each mark since the call began.
"""

import collections
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from ln_tutorial import function, launch, layer_norm

marks = []


def mark(label):
    marks.append((label, time.perf_counter_ns()))


def wrap_function(owner, name, label):
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        mark(f"{label} enter")
        out = original(*args, **kwargs)
        mark(f"{label} exit")
        return out

    setattr(owner, name, wrapped)


def compiled_tables():
    """The tables of directly launched kernels: one per ``Launcher`` (one in all before them)."""
    if hasattr(launch, "_launchers"):
        return [launcher.compiled for launcher in launch._launchers.values()]
    return [launch._compiled_kernels]


def wrap_compiled_launchers():
    for table in compiled_tables():
        for key, (run, *rest) in list(table.items()):
            def timed_run(*args, _run=run):
                launch_number = 1 + sum(label.endswith("launch enter") for label, _ in marks)
                mark(f"{launch_number}. launch enter")
                _run(*args)
                mark(f"{launch_number}. launch exit")

            table[key] = (timed_run, *rest)


def timeline(call, reps=300, before=None):
    """Median time (us) of each mark since the start of ``call``."""
    for _ in range(20):
        call()
    offsets = collections.defaultdict(list)
    for _ in range(reps):
        if before:
            before()
        torch.cuda.synchronize()
        marks.clear()
        start = time.perf_counter_ns()
        call()
        mark("call returned")
        seen = collections.Counter()
        for label, t in marks:
            seen[label] += 1
            offsets[label if seen[label] == 1 else f"{label} ({seen[label]})"].append((t - start) / 1e3)
    order = sorted(offsets, key=lambda k: statistics.median(offsets[k]))
    return [(label, statistics.median(offsets[label])) for label in order]


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def report(title, rows):
    print(title)
    for label, us in rows:
        print(f"  {us:8.1f} us  {label}")


def main():
    for m, n in [(4096, 1024), (4096, 8192)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.float16)
        w = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
        b = torch.rand(n, device="cuda", dtype=torch.float16, requires_grad=True)
        dy = 0.1 * torch.randn_like(x)
        xg = x.clone().requires_grad_()
        params = (xg, w, b)

        def reset():
            for t in params:
                t.grad = None

        y_ours = layer_norm(xg, (n,), w, b)
        y_ours.backward(dy, retain_graph=True)  # compiles and caches the launches
        y_torch = F.layer_norm(xg, (n,), w, b)
        y_identity = Identity.apply(xg)
        wrap_compiled_launchers()
        cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")
        event = torch.cuda.Event(enable_timing=True)
        report(f"{m}x{n} float16: do_bench's own steps", timeline(lambda: (mark("zero_"), cache.zero_(),
               mark("record"), event.record()), before=reset))  # fmt: skip
        report("  forward, ln_tutorial (grad enabled)", timeline(lambda: layer_norm(xg, (n,), w, b)))
        report("  forward, torch", timeline(lambda: F.layer_norm(xg, (n,), w, b)))
        for name, y in (("identity Function", y_identity), ("torch", y_torch), ("ln_tutorial", y_ours)):
            report(f"  backward, {name}", timeline(lambda y=y: y.backward(dy, retain_graph=True), before=reset))
        torch.autograd.set_multithreading_enabled(False)
        report("  backward, identity Function, engine on the calling thread",
               timeline(lambda: y_identity.backward(dy, retain_graph=True), before=reset))  # fmt: skip
        report("  backward, ln_tutorial, engine on the calling thread",
               timeline(lambda: y_ours.backward(dy, retain_graph=True), before=reset))  # fmt: skip
        torch.autograd.set_multithreading_enabled(True)
        _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
        report("  launch.layer_norm_backward, called directly",
               timeline(lambda: launch.layer_norm_backward(dy, x, w, b, mean, rstd)))  # fmt: skip
        for table in compiled_tables():
            table.clear()


if "--detail" in sys.argv:
    for name in ("new_empty", "unbind", "stride", "get_device"):
        wrap_function(torch.Tensor, name, f"Tensor.{name}")
    wrap_function(torch, "empty_like", "torch.empty_like")
    for name in ("_launch_arguments", "_hooks_installed"):
        wrap_function(launch, name, name)
    if hasattr(launch, "Launcher"):
        wrap_function(launch.Launcher, "__call__", "Launcher")
wrap_function(function.LayerNormFunction, "backward", "Function.backward")
function.LayerNormFunction.backward = staticmethod(function.LayerNormFunction.backward)
wrap_function(function.LayerNormFunction, "forward", "Function.forward")
function.LayerNormFunction.forward = staticmethod(function.LayerNormFunction.forward)
wrap_function(launch, "layer_norm_backward", "launch.layer_norm_backward")
wrap_function(launch, "layer_norm_forward", "launch.layer_norm_forward")
wrap_function(launch, "_backward_plan" if hasattr(launch, "_backward_plan") else "_backward_grid", "plan")
main()
