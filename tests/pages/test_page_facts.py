"""Every number the tutorial prose quotes from a launch table or the benchmark, checked against its source.

The tables are data (``ln_tutorial/data/tuning/``, read by :mod:`ln_tutorial.tuning`);
the facts are checked against the H100's table, which the advanced pages print, and against
the H200's where the prose speaks of it. The
benchmark's facts (what the plotted time is, the noise rule, the ceiling) are checked
against :mod:`ln_tutorial_book.bench` and its recorded runs, on every page that states them.

Each fact is a sentence fragment of an example's text and a check of the code
it describes. A fragment that is no longer on the page fails too: rewording
the prose means revisiting its fact here.
"""

import inspect
import re
from pathlib import Path

import pytest

from ln_tutorial import _common, dispatch, host, tuning
from ln_tutorial_book import bench, plain
from ln_tutorial.variants import lock, one_launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DOCS = EXAMPLES.parent / "docs"

# The H100's table, which the advanced pages print (tuning.load), as the pages read it.
TABLE = tuning.load("nvidia-h100-80gb-hbm3")
FWD = TABLE.forward  # padded row bytes -> ForwardConfig
BWD = TABLE.backward  # padded row bytes -> BackwardConfig


def _two_tiles(section):
    """Longest row of each two-tile entry of a padded section, by row bytes."""
    return {key: [e.longest for e in entries if e.two_tiles] for key, entries in getattr(TABLE, section).items()}


