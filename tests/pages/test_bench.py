"""The benchmark harness without a GPU: CSV round trip, tables, plots, a real run through the
interpreter, failing providers, the command line."""

import math
import re

import pytest
import torch

from ln_tutorial._common import INTERPRET
from ln_tutorial_book import bench

#: Providers timed on CPU tensors: their Triton kernels run only through the interpreter.
on_the_interpreter = pytest.mark.skipif(not INTERPRET, reason="CPU tensors reach Triton kernels only through the interpreter")


def _rows(provider="ln_tutorial", mode="forward", scale=1.0, commit="abc1234"):
    base = dict(copy_gbps=3000.0, gpu="Test GPU", torch="2.x", triton="3.x", date="2026-11-22", commit=commit,
                timer="graph", repetitions=10, calls=50)  # fmt: skip
    rows = []
    for set_name, dtype in (("tutorial", "float16"), ("llm", "bfloat16")):
        for m, n in bench.SETS[set_name]:
            gb = scale * n / 10 if set_name == "tutorial" else scale * 2850.0
            moved = bench.ELEMENTS_MOVED[mode] * m * n * 2
            us = {p: moved / (g * 1e9) * 1e6 for p, g in (("p20", gb + 1), ("p50", gb), ("p80", gb - 1))}
            rows.append(dict(provider=provider, mode=mode, dtype=dtype, M=m, N=n, **base,
                             **{f"gbps_{p}": g for p, g in (("p20", gb + 1), ("p50", gb), ("p80", gb - 1))},
                             **{f"gpu_us_{p}": u for p, u in us.items()},
                             **{f"host_us_{p}": 2 * u for p, u in us.items()}))  # fmt: skip
    return rows


def test_a_file_is_one_run(tmp_path):
    path = bench.save_results(_rows() + _rows("torch"), tmp_path / "gpu.csv")
    assert path.read_text().splitlines()[0] == ",".join(bench.COLUMNS)
    rows = bench.load_results(path)
    assert len(rows) == 2 * len(_rows())
    assert isinstance(rows[0]["N"], int) and isinstance(rows[0]["gbps_p50"], float)
    assert rows[0]["gbps_p20"] >= rows[0]["gbps_p50"] >= rows[0]["gbps_p80"]
    newer = [dict(r, commit="def5678") for r in _rows()[:3]]
    bench.save_results(newer, path)  # a new run replaces the file: no rows of two runs in one file
    assert [r["commit"] for r in bench.load_results(path)] == ["def5678"] * 3


def test_old_rows_without_the_new_columns_load(tmp_path):
    path = tmp_path / "old.csv"
    old_columns = bench.COLUMNS[:14]
    path.write_text(",".join(old_columns) + "\nln_tutorial,forward,float16,4096,1024,1500,1400,1300,3000,G,2,3,d,c\n")
    (row,) = bench.load_results(path)
    assert row["timer"] == "do_bench" and row["host_us_p50"] is None and row["gbps_p50"] == 1400.0
    assert bench.gbps(row, "host") is None and bench.gbps(row, "gpu") == 1400.0


def test_current_results_and_the_shipped_ones(monkeypatch):
    """One current row per key; the shipped results are those of the GPU with the fullest record."""
    old = _rows("torch")
    new = [dict(r, commit="def5678") for r in _rows()]
    assert bench.current_results(old + new + new[:2]) == old + new
    other_gpu = [dict(r, gpu="Another GPU") for r in _rows()]
    monkeypatch.setattr(bench, "load_results", lambda: other_gpu + old + new)
    assert bench.shipped_results() == old + new
    assert list(bench.by_gpu(other_gpu + old)) == ["Another GPU", "Test GPU"]


def test_provenance_names_each_run_and_the_datasheet(monkeypatch):
    rows = _rows() + _rows("torch", commit="def5678")
    assert bench.runs(rows) == {("abc1234", "2026-11-22", 3000.0): ["ln_tutorial"],
                                ("def5678", "2026-11-22", 3000.0): ["torch"]}
    line = bench.provenance(rows)
    assert "commit abc1234 (ln_tutorial); 2026-11-22, commit def5678 (torch)" in line
    assert line.endswith("1 GB copy 3000 GB/s") and bench.copy_share(rows) is None  # no datasheet for "Test GPU"
    monkeypatch.setitem(bench.DATASHEET_GBPS, "Test GPU", 4000.0)
    assert bench.provenance(_rows()).endswith("commit abc1234; 1 GB copy 3000 GB/s = 75 % of the datasheet's 4000 GB/s")


def test_the_datasheet_bandwidths_are_those_of_nvidias_datasheets():
    assert bench.DATASHEET_GBPS == {"NVIDIA H100 80GB HBM3": 3350.0, "NVIDIA H200": 4800.0}
    assert bench.datasheet_gbps("NVIDIA H200") == 4800.0 and bench.datasheet_gbps("Some GPU") is None


