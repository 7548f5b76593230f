"""Sweep the launch configurations at one shape per tuning-table entry; print the default and the
two fastest per shape, write every timing to a CSV and, with --table, the fastest into a table.

Used to fill the tuning table of a new GPU (``ln_tutorial/data/tuning/<gpu>.json``):
    python tools/tune.py --mode forward --table ln_tutorial/data/tuning/nvidia-h200.json
    python tools/tune.py --mode backward --table ln_tutorial/data/tuning/nvidia-h200.json
A table that does not exist yet starts as the GPU's current one (the generic table for a new
GPU); each entry tuned here gets the evidence of its measurement. On a CPU (TRITON_INTERPRET=1,
tiny shapes) it only checks that every candidate runs.
"""

import argparse
import csv
import json
import itertools
import os
import statistics
import sys
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton compiles any kernel

import triton  # noqa: E402

from ln_tutorial import dispatch, tuning  # noqa: E402

# One shape per entry of the tables (they are keyed by padded row bytes: 2 KB ... 64 KB),
# LLM-sized where one exists, plus the tutorial's smallest.
SHAPES = {
    torch.float16: [(4096, 1024), (4096, 2048)],
    torch.bfloat16: [(65536, 1024), (16384, 4096), (16384, 8192), (8192, 16384), (4096, 32768), (2048, 65536)],
}
# (programs per SM, tiles in flight) tried for the persistent backward.
BACKWARD_GRIDS = [(1, 1), (1, 3), (1, 4), (2, 3), (2, 4)]


def forward_candidates(n, size):
    block_n = triton.next_power_of_2(n)
    for block_m, warps in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8, 16, 32)):
        per_thread = block_m * block_n // (32 * warps)
        if 4 <= per_thread <= 64 and block_m * block_n <= 65536:
            yield tuning.ForwardConfig(False, block_m, block_n, warps)
    if n >= 8192:  # a loop: all of a row's loads in flight at once (its width is compiled in)
        for step, warps in itertools.product((4096, 8192, 16384), (8, 16, 32)):
            if step <= block_n and 4 <= step // (32 * warps) <= 64:
                yield tuning.ForwardConfig(True, 1, step, warps)
    if n > 4096 and block_n > n:  # padded rows: a loop over the row wastes no lanes
        for step, warps in itertools.product((1024, 2048, 4096, 8192), (4, 8, 16)):
            yield tuning.ForwardConfig(True, 1, step, warps)


def backward_candidates(n, size):
    block_n = triton.next_power_of_2(n)
    if block_n * size <= 32768:
        for block_m, warps in itertools.product((1, 2, 4, 8), (4, 8, 16)):
            per_thread = block_m * block_n // (32 * warps)
            if 8 <= per_thread <= 32 and block_m * block_n <= 16384:
                for per_sm, stages in BACKWARD_GRIDS:
                    yield tuning.BackwardConfig(False, block_m, block_n, warps, per_sm, stages)
    if block_n * size == 32768:  # the widest fused rows: also read each tile twice (reload)
        for warps, stages, reload in itertools.product((8, 16), (1, 2, 3), (False, True)):
            yield tuning.BackwardConfig(False, 1, block_n, warps, 1, stages, reload)
    if n >= 16384:
        for step, stages in itertools.product((4096, 8192), (1, 2, 3)):
            yield tuning.BackwardConfig(True, 16, step, 16, 1, stages)
    if block_n * size >= 32768:  # rows shared by programs of block_n columns each (cooperative launch)
        for step, block_m, warps in itertools.product((2048, 4096, 8192), (1, 2), (4, 8, 16)):
            if 8 <= block_m * step // (32 * warps) <= 32 and step < n:
                for per_sm in (1, 2, 3, 4):
                    yield tuning.BackwardConfig(False, block_m, step, warps, per_sm, split=True)
    if size == 2 and 8192 < n <= 16384:  # an 8192-wide tile and a second one for the rest of the row
        tail = triton.next_power_of_2(n - 8192)
        for (block_m, warps), stages in itertools.product(((1, 4), (1, 8), (1, 16), (2, 16)), (1, 2, 3)):
            yield tuning.BackwardConfig(False, block_m, 8192, warps, 1, stages, tail_n=tail)
        for warps, stages in itertools.product((8, 16), (1, 3)):
            yield tuning.BackwardConfig(False, 1, 8192, warps, 1, stages, True, tail_n=tail)


