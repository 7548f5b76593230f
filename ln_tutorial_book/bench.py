"""GB/s benchmark of LayerNorm implementations, with recorded results and plots.

Run ``python -m ln_tutorial_book.bench --help``. One run measures the bandwidth of a
1 GB device-to-device copy and then, shape by shape, every provider forward and
backward, together with a copy of the same size (the provider ``copy``). The
providers are the kernels the tutorial pages teach (``plain``), the package
(``ln_tutorial``) and its lock-based backward (``ln_tutorial-lock``, the Triton
tutorial's reduction), PyTorch (``torch``, ``torch.compile``) and the peers that
import (Liger-Kernel, QuACK, Apex, FlashAttention). Each provider gets two
figures per point:

* **GPU time**: the replay of a CUDA graph of many calls, divided by the number
  of calls: no host time is in it. The plots and GB/s use it.
* **Host-included time**: the same calls made back to back from Python with one
  synchronisation at the end, divided by the number of calls. When the host
  takes longer to issue a call than the GPU takes to run it, this is the host's
  time; otherwise it is close to the GPU time.

Successive calls cycle through enough copies of the inputs that none finds them
in L2, and every call allocates its outputs, the copy's included. Providers are
interleaved at each point, and the measurement is repeated (``--repetitions``):
the 20th, 50th and 80th percentiles of the repetitions are recorded, and every
summary uses the median. GB/s follow the Triton tutorial: the forward moves
``2·M·N`` elements (read x, write y), the backward ``3·M·N`` (read x and dy,
write dx).

The ceiling is the GPU's memory bandwidth from its datasheet
(:data:`DATASHEET_GBPS`): no kernel moves bytes faster. The copies show how
much of it a plain kernel reaches: the 1 GB copy on the whole, the same-size
copy at each shape. One file of recorded results is one run: one GPU, one
commit, every provider interleaved.
"""

import argparse
import contextlib
import csv
import datetime
import math
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch
import torch.nn.functional as F

RESULTS_DIR = Path(__file__).parent / "data" / "benchmarks"
DEFAULT_CSV = Path("ln_tutorial_bench.csv")
PERCENTILES = ("p20", "p50", "p80")
COLUMNS = [
    "provider", "mode", "dtype", "M", "N", "gbps_p20", "gbps_p50", "gbps_p80",
    "copy_gbps", "gpu", "torch", "triton", "date", "commit",
    "timer", "gpu_us_p20", "gpu_us_p50", "gpu_us_p80", "host_us_p20", "host_us_p50", "host_us_p80",
    "repetitions", "calls",
]  # fmt: skip
KEY = ("gpu", "provider", "mode", "dtype", "M", "N")  # one current result per key
MODES = ("forward", "backward")
#: The Triton tutorial's sweep (fp16, M = 4096), LLM-sized shapes (bf16), and fewer rows (fp16),
#: where the host rather than the GPU sets the time of a call.
SETS = {
    "tutorial": [(4096, n) for n in range(1024, 16384, 512)],
    "llm": [(16384, 4096), (16384, 8192), (8192, 16384), (4096, 32768), (2048, 65536), (65536, 1024)],
    "small": [(m, n) for m in (256, 1024) for n in range(1024, 8193, 1024)],
}
SET_DTYPES = {"tutorial": torch.float16, "llm": torch.bfloat16, "small": torch.float16}
ELEMENTS_MOVED = {"forward": 2, "backward": 3}  # per element of x, in units of its size
#: The noise rule of every page, two medians of GPU time less than this far apart (relative)
#: being a tie. Two interleaved recordings of the same code on the H100 differ by up to 5 %.
NOISE = 0.05
#: How far (relative, at the median) ``--compare`` lets a new run stray from a recorded one before
#: it lists the point: the noise in GPU time, 2x in host-included time (which follows the host's
#: CPU and load). Runs on other machines may differ by more than the noise: two full runs on two
#: H100 machines differed by up to 7 % (torch.compile apart, up to 47 %: its autotuning may pick
#: other kernels on each compile), which is why a page draws one run.
TOLERANCE = {"gpu": NOISE, "host": 1.0}
#: Memory bandwidth from NVIDIA's datasheets, GB/s (reads plus writes), by the name
#: ``torch.cuda.get_device_name()`` gives: H100 SXM5 80 GB (HBM3) 3.35 TB/s, H200 (HBM3e) 4.8 TB/s.
DATASHEET_GBPS = {"NVIDIA H100 80GB HBM3": 3350.0, "NVIDIA H200": 4800.0}
#: Providers whose GPU time is not held to the tolerance, since they autotune anew on each compile.
RETUNED = ("torch.compile",)
COPY = "copy"  # the provider that copies the same bytes
L2_FOOTPRINT = 256 * 2**20  # bytes of inputs the calls cycle through, several times any L2
REPETITION_SECONDS = 2e-3  # GPU time aimed at per repetition, which sets the calls per repetition

