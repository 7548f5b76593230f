"""Run 44: the one-launch backward inside a CUDA graph (capture, replay) against eager.

Question: does a cooperative launch record into a CUDA graph, and does the barrier
state (allocated on first use per stream, here during capture) work on replay?
"""

import torch

from ln_tutorial import launch

torch.manual_seed(0)
m, n = 4096, 1024
x = torch.randn(m, n, device="cuda", dtype=torch.float16)
dy = torch.randn_like(x)
w, b = torch.randn(n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16)
_, mean, rstd = launch.layer_norm_forward(x, w, b, 1e-5)
eager = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
plan = launch._backward_plan(m, n, x.dtype, 0, "deterministic", launch.backward_config(n, 2), True, True)
print(torch.cuda.get_device_name(), torch.__version__, "one launch:", plan.reduce is None, flush=True)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm up on the capture stream, as torch.cuda.graphs recommends
    launch.layer_norm_backward(dy, x, w, b, mean, rstd)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        captured = launch.layer_norm_backward(dy, x, w, b, mean, rstd)
except Exception as error:  # noqa: BLE001 -- report what the capture says
    print("capture failed:", type(error).__name__, str(error)[:300], flush=True)
    raise SystemExit(1)
for replay in range(3):
    for t in captured:
        t.zero_()
    graph.replay()
    torch.cuda.synchronize()
    print(f"replay {replay}: equal to eager", [torch.equal(a, c) for a, c in zip(captured, eager)], flush=True)