def _compiled(run, cfg):
    try:
        run(cfg)
        return True
    except Exception as exc:
        print(f"  {tuple(cfg)} failed: {type(exc).__name__}", file=sys.stderr)
        return False


def gbps(ms, mode, m, n, size):
    return (2 if mode == "forward" else 3) * m * n * size / (ms * 1e-3) / 1e9


def median_ms(fn, rep_ms: int, warmup_ms: int) -> float:
    """Median time of ``fn``: ``do_bench`` (L2 flushed) on a GPU, a few wall-clock calls on a CPU."""
    if torch.cuda.is_available():
        from triton.testing import do_bench

        return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("--mode", choices=("forward", "backward"), required=True)
    parser.add_argument("--out", default="tune.csv", help="CSV of every configuration timed")
    parser.add_argument("--rep", type=int, default=40, help="ms of timed calls per configuration (GPU)")
    parser.add_argument("--max-n", type=int, default=1 << 30, help="only rows up to this length")
    parser.add_argument("--shapes", help="instead of the built-in shapes, e.g. float16:4096x2048,bfloat16:16384x4096")
    parser.add_argument("--table", help="tuning table (JSON) to write the fastest configurations into")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    index = device_index()  # whose table holds the default
    shapes_by_dtype = SHAPES
    if args.shapes:
        shapes_by_dtype = {}
        for item in args.shapes.split(","):
            name, shape = item.split(":")
            shapes_by_dtype.setdefault(getattr(torch, name), []).append(tuple(map(int, shape.split("x"))))
    out = open(args.out, "w", newline="")
    writer = csv.writer(out)
    writer.writerow(["mode", "dtype", "M", "N", "config", "gbps", "is_default"])
    for dtype, shapes in shapes_by_dtype.items():
        for m, n in [s for s in shapes if s[1] <= args.max_n]:
            x = torch.randn(m, n, device=device, dtype=dtype)
            w, b = torch.randn(n, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype)
            size = x.element_size()
            if args.mode == "forward":
                default = dispatch.forward_config(n, size, index)
                cands = list(dict.fromkeys([default, *forward_candidates(n, size)]))
                run = lambda c: dispatch.layer_norm_forward(x, w, b, 1e-5, config=c)
            else:
                _, mean, rstd = dispatch.layer_norm_forward(x, w, b, 1e-5)
                dy = torch.randn_like(x)
                default = dispatch.backward_config(n, size, index)
                cands = list(dict.fromkeys([default, *backward_candidates(n, size)]))
                run = lambda c: dispatch.layer_norm_backward(dy, x, w, b, mean, rstd, config=c)
            results = []
            # Compile everything first: compiling leaves the GPU idle and its clocks low.
            cands = [c for c in cands if _compiled(run, c)]
            median_ms(lambda: run(cands[0]), rep_ms=100, warmup_ms=200)  # bring the clocks up
            for cfg in cands:
                ms = median_ms(lambda: run(cfg), rep_ms=args.rep, warmup_ms=10)
                g = gbps(ms, args.mode, m, n, size)
                results.append((g, cfg))
                writer.writerow([args.mode, str(dtype)[6:], m, n, tuple(cfg), round(g, 1), cfg == default])
            results.sort(key=lambda r: -r[0])
            dflt = next((g for g, c in results if c == default), float("nan"))
            ranked = "  ".join(f"{label} {g:.0f} {tuple(c)}" for label, (g, c) in zip(("best", "2nd"), results))
            print(f"{args.mode} {str(dtype)[6:]} {m}x{n}: {len(results)} configurations, default {dflt:.0f}  {ranked}",
                  flush=True)  # fmt: skip
            if args.table and results:
                best_gbps, best = results[0]
                evidence = (f"tools/tune.py at {m} x {n} {str(dtype)[6:]} on {device_name()}: {best_gbps:.0f} GB/s "
                            f"against {dflt:.0f} for the previous entry")  # fmt: skip
                write_entry(args.table, args.mode, n, size, best, evidence)
    out.close()


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "the interpreter"


