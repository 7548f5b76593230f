"""Run 123 on the GPU: the streamed Gluon forward against the package's forward and a copy."""
import sys
import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import streamed
from ln_tutorial import launch

torch.manual_seed(0)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print("gpu", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, "sms", SMS)


def gbps(nbytes, ms):
    return nbytes / ms / 1e6


def streamed_fwd(x, w, b, eps, chunk, slots, warps, per_sm, ahead, copy_only=False):
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    chunks = triton.cdiv(n, chunk)
    grid = (min(m, SMS * per_sm),)
    streamed.streamed_forward_kernel[grid](
        x, y, w, b, mean, rstd, x.stride(0), y.stride(0), m, n, eps,
        CHUNK=chunk, CHUNKS=chunks, SLOTS=slots, VEC=16 // x.element_size(), WARPS=warps, WB_AHEAD=ahead, COPY_ONLY=copy_only, num_warps=warps)
    return y, mean, rstd


SHAPES = [(2048, 65536, torch.bfloat16), (4096, 32768, torch.bfloat16),
          (4096, 9216, torch.float16)]
CONFIGS = {  # (chunk, slots, warps, programs per SM, w and b chunks ahead, copy only)
    65536: [(4096, 24, 16, 1, 2), (8192, 12, 16, 1, 1), (4096, 24, 16, 1, 2, True), (8192, 12, 16, 1, 1, True)],
    32768: [(8192, 8, 16, 1, 2), (2048, 24, 4, 2, 2), (8192, 8, 16, 1, 2, True), (2048, 24, 4, 2, 2, True)],
    9216: [(1024, 20, 4, 4, 2), (1024, 20, 4, 4, 2, True)],
}
results = {}
for rnd in range(2):
    for m, n, dtype in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        nbytes = 2 * m * n * x.element_size()
        dst = torch.empty_like(x)
        cases = {"copy": lambda: dst.copy_(x),
                 "package": lambda: launch.layer_norm_forward(x, w, b, 1e-5)}
        ref = launch.layer_norm_forward(x, w, b, 1e-5)
        for cfg in CONFIGS[n]:
            chunk, slots, warps, per_sm = cfg[:4]
            if slots * chunk * x.element_size() * per_sm > 227 * 1024:
                continue
            fn = lambda cfg=cfg: streamed_fwd(x, w, b, 1e-5, *cfg)
            try:
                out = fn()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                print(f"{m}x{n} {cfg} failed: {type(e).__name__}: {str(e)[:200]}")
                continue
            if rnd == 0:
                ydiff = ((out[0].float() - ref[0].float()).abs().max() / ref[0].float().abs().max()).item()
                mdiff = (out[1] - ref[1]).abs().max().item()
                rdiff = ((out[2] - ref[2]).abs() / ref[2]).max().item()
                again = streamed_fwd(x, w, b, 1e-5, *cfg)
                same = torch.equal(again[0], out[0])
                print(f"{m}x{n} {cfg}: y rel {ydiff:.2e} mean abs {mdiff:.2e} rstd rel {rdiff:.2e} same bits {same}")
            cases[f"streamed{cfg}"] = fn
        for name, fn in cases.items():
            ms = do_bench(fn, warmup=50, rep=300, return_mode="median")
            results.setdefault((m, n, name), []).append(gbps(nbytes, ms))
        line = "  ".join(f"{k[2]} {v[-1]:.0f}" for k, v in results.items() if k[:2] == (m, n))
        print(f"round {rnd} {m}x{n} {dtype}: {line}", flush=True)

print("\nsummary (GB/s per round; % of copy of the same size, last round)")
for (m, n, name), v in results.items():
    copy = results[(m, n, "copy")][-1]
    print(f"{m}x{n} {name:32s} {' '.join(f'{g:.0f}' for g in v)}  {100 * v[-1] / copy:.1f}%")
