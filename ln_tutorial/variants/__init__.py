"""The specialised variants: each takes only some shapes, and each was measured to pay there.

The default path -- :mod:`ln_tutorial.kernels` launched by :mod:`ln_tutorial.launch`
with Triton's own launch -- takes every call. A variant replaces one of its
pieces where a measurement showed a gain above the noise of an A/B run on the
H100 (5 %: two recordings of the same code differ by up to that much at the
recorded shapes):

=====================  ================================================  ===================================
variant                takes                                             gains (H100, measured)
=====================  ================================================  ===================================
:mod:`.native`         eager calls with contiguous rows (C++); its       host time per call: see the
(with ``launcher``)    node launches first-order gradients, the          performance page
                       looped kernels of float64 rows apart
:mod:`.one_launch`     backward, inputs up to 64 MB: dW/dB added up by   one launch instead of two
                       the same programs after a grid-wide barrier
:mod:`.split`          backward, rows past the register budget: each     1.45x (half precision) to 2x
                       row shared by programs that trade row sums        (float32) the looped kernels
:mod:`.two_tiles`      forward, half-precision rows a power of two       up to 11 % at 4608 columns
                       pads by a quarter or more (Gluon)
=====================  ================================================  ===================================

``backward_strategy="lock"`` (:mod:`.lock`) is the Triton tutorial's backward,
kept as an option for comparison; it is never chosen for you.

``LN_TUTORIAL_VARIANTS=0`` in the environment, or :func:`use_variants` ``(False)``,
runs the default path alone: for bisecting a problem, and as the tutorial
pages' reference. :func:`ln_tutorial.explain` says which path a call takes.
"""

import os

#: False: every call takes the default path (kernels, Triton's own launch, no C++).
ENABLED = os.environ.get("LN_TUTORIAL_VARIANTS", "1") != "0"


def use_variants(enabled: bool) -> None:
    """Let calls take the variants (True, the default) or only the default path (False)."""
    global ENABLED
    ENABLED = bool(enabled)
