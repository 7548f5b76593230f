"""Run 133, third lease: where a cluster program's time goes, from %globaltimer traces.

    PYTHONPATH=$PWD python tools/runs/run133/trace_trade.py [TRADE values]
"""

import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import cluster_variants as cv  # noqa: E402

torch.manual_seed(0)
TRADES = [int(t) for t in sys.argv[1:]] or [1, 2, 3, 4, 5, 0]


def q(t):
    """Median and 10th / 90th percentiles, in us."""
    t = t.double().flatten()
    return f"{t.median().item():.2f} ({t.quantile(0.1).item():.2f}-{t.quantile(0.9).item():.2f})"


for m, n, warps in [(2048, 65536, 32), (4096, 32768, 16)]:
    x = -2.3 + 0.5 * torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    b = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    first = cv.launch(x, w, b, 1e-5, warps, trade=1)
    again = cv.launch(x, w, b, 1e-5, warps, trade=6)
    print(f"{m}x{n} TRADE=6 gives TRADE=1's bits: {all(torch.equal(a, c) for a, c in zip(first, again))}", flush=True)
    for trade in TRADES:
        times = torch.zeros(2 * m, 5, device="cuda", dtype=torch.int64)
        for _ in range(3):
            cv.launch(x, w, b, 1e-5, warps, trade=trade, times=times)
        torch.cuda.synchronize()
        t = times.cpu()
        sm = t[:, 4]
        t = (t[:, :4] - t[:, 0].min()).double() / 1000.0
        pair = t.view(m, 2, 4)
        own_ready, other_ready = pair[:, :, 1], pair[:, :, 1].flip(1)
        gaps = []
        for s in sm.unique():
            mine = t[sm == s]
            mine = mine[torch.argsort(mine[:, 0])]
            gaps.append(mine[1:, 0] - mine[:-1, 3])
        gaps = torch.cat(gaps)
        print(f"{m}x{n} {warps} warps TRADE={trade}: kernel {t[:, 3].max().item():.1f} us; per program: "
              f"load and sums {q(t[:, 1] - t[:, 0])}, trade {q(t[:, 2] - t[:, 1])}, normalize and store "
              f"{q(t[:, 3] - t[:, 2])}, whole {q(t[:, 3] - t[:, 0])}; partner ready later by "
              f"{q((other_ready - own_ready).clamp_min(0))}; after both ready {q(pair[:, :, 2] - pair[:, :, 1].max(1, keepdim=True).values)}; "
              f"start skew in a cluster {q((pair[:, 0, 0] - pair[:, 1, 0]).abs())}; idle between programs on an SM {q(gaps)}; "
              f"SMs used {sm.unique().numel()}", flush=True)
        ms = do_bench(lambda: cv.launch(x, w, b, 1e-5, warps, trade=trade), warmup=25, rep=150)
        print(f"{m}x{n} {warps} warps TRADE={trade}: untraced {4 * m * n / (ms * 1e-3) / 1e9:.0f} GB/s", flush=True)