FACTS = [
    ("01_forward", "gives each thread 8 values until 16 warps are reached",
     lambda: all(plain.launch_config(n, 2)[0] // (32 * plain.launch_config(n, 2)[1]) == 8 for n in (256, 1024, 4096))
     and plain.launch_config(16384, 2)[1] == 16),
    ("02_backward", "sized to the GPU rather than to the input: two programs per SM",
     lambda: "2 * torch.cuda.get_device_properties" in Path(plain.__file__).read_text()),
    ("04_forward_advanced", "Rows of 2 KB get eight rows per program, rows of 4 and 8 KB two, and wider rows one",
     lambda: FWD[2048].block_m == 8 and FWD[4096].block_m == FWD[8192].block_m == 2
     and all(FWD[b].block_m == 1 for b in FWD if b > 8192)),
    ("04_forward_advanced", "every program moves at least 8 KB",
     lambda: all(cfg.block_m * row_bytes >= 8192 for row_bytes, cfg in FWD.items())),
    ("04_forward_advanced", "packed into tiles of about 8 KB, up to 64 rows",
     lambda: dispatch.forward_config(16, 2).block_m == 64 and dispatch.forward_config(256, 2).block_m == 16),
    ("04_forward_advanced", "one file per GPU model in ``ln_tutorial/data/tuning/``",
     lambda: (tuning.TABLES / "nvidia-h100-80gb-hbm3.json").exists() and tuning.TABLES.name == "tuning"
     and tuning.TABLES.parent.name == "data"),
    ("04_forward_advanced", "A GPU without a table gets ``tuning.generic_table()``",
     lambda: tuning.load("no-such-gpu").name == "generic"),
    ("04_forward_advanced", "rows of more than 64 KB",
     lambda: tuning.MAX_FUSED_FWD_BYTES == 65536 and max(FWD) == 65536),
    ("04_forward_advanced", "padded half-precision rows of 4097 to 12288 values take a variant",
     lambda: _two_tiles("forward_padded") == {4096: [], 8192: [], 16384: [8191], 32768: [10240, 12288]}),
    ("04_forward_advanced", "the H200's table keeps it to 10240 values",
     lambda: [e.longest for e in tuning.load("nvidia-h200").forward_padded[32768] if e.two_tiles] == [10240]),
    ("04_forward_advanced", "less than 32 KB of rows (padded) per SM",
     lambda: host.SMALL_BYTES_PER_SM == 32768 and host.small_call(256, 8192, 2, -1) == (False, False)
     and host.small_call(2 * _common.sm_count(-1) - 1, 8192, 2, -1)[0]),
    ("04_forward_advanced", "fewer than four rows per SM, rows of up to 16 KB load",
     lambda: host.FEW_ROWS_PER_SM == 4 and host.forward_choice(8192, 2, -1, False, True, True).config.params_first
     and not host.forward_choice(16384, 2, -1, False, True, True).config.params_first),
    ("04_forward_advanced", "a loop over steps of 2048 or 4096 values",
     lambda: sorted(e.config.block_n for gpu in ("nvidia-h100-80gb-hbm3", "nvidia-h200")
                    for e in tuning.load(gpu).forward_padded[32768] if e.config.looped) == [2048, 4096]),
    ("05_backward_advanced", "256 up to 1024 values, 128 up to 4096, 96 up to 8192 and 64 past that",
     lambda: [lock.group_size(n) for n in (1024, 1025, 4096, 4097, 8192, 8193, 65536)]
     == [256, 128, 128, 96, 96, 64, 64]),
    ("05_backward_advanced", "every row that fits in registers (up to 32 KB)",
     lambda: tuning.MAX_FUSED_BWD_BYTES == 32768 and max(BWD) == 32768),
    ("05_backward_advanced", "Every row size runs one program per SM",
     lambda: all(cfg.programs_per_sm == 1 for cfg in BWD.values())),
    ("05_backward_advanced", "Rows of 2 and 4 KB take four rows per step, 8 KB rows two and wider rows one",
     lambda: BWD[2048].block_m == BWD[4096].block_m == 4 and BWD[8192].block_m == 2
     and all(BWD[b].block_m == 1 for b in BWD if b > 8192)),
    ("05_backward_advanced", "2 KB rows keep four tiles in flight, the wider ones three, and 32 KB rows one, reloading",
     lambda: BWD[2048].num_stages == 4 and all(BWD[b].num_stages == 3 for b in (4096, 8192, 16384))
     and BWD[32768].num_stages == 1 and BWD[32768].reload),
    ("05_backward_advanced", "the table turns it on for 32 KB rows alone",
     lambda: [b for b, cfg in BWD.items() if cfg.reload] == [32768]),
    ("05_backward_advanced", "rows of more than 32 KB",
     lambda: tuning.MAX_FUSED_BWD_BYTES == 32768),
    ("05_backward_advanced", "inputs up to ``MAX_BYTES`` (64 MB)",
     lambda: one_launch.MAX_BYTES == 64 * 2**20),
    ("05_backward_advanced", "On the H100 parts of 2048 columns won",
     lambda: sorted(TABLE.backward_split) == [2, 4] and all(c.block_n == 2048 for c in TABLE.backward_split.values())),
    ("05_backward_advanced", "wider parts for the widest half-precision rows gained less there",
     lambda: all(e.config.block_n == 2048 for entries in TABLE.backward_padded.values() for e in entries
                 if e.config.split)),
    ("05_backward_advanced", "its table, tuned there, takes wider parts for 2-byte values",
     lambda: tuning.load("nvidia-h200").backward_split[2].block_n > TABLE.backward_split[2].block_n),
]


def _prose(name):
    """The example's comment text, whitespace-normalized, without the ``# `` prefixes."""
    lines = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8").splitlines()
    return " ".join(re.sub(r"^#\s?", "", line) for line in lines)


@pytest.mark.parametrize("page, fragment, check", FACTS, ids=[f"{p}: {f[:40]}" for p, f, _ in FACTS])
def test_the_prose_matches_the_launch_tables(page, fragment, check):
    assert " ".join(fragment.split()) in " ".join(_prose(page).split()), f"{page}: no longer says {fragment!r}"
    assert check(), f"{page} says {fragment!r}, the code disagrees"


# --- the benchmark: one description, one statistic, one noise rule, one ceiling, on every page ---------
#: What the plotted time contains, in the same words on every page that says it (and in the harness).
GPU_TIME = "the replay of a CUDA graph of many calls, divided by the number of calls: no host time is in it"


def _doc(page):
    """A page's prose, whitespace-normalized: an example's comments, or a Markdown page of docs/."""
    text = (DOCS / page).read_text(encoding="utf-8") if page.endswith(".md") else _prose(page)
    return " ".join(text.split())


def _plain_grid_is_one_row_per_program():
    return "layer_norm_fwd_kernel[(m,)]" in Path(plain.__file__).read_text()


BOOK_FACTS = [
    *[(page, GPU_TIME, lambda: GPU_TIME in " ".join(bench.__doc__.split()))
      for page in ("03_benchmark", "performance.md", "benchmarks.md")],
    ("03_benchmark", "3350 GB/s for an H100 SXM, 4800 GB/s for an H200",
     lambda: bench.DATASHEET_GBPS == {"NVIDIA H100 80GB HBM3": 3350.0, "NVIDIA H200": 4800.0}),
    ("03_benchmark", "Within one run, medians less than 5 % apart are a tie", lambda: bench.NOISE == 0.05),
    ("performance.md", "Within one run, two medians of GPU time less than 5 % apart are a tie",
     lambda: bench.NOISE == 0.05),
    ("performance.md", "it gains more than the noise, 5 %", lambda: bench.NOISE == 0.05),
    ("03_benchmark", "the measurement is repeated ten times",
     lambda: inspect.signature(bench.measure).parameters["repetitions"].default == 10),
    ("benchmarks.md", "Each is the median of ten repetitions",
     lambda: inspect.signature(bench.measure).parameters["repetitions"].default == 10),
    ("03_benchmark", "the kernels of the first two pages (rows up to 32 KB)", lambda: plain.MAX_ROW_BYTES == 32768),
    ("performance.md", "(`plain`, rows up to 32 KB)", lambda: plain.MAX_ROW_BYTES == 32768),
    ("03_benchmark", "past 32 KB a row no longer fits in registers in the backward (past 64 KB in the forward)",
     lambda: tuning.MAX_FUSED_BWD_BYTES == 32768 and tuning.MAX_FUSED_FWD_BYTES == 65536),
    ("03_benchmark", "move about :math:`5MNs` bytes, so they can score at most 60 % of the datasheet bandwidth",
     lambda: bench.ELEMENTS_MOVED["backward"] / (bench.ELEMENTS_MOVED["backward"] + 2) == 0.6),
    ("03_benchmark", "which is why ``ln_tutorial`` packs several rows into a program and ``plain`` does not",
     lambda: dispatch.forward_config(1024, 2).block_m > 1 and _plain_grid_is_one_row_per_program()),
    ("03_benchmark", "(the provider ``copy``: ``x.clone()`` for the forward; for the backward ``torch.add(x, dy)``",
     lambda: "x.clone()" in inspect.getsource(bench._calls) and "torch.add(x, dy))" in inspect.getsource(bench._calls)),
    ("02_backward", "two programs per SM, :math:`P` in all, a *persistent* grid",
     lambda: "2 * torch.cuda.get_device_properties" in Path(plain.__file__).read_text()),
]


@pytest.mark.parametrize("page, fragment, check", BOOK_FACTS, ids=[f"{p}: {f[:40]}" for p, f, _ in BOOK_FACTS])
def test_the_prose_matches_the_benchmark(page, fragment, check):
    assert " ".join(fragment.split()) in _doc(page), f"{page}: no longer says {fragment!r}"
    assert check(), f"{page} says {fragment!r}, the code disagrees"


@pytest.mark.parametrize("page", ["03_benchmark", "performance.md", "benchmarks.md"])
def test_the_pages_summarise_with_the_median_and_quote_no_measured_bandwidth(page):
    text = _doc(page)
    assert not re.search(r"\bmean (GB/s|of the|over)", text, re.I), f"{page} summarises with the mean"
    quoted = {float(n) for n in re.findall(r"\b(\d{3,5}) GB/s", text)}
    assert quoted <= set(bench.DATASHEET_GBPS.values()), f"{page} quotes measured GB/s by hand: {quoted}"


RECORDED = sorted(bench.RESULTS_DIR.glob("*.csv"))


@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_each_recorded_file_is_one_run_below_its_datasheet(path):
    """One file, one run (one commit, every provider interleaved), as the pages say; the providers
    the benchmark page describes; no median above the GPU's datasheet bandwidth, the ceiling."""
    rows = bench.load_results(path)
    assert len(bench.runs(rows)) == 1, f"{path.name} holds several runs: {bench.provenance(rows)}"
    (gpu,) = {r["gpu"] for r in rows}
    peak = bench.datasheet_gbps(gpu)
    assert peak, f"no datasheet bandwidth for {gpu} in bench.DATASHEET_GBPS"
    assert {"plain", "ln_tutorial", "ln_tutorial-lock", "torch", bench.COPY} <= {r["provider"] for r in rows}
    above = [(r["provider"], r["mode"], r["M"], r["N"]) for r in rows if r["gbps_p50"] and r["gbps_p50"] > peak]
    assert not above, f"medians above the datasheet's {peak} GB/s: {above}"