# --- providers: each returns fn(x, weight, bias) -> y -----------------------------------
# A provider may carry attributes: ``modes`` (the directions it is timed in), ``supports(m, n,
# dtype)`` (shapes it takes; others are left out silently), ``weight_dtype`` (its weight's dtype,
# when it needs one of its own) and ``bias`` (False: it takes none).


def _ln_tutorial(strategy: str) -> Callable:
    from ln_tutorial import layer_norm

    fn = lambda x, w, b: layer_norm(x, (x.shape[-1],), w, b, backward_strategy=strategy)  # noqa: E731
    if strategy == "lock":
        fn.modes = ("backward",)  # the same forward as ln_tutorial

        def supports(m, n, dtype):  # the lock backward holds a whole row in registers
            from ln_tutorial.tuning import MAX_FUSED_FWD_BYTES

            return triton_next_power_of_2(n) * torch.empty(0, dtype=dtype).element_size() <= MAX_FUSED_FWD_BYTES

        fn.supports = supports
    return fn


def _plain() -> Callable:
    """The kernels of the tutorial's pages 1 and 2: one row per program, rows up to 32 KB."""
    from ln_tutorial_book import plain

    fn = lambda x, w, b: plain.layer_norm(x, w, b)  # noqa: E731
    fn.supports = lambda m, n, dtype: (
        triton_next_power_of_2(n) * torch.empty(0, dtype=dtype).element_size() <= plain.MAX_ROW_BYTES)
    return fn


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
    """QuACK's layer norm (CuTe DSL): y = x̂·w, without a bias, with a float32 weight."""
    from quack.layernorm import layernorm as quack_layernorm

    fn = lambda x, w, b: quack_layernorm(x, w, eps=1e-5)  # noqa: E731
    fn.weight_dtype, fn.bias = torch.float32, False
    return fn


def _same_size_copy(x, w, b):
    """Marker of the copy: forward ``x.clone()``, backward ``torch.add(x, dy)``: the bytes of the
    layer norm, with the output allocated by each call as the layer norms allocate theirs."""
    raise NotImplementedError("the copy is timed by _calls, not called as a layer norm")


def triton_next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


PROVIDERS: Dict[str, Callable[[], Callable]] = {
    "ln_tutorial": lambda: _ln_tutorial("deterministic"),
    "ln_tutorial-lock": lambda: _ln_tutorial("lock"),
    "plain": _plain,
    "torch": lambda: (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)),
    "torch.compile": _torch_compile,
    "liger": _liger,
    "quack": _quack,
    "apex": _apex,
    "flash-attn": _flash_attn,
    COPY: lambda: _same_size_copy,
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


def _takes(fn: Callable, mode: str, m: int, n: int, dtype: torch.dtype) -> bool:
    """Whether provider ``fn`` is timed at this point (its directions, the shapes it supports)."""
    return mode in getattr(fn, "modes", MODES) and getattr(fn, "supports", lambda *a: True)(m, n, dtype)


# --- measuring ----------------------------------------------------------------------------


def copy_bandwidth(size_bytes: int = 1 << 30) -> float:
    """Device-to-device copy in GB/s, counting bytes read plus bytes written."""
    from triton.testing import do_bench

    src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * size_bytes / (ms * 1e-3) / 1e9


