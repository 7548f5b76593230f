"""Every number the tutorial prose quotes from a launch table, checked against the table.

Each fact is a sentence fragment of an example's text and a check of the code
it describes. A fragment that is no longer on the page fails too: rewording
the prose means revisiting its fact here.
"""

import re
from pathlib import Path

import pytest

from ln_tutorial import launch, plain

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

FWD = launch.FORWARD_TABLE
BWD = launch.BACKWARD_TABLE  # row bytes -> (rows per step, warps, programs per SM, stages, reload)
FACTS = [
    ("01_forward", "gives each thread 8 values until 16 warps are reached",
     lambda: all(plain.launch_config(n, 2)[0] // (32 * plain.launch_config(n, 2)[1]) == 8 for n in (256, 1024, 4096))
     and plain.launch_config(16384, 2)[1] == 16),
    ("02_backward", "sized to the GPU rather than to the input: two programs per SM",
     lambda: "2 * torch.cuda.get_device_properties" in Path(plain.__file__).read_text()),
    ("04_forward_advanced", "Rows of 2 KB get eight rows per program, rows of 4 and 8 KB two, and wider rows one",
     lambda: FWD[2048][0] == 8 and FWD[4096][0] == FWD[8192][0] == 2
     and all(FWD[b][0] == 1 for b in FWD if b > 8192)),
    ("04_forward_advanced", "every program moves at least 8 KB",
     lambda: all(block_m * row_bytes >= 8192 for row_bytes, (block_m, _) in FWD.items())),
    ("04_forward_advanced", "packed into tiles of about 8 KB, up to 64 rows",
     lambda: launch.forward_config(16, 2).block_m == 64 and launch.forward_config(256, 2).block_m == 16),
    ("04_forward_advanced", "It helped only rows of 8 KB",
     lambda: list(launch.FORWARD_PREFETCH) == [8192]),
    ("04_forward_advanced", "rows of more than 64 KB",
     lambda: launch.MAX_FUSED_FWD_BYTES == 65536),
    ("04_forward_advanced", "half-precision rows of 12288 to 32768 values therefore take",
     lambda: sorted(launch.FORWARD_ONE_EXCHANGE) == [32768, 65536]),
    ("04_forward_advanced", "padded half-precision rows of 4097 to 12287 values as two tiles",
     lambda: launch.FORWARD_TWO_TILES[16384][0][1] == 8191 and launch.FORWARD_TWO_TILES[32768][-1][1] == 12287),
    ("04_forward_advanced", "A row of 65536 half-precision values (128 KB)",
     lambda: list(launch.FORWARD_CLUSTER) == [131072]),
    ("05_backward_advanced", "256 up to 1024 values, 128 up to 4096, and 96 past that",
     lambda: [launch.lock_group_size(n) for n in (1024, 1025, 4096, 4097, 65536)] == [256, 128, 128, 96, 96]),
    ("05_backward_advanced", "every row that fits in registers (up to 32 KB)",
     lambda: launch.MAX_FUSED_BWD_BYTES == 32768 and max(BWD) == 32768),
    ("05_backward_advanced", "Every row size runs one program per SM",
     lambda: all(entry[2] == 1 for entry in BWD.values())),
    ("05_backward_advanced", "Rows of 2 and 4 KB take four rows per step, 8 KB rows two and wider rows one",
     lambda: BWD[2048][0] == BWD[4096][0] == 4 and BWD[8192][0] == 2 and all(BWD[b][0] == 1 for b in BWD if b > 8192)),
    ("05_backward_advanced", "2 KB rows keep four tiles in flight, the wider ones three, and 32 KB rows one, reloading",
     lambda: BWD[2048][3] == 4 and all(BWD[b][3] == 3 for b in (4096, 8192, 16384))
     and BWD[32768][3] == 1 and BWD[32768][4]),
    ("05_backward_advanced", "the table turns it on for 32 KB rows alone",
     lambda: [b for b, entry in BWD.items() if entry[4]] == [32768]),
    ("05_backward_advanced", "rows of more than 32 KB",
     lambda: launch.MAX_FUSED_BWD_BYTES == 32768),
    ("05_backward_advanced", "parts of 4096 columns (8 warps, 2 programs per SM)",
     lambda: launch.BACKWARD_SPLIT_WIDEST[1:5] == (1, 4096, 8, 2)),
    ("05_backward_advanced", "2048 columns won up to rows of 32768 half-precision values",
     lambda: launch.BACKWARD_SPLIT.block_n == 2048),
]


def _prose(name):
    """The example's comment text, whitespace-normalized, without the ``# `` prefixes."""
    lines = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8").splitlines()
    return " ".join(re.sub(r"^#\s?", "", line) for line in lines)


@pytest.mark.parametrize("page, fragment, check", FACTS, ids=[f"{p}: {f[:40]}" for p, f, _ in FACTS])
def test_the_prose_matches_the_launch_tables(page, fragment, check):
    assert " ".join(fragment.split()) in " ".join(_prose(page).split()), f"{page}: no longer says {fragment!r}"
    assert check(), f"{page} says {fragment!r}, the code disagrees"
