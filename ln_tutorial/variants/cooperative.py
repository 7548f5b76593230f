"""What :mod:`.one_launch` and :mod:`.split` share: a grid-wide barrier, the tile of the dW/dB sums
added after it, and the launches the driver refused. A program waiting at a barrier keeps its SM
slot, so all programs must be resident at once: a cooperative launch, which the driver refuses when
the GPU cannot hold the grid (a share of it taken, say). The interpreter never runs these barriers.
"""

import torch
import triton
import triton.language as tl

from ln_tutorial._common import cache, next_power_of_2
from ln_tutorial.host import REDUCE_BLOCK_N


class Refused(RuntimeError):
    """The driver refused a cooperative launch: more programs than the GPU can hold at once."""


#: The (device, configuration) pairs whose cooperative launch the driver refused, never tried again.
refused: set = set()


def remember_refusal(error: RuntimeError, device: int, cfg) -> None:
    """Re-raise ``error`` unless the driver refused a cooperative launch; then remember ``cfg`` as
    refused on ``device`` and raise :class:`Refused` (the dispatcher chooses again without it)."""
    if "cooperative launch" not in str(error):
        raise error
    refused.add((device, cfg))
    raise Refused() from error


def reduce_blocks(n: int, sets: int, programs: int, partial_rows: int, num_warps: int) -> dict:
    """Tile of the dW/dB reduction done after the barrier: column blocks of about one per program
    (M = 0 has no programs), each step 32 values per thread (the second kernel of the default path
    has many small programs instead)."""
    block_n = min(1024, max(REDUCE_BLOCK_N, next_power_of_2(-(-n * sets // max(programs, 1)))))
    block_p = min(next_power_of_2(partial_rows), max(1, 1024 * num_warps // block_n))
    return dict(REDUCE_BLOCK_P=block_p, REDUCE_BLOCK_N=block_n)


@cache
def grid_barrier_state(device: int, stream: int) -> torch.Tensor:
    """The state of :func:`grid_barrier` for the launches on one stream (they run one after another,
    each leaving it ready for the next): zeroed once, here."""
    return torch.zeros(2, dtype=torch.int32, device=device)


@triton.jit
def grid_barrier(
    BARRIER,  # int32 (2,): programs arrived (0 between launches), then a generation count
):
    """Wait until every program of the grid has arrived here (a cooperative launch only).

    The last program to arrive resets the count for the next launch and moves
    the generation on, which releases the others.
    """
    tl.debug_barrier()  # every thread's stores before this program arrives
    generation = tl.atomic_add(BARRIER + 1, 0, sem="acquire")
    if tl.atomic_add(BARRIER, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.atomic_xchg(BARRIER, 0, sem="relaxed")
        tl.atomic_add(BARRIER + 1, 1, sem="release")
    else:
        while tl.atomic_add(BARRIER + 1, 0, sem="acquire") == generation:
            pass
    tl.debug_barrier()  # no thread reads before the wait is over
