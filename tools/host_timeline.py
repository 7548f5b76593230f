"""Host timeline of one call: where, between the caller and the first kernel launch, the time goes.

    python tools/host_timeline.py [--detail]

The GPU is synchronized before every call, so no launch ever waits for a full
launch queue: every interval below is host time alone. Timestamps are taken in
wrappers around the package's own functions and around Triton's compiled
launcher (``run``), in whichever thread calls them (the backward runs on the
autograd engine's device thread). Printed: the median, over calls, of the time
of each mark since the call began.
"""

import argparse
import collections
import os
import statistics
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton compiles any kernel (a check of the tool only)

import torch.nn.functional as F  # noqa: E402

from ln_tutorial import dispatch, function, layer_norm  # noqa: E402
from ln_tutorial.variants import fast_launch  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

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


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def compiled_tables():
    """The table of directly launched kernels (empty under the interpreter)."""
    return [fast_launch._compiled]


def wrap_compiled_launchers():
    for table in compiled_tables():
        for key, (run, *rest) in list(table.items()):
            def timed_run(*args, _run=run):
                launch_number = 1 + sum(label.endswith("launch enter") for label, _ in marks)
                mark(f"{launch_number}. launch enter")
                _run(*args)
                mark(f"{launch_number}. launch exit")

            table[key] = (timed_run, *rest)


def timeline(call, reps, before=None):
    """Median time (us) of each mark since the start of ``call``."""
    for _ in range(min(reps, 20)):
        call()
    offsets = collections.defaultdict(list)
    for _ in range(reps):
        if before:
            before()
        sync()
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


def main(args):
    dtype = getattr(torch, args.dtype)
    reps = args.reps
    for m, n in [tuple(map(int, shape.split("x"))) for shape in args.shapes.split(",")]:
        x = torch.randn(m, n, device=DEVICE, dtype=dtype)
        w = torch.rand(n, device=DEVICE, dtype=dtype, requires_grad=True)
        b = torch.rand(n, device=DEVICE, dtype=dtype, requires_grad=True)
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
        report(f"{m}x{n} {args.dtype}, forward, ln_tutorial (grad enabled)", timeline(lambda: layer_norm(xg, (n,), w, b), reps))
        report("  forward, torch", timeline(lambda: F.layer_norm(xg, (n,), w, b), reps))
        for name, y in (("identity Function", y_identity), ("torch", y_torch), ("ln_tutorial", y_ours)):
            report(f"  backward, {name}", timeline(lambda y=y: y.backward(dy, retain_graph=True), reps, before=reset))
        torch.autograd.set_multithreading_enabled(False)
        report("  backward, identity Function, engine on the calling thread",
               timeline(lambda: y_identity.backward(dy, retain_graph=True), reps, before=reset))  # fmt: skip
        report("  backward, ln_tutorial, engine on the calling thread",
               timeline(lambda: y_ours.backward(dy, retain_graph=True), reps, before=reset))  # fmt: skip
        torch.autograd.set_multithreading_enabled(True)
        _, mean, rstd = dispatch.layer_norm_forward(x, w, b, 1e-5)
        report("  dispatch.layer_norm_backward, called directly",
               timeline(lambda: dispatch.layer_norm_backward(dy, x, w, b, mean, rstd), reps))  # fmt: skip
        for table in compiled_tables():
            table.clear()


def wrap_everything(detail: bool) -> None:
    """Marks around the package's layers (and, with ``detail``, around single torch calls)."""
    if detail:
        for name in ("new_empty", "unbind", "stride", "get_device"):
            wrap_function(torch.Tensor, name, f"Tensor.{name}")
        wrap_function(torch, "empty_like", "torch.empty_like")
        for name in ("_specialize", "hooks_installed"):
            wrap_function(fast_launch, name, name)
        wrap_function(fast_launch, "run", "fast_launch.run")
    for name in ("forward", "backward"):
        wrap_function(function.LayerNormFunction, name, f"Function.{name}")
        setattr(function.LayerNormFunction, name, staticmethod(getattr(function.LayerNormFunction, name)))
    wrap_function(dispatch, "layer_norm_backward", "dispatch.layer_norm_backward")
    wrap_function(dispatch, "layer_norm_forward", "dispatch.layer_norm_forward")
    wrap_function(dispatch, "backward_path", "path")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("--shapes", default="4096x1024,4096x8192", help="MxN, comma-separated")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    parser.add_argument("--reps", type=int, default=300, help="timed calls per line")
    parser.add_argument("--detail", action="store_true", help="also mark single torch calls and launcher steps")
    arguments = parser.parse_args()
    wrap_everything(arguments.detail)
    main(arguments)
