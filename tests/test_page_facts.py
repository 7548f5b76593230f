"""Every number the tutorial prose quotes from a launch table, checked against the table.

The tables are data (``ln_tutorial/data/tuning/``, read by :mod:`ln_tutorial.tuning`);
the advanced pages print the H100's, so the facts are checked against that one.

Each fact is a sentence fragment of an example's text and a check of the code
it describes. A fragment that is no longer on the page fails too: rewording
the prose means revisiting its fact here.
"""

import re
from pathlib import Path

import pytest

from ln_tutorial import launch, tuning
from ln_tutorial_book import plain
from ln_tutorial.variants import lock, one_launch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# The table the advanced pages print (tuning.load), as the pages read it.
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
     lambda: launch.forward_config(16, 2).block_m == 64 and launch.forward_config(256, 2).block_m == 16),
    ("04_forward_advanced", "one file per GPU model in ``ln_tutorial/data/tuning/``",
     lambda: (tuning.TABLES / "nvidia-h100-80gb-hbm3.json").exists() and tuning.TABLES.name == "tuning"
     and tuning.TABLES.parent.name == "data"),
    ("04_forward_advanced", "A GPU without a table gets ``tuning.generic_table()``",
     lambda: tuning.load("no-such-gpu").name == "generic"),
    ("04_forward_advanced", "rows of more than 64 KB",
     lambda: tuning.MAX_FUSED_FWD_BYTES == 65536 and max(FWD) == 65536),
    ("04_forward_advanced", "padded half-precision rows of 4097 to 12287 values take a variant",
     lambda: _two_tiles("forward_padded") == {4096: [], 8192: [], 16384: [8191], 32768: [10240, 12287]}),
    ("04_forward_advanced", "a loop over 2048-value steps that wastes nothing",
     lambda: [e.config.block_n for e in TABLE.forward_padded[32768] if e.config.looped] == [2048]),
    ("05_backward_advanced", "256 up to 1024 values, 128 up to 4096, and 96 past that",
     lambda: [lock.group_size(n) for n in (1024, 1025, 4096, 4097, 65536)] == [256, 128, 128, 96, 96]),
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
    ("05_backward_advanced", "so the package keeps one part width",
     lambda: len({c.block_n for c in TABLE.backward_split.values()}) == 1
     and all(e.config.block_n == 2048 for entries in TABLE.backward_padded.values() for e in entries
             if e.config.split)),
]


def _prose(name):
    """The example's comment text, whitespace-normalized, without the ``# `` prefixes."""
    lines = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8").splitlines()
    return " ".join(re.sub(r"^#\s?", "", line) for line in lines)


@pytest.mark.parametrize("page, fragment, check", FACTS, ids=[f"{p}: {f[:40]}" for p, f, _ in FACTS])
def test_the_prose_matches_the_launch_tables(page, fragment, check):
    assert " ".join(fragment.split()) in " ".join(_prose(page).split()), f"{page}: no longer says {fragment!r}"
    assert check(), f"{page} says {fragment!r}, the code disagrees"