def test_tables_and_provenance():
    rows = _rows() + _rows("torch", scale=0.5)
    table = bench.format_table(rows, "forward")
    assert table.splitlines()[1].split() == ["N", "ln_tutorial", "torch"]
    assert "1024" in table and "1587.2" in table  # 15872 / 10
    assert "793.6" in bench.format_table(rows, "forward", figure="host")  # twice the time
    assert "no datasheet bandwidth" in bench.llm_table(rows, "forward")
    rows = [dict(r, gpu="NVIDIA H100 80GB HBM3") for r in rows]
    llm = bench.llm_table(rows, "forward")
    assert "2048x65536" in llm and "85.1%" in llm  # 2850 / 3350
    assert bench.provenance(rows).startswith("NVIDIA H100 80GB HBM3, torch 2.x, triton 3.x, 2026-11-22, commit abc1234")


def test_summaries_take_the_median_against_the_datasheet():
    rows = [dict(r, gpu="NVIDIA H100 80GB HBM3") for r in _rows() + _rows("torch", scale=0.5)]
    (short,) = [c for c in bench.class_summary(rows, "forward") if c["shape_class"].startswith("short")]
    assert short["shapes"] == 7 and short["datasheet"] == 3350.0
    assert short["gbps"]["ln_tutorial"] == 256.0  # the median of N / 10 over N = 1024, 1536, ..., 4096
    assert math.isclose(short["gbps"]["ln_tutorial"], 2 * short["gbps"]["torch"])
    rows += [dict(r, gpu="NVIDIA H100 80GB HBM3") for r in _rows(bench.COPY, scale=2.0)]
    (short,) = [c for c in bench.class_summary(rows, "forward") if c["shape_class"].startswith("short")]
    assert math.isclose(short["gbps"][bench.COPY], 2 * short["gbps"]["ln_tutorial"])
    table = bench.share_table(rows).splitlines()
    assert table[0] == "median % of the datasheet bandwidth (3350 GB/s):"
    assert table[2].split()[:3] == ["ln_tutorial", "25", "%"]  # 844.8 GB/s: N / 10 at the median N of the sweep
    assert table[-1].split()[0] == bench.COPY


def test_points_above_the_same_size_copy_are_listed():
    rows = _rows() + _rows(bench.COPY)
    assert bench.above_copy(rows) == []
    rows[0] = dict(rows[0], gbps_p50=rows[0]["gbps_p50"] * (1 + 2 * bench.NOISE))
    (point,) = bench.above_copy(rows)
    assert (point["provider"], point["N"]) == ("ln_tutorial", 1024)


def test_compare_flags_only_points_outside_the_tolerance():
    recorded = _rows()
    live = [dict(r) for r in recorded]
    live[0]["gpu_us_p50"] *= 1 + bench.TOLERANCE["gpu"] / 2
    live[1]["gpu_us_p50"] *= 1 + 2 * bench.TOLERANCE["gpu"]
    live[2]["host_us_p50"] *= 1 + 2 * bench.TOLERANCE["host"]
    strays = bench.compare(recorded, live)
    assert len(strays) == 2 and "4096x1536: gpu" in strays[0] and "4096x2048: host" in strays[1]
    # torch.compile autotunes anew on each compile: its GPU time is not held to the tolerance, its host time is
    retuned = [dict(r, provider="torch.compile") for r in recorded]
    live = [dict(r, gpu_us_p50=2 * r["gpu_us_p50"]) for r in retuned]
    live[0]["host_us_p50"] *= 1 + 2 * bench.TOLERANCE["host"]
    strays = bench.compare(retuned, live)
    assert len(strays) == 1 and "torch.compile forward 4096x1024: host time" in strays[0]


def test_plot_draws_every_provider_the_copies_the_datasheet_and_bands():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    ax = bench.plot_sweep(_rows() + _rows("torch", scale=0.5), "forward")
    assert [line.get_label() for line in ax.get_lines()] == ["ln_tutorial", "torch", "1 GB copy: 3000 GB/s"]
    assert len(ax.collections) == 2  # one p20-p80 band per provider
    rows = [dict(r, gpu="NVIDIA H200") for r in _rows() + _rows(bench.COPY, scale=2.0)]
    ax = bench.plot_sweep(rows, "forward")
    assert [line.get_label() for line in ax.get_lines()] == [
        "ln_tutorial", "copy of the same size", "datasheet: 4800 GB/s (the ceiling)",
        "1 GB copy: 3000 GB/s, 62 % of it"]  # fmt: skip
    assert ax.get_ylim()[1] >= 4800