def device_index() -> int:
    """The GPU being tuned, or -1 (the interpreter): which table is its current one."""
    return torch.cuda.current_device() if torch.cuda.is_available() else -1


def write_entry(path: str, mode: str, n: int, size: int, cfg, evidence: str) -> None:
    """Put ``cfg`` into the tuning table at ``path`` as the entry for rows like ``n`` values of ``size`` bytes.

    Padded half-precision rows keep their own entries (``forward_padded``), which this does not write.
    """
    if os.path.exists(path):
        data = json.loads(open(path).read())
    else:  # start from the table this GPU uses now, as data, each entry marked as not tuned here
        base = tuning.table_for(device_index())
        data = table_as_data(base)
        for section in data.values():
            for item in section.values() if "evidence" not in section else [section]:
                for e in item if isinstance(item, list) else [item]:
                    e["evidence"] = f"as in the {base.name} table (not tuned on this GPU): {e['evidence']}"
        data["gpu"] = device_name()
        data["measured"] = f"tools/tune.py, torch {torch.__version__}, triton {triton.__version__}"
    row_bytes = triton.next_power_of_2(n) * size
    wide = row_bytes > (tuning.MAX_FUSED_FWD_BYTES if mode == "forward" else tuning.MAX_FUSED_BWD_BYTES)
    if mode == "forward" and cfg.looped:  # a forward loop may win at any width
        mismatch = not wide and triton.next_power_of_2(n) != n
    else:
        mismatch = wide != (cfg.looped or getattr(cfg, "split", False))
    if mismatch or getattr(cfg, "tail_n", 0):
        return  # a padded row's best (a loop, shared rows, two tiles) belongs to a padded entry, not written here
    if mode == "forward":
        entry = {"block_m": cfg.block_m, "num_warps": cfg.num_warps}
        section, key = ("forward_looped", None) if wide else ("forward", str(row_bytes))
        if cfg.looped:
            entry["block_n"] = cfg.block_n
            if not wide:
                entry["looped"] = True
    else:
        entry = {"block_m": cfg.block_m, "num_warps": cfg.num_warps, "programs_per_sm": cfg.programs_per_sm,
                 "num_stages": cfg.num_stages, "reload": cfg.reload}  # fmt: skip
        if cfg.split:
            section, key = "backward_split", str(size)
            entry["block_n"] = cfg.block_n
        elif cfg.looped:
            section, key = "backward_looped", None
            entry["block_n"] = cfg.block_n
        else:
            section, key = "backward", str(row_bytes)
    entry["evidence"] = evidence
    if key is None:
        data[section] = entry
    else:
        data.setdefault(section, {})[key] = entry
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def table_as_data(table) -> dict:
    """A :class:`ln_tutorial.tuning.Table` as the JSON a table file holds."""

    def entry(cfg, why):
        fields = {k: v for k, v in cfg._asdict().items() if v != type(cfg)._field_defaults.get(k, None)}
        if not fields.get("looped"):  # the looped flag alone says a padded entry loops
            fields.pop("looped", None)
        if not fields.get("block_n"):  # set per row by the launcher
            fields.pop("block_n", None)
        return {**fields, "evidence": why}

    def padded(entries):
        return [{**entry(e.config, e.evidence), "longest": e.longest, "two_tiles": e.two_tiles} for e in entries]

    why = table.evidence
    return {
        "forward": {str(k): entry(c, why[("forward", k)]) for k, c in table.forward.items()},
        "forward_looped": {**entry(table.forward_looped, why[("forward_looped", 0)]), "looped": True},
        "forward_padded": {str(k): padded(v) for k, v in table.forward_padded.items()},
        "backward": {str(k): entry(c, why[("backward", k)]) for k, c in table.backward.items()},
        "backward_looped": entry(table.backward_looped, why[("backward_looped", 0)]),
        "backward_split": {str(k): entry(c, why[("backward_split", k)]) for k, c in table.backward_split.items()},
        "backward_padded": {str(k): padded(v) for k, v in table.backward_padded.items()},
        **({"backward_cluster": {str(k): entry(c._replace(split=False, cluster=False), why[("backward_cluster", k)])
                                 for k, c in table.backward_cluster.items()}} if table.backward_cluster else {}),
    }


if __name__ == "__main__":
    main()
