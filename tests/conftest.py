"""Shared test set-up: pick the device, and the Triton interpreter when there is no GPU.

``TRITON_INTERPRET`` must be set before ``ln_tutorial`` (and so its kernels) is
imported, which is why it happens here, at collection time. The tests are split by
what they test: ``package/`` (the library and its tools), ``pages/`` (the book's
code, pages, translations and set-up) and ``site/`` (the built site in a browser);
``helpers.py`` and this module, shared by all, are importable from each.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # helpers.py and this module, from the subfolders

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if ON_GPU else "cpu"

# Error floors per dtype, added to twice PyTorch's own error (relative, norm-wise).
FLOOR = {
    torch.float16: 1e-4,
    torch.bfloat16: 1e-3,
    torch.float32: 1e-6,
    torch.float64: 1e-13,
}


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