def _calls(fn: Callable, mode: str, m: int, n: int, dtype: torch.dtype, device: str) -> List[Callable]:
    """One call of ``fn`` per copy of the inputs; on a GPU, enough copies that cycling
    through them keeps every call's inputs out of L2."""
    per_copy = (1 if mode == "forward" else 2) * m * n * torch.empty(0, dtype=dtype).element_size()
    copies = 1 if device == "cpu" else max(1, min(64, math.ceil(L2_FOOTPRINT / per_copy)))
    calls = []
    for _ in range(copies):
        x = -2.3 + 0.5 * torch.randn(m, n, device=device, dtype=dtype)
        weight = torch.rand(n, device=device, dtype=getattr(fn, "weight_dtype", dtype), requires_grad=True)
        bias = torch.rand(n, device=device, dtype=dtype, requires_grad=True) if getattr(fn, "bias", True) else None
        dy = 0.1 * torch.randn_like(x)
        if fn is _same_size_copy:
            # a new output per call, from the caching allocator, as every layer norm's
            copy = (lambda x=x: x.clone()) if mode == "forward" else (lambda x=x, dy=dy: torch.add(x, dy))
            calls.append(copy)
        elif mode == "forward":
            calls.append(lambda x=x, w=weight, b=bias: fn(x, w, b))
        else:
            x.requires_grad_(True)
            y = fn(x, weight, bias)
            inputs = tuple(t for t in (x, weight, bias) if t is not None)
            # autograd.grad returns the gradients without accumulating them anywhere.
            calls.append(lambda y=y, inputs=inputs, dy=dy: torch.autograd.grad(y, inputs, dy, retain_graph=True))
    return calls


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def host_us(calls: List[Callable], count: int, device: str) -> float:
    """Host-included µs per call: ``count`` calls back to back, one synchronisation."""
    _sync(device)
    start = time.perf_counter()
    for i in range(count):
        calls[i % len(calls)]()
    _sync(device)
    return (time.perf_counter() - start) / count * 1e6


class _GpuTimer:
    """GPU µs per call: a CUDA graph of ``count`` calls, replayed; where a provider cannot be
    captured, CUDA events around each call ("events": launch gaps between kernels included)."""

    def __init__(self, calls: List[Callable], count: int, stream: "torch.cuda.Stream"):
        self.calls, self.count = calls, count
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph, stream=stream):
                for i in range(count):
                    calls[i % len(calls)]()
            self.kind = "graph"
        except Exception as exc:
            print(f"\nbench: CUDA graph capture failed ({type(exc).__name__}), timing with events", file=sys.stderr)
            torch.cuda.synchronize()
            self.graph, self.kind = None, "events"

    def __call__(self) -> float:
        if self.graph is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / self.count
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(self.count)]
        for i, (start, end) in enumerate(events):
            start.record()
            self.calls[i % len(self.calls)]()
            end.record()
        torch.cuda.synchronize()
        return sum(s.elapsed_time(e) for s, e in events) * 1e3 / self.count


def _percentiles(values: List[float]) -> List[float]:
    """20th, 50th and 80th percentiles (linear interpolation)."""
    if len(values) == 1:
        return values * 3
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    return [cuts[1], statistics.median(values), cuts[7]]


class _Point:
    """One provider at one shape and direction: its calls, timers and samples. On a GPU it
    works on a stream of its own: a graph is captured on a side stream, and a backward runs on
    the stream of its forward, so the forward is made there too."""

    def __init__(self, fn: Callable, mode: str, m: int, n: int, dtype: torch.dtype, device: str):
        self.device = device
        self.stream = torch.cuda.Stream() if device != "cpu" else None
        self.gpu_us: List[float] = []
        self.host_us: List[float] = []
        with self._on_stream():
            self.calls = _calls(fn, mode, m, n, dtype, device)
            for call in self.calls:  # compile, autotune and allocate before anything is timed
                call()
            estimate = host_us(self.calls, len(self.calls), device)
            self.count = max(len(self.calls), min(500, math.ceil(REPETITION_SECONDS * 1e6 / max(estimate, 1.0))))
            self.gpu = _GpuTimer(self.calls, self.count, self.stream) if self.stream else None

    def _on_stream(self):
        return torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext()

    def sample(self, record: bool = True) -> None:
        with self._on_stream():
            gpu_us = self.gpu() if self.gpu is not None else None
            host = host_us(self.calls, self.count, self.device)
        if record:
            self.host_us.append(host)
            if gpu_us is not None:
                self.gpu_us.append(gpu_us)


