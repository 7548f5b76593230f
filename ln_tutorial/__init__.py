"""ln_tutorial: a LayerNorm in Triton, fast, tested and explained.

Public API: :func:`layer_norm` (like :func:`torch.nn.functional.layer_norm`)
and :class:`LayerNorm` (a :class:`torch.nn.LayerNorm` subclass).
"""

from ln_tutorial.function import layer_norm
from ln_tutorial.module import LayerNorm

__version__ = "0.1.0"
__all__ = ["layer_norm", "LayerNorm", "__version__"]
