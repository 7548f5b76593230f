"""Run 39: the backward in one launch (grid-wide barrier, cooperative launch) against two launches.

Prediction: at the tutorial's M = 4096 the backward is timed mostly on the host;
dropping the second launch (about 24 us of Python plus a 12 us launch on the
engine's thread, run 34's timeline) should lift small-N points by 15-25 %;
at the LLM shapes (GPU-bound) within +-2 %. dW/dB must be the same bits either way.
"""

import torch
from triton.testing import do_bench

from ln_tutorial import launch, layer_norm

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
plain_config = launch.backward_config


def two_launches(n, element_size):
    return plain_config(n, element_size)._replace(one_launch=False)


# 1. the same bits
for m, n, dtype, params in [(4096, 1024, torch.float16, "wb"), (37, 24, torch.float32, "wb"), (3, 130, torch.bfloat16, "b"),
                            (8192, 4096, torch.bfloat16, "w"), (1000, 8191, torch.float64, "wb"), (65536, 1024, torch.bfloat16, "wb"),
                            (5, 16384, torch.float16, "wb"), (1, 1, torch.float32, "wb")]:  # fmt: skip
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype) if "w" in params else None
    b = torch.randn(n, device="cuda", dtype=dtype) if "b" in params else None
    dy = torch.randn_like(x)
    _, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
    one = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
    again = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
    two = launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=two_launches(n, x.element_size()))
    same = ["-" if a is None else torch.equal(a, c) for a, c in zip(one, two)]
    rerun = all((a is None and c is None) or torch.equal(a, c) for a, c in zip(one, again))
    diff = max((a.double() - c.double()).abs().max().item() for a, c in zip(one, two) if a is not None)
    print(f"bits {m}x{n} {dtype} {params}: dx, dw, db equal to two launches {same} (max diff {diff:.2g}), "
          f"rerun equal {rerun}", flush=True)

# 2. refused: more programs than fit at once
cfg = launch.BackwardConfig(False, 1, 1024, 4, 64, 1)
x = torch.randn(8192, 1024, device="cuda")
w, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
dy = torch.randn_like(x)
_, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
got = launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg)
ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg._replace(one_launch=False))
print("refused:", launch._cooperative_refused, "same", all(torch.equal(a, c) for a, c in zip(got, ref)), flush=True)


# 3. the kernels alone (launcher called directly, L2 flushed), then end to end as the
# benchmark times it, the two versions alternating call by call so that the host's
# drift from second to second hits both alike.
def backward_inputs(m, n, dtype):
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    return x, w, b, layer_norm(x, (n,), w, b), 0.1 * torch.randn(m, n, device="cuda", dtype=dtype)


def interleaved(m, n, dtype, calls=300):
    x, w, b, y, dy = backward_inputs(m, n, dtype)
    cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    times = {"one": [], "two": []}
    for i in range(calls + 20):
        for name in ("one", "two"):
            launch.backward_config = plain_config if name == "one" else two_launches
            x.grad = w.grad = b.grad = None
            cache.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            y.backward(dy, retain_graph=True)
            end.record()
            torch.cuda.synchronize()
            if i >= 20:  # warm-up calls not counted
                times[name].append(start.elapsed_time(end))
    launch.backward_config = plain_config
    moved = 3 * m * n * x.element_size()
    return {k: [round(moved / (q * 1e-3) * 1e-9) for q in torch.tensor(v).quantile(torch.tensor([0.8, 0.5, 0.2])).tolist()]
            for k, v in times.items()}  # fmt: skip


shapes = [(4096, n, torch.float16) for n in (1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288)]
shapes += [(16384, 4096, torch.bfloat16), (16384, 8192, torch.bfloat16), (65536, 1024, torch.bfloat16),
           (8192, 16384, torch.bfloat16)]  # fmt: skip
for m, n, dtype in shapes:
    x, w, b, y, dy = backward_inputs(m, n, dtype)
    _, mean, rstd = launch.layer_norm_forward(x.detach(), w.detach(), b.detach(), 1e-5)
    moved = 3 * m * n * x.element_size()
    kernel = {}
    for name, cfg in (("one", plain_config(n, x.element_size())), ("two", two_launches(n, x.element_size()))):
        ms = do_bench(lambda: launch.layer_norm_backward(dy, x.detach(), w.detach(), b.detach(), mean, rstd, config=cfg))
        kernel[name] = round(moved / (ms * 1e-3) * 1e-9)
    print(f"{m}x{n} {dtype}: launcher alone one {kernel['one']} two {kernel['two']} GB/s; "
          f"end to end (p20, p50, p80 GB/s) {interleaved(m, n, dtype)}", flush=True)