def time_provider(
    fn: Callable, mode: str, m: int, n: int, dtype: torch.dtype, repetitions: int = 10, device: str = "cuda"
) -> dict:
    """One provider alone at one point: see :func:`measure`, which interleaves providers."""
    point = _Point(fn, mode, m, n, dtype, device)
    point.sample(record=False)
    for _ in range(repetitions):
        point.sample()
    return _figures(point, mode, m, n, dtype, repetitions)


def _figures(point: _Point, mode: str, m: int, n: int, dtype: torch.dtype, repetitions: int) -> dict:
    """The CSV fields of one measured point (GB/s from the GPU time, where there is one)."""
    moved = ELEMENTS_MOVED[mode] * m * n * torch.empty(0, dtype=dtype).element_size()
    out = dict(timer=point.gpu.kind if point.gpu else "none", repetitions=repetitions, calls=point.count)
    for name, us in zip(PERCENTILES, _percentiles(point.host_us)):
        out[f"host_us_{name}"] = round(us, 2)
    gpu_us = _percentiles(point.gpu_us) if point.gpu_us else [None] * 3
    for name, us in zip(PERCENTILES, gpu_us):
        out[f"gpu_us_{name}"] = round(us, 2) if us else None
        out[f"gbps_{name}"] = round(moved / (us * 1e-6) / 1e9, 1) if us else None
    return out


def run_provenance(on_gpu: bool) -> dict:
    """Where and when a recording is made: GPU, torch and Triton versions, date, source commit."""
    import triton  # imported only when a recording is made

    return dict(
        gpu=torch.cuda.get_device_name() if on_gpu else "CPU (Triton interpreter)", torch=torch.__version__,
        triton=triton.__version__, date=datetime.date.today().isoformat(), commit=source_commit(),
    )  # fmt: skip


def source_commit() -> str:
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
    repetitions: int = 10,
    device: Optional[str] = None,
    max_seconds: Optional[float] = None,
) -> List[dict]:
    """Measure live (on the current GPU, or on the CPU through the interpreter with
    ``device="cpu"``: host-included time only); return CSV rows (see :data:`COLUMNS`).
    With ``max_seconds``, no new point starts after that long: the points measured by
    then are kept, and the ones left out are listed on stderr."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    fns = available_providers(providers)
    on_gpu = device != "cpu"
    base = dict(copy_gbps=round(copy_bandwidth(), 1) if on_gpu else None, **run_provenance(on_gpu))
    plan = [(mode, dtype, m, n) for set_name in sets for dtype in (dtypes or [SET_DTYPES[set_name]])
            for m, n in SETS[set_name] for mode in modes]  # fmt: skip
    rows, start = [], time.monotonic()
    for i, (mode, dtype, m, n) in enumerate(plan):
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            left = ", ".join(f"{mo} {mm}x{nn}" for mo, _, mm, nn in plan[i:])
            print(f"\nbench: stopped after {max_seconds:.0f} s; not measured: {left}", file=sys.stderr)
            break
        if progress:
            print(f"\rbench [{i + 1}/{len(plan)}] {mode} {m}x{n}".ljust(60), end="", file=sys.stderr)
        points = {}
        for name, fn in fns.items():
            if not _takes(fn, mode, m, n, dtype):
                continue
            try:
                points[name] = _Point(fn, mode, m, n, dtype, device)
            except Exception as exc:
                _report_failure(name, mode, dtype, m, n, exc, on_gpu)
        names = list(points)
        for name in names:  # one round unrecorded: the GPU's clocks rise after compiling
            points[name].sample(record=False)
        for r in range(repetitions if names else 0):  # interleaved, each repetition one provider later
            for name in names[r % len(names):] + names[: r % len(names)]:
                points[name].sample()
        for name, point in points.items():
            rows.append(dict(provider=name, mode=mode, dtype=str(dtype).removeprefix("torch."), M=m, N=n,
                             **_figures(point, mode, m, n, dtype, repetitions), **base))  # fmt: skip
        del points
        if on_gpu:
            torch.cuda.empty_cache()
    if progress:
        print(file=sys.stderr)
    return rows


def _report_failure(name, mode, dtype, m, n, exc, on_gpu) -> None:
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    print(f"\nbench: {name} {mode} {str(dtype)[6:]} {m}x{n} failed: {type(exc).__name__}: {first_line}",
          file=sys.stderr)  # fmt: skip
    if on_gpu:
        torch.cuda.empty_cache()


# --- recorded results ---------------------------------------------------------------------


def _key(row: dict) -> tuple:
    return tuple(str(row[k]) for k in KEY)


def save_results(rows: List[dict], path: Path = DEFAULT_CSV) -> Path:
    """Write the rows of one run to ``path``, replacing whatever the file held: a file of
    recorded results is one run (one GPU, one commit, the providers interleaved)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows([{k: ("" if r.get(k) is None else r[k]) for k in COLUMNS} for r in rows])
    return path


