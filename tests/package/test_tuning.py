"""Tuning tables keyed by GPU, the generic table for other GPUs, the default-path switch, ``explain``."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ln_tutorial
from conftest import DEVICE
from helpers import load_module
from ln_tutorial import dispatch, host, tuning, variants
from ln_tutorial._common import INTERPRET

H100 = "nvidia-h100-80gb-hbm3"
TABLES = ["generic", *sorted(path.stem for path in tuning.TABLES.glob("*.json"))]  # every table a GPU can get
ROW_LENGTHS = [*range(1, 70000, 331), 1024, 1792, 2048, 4097, 8192, 9216, 12288, 16384, 32768, 65536]


def test_gpu_names_become_table_names(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    assert tuning.gpu_name(0) == H100
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA L4")
    assert tuning.gpu_name(0) == "nvidia-l4"


def test_every_shipped_table_parses_and_says_why():
    """Each table file names its GPU and carries evidence for every keyed entry."""
    for path in tuning.TABLES.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["gpu"] and tuning.gpu_name  # a name to match against
        table = tuning.load(path.stem)
        assert table.name == path.stem
        assert all(why for why in table.evidence.values()), path.name


@pytest.mark.parametrize("name", TABLES)
def test_tune_writes_back_the_table_it_read(name):
    """tools/tune.py starts from a table and writes it back with its new entries: the same table."""
    tune = load_module("tune", Path(__file__).resolve().parents[2] / "tools" / "tune.py")
    table = tuning.load(name)
    assert tuning.parse(name, tune.table_as_data(table)) == table


def test_an_entry_can_turn_the_one_launch_backward_off():
    """An entry's ``"one_launch": false`` reaches its configuration (two launches); entries without the key
    keep one launch for small inputs."""
    data = json.loads((tuning.TABLES / f"{H100}.json").read_text())
    data["backward"]["4096"]["one_launch"] = False
    data["backward"]["8192"].pop("one_launch", None)
    table = tuning.parse("test", data)
    assert not table.backward[4096].one_launch and table.backward[8192].one_launch


def test_a_looped_forward_entry_keeps_its_step_and_tune_writes_it_back(monkeypatch, tmp_path):
    """A forward entry that loops rows which fit the registers runs the looped kernel in its own steps (not
    one step of the padded row), and tools/tune.py writes such a winner into that entry."""
    data = json.loads((tuning.TABLES / f"{H100}.json").read_text())
    data["forward"]["32768"] = {"looped": True, "block_n": 4096, "num_warps": 16, "evidence": "test"}
    monkeypatch.setattr(host, "table_for", lambda device: tuning.parse("test", data))
    host.forward_choice.cache_clear()
    try:
        cfg = host.forward_choice(16384, 2, -1, False).config
        assert cfg == tuning.ForwardConfig(looped=True, block_m=1, block_n=4096, num_warps=16)
        assert dict(host.forward_call(cfg, torch.bfloat16, 16384).meta)["N"] == 16384  # compiled in
    finally:
        host.forward_choice.cache_clear()
    tune = load_module("tune", Path(__file__).resolve().parents[2] / "tools" / "tune.py")
    path = tmp_path / "table.json"
    path.write_text(json.dumps(json.loads((tuning.TABLES / f"{H100}.json").read_text())))
    tune.write_entry(str(path), "forward", 16384, 2, tuning.ForwardConfig(True, 1, 8192, 16), "test")
    tune.write_entry(str(path), "forward", 14336, 2, tuning.ForwardConfig(True, 1, 2048, 8), "padded")
    written = tuning.parse("written", json.loads(path.read_text()))
    assert written.forward[32768] == tuning.ForwardConfig(True, 1, 8192, 16)  # padded rows' loops are not written


def test_a_gpu_without_a_table_gets_the_generic_one(monkeypatch):
    """An unknown GPU (an L4, say) gets the generic table, not the H100's."""
    monkeypatch.setattr(tuning, "gpu_name", lambda device: "nvidia-l4")
    tuning.table_for.cache_clear()
    try:
        if not INTERPRET:
            assert tuning.table_for(0).name == "generic"
        assert tuning.load("nvidia-l4").name == "generic"
    finally:
        tuning.table_for.cache_clear()


@pytest.mark.parametrize("name", TABLES)
def test_configurations_cover_every_row(name, monkeypatch):
    """Every row length gets a configuration whose tiles cover it (or a loop, or shared rows), with
    at most 32 warps, from the generic table as from each measured one, with the variants' entries
    and without, for small inputs and large."""
    monkeypatch.setenv("LN_TUTORIAL_TUNING", name)
    tuning.table_for.cache_clear()
    host.forward_choice.cache_clear()
    host.backward_choice.cache_clear()
    try:
        for size in (2, 4, 8):
            for n in ROW_LENGTHS:
                for two_tiles in (False, True):
                    for small in (False, True):
                        fwd = host.forward_choice(n, size, -1, two_tiles, small, small).config
                        assert fwd.looped or fwd.block_n + fwd.tail_n >= n, (name, n, size, two_tiles, small)
                        assert 1 <= fwd.num_warps <= 32 and fwd.block_m >= 1
                bwd = dispatch.backward_config(n, size)
                assert bwd.looped or bwd.split or bwd.block_n + bwd.tail_n >= n, (name, n, size)
                assert 1 <= bwd.num_warps <= 32 and bwd.programs_per_sm >= 1
    finally:
        tuning.table_for.cache_clear()
        host.forward_choice.cache_clear()
        host.backward_choice.cache_clear()


