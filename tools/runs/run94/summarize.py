"""Run 94: the benchmark's summary (LLM shapes as % of copy, sweep means, points at 0.97x the best peer).

    python tools/runs/run94/summarize.py tools/runs/run94/bench.csv
"""
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
commit = sys.argv[2] if len(sys.argv) > 2 else rows[-1]["commit"]
rows = [r for r in rows if r["commit"] == commit]
copy = float(rows[0]["copy_gbps"])
print("commit", commit, "copy", copy, "date", rows[0]["date"])
for mode in ("forward", "backward"):
    llm = [(16384, 4096), (16384, 8192), (8192, 16384), (4096, 32768), (2048, 65536), (65536, 1024)]
    ours = {(int(r["M"]), int(r["N"])): float(r["gbps_p50"]) for r in rows if r["mode"] == mode and r["provider"] == "ln_tutorial" and r["dtype"] == "bfloat16"}
    print(mode, "LLM % of copy:", ", ".join(f"{100 * ours[s] / copy:.1f}" for s in llm if s in ours))
    sweep = collections.defaultdict(dict)
    for r in rows:
        if r["mode"] == mode and r["dtype"] == "float16" and int(r["M"]) == 4096:
            sweep[int(r["N"])][r["provider"]] = float(r["gbps_p50"])
    ns = sorted(sweep)
    mean = lambda p: sum(sweep[n].get(p, 0) for n in ns) / len(ns)
    peers = [p for p in {p for n in ns for p in sweep[n]} if not p.startswith("ln_tutorial")]
    best = {n: max(v for p, v in sweep[n].items() if p in peers) for n in ns}
    ok = [n for n in ns if sweep[n]["ln_tutorial"] >= 0.97 * best[n]]
    print(f"  sweep mean ours {mean('ln_tutorial'):.0f}; " + ", ".join(f"{p} {mean(p):.0f}" for p in sorted(peers)) + f"; best peer per point {sum(best.values()) / len(ns):.0f}; >=0.97x at {len(ok)}/{len(ns)}")
    short = [(n, sweep[n]["ln_tutorial"], best[n], max((p for p in peers if sweep[n].get(p) == best[n]))) for n in ns if n not in ok]
    print("  short:", "; ".join(f"{n}: {a:.0f} vs {b:.0f} ({p})" for n, a, b, p in short))