def test_measure_runs_on_the_cpu_through_the_interpreter(monkeypatch):
    """Every figure the CSV carries, from a real (tiny) run: providers interleaved, the
    same-size copy included, host-included time only (there is no GPU time on a CPU)."""
    monkeypatch.setattr(bench, "SETS", {"tiny": [(4, 64)]})
    monkeypatch.setattr(bench, "SET_DTYPES", {"tiny": torch.float32})
    rows = bench.measure(["ln_tutorial", "torch", "copy"], sets=("tiny",), progress=False, repetitions=3, device="cpu")
    assert [(r["provider"], r["mode"]) for r in rows] == [
        ("ln_tutorial", "forward"), ("torch", "forward"), ("copy", "forward"),
        ("ln_tutorial", "backward"), ("torch", "backward"), ("copy", "backward"),
    ]  # fmt: skip
    for r in rows:
        assert r["timer"] == "none" and r["gbps_p50"] is None and r["repetitions"] == 3
        assert 0 < r["host_us_p20"] <= r["host_us_p50"] <= r["host_us_p80"]


@on_the_interpreter
def test_the_taught_kernels_and_the_lock_backward_are_providers(monkeypatch):
    """``plain`` (pages 1 and 2) in both directions, up to its 32 KB rows; the lock backward in the
    backward only; the copy allocates its output like the others."""
    from ln_tutorial_book import plain

    monkeypatch.setattr(bench, "SETS", {"tiny": [(4, 64), (2, 128)]})
    monkeypatch.setattr(bench, "SET_DTYPES", {"tiny": torch.float32})
    monkeypatch.setattr(plain, "MAX_ROW_BYTES", 256)  # rows of 128 float32 values are past it
    rows = bench.measure(["plain", "ln_tutorial-lock", "copy"], sets=("tiny",), progress=False, repetitions=1,
                         device="cpu")  # fmt: skip
    assert [(r["provider"], r["mode"], r["N"]) for r in rows] == [
        ("plain", "forward", 64), ("copy", "forward", 64),
        ("plain", "backward", 64), ("ln_tutorial-lock", "backward", 64), ("copy", "backward", 64),
        ("copy", "forward", 128), ("ln_tutorial-lock", "backward", 128), ("copy", "backward", 128),
    ]  # fmt: skip


@on_the_interpreter
def test_the_providers_agree_with_torch_on_the_cpu():
    """What the benchmark page says of the providers it can run without a GPU: each one, called as
    the benchmark calls it, gives torch's output and gradients."""
    torch.manual_seed(0)
    x = (-2.3 + 0.5 * torch.randn(16, 256)).requires_grad_(True)
    weight, bias = (torch.rand(256, requires_grad=True) for _ in range(2))
    dy = 0.1 * torch.randn(16, 256)
    results = {}
    for name, fn in bench.available_providers(["torch", "plain", "ln_tutorial", "ln_tutorial-lock"]).items():
        y = fn(x, weight, bias)
        results[name] = [y, *torch.autograd.grad(y, (x, weight, bias), dy)]
        assert max((a - b).abs().max().item() for a, b in zip(results[name], results["torch"])) < 1e-4, name
    assert len(results) == 4


def test_failing_provider_records_nothing_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(bench, "SETS", {"tiny": [(4, 64), (4, 128)]})
    monkeypatch.setattr(bench, "SET_DTYPES", {"tiny": torch.float32})

    def refuses_128(x, w, b):
        if x.shape[-1] == 128:
            raise RuntimeError("out of shared memory")
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)

    monkeypatch.setitem(bench.PROVIDERS, "picky", lambda: refuses_128)
    rows = bench.measure(["picky", "torch"], modes=("forward",), sets=("tiny",), progress=False, repetitions=2,
                         device="cpu")  # fmt: skip
    assert [(r["provider"], r["N"]) for r in rows] == [("picky", 64), ("torch", 64), ("torch", 128)]
    assert "picky forward float32 4x128 failed: RuntimeError: out of shared memory" in capsys.readouterr().err


def test_cli_shows_defaults_and_writes_to_the_current_directory(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    out = capsys.readouterr().out
    options = [o for o in re.findall(r"^  (--[a-z-]+)", out, re.M) if o != "--help"]
    help_text = " ".join(out.split())
    assert len(options) == 10 and help_text.count("(default:") == len(options)
    assert "(default: ln_tutorial_bench.csv)" in help_text and "(default: 10)" in help_text
    assert bench.DEFAULT_CSV == bench.Path("ln_tutorial_bench.csv") and not bench.DEFAULT_CSV.is_absolute()


def test_cli_refuses_to_measure_without_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        bench.main(["--sets", "llm"])


def test_commit_from_environment_wins(monkeypatch):
    """A copied tree (the GPU machine's) may carry a stale .git: the commit given by the caller wins."""
    monkeypatch.setenv("LN_TUTORIAL_COMMIT", "abc1234")
    assert bench.source_commit() == "abc1234"
    monkeypatch.delenv("LN_TUTORIAL_COMMIT")
    assert bench.source_commit() != "abc1234"