def test_generic_table_follows_the_model(monkeypatch):
    """Forward tiles of 4 to 16 KB, backward tiles up to 16 KB, 8 warps (4 for 2 KB rows, 16 for 64 KB
    forward rows); half rows of 12289 to 16384 values shared by programs in the backward."""
    table = tuning.generic_table()
    for row_bytes, cfg in table.forward.items():
        assert 4096 <= cfg.block_m * row_bytes <= 65536 and cfg.block_m <= 2
        assert cfg.num_warps == {2048: 4, 65536: 16}.get(row_bytes, 8)
    for row_bytes, cfg in table.backward.items():
        assert cfg.block_m * row_bytes <= 16384 or cfg.block_m == 1
    assert table.backward_split == tuning.load(H100).backward_split  # register-file bound, not GPU-bound
    monkeypatch.setenv("LN_TUTORIAL_TUNING", "generic")
    tuning.table_for.cache_clear()
    host.backward_choice.cache_clear()
    try:
        assert dispatch.backward_config(12288, 2) == table.backward[32768]._replace(block_n=16384)
        assert dispatch.backward_config(12289, 2).split and dispatch.backward_config(16384, 2).split
    finally:
        tuning.table_for.cache_clear()
        host.backward_choice.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("m, n", [
    pytest.param(37, 100, id="short"), pytest.param(37, 1500, id="padded"), pytest.param(37, 4100, id="small"),
    pytest.param(300, 4100, id="two-tiles", marks=pytest.mark.gpu),
    pytest.param(300, 10752, id="two-tiles-or-a-loop", marks=pytest.mark.gpu),
])  # fmt: skip
def test_default_path_alone_gives_the_same_results(m, n, dtype):
    """With the variants off every call takes the default kernels with Triton's own launch; the
    outputs and gradients agree with the variants' within the flash-attention rule (the forward
    bits may differ where a variant computes the statistics differently). On a GPU, its own table."""
    x = torch.randn(m, n, device=DEVICE, dtype=dtype, requires_grad=True)
    weight = torch.randn(n, device=DEVICE, dtype=dtype, requires_grad=True)
    bias = torch.randn(n, device=DEVICE, dtype=dtype, requires_grad=True)
    dy = torch.randn(m, n, device=DEVICE, dtype=dtype)
    results = []
    for enabled in (True, False):
        ln_tutorial.use_variants(enabled)
        try:
            y = ln_tutorial.layer_norm(x, (n,), weight, bias)
            grads = torch.autograd.grad(y, (x, weight, bias), dy)
        finally:
            ln_tutorial.use_variants(True)
        results.append((y, *grads))
    reference = [F.layer_norm(x.double(), (n,), weight.double(), bias.double())]
    reference += torch.autograd.grad(reference[0], (x, weight, bias), dy.double())
    for name, with_variants, default, exact in zip(("y", "dx", "dw", "db"), *results, reference):
        scale = exact.abs().max()
        worst = max((with_variants.double() - exact).abs().max(), (default.double() - exact).abs().max()) / scale
        assert worst < (1e-5 if dtype == torch.float32 else 2e-3), name


def test_switch_reaches_every_decision():
    """Off, no configuration asks for a variant: no two tiles, no shared rows."""
    variants.use_variants(False)
    try:
        for n in ROW_LENGTHS:
            fwd = dispatch.forward_config(n, 2)
            assert fwd.tail_n == 0, n
            assert not dispatch.backward_config(n, 2).split, n
        assert "variants off" in ln_tutorial.explain((4096, 3000))
    finally:
        variants.use_variants(True)


def test_explain_names_the_kernels_and_the_evidence():
    report = ln_tutorial.explain((2, 4096, 1024), torch.bfloat16)
    assert report.forward_kernel == "layer_norm_fwd_kernel"
    assert report.startswith("layer_norm of 8192 rows x 1024 columns, bfloat16")
    assert report.table in report and tuning.load(report.table).evidence[("forward", 2048)] in report  # 2 KB rows
    wide = ln_tutorial.explain((64, 65536), torch.float64)
    assert wide.forward_kernel == "layer_norm_fwd_looped_kernel" and wide.backward_config.looped
    assert "Python" in wide.host  # wide float64 rows: the node hands the looped kernels to Python
    with pytest.raises(TypeError, match="dtype"):
        ln_tutorial.explain((4, 8), torch.int32)
    with pytest.raises(ValueError, match="normalized_dims"):
        ln_tutorial.explain((4, 8), normalized_dims=3)
