"""ln_tutorial: a LayerNorm in Triton. :func:`layer_norm` (like :func:`torch.nn.functional.layer_norm`),
:class:`LayerNorm` (a :class:`torch.nn.LayerNorm` subclass), :func:`explain` (which kernels a call takes,
and why) and :func:`use_variants` (``False``: the default path alone, see :mod:`ln_tutorial.variants`)."""

from ln_tutorial.explain import explain
from ln_tutorial.function import layer_norm
from ln_tutorial.module import LayerNorm
from ln_tutorial.variants import use_variants

__version__ = "0.1.0"
__all__ = ["layer_norm", "LayerNorm", "explain", "use_variants", "__version__"]
