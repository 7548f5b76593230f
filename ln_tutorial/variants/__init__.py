"""The variants: each replaces a piece of the default path for the calls it takes, where a
measurement showed a gain above the noise of an A/B run on the H100 (5 %: two recordings of the same
code differ by up to that much); each module says what it **takes**, what it **gains** and what
runs **else**. :mod:`ln_tutorial.dispatch` alone decides which one a call takes.

=====================  ==============================================  ============================
variant                takes                                           gains (H100, measured)
=====================  ==============================================  ============================
:mod:`.fast_launch`    eager launches on a GPU                         host time per launch
:mod:`.native`         eager calls with contiguous rows, in C++: the   host time per call and per
                       forward's launch, the backward's autograd node  training step
:mod:`.one_launch`     backward, inputs up to 64 MB: dW/dB added up    one launch instead of two
                       by the same programs after a grid barrier
:mod:`.split`          backward, rows past the register budget, each   each row read once (split.py
                       shared by programs that trade row sums          gives its measured speed)
:mod:`.cluster`        the split backward's half-precision rows on     4 to 20 % on the split kernel
                       Hopper: the row sums traded in a cluster        (16384 to 65536 columns)
:mod:`.two_tiles`      forward, half-precision rows that a power of    up to 11 % at 4608 columns
                       two pads by a quarter or more (Gluon)
=====================  ==============================================  ============================

:mod:`.cooperative` holds what the one-launch and shared-row kernels share (a grid barrier, the
record of refused launches).
``backward_strategy="lock"`` (:mod:`.lock`) is the Triton tutorial's backward, kept as an option for
comparison; it is never chosen for you.

The variants run only on the Triton releases they were verified on
(``ln_tutorial._common.VERIFIED_TRITONS``); elsewhere a warning names the release and every call
takes the default path. ``LN_TUTORIAL_VARIANTS=0`` in the environment, or :func:`use_variants`
``(False)``, runs the default path alone: for bisecting a problem, and as the tutorial pages'
reference. :func:`ln_tutorial.explain` says which path a call takes.
"""

import os

#: False: every call takes the default path (the default kernels, Triton's own launch, no C++).
ENABLED = os.environ.get("LN_TUTORIAL_VARIANTS", "1") != "0"


def use_variants(enabled: bool) -> None:
    """Let calls take the variants (True, the default) or only the default path (False)."""
    global ENABLED
    ENABLED = bool(enabled)
