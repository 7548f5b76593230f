"""Time a transformer training step with torch's LayerNorm and with ln_tutorial's, under autocast.

Small stacks in plain PyTorch, the same weights for both norms, dropout 0.1, an
AdamW step per iteration, eager or compiled (``torch.compile`` of the model):

* ``gpt``: pre-norm blocks, ``x + attn(LN(x))`` then ``x + mlp(LN(x))`` (GELU), a final LayerNorm;
* ``bert``: post-norm blocks, ``LN(x + attn(x))`` then ``LN(x + mlp(x))`` (GELU), a LayerNorm
  of the embeddings first;
* ``opt``: pre-norm blocks as ``gpt`` with a ReLU MLP.

Each norm's model is built twice, in the order torch, ours, ours, torch, so that whatever favours a
model built (or compiled) earlier or later falls on both norms alike; every round, the four take one
step each in a new random order. Prints one CSV row per model, mode and norm (median and p20/p80 ms
per step over the rounds, each norm's two models averaged; ``vs_torch_p50``, the median over rounds
of the step's time over torch's step of the same round; ``aa_p50``, the same median of the norm's
second model over its first, an A/A check) and appends them to ``--csv`` if given.
Python's garbage collector is paused while the rounds run, so that no collection falls inside one
model's step.

    python tools/train_step.py [--models gpt bert opt] [--modes eager compiled] [--layers 6] [--csv FILE]

Without a GPU it runs on the CPU (through Triton's interpreter if ``TRITON_INTERPRET=1``): a check
that the tool works, not a measurement.
"""

import argparse
import csv
import gc
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import ln_tutorial
from ln_tutorial_book.bench import run_provenance


#: The hidden width of each model kind, as in Hugging Face's GPT-2, BERT-base and OPT-125m.
WIDTHS = {"gpt": 1024, "bert": 768, "opt": 768}
#: Each norm's model twice, in this order (see the module docstring).
BUILD_ORDER = ("torch", "ln_tutorial", "ln_tutorial", "torch")


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int, norm: type, kind: str):
        super().__init__()
        self.heads, self.kind = heads, kind
        self.norm1, self.norm2 = norm(width), norm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
        self.drop = torch.nn.Dropout(0.1)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).transpose(1, 3).unbind(2)
        return self.drop(self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)))

    def mlp(self, x):
        return self.drop(self.down((F.relu if self.kind == "opt" else F.gelu)(self.up(x))))

    def forward(self, x):
        if self.kind == "bert":  # post-norm: the residual sum is normalized
            x = self.norm1(x + self.attention(x))
            return self.norm2(x + self.mlp(x))
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def model(kind: str, layers: int, width: int, norm: type) -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights for either norm
    blocks = [Block(width, width // 64, norm, kind) for _ in range(layers)]
    ends = ([norm(width)], []) if kind == "bert" else ([], [norm(width)])
    return torch.nn.Sequential(*ends[0], *blocks, *ends[1])


def step_times(models, data, amp_dtype, rounds: int):
    """Milliseconds of each model's steps, one step each per round in a new (seeded) random order, so
    that noise, drift and the place in a round hit every model alike."""
    device = data.device.type
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]
    times = [[] for _ in models]

    def step(m, opt):
        with torch.autocast(device, dtype=amp_dtype):
            loss = m(data).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for m, opt in zip(models, optimizers):
        for _ in range(5):  # compiles, where compiled, and warms up
            step(m, opt)
    # No collection inside the timed window: after compiling, a full collection walks about 600,000
    # objects (0.4 s on an H100's host); frozen, they are never scanned again.
    gc.collect()
    gc.freeze()
    gc.disable()
    order, shuffle = list(range(len(models))), random.Random(0).shuffle
    try:
        for _ in range(rounds):
            shuffle(order)
            for i in order:
                sync()
                start = time.perf_counter()
                step(models[i], optimizers[i])
                sync()
                times[i].append((time.perf_counter() - start) * 1e3)
    finally:
        gc.enable()
        gc.unfreeze()
    return times


def quantiles(values):
    q = statistics.quantiles(values, n=10, method="inclusive")
    return q[1], statistics.median(values), q[7]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=list(WIDTHS), default=list(WIDTHS))
    parser.add_argument("--modes", nargs="+", choices=["eager", "compiled"], default=["eager", "compiled"])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, help="the hidden width of every model (default: each kind's own)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--amp", choices=["bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--rounds", type=int, default=400, help="timed rounds, one step of every model each")
    parser.add_argument("--csv", type=Path, help="append the rows to this file")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    norms = {"torch": torch.nn.LayerNorm, "ln_tutorial": ln_tutorial.LayerNorm}
    provenance = run_provenance(device == "cuda")
    rows = []
    for kind in args.models:
        for mode in args.modes:
            width = args.width or WIDTHS[kind]
            built = [model(kind, args.layers, width, norms[name]).to(device) for name in BUILD_ORDER]
            if mode == "compiled":
                built = [torch.compile(m) for m in built]
            data = torch.randn(args.batch, args.seq, width, device=device)
            times = step_times(built, data, getattr(torch, args.amp), args.rounds)
            copies = {name: [times[i] for i, built_as in enumerate(BUILD_ORDER) if built_as == name] for name in norms}
            by_norm = {name: [statistics.mean(step) for step in zip(*copies[name])] for name in norms}  # per round
            for name, values in by_norm.items():
                p20, p50, p80 = quantiles(values)
                # paired: each round's step over torch's step of the same round, which drift hits alike
                paired = statistics.median(ours / theirs for ours, theirs in zip(values, by_norm["torch"]))
                # A/A: the norm's second model over its first, paired the same way: the measurement's own spread
                same = statistics.median(second / first for first, second in zip(*copies[name]))
                shape = {"layers": args.layers, "width": width, "batch": args.batch, "seq": args.seq, "amp": args.amp}
                rows.append({"model": kind, "mode": mode, "norm": name, **shape, "ms_p20": f"{p20:.3f}",
                             "ms_p50": f"{p50:.3f}", "ms_p80": f"{p80:.3f}", "vs_torch_p50": f"{paired:.3f}",
                             "aa_p50": f"{same:.3f}", **provenance})  # fmt: skip
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    if args.csv:
        new = not args.csv.exists()
        if not new:
            with args.csv.open(newline="") as f:
                if next(csv.reader(f), []) != list(rows[0]):
                    raise SystemExit(f"{args.csv} has other columns than this tool writes: name a new file")
        with args.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
