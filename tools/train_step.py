"""Time a transformer training step with torch's LayerNorm and with ln_tutorial's, under autocast.

A small GPT-style stack in plain PyTorch (pre-norm blocks: LayerNorm, attention,
LayerNorm, MLP), the same weights for both norms, an AdamW step per iteration.
Prints one CSV row per norm (median and p20/p80 ms per step over several
repetitions, the two interleaved) and appends them to ``--csv`` if given.

    python tools/train_step.py [--layers 6] [--width 1024] [--batch 8] [--seq 512] [--csv FILE]

Without a GPU it runs on the CPU (through Triton's interpreter if ``TRITON_INTERPRET=1``): a check
that the tool works, not a measurement.
"""

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import ln_tutorial
from ln_tutorial_book.bench import run_provenance


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int, norm: type):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = norm(width), norm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).transpose(1, 3).unbind(2)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def model(layers: int, width: int, norm: type) -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights for either norm
    return torch.nn.Sequential(*[Block(width, width // 64, norm) for _ in range(layers)], norm(width))


def step_times(models, data, amp_dtype, steps: int, repetitions: int):
    """Milliseconds per step of each model, repetitions interleaved so that noise hits both alike."""
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
        for _ in range(min(5, steps)):
            step(m, opt)
    for _ in range(repetitions):
        for m, opt, out in zip(models, optimizers, times):
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                step(m, opt)
            sync()
            out.append((time.perf_counter() - start) / steps * 1e3)
    return times


def quantiles(values):
    q = statistics.quantiles(values, n=10, method="inclusive")
    return q[1], statistics.median(values), q[7]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--amp", choices=["bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed repetition")
    parser.add_argument("--repetitions", type=int, default=30, help="timed repetitions, the two norms taking turns")
    parser.add_argument("--csv", type=Path, help="append the rows to this file")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    norms = {"torch": torch.nn.LayerNorm, "ln_tutorial": ln_tutorial.LayerNorm}
    models = [model(args.layers, args.width, norm).to(device) for norm in norms.values()]
    data = torch.randn(args.batch, args.seq, args.width, device=device)
    times = step_times(models, data, getattr(torch, args.amp), args.steps, args.repetitions)
    provenance = run_provenance(device == "cuda")
    rows = []
    for name, values in zip(norms, times):
        p20, p50, p80 = quantiles(values)
        shape = {"layers": args.layers, "width": args.width, "batch": args.batch, "seq": args.seq, "amp": args.amp}
        rows.append({"norm": name, **shape, "ms_p20": f"{p20:.3f}", "ms_p50": f"{p50:.3f}", "ms_p80": f"{p80:.3f}",
                     **provenance})  # fmt: skip
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    if args.csv:
        new = not args.csv.exists()
        with args.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
