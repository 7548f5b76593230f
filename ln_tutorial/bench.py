"""GB/s benchmark of LayerNorm implementations, with recorded results and plots.

Run ``python -m ln_tutorial.bench --help``. One run measures the device-to-device
copy bandwidth (the ceiling) and then every provider, forward and backward,
with :func:`triton.testing.do_bench` (L2 flushed before each call; median and
20th/80th percentiles). GB/s follow the Triton tutorial: the forward moves
``2·M·N`` elements (read x, write y), the backward ``3·M·N`` (read x and dy,
write dx). Results are appended to ``data/benchmarks/<gpu-slug>.csv`` with
their provenance; the tutorial site draws its plots from these functions.
"""

import argparse
import csv
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch
import torch.nn.functional as F

RESULTS_DIR = Path(__file__).parent / "data" / "benchmarks"
COLUMNS = [
    "provider", "mode", "dtype", "M", "N", "gbps_p20", "gbps_p50", "gbps_p80",
    "copy_gbps", "gpu", "torch", "triton", "date", "commit",
]  # fmt: skip
MODES = ("forward", "backward")
#: The Triton tutorial's sweep (fp16, M = 4096) and LLM-sized shapes (bf16).
SETS = {
    "tutorial": [(4096, n) for n in range(1024, 16384, 512)],
    "llm": [(16384, 4096), (16384, 8192), (8192, 16384), (4096, 32768), (2048, 65536), (65536, 1024)],
}
SET_DTYPES = {"tutorial": torch.float16, "llm": torch.bfloat16}
ELEMENTS_MOVED = {"forward": 2, "backward": 3}  # per element of x, in units of its size


# --- providers: each returns fn(x, weight, bias) -> y -----------------------------------


def _ln_tutorial(strategy: str) -> Callable:
    from ln_tutorial import layer_norm

    return lambda x, w, b: layer_norm(x, (x.shape[-1],), w, b, backward_strategy=strategy)


def _torch_compile() -> Callable:
    import torch._dynamo

    # Static shapes, one graph per size: never fall back to eager.
    torch._dynamo.config.cache_size_limit = 1024
    torch._dynamo.config.accumulated_cache_size_limit = 4096
    return torch.compile(lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), dynamic=False)


def _liger() -> Callable:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)


def _apex() -> Callable:
    from apex.normalization.fused_layer_norm import fused_layer_norm_affine

    return lambda x, w, b: fused_layer_norm_affine(x, w, b, (x.shape[-1],), 1e-5)


def _flash_attn() -> Callable:
    from flash_attn.ops.layer_norm import layer_norm as flash_layer_norm

    return lambda x, w, b: flash_layer_norm(x, w, b, 1e-5)


def _quack() -> Callable:
    from quack import layernorm as quack_layernorm

    return lambda x, w, b: quack_layernorm(x, w, b, eps=1e-5)


PROVIDERS: Dict[str, Callable[[], Callable]] = {
    "ln_tutorial": lambda: _ln_tutorial("deterministic"),
    "ln_tutorial-lock": lambda: _ln_tutorial("lock"),
    "torch": lambda: (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)),
    "torch.compile": _torch_compile,
    "liger": _liger,
    "apex": _apex,
    "flash-attn": _flash_attn,
    "quack": _quack,
}


def available_providers(names: Optional[Iterable[str]] = None) -> Dict[str, Callable]:
    """Build the providers that import here; say on stderr why the others are left out."""
    found = {}
    for name in names or PROVIDERS:
        try:
            found[name] = PROVIDERS[name]()
        except Exception as exc:  # an optional peer that is not installed
            print(f"bench: provider {name} unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
    return found


# --- measuring ----------------------------------------------------------------------------


def copy_bandwidth(size_bytes: int = 1 << 30) -> float:
    """Device-to-device copy in GB/s, counting bytes read plus bytes written."""
    from triton.testing import do_bench

    src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * size_bytes / (ms * 1e-3) / 1e9


def time_provider(fn: Callable, mode: str, m: int, n: int, dtype: torch.dtype) -> List[float]:
    """GB/s at the 20th, 50th and 80th percentile of time (so p20 >= p50 >= p80)."""
    from triton.testing import do_bench

    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=dtype)
    weight = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    bias = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    # warmup=100 ms: compiling a new size leaves the GPU idle and its clocks low.
    if mode == "forward":
        quantiles = do_bench(lambda: fn(x, weight, bias), warmup=100, quantiles=[0.2, 0.5, 0.8])
    else:
        x.requires_grad_(True)
        y = fn(x, weight, bias)
        dy = 0.1 * torch.randn_like(y)
        quantiles = do_bench(
            lambda: y.backward(dy, retain_graph=True), grad_to_none=[x, weight, bias], warmup=100,
            quantiles=[0.2, 0.5, 0.8],
        )
    moved = ELEMENTS_MOVED[mode] * m * n * x.element_size()
    return [moved / (ms * 1e-3) / 1e9 for ms in quantiles]


