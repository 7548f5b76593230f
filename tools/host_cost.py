"""Host-included time per call of torch's layer norm and ln_tutorial's, through the function and the
module, with and without autocast, with float32 and half-precision inputs.

    python tools/host_cost.py [--shapes 256x1024,4096x4096] [--csv FILE]

Each case is timed as the benchmark times host-included time: calls back to back, one
synchronisation at the end, divided by the number of calls; torch and ln_tutorial take turns,
``--repetitions`` times, and the medians are printed as CSV (``python``: ln_tutorial with its
C++ forward and node turned off). ``forward``: a call whose parameters need gradients, so that
autograd records it; ``step``: a forward and its backward (``y.backward(dy)``, the gradients
accumulated as in training). Without a GPU it runs on the CPU (through Triton's interpreter if
``TRITON_INTERPRET=1``): a check that the tool works, not a measurement.
"""

import argparse
import contextlib
import csv
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import ln_tutorial
from ln_tutorial_book.bench import host_us, run_provenance
from ln_tutorial.variants import native

SHAPES = ",".join(f"{m}x{n}" for m in (256, 1024, 4096) for n in (1024, 2048, 4096, 8192))
PROVIDERS = {  # "python": ln_tutorial without its C++ forward and node (the variant native), for comparison
    "torch": (F.layer_norm, torch.nn.LayerNorm),
    "ours": (ln_tutorial.layer_norm, ln_tutorial.LayerNorm),
    "python": (ln_tutorial.layer_norm, ln_tutorial.LayerNorm),
}


def calls_of(provider, via, amp, dtype, m, n, device):
    """The two timed calls of one provider in one case: forward, and forward + backward."""
    function, module = PROVIDERS[provider]
    if via == "module":
        norm = module(n, device=device, dtype=dtype)
    else:
        weight = torch.rand(n, device=device, dtype=dtype, requires_grad=True)
        bias = torch.rand(n, device=device, dtype=dtype, requires_grad=True)
        norm = lambda x: function(x, (n,), weight, bias)  # noqa: E731
    x = torch.randn(m, n, device=device, dtype=dtype, requires_grad=True)
    autocast = (lambda: torch.autocast(device, dtype=getattr(torch, amp))) if amp != "none" else contextlib.nullcontext

    def forward():
        native.ENABLED = provider != "python"
        try:
            with autocast():
                return norm(x)
        finally:
            native.ENABLED = True

    dy = torch.randn_like(forward())  # float32 under autocast, as the output
    return {"forward": forward, "step": lambda: forward().backward(dy)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES, help="MxN, comma-separated")
    parser.add_argument("--via", nargs="+", choices=["function", "module"], default=["function", "module"])
    parser.add_argument("--amp", nargs="+", choices=["none", "bfloat16", "float16"], default=["none", "bfloat16", "float16"])
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16", "float16"], default=["float32", "bfloat16"])
    parser.add_argument("--calls", type=int, default=100, help="calls per timed repetition")
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--csv", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    provenance = run_provenance(device == "cuda")
    rows = []
    writer = csv.DictWriter(sys.stdout, fieldnames=["via", "amp", "dtype", "M", "N", "mode", "torch_us", "ours_us",
                                                    "python_us", "ours_over_torch", *provenance])  # fmt: skip
    writer.writeheader()
    for via in args.via:
        for amp in args.amp:
            for dtype in args.dtypes:
                for shape in args.shapes.split(","):
                    m, n = map(int, shape.split("x"))
                    calls = {p: calls_of(p, via, amp, getattr(torch, dtype), m, n, device) for p in PROVIDERS}
                    for mode in ("forward", "step"):
                        times = {p: [] for p in PROVIDERS}
                        for p in PROVIDERS:
                            host_us([calls[p][mode]], 3, device)  # warm up
                        for _ in range(args.repetitions):
                            for p in PROVIDERS:
                                times[p].append(host_us([calls[p][mode]], args.calls, device))
                        us = {p: statistics.median(times[p]) for p in PROVIDERS}
                        row = {"via": via, "amp": amp, "dtype": dtype, "M": m, "N": n, "mode": mode,
                               **{f"{p}_us": f"{us[p]:.1f}" for p in PROVIDERS},
                               "ours_over_torch": f"{us['ours'] / us['torch']:.3f}", **provenance}  # fmt: skip
                        writer.writerow(row)
                        sys.stdout.flush()
                        rows.append(row)
    at_or_below = sum(float(r["ours_over_torch"]) <= 1 for r in rows)
    print(f"ln_tutorial at or below torch in {at_or_below} of {len(rows)} cases", file=sys.stderr)
    if args.csv:
        with args.csv.open("w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=list(rows[0]))
            out.writeheader()
            out.writerows(rows)


if __name__ == "__main__":
    main()