_INTS = ("M", "N", "repetitions", "calls")
_FLOATS = ("gbps_p20", "gbps_p50", "gbps_p80", "copy_gbps", "gpu_us_p20", "gpu_us_p50", "gpu_us_p80",
           "host_us_p20", "host_us_p50", "host_us_p80")  # fmt: skip


def load_results(path: Optional[Path] = None) -> List[dict]:
    """Rows of one recorded CSV, or of every CSV in ``data/benchmarks/``, with typed numbers.
    A column a row's file does not have (older files) reads ``None``; their timer is do_bench."""
    paths = [Path(path)] if path else sorted(RESULTS_DIR.glob("*.csv"))
    rows = []
    for p in paths:
        with p.open(newline="") as f:
            for raw in csv.DictReader(f):
                row = {k: raw.get(k) or None for k in COLUMNS}
                row["timer"] = row["timer"] or "do_bench"
                for key in _INTS:
                    row[key] = int(row[key]) if row[key] else None
                for key in _FLOATS:
                    row[key] = float(row[key]) if row[key] else None
                rows.append(row)
    return rows


def current_results(rows: List[dict]) -> List[dict]:
    """The last row recorded for each GPU, provider, direction, dtype and shape."""
    return list({_key(r): r for r in rows}.values())


def by_gpu(rows: List[dict]) -> Dict[str, List[dict]]:
    """The current rows of each GPU, GPUs in name order."""
    out: Dict[str, List[dict]] = {}
    for r in current_results(rows):
        out.setdefault(str(r["gpu"]), []).append(r)
    return dict(sorted(out.items()))


def runs(rows: List[dict]) -> Dict[tuple, List[str]]:
    """The runs ``rows`` come from, ``(commit, date, 1 GB copy)``, each with its providers."""
    out: Dict[tuple, List[str]] = {}
    for r in rows:
        providers = out.setdefault((r["commit"], r["date"], r["copy_gbps"]), [])
        if r["provider"] not in providers:
            providers.append(r["provider"])
    return out


def shipped_results() -> List[dict]:
    """The recorded rows of the GPU with the fullest record (the most points)."""
    recorded = by_gpu(load_results())
    return max(recorded.values(), key=len, default=[])


def datasheet_gbps(gpu: Optional[str]) -> Optional[float]:
    """The memory bandwidth of ``gpu`` from its datasheet (:data:`DATASHEET_GBPS`), or None."""
    return DATASHEET_GBPS.get(str(gpu))


def copy_share(rows: List[dict]) -> Optional[float]:
    """The 1 GB copy of ``rows``' run as a percentage of the GPU's datasheet bandwidth."""
    peak = datasheet_gbps(rows[0]["gpu"]) if rows else None
    return 100 * rows[0]["copy_gbps"] / peak if peak and rows[0].get("copy_gbps") else None


def provenance(rows: List[dict]) -> str:
    """One line saying where and when ``rows`` were measured, and against what bandwidth."""
    if not rows:
        return "no results"

    def values(key):
        return ", ".join(dict.fromkeys(str(r[key]) for r in rows))

    found = runs(rows)
    if len(found) == 1:
        when = f"{values('date')}, commit {values('commit')}"
    else:  # several runs: say which providers each one measured
        when = "; ".join(f"{date}, commit {commit} ({', '.join(names)})" for (commit, date, _), names in found.items())
    line = f"{values('gpu')}, torch {values('torch')}, triton {values('triton')}, {when}"
    if rows[0].get("copy_gbps"):
        line += f"; 1 GB copy {rows[0]['copy_gbps']:.0f} GB/s"
        peak = datasheet_gbps(rows[0]["gpu"])
        if peak:
            line += f" = {copy_share(rows):.0f} % of the datasheet's {peak:.0f} GB/s"
    return line


