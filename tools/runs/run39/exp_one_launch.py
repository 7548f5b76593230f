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
    same = all((a is None and c is None) or torch.equal(a, c) for a, c in zip(one, two))
    rerun = all((a is None and c is None) or torch.equal(a, c) for a, c in zip(one, again))
    print(f"bits {m}x{n} {dtype} {params}: one == two launches {same}, rerun {rerun}", flush=True)

# 2. refused: more programs than fit at once
cfg = launch.BackwardConfig(False, 1, 1024, 4, 64, 1)
x = torch.randn(8192, 1024, device="cuda")
w, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
dy = torch.randn_like(x)
_, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
got = launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg)
ref = launch.layer_norm_backward(dy, x, w, b, mean, rstd, config=cfg._replace(one_launch=False))
print("refused:", launch._cooperative_refused, "same", all(torch.equal(a, c) for a, c in zip(got, ref)), flush=True)


# 3. end to end, as the benchmark times it, alternating the two versions
def end_to_end(m, n, dtype):
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.rand(n, device="cuda", dtype=dtype, requires_grad=True)
    y = layer_norm(x, (n,), w, b)
    dy = 0.1 * torch.randn_like(y)
    ms = do_bench(lambda: y.backward(dy, retain_graph=True), grad_to_none=[x, w, b], warmup=100, return_mode="median")
    return 3 * m * n * x.element_size() / ms * 1e-6


shapes = [(4096, n, torch.float16) for n in (1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288)]
shapes += [(16384, 4096, torch.bfloat16), (16384, 8192, torch.bfloat16), (65536, 1024, torch.bfloat16),
           (8192, 16384, torch.bfloat16)]  # fmt: skip
for m, n, dtype in shapes:
    results = {"one": [], "two": []}
    for _ in range(3):
        for name in ("one", "two"):
            launch.backward_config = plain_config if name == "one" else two_launches
            results[name].append(end_to_end(m, n, dtype))
    launch.backward_config = plain_config
    print(f"end to end {m}x{n} {dtype}: one launch {[round(v) for v in results['one']]} GB/s, "
          f"two {[round(v) for v in results['two']]}", flush=True)  # fmt: skip
