"""``python -m ln_tutorial``: build the C++ extension ahead of the first call, and say where calls go."""

import torch

from ln_tutorial import explain
from ln_tutorial.dispatch import native

if torch.cuda.is_available():
    print("ln_tutorial: C++ extension", "ready" if native.ENABLED and native.extension() else "not used")
print(explain((16, 4096), torch.bfloat16))
