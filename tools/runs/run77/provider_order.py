"""Experiment (run 77): does the order in which the benchmark times its providers move the small backward
points? The benchmark's own ``measure`` on three sweep sizes, providers in the usual order and reversed.

    PYTHONPATH=$PWD:/tmp/peer python tools/runs/run77/provider_order.py
"""

from ln_tutorial import bench

bench.SETS["tutorial"] = [(4096, n) for n in (1536, 2560, 3072)]
usual = [name for name in ("ln_tutorial", "torch", "torch.compile", "liger") if name in bench.available_providers()]
orders = {"usual": usual, "reversed": usual[::-1]}
for round_ in range(2):
    for label, order in orders.items():
        rows = bench.measure(order, sets=["tutorial"], progress=False)
        cells = "  ".join(f"{r['provider']} {r['N']} {r['gbps_p50']:.0f}" for r in rows if r["mode"] == "backward")
        print(f"round {round_} {label:<8} backward: {cells}", flush=True)
