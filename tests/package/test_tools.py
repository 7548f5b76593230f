"""The maintainer tools in tools/: each shows its defaults with --help and runs on a tiny input
(on a CPU, through Triton's interpreter), so that a change to the package cannot silently break them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ON_GPU

ROOT = Path(__file__).resolve().parents[2]
TOOLS = sorted(p.name for p in (ROOT / "tools").glob("*.py"))
TINY_RUNS = {
    "tune.py": ["--mode", "forward", "--shapes", "float32:4x512", "--table", "table.json"],
    "host_timeline.py": ["--shapes", "4x64", "--dtype", "float32", "--reps", "2"],
    "profile_calls.py": ["--shapes", "float32:4x64", "--calls", "2"],
    "host_cost.py": ["--shapes", "4x64", "--via", "module", "--amp", "bfloat16", "--dtypes", "float32", "--calls", "2",
                     "--repetitions", "2"],
    "train_step.py": ["--models", "bert", "--modes", "eager", "--layers", "1", "--width", "64", "--batch", "1", "--seq", "8", "--rounds", "2"],
}


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not ON_GPU:  # the tools' kernels run through Triton's interpreter; on a GPU, on the GPU
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_every_tool_is_listed_in_the_readme_and_smoke_tested():
    readme = (ROOT / "tools" / "README.md").read_text()
    assert TOOLS == sorted(TINY_RUNS)
    for name in TOOLS:
        assert f"`{name}`" in readme


@pytest.mark.parametrize("name", TOOLS)
def test_help_shows_the_defaults(name, tmp_path):
    out = _run([str(ROOT / "tools" / name), "--help"], tmp_path)
    assert "usage:" in out and "(default:" in out


@pytest.mark.parametrize("name", TOOLS)
def test_tiny_run_on_the_interpreter(name, tmp_path):
    out = _run([str(ROOT / "tools" / name), *TINY_RUNS[name]], tmp_path)
    expected = {"tune.py": "forward float32 4x512: ", "host_timeline.py": "call returned",
                "profile_calls.py": "ln_tutorial 4x64 float32: host fwd",
                "train_step.py": "bert,eager,ln_tutorial,1,64,1,8,bfloat16,",
                "host_cost.py": "module,bfloat16,float32,4,64,step,"}[name]  # fmt: skip
    assert expected in out
    if name == "train_step.py":  # the ratio to torch's step and the A/A check of each norm
        assert ",ms_p80,vs_torch_p50,aa_p50," in out.splitlines()[0]
    if name == "tune.py":
        rows = (tmp_path / "tune.csv").read_text().splitlines()
        assert rows[0] == "mode,dtype,M,N,config,gbps,is_default" and len(rows) > 2
        assert sum(r.endswith(",True") for r in rows) == 1  # the package's own choice is among them
        # the table written: the interpreter's table, with the 2 KB entry replaced by the fastest, and its evidence
        from ln_tutorial import tuning

        table = tuning.parse("written", json.loads((tmp_path / "table.json").read_text()))
        assert "tools/tune.py at 4 x 512 float32" in table.evidence[("forward", 2048)]
        assert table.forward[4096] == tuning.load(tuning.INTERPRETER_TABLE).forward[4096]  # others kept