def compare(recorded: List[dict], live: List[dict], tolerance: Dict[str, float] = TOLERANCE) -> List[str]:
    """The points where ``live`` strays from ``recorded`` by more than ``tolerance`` at the
    median, GPU time and host-included time apart (only where both carry the figure, on the same GPU;
    not the GPU time of the ``RETUNED`` providers)."""
    old = {_key(r): r for r in recorded}
    out = []
    for row in live:
        ref = old.get(_key(row))
        for figure, column in (("gpu", "gpu_us_p50"), ("host", "host_us_p50")):
            if figure == "gpu" and row["provider"] in RETUNED:
                continue
            if ref and ref.get(column) and row.get(column):
                change = row[column] / ref[column] - 1
                if abs(change) > tolerance[figure]:
                    out.append(f"{row['provider']} {row['mode']} {row['M']}x{row['N']}: {figure} time "
                               f"{ref[column]:.1f} -> {row[column]:.1f} us ({100 * change:+.0f}%)")  # fmt: skip
    return out


def gbps(row: dict, figure: str = "gpu", percentile: str = "p50") -> Optional[float]:
    """GB/s of a row from its GPU time (for rows without one, the recorded ``gbps_*``) or
    from its host-included time; ``None`` where the row has no such figure."""
    if figure == "gpu":
        return row.get(f"gbps_{percentile}")
    us = row.get(f"host_us_{percentile}")
    if not us:
        return None
    size = torch.empty(0, dtype=getattr(torch, row["dtype"])).element_size()
    return ELEMENTS_MOVED[row["mode"]] * row["M"] * row["N"] * size / (us * 1e-6) / 1e9


def _by_provider(rows: List[dict], mode: str, shapes: Sequence, figure: str = "gpu") -> Dict[str, Dict[tuple, float]]:
    table: Dict[str, Dict[tuple, float]] = {}
    for r in rows:
        value = gbps(r, figure) if r["mode"] == mode and (r["M"], r["N"]) in shapes else None
        if value:
            table.setdefault(r["provider"], {})[(r["M"], r["N"])] = value
    return table


def format_table(rows: List[dict], mode: str, set_name: str = "tutorial", figure: str = "gpu") -> str:
    """GB/s (median) per N, one column per provider, like the Triton tutorial's printed output."""
    shapes = [s for s in SETS[set_name] if any((r["M"], r["N"]) == s and r["mode"] == mode for r in rows)]
    table = _by_provider(rows, mode, shapes, figure)
    names = list(table)
    timers = {r["timer"] for r in rows if r["mode"] == mode and (r["M"], r["N"]) in shapes}
    label = "host-included time" if figure == "host" else "do_bench time" if timers == {"do_bench"} else "GPU time"
    several_m = len({m for m, _ in shapes}) > 1
    lines = [f"layer-norm-{mode} (GB/s from the median {label}):",
             "".join([f"{'M x N' if several_m else 'N':>12}"] + [f"{p:>17}" for p in names])]  # fmt: skip
    for m, n in shapes:
        cells = [f"{table[p].get((m, n), float('nan')):>17.1f}" for p in names]
        lines.append("".join([f"{f'{m} x {n}' if several_m else n:>12}"] + cells))
    return "\n".join(lines)


def llm_table(rows: List[dict], mode: str) -> str:
    """Median GB/s as a percentage of the datasheet bandwidth, per LLM shape and provider
    (the copy of the same size among them)."""
    shapes = [s for s in SETS["llm"] if any((r["M"], r["N"]) == s and r["mode"] == mode for r in rows)]
    table = _by_provider(rows, mode, shapes)
    peak = datasheet_gbps(rows[0]["gpu"]) if rows else None
    names = [p for p in table if p != COPY] + [p for p in table if p == COPY]
    lines = [f"layer-norm-{mode}, % of the datasheet bandwidth ({peak:.0f} GB/s):" if peak else
             f"layer-norm-{mode}: no datasheet bandwidth known for this GPU",
             "".join([f"{'M x N':>14}"] + [f"{p:>17}" for p in names])]  # fmt: skip
    for m, n in shapes:
        cells = [f"{100 * table[p][(m, n)] / peak:>16.1f}%" if (m, n) in table[p] and peak else f"{'-':>17}"
                 for p in names]  # fmt: skip
        lines.append("".join([f"{f'{m}x{n}':>14}"] + cells))
    return "\n".join(lines)


