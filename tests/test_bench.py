"""The benchmark harness without a GPU: CSV round trip, tables, plots, failing providers."""

import math

import pytest
import torch

from ln_tutorial import bench


def _rows(provider="ln_tutorial", mode="forward", scale=1.0):
    base = dict(copy_gbps=3000.0, gpu="Test GPU", torch="2.x", triton="3.x", date="2026-11-22", commit="abc1234")
    rows = [dict(provider=provider, mode=mode, dtype="float16", M=m, N=n, gbps_p20=scale * n / 10 + 1,
                 gbps_p50=scale * n / 10, gbps_p80=scale * n / 10 - 1, **base) for m, n in bench.SETS["tutorial"]]  # fmt: skip
    rows += [dict(provider=provider, mode=mode, dtype="bfloat16", M=m, N=n, gbps_p20=2900.0, gbps_p50=2850.0,
                  gbps_p80=2800.0, **base) for m, n in bench.SETS["llm"]]  # fmt: skip
    return rows


def test_csv_round_trip_keeps_columns_and_types(tmp_path):
    path = bench.save_results(_rows(), tmp_path / "gpu.csv")
    bench.save_results(_rows("torch"), path)  # appended: one header
    assert path.read_text().splitlines()[0] == ",".join(bench.COLUMNS)
    assert path.read_text().count("provider,") == 1
    rows = bench.load_results(path)
    assert len(rows) == 2 * len(_rows())
    assert isinstance(rows[0]["N"], int) and isinstance(rows[0]["gbps_p50"], float)
    assert rows[0]["gbps_p20"] >= rows[0]["gbps_p50"] >= rows[0]["gbps_p80"]


def test_latest_run_selects_the_last_commit():
    old = _rows("torch")
    new = [dict(r, commit="def5678") for r in _rows()]
    assert bench.latest_run(old + new) == new


def test_tables_and_provenance():
    rows = _rows() + _rows("torch", scale=0.5)
    table = bench.format_table(rows, "forward")
    assert table.splitlines()[1].split() == ["N", "ln_tutorial", "torch"]
    assert "1024" in table and "1587.2" in table  # 15872 / 10
    llm = bench.llm_table(rows, "forward")
    assert "2048x65536" in llm and "95.0%" in llm  # 2850 / 3000
    assert bench.provenance(rows).startswith("Test GPU, torch 2.x, triton 3.x, 2026-11-22, commit abc1234")


def test_plot_draws_every_provider_and_the_ceiling():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    ax = bench.plot_sweep(_rows() + _rows("torch", scale=0.5), "forward")
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["ln_tutorial", "torch", "copy (ceiling)"]


def test_failing_provider_records_nothing_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 3000.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Test GPU")
    monkeypatch.setattr(bench, "available_providers", lambda names: {"good": None, "bad": None})

    def fake_time(fn_unused, mode, m, n, dtype):
        if n == 2048:
            raise RuntimeError("out of shared memory")
        return [3.0, 2.0, 1.0]

    monkeypatch.setattr(bench, "time_provider", fake_time)
    monkeypatch.setattr(bench, "SETS", {"tutorial": [(4, 1024), (4, 2048)]})
    rows = bench.measure(modes=("forward",), sets=("tutorial",), progress=False)
    assert [(r["provider"], r["N"]) for r in rows] == [("good", 1024), ("bad", 1024)]
    assert "failed: RuntimeError: out of shared memory" in capsys.readouterr().err
    assert all(math.isclose(r["copy_gbps"], 3000.0) for r in rows)


def test_cli_refuses_to_measure_without_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        bench.main(["--sets", "llm"])


def test_commit_from_environment_wins(monkeypatch):
    """A copied tree (the GPU machine's) may carry a stale .git: the commit given by the caller wins."""
    monkeypatch.setenv("LN_TUTORIAL_COMMIT", "abc1234")
    assert bench._commit() == "abc1234"
    monkeypatch.delenv("LN_TUTORIAL_COMMIT")
    assert bench._commit() != "abc1234"