def _commit() -> str:
    """The source commit: LN_TUTORIAL_COMMIT when set (a copy of the tree, whose .git may be
    missing or stale), else ``git describe`` of the package's checkout."""
    if os.environ.get("LN_TUTORIAL_COMMIT"):
        return os.environ["LN_TUTORIAL_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent, capture_output=True, text=True
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except OSError:
        pass
    return "unknown"


def gpu_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def measure(
    providers: Optional[Sequence[str]] = None,
    modes: Sequence[str] = MODES,
    sets: Sequence[str] = ("tutorial", "llm"),
    dtypes: Optional[Sequence[torch.dtype]] = None,
    progress: bool = True,
) -> List[dict]:
    """Measure live on the current GPU; return CSV rows (see :data:`COLUMNS`)."""
    import triton

    fns = available_providers(providers)
    copy_gbps = copy_bandwidth()
    base = dict(
        copy_gbps=round(copy_gbps, 1), gpu=torch.cuda.get_device_name(), torch=torch.__version__,
        triton=triton.__version__, date=datetime.date.today().isoformat(), commit=_commit(),
    )  # fmt: skip
    plan = [
        (name, mode, dtype, m, n)
        for set_name in sets
        for dtype in (dtypes or [SET_DTYPES[set_name]])
        for m, n in SETS[set_name]
        for mode in modes
        for name in fns
        if not (name == "ln_tutorial-lock" and mode == "forward")  # same forward as ln_tutorial
    ]
    rows = []
    for i, (name, mode, dtype, m, n) in enumerate(plan):
        if progress:
            print(f"\rbench [{i + 1}/{len(plan)}] {name} {mode} {m}x{n}".ljust(70), end="", file=sys.stderr)
        try:
            p20, p50, p80 = time_provider(fns[name], mode, m, n, dtype)
        except Exception as exc:
            print(f"\nbench: {name} {mode} {str(dtype)[6:]} {m}x{n} failed: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)  # fmt: skip
            torch.cuda.empty_cache()
            continue
        rows.append(dict(provider=name, mode=mode, dtype=str(dtype).removeprefix("torch."), M=m, N=n,
                         gbps_p20=round(p20, 1), gbps_p50=round(p50, 1), gbps_p80=round(p80, 1), **base))  # fmt: skip
    if progress:
        print(file=sys.stderr)
    return rows


# --- recorded results ---------------------------------------------------------------------


def save_results(rows: List[dict], path: Optional[Path] = None) -> Path:
    """Append rows to ``data/benchmarks/<gpu-slug>.csv`` (header written once)."""
    path = Path(path) if path else RESULTS_DIR / f"{gpu_slug(rows[0]['gpu'])}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return path


def load_results(path: Optional[Path] = None) -> List[dict]:
    """Rows of one recorded CSV, or of every CSV in ``data/benchmarks/``, with typed numbers."""
    paths = [Path(path)] if path else sorted(RESULTS_DIR.glob("*.csv"))
    rows = []
    for p in paths:
        with p.open(newline="") as f:
            for row in csv.DictReader(f):
                for key in ("M", "N"):
                    row[key] = int(row[key])
                for key in ("gbps_p20", "gbps_p50", "gbps_p80", "copy_gbps"):
                    row[key] = float(row[key])
                rows.append(row)
    return rows


def latest_run(rows: List[dict]) -> List[dict]:
    """The rows of the most recent run (same date, commit and GPU as the last row recorded)."""
    if not rows:
        return []
    last = rows[-1]
    return [r for r in rows if (r["date"], r["commit"], r["gpu"]) == (last["date"], last["commit"], last["gpu"])]


def provenance(rows: List[dict]) -> str:
    """One line saying where and when ``rows`` were measured."""
    if not rows:
        return "no results"
    r = rows[0]
    return (f"{r['gpu']}, torch {r['torch']}, triton {r['triton']}, {r['date']}, commit {r['commit']}, "
            f"copy {r['copy_gbps']:.0f} GB/s")  # fmt: skip


def _by_provider(rows: List[dict], mode: str, shapes: Sequence) -> Dict[str, Dict[tuple, float]]:
    table: Dict[str, Dict[tuple, float]] = {}
    for r in rows:
        if r["mode"] == mode and (r["M"], r["N"]) in shapes:
            table.setdefault(r["provider"], {})[(r["M"], r["N"])] = r["gbps_p50"]
    return table


def format_table(rows: List[dict], mode: str, set_name: str = "tutorial") -> str:
    """GB/s (median) per N, one column per provider, like the Triton tutorial's printed output."""
    shapes = [s for s in SETS[set_name] if any((r["M"], r["N"]) == s and r["mode"] == mode for r in rows)]
    table = _by_provider(rows, mode, shapes)
    names = list(table)
    lines = [f"layer-norm-{mode} (GB/s, median):", "".join([f"{'N':>8}"] + [f"{p:>17}" for p in names])]
    for m, n in shapes:
        cells = [f"{table[p].get((m, n), float('nan')):>17.1f}" for p in names]
        lines.append("".join([f"{n:>8}"] + cells))
    return "\n".join(lines)


def llm_table(rows: List[dict], mode: str) -> str:
    """Median GB/s as a percentage of the copy bandwidth, per LLM shape and provider."""
    shapes = [s for s in SETS["llm"] if any((r["M"], r["N"]) == s and r["mode"] == mode for r in rows)]
    table = _by_provider(rows, mode, shapes)
    copy = rows[0]["copy_gbps"] if rows else float("nan")
    names = list(table)
    lines = [f"layer-norm-{mode}, % of copy ({copy:.0f} GB/s):", "".join([f"{'M x N':>14}"] + [f"{p:>17}" for p in names])]
    for m, n in shapes:
        cells = [f"{100 * table[p][(m, n)] / copy:>16.1f}%" if (m, n) in table[p] else f"{'-':>17}" for p in names]
        lines.append("".join([f"{f'{m}x{n}':>14}"] + cells))
    return "\n".join(lines)


def plot_sweep(rows: List[dict], mode: str, ax=None, set_name: str = "tutorial"):
    """GB/s against N for each provider, with the copy ceiling dashed; returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    table = _by_provider(rows, mode, SETS[set_name])
    for name, points in table.items():
        ns = sorted(points, key=lambda s: s[1])
        color = f"C{list(PROVIDERS).index(name) % 10}" if name in PROVIDERS else None  # same colour on every plot
        ax.plot([s[1] for s in ns], [points[s] for s in ns], marker=".", label=name, color=color,
                linewidth=2.5 if name == "ln_tutorial" else 1.2)  # fmt: skip
    if rows:
        ax.axhline(rows[0]["copy_gbps"], linestyle="--", color="gray", label="copy (ceiling)")
    ax.set_xlabel("N (row length)")
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    # The title says where and when the numbers were measured.
    title = f"layer-norm-{mode}, M = 4096, float16" if set_name == "tutorial" else f"layer-norm-{mode}"
    ax.set_title(f"{title}\n{provenance(rows)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ln_tutorial.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", nargs="+", choices=list(PROVIDERS), help="default: all importable")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--dtypes", nargs="+", choices=["float16", "bfloat16", "float32"], help="default: per set")
    parser.add_argument("--csv", type=Path, help="default: ln_tutorial/data/benchmarks/<gpu-slug>.csv")
    parser.add_argument("--plots", type=Path, default=Path("bench-plots"), help="folder for the PNG plots")
    parser.add_argument("--no-save", action="store_true", help="print only; record nothing")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("measuring needs a CUDA GPU; recorded results are in " + str(RESULTS_DIR))
    dtypes = [getattr(torch, d) for d in args.dtypes] if args.dtypes else None
    rows = measure(args.providers, args.modes, args.sets, dtypes)
    if not rows:
        sys.exit("bench: nothing was measured")
    print(provenance(rows))
    for mode in args.modes:
        if "tutorial" in args.sets:
            print(format_table(rows, mode))
        if "llm" in args.sets:
            print(llm_table(rows, mode))
    if not args.no_save:
        print("appended to", save_results(rows, args.csv))
        _save_plots(rows, args)


def _save_plots(rows: List[dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.plots.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        ax = plot_sweep(rows, mode)
        path = args.plots / f"{gpu_slug(rows[0]['gpu'])}-{mode}.png"
        ax.figure.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(ax.figure)
        print("plot:", path)


if __name__ == "__main__":
    main()