# Shape classes of the summary on the performance page: (name, set, predicate on (M, N, element size)).
SHAPE_CLASSES = [
    ("short rows (N ≤ 4096)", "tutorial", lambda m, n, s: n <= 4096),
    ("wide rows (4096 < N < 16384)", "tutorial", lambda m, n, s: n > 4096),
    ("LLM shapes, rows ≤ 16 KB", "llm", lambda m, n, s: n * s <= 16384),
    ("LLM shapes, rows ≥ 32 KB", "llm", lambda m, n, s: n * s >= 32768),
]


def class_summary(rows: List[dict], mode: str) -> List[dict]:
    """Per shape class: the median GB/s (GPU time, median of each point) over the class's recorded
    shapes of each provider that has them all (so that the columns compare like with like), the
    copy of the same size among them, the datasheet bandwidth, and the number of shapes."""
    out = []
    peak = datasheet_gbps(rows[0]["gpu"]) if rows else None
    for name, set_name, member in SHAPE_CLASSES:
        table = _by_provider(rows, mode, [(m, n) for m, n in SETS[set_name] if member(m, n, 2)])
        common = sorted({s for points in table.values() for s in points})
        table = {p: points for p, points in table.items() if all(s in points for s in common)}
        if not common or not table:
            continue
        out.append(dict(
            shape_class=name, shapes=len(common), datasheet=peak,
            gbps={p: statistics.median(points[s] for s in common) for p, points in table.items()},
        ))  # fmt: skip
    return out


def share_table(rows: List[dict]) -> str:
    """One line per provider: the median, over the shapes of the tutorial's sweep and over the
    language-model shapes, of its GB/s as a percentage of the datasheet bandwidth."""
    peak = datasheet_gbps(rows[0]["gpu"]) if rows else None
    if not peak:
        return "no datasheet bandwidth known for this GPU"
    columns = [(mode, name) for name in ("tutorial", "llm") for mode in MODES]
    providers = [p for p in dict.fromkeys(r["provider"] for r in rows) if p != COPY] + [COPY]
    lines = [f"median % of the datasheet bandwidth ({peak:.0f} GB/s):",
             f"{'provider':>17}" + "".join(f"{f'{mode}, {name}':>20}" for mode, name in columns)]  # fmt: skip
    for provider in providers:
        cells = []
        for mode, name in columns:
            values = [100 * r["gbps_p50"] / peak for r in rows if (r["provider"], r["mode"]) == (provider, mode)
                      and (r["M"], r["N"]) in SETS[name] and r["gbps_p50"]]  # fmt: skip
            cells.append(f"{statistics.median(values):.0f} %" if values else "-")
        lines.append(f"{provider:>17}" + "".join(f"{c:>20}" for c in cells))
    return "\n".join(lines)


def above_copy(rows: List[dict]) -> List[dict]:
    """The points where a provider's median GB/s is above that of the copy of the same size, by
    more than the noise: provider, direction, shape and the two figures."""
    copies = {(r["mode"], r["M"], r["N"]): r["gbps_p50"] for r in rows if r["provider"] == COPY and r["gbps_p50"]}
    out = []
    for r in rows:
        copy = copies.get((r["mode"], r["M"], r["N"]))
        if r["provider"] != COPY and copy and r["gbps_p50"] and r["gbps_p50"] > (1 + NOISE) * copy:
            out.append(dict(provider=r["provider"], mode=r["mode"], M=r["M"], N=r["N"], gbps=r["gbps_p50"],
                            copy=copy))  # fmt: skip
    return out


def plot_sweep(rows: List[dict], mode: str, ax=None, set_name: str = "tutorial", figure: str = "gpu"):
    """GB/s against N for each provider, the median as a line and the 20th–80th percentiles as a
    band where recorded; the copy of the same size dashed, and the two bandwidths of the whole GPU
    as horizontal lines: the datasheet's (the ceiling) and the 1 GB copy's. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 5))
    curves: Dict[str, Dict[int, dict]] = {}
    for r in rows:
        if r["mode"] == mode and (r["M"], r["N"]) in SETS[set_name] and gbps(r, figure):
            curves.setdefault(r["provider"], {})[r["N"]] = r
    for name, points in curves.items():
        ns = sorted(points)
        color = f"C{list(PROVIDERS).index(name) % 10}" if name in PROVIDERS else None  # same colour on every plot
        if name == COPY:
            color, style, label = "gray", dict(linestyle="--", linewidth=1.2), "copy of the same size"
        else:
            style, label = dict(marker=".", linewidth=2.5 if name == "ln_tutorial" else 1.2), name
        ax.plot(ns, [gbps(points[n], figure) for n in ns], label=label, color=color, **style)
        slow, fast = ([gbps(points[n], figure, p) for n in ns] for p in ("p80", "p20"))  # more time, fewer GB/s
        if all(slow) and all(fast):
            ax.fill_between(ns, slow, fast, color=color, alpha=0.2, linewidth=0)
    peak = datasheet_gbps(rows[0]["gpu"]) if rows else None
    if peak:
        ax.axhline(peak, color="black", linewidth=1.2, label=f"datasheet: {peak:.0f} GB/s (the ceiling)")
    if rows and rows[0].get("copy_gbps"):
        share = f", {copy_share(rows):.0f} % of it" if peak else ""
        ax.axhline(rows[0]["copy_gbps"], linestyle=":", color="black", linewidth=1.2,
                   label=f"1 GB copy: {rows[0]['copy_gbps']:.0f} GB/s{share}")  # fmt: skip
    ax.set_xlabel("N (row length)")
    ax.set_ylabel("GB/s" + (" (GPU time)" if figure == "gpu" else " (host-included time)"))
    ax.set_ylim(0, 1.1 * max([peak or 0, 1] + [max(line.get_ydata()) for line in ax.get_lines()]))
    # The title says where and when the numbers were measured.
    title = f"layer-norm-{mode}, M = 4096, float16" if set_name == "tutorial" else f"layer-norm-{mode}"
    ax.set_title(f"{title}\n" + textwrap.fill(provenance(rows), 120), fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ln_tutorial_book.bench", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--providers", nargs="+", choices=list(PROVIDERS), default=list(PROVIDERS),
                        help="those that do not import are left out")  # fmt: skip
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="directions")
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS),
                        help="shape sets: the Triton tutorial's sweep (M = 4096), shapes of language models, fewer rows")  # fmt: skip
    parser.add_argument("--dtypes", nargs="+", choices=["float16", "bfloat16", "float32"],
                        help="measure every set in these dtypes instead of its own (tutorial: float16, llm: bfloat16)")
    parser.add_argument("--repetitions", type=int, default=10, help="interleaved repetitions per point")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="start no new point after this long (the points measured by then are kept)")
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV,
                        help="where the run is written (the file is replaced: one file, one run)")  # fmt: skip
    parser.add_argument("--compare", type=Path, help="a recorded CSV to check the new results against")
    parser.add_argument("--plots", type=Path, default=Path("bench-plots"), help="folder for the PNG plots")
    parser.add_argument("--no-save", action="store_true", help="print only; record nothing")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("measuring needs a CUDA GPU; recorded results are in " + str(RESULTS_DIR))
    dtypes = [getattr(torch, d) for d in args.dtypes] if args.dtypes else None
    rows = measure(args.providers, args.modes, args.sets, dtypes, repetitions=args.repetitions,
                   max_seconds=args.max_seconds)  # fmt: skip
    if not rows:
        sys.exit("bench: nothing was measured")
    print(provenance(rows))
    for mode in args.modes:
        if "tutorial" in args.sets:
            print(format_table(rows, mode))
            print(format_table(rows, mode, figure="host"))
        if "llm" in args.sets:
            print(llm_table(rows, mode))
        if "small" in args.sets:
            print(format_table(rows, mode, "small", figure="host"))
    print(share_table(rows))
    if args.compare:
        strays = compare(current_results(load_results(args.compare)), rows)
        print(f"{len(strays)} points outside the tolerance {TOLERANCE} of {args.compare}", *strays, sep="\n  ")
    if not args.no_save:
        print("written to", save_results(rows, args.csv))
        _save_plots(rows, args)


def _save_plots(rows: List[dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.plots.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        for figure in ("gpu", "host"):
            ax = plot_sweep(rows, mode, figure=figure)
            path = args.plots / f"{gpu_slug(rows[0]['gpu'])}-{mode}-{figure}.png"
            ax.figure.savefig(path, dpi=120, bbox_inches="tight")
            plt.close(ax.figure)
            print("plot:", path)


if __name__ == "__main__":
    main()
