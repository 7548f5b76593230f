"""Shared test set-up: pick the device, and the Triton interpreter when there is no GPU.

``TRITON_INTERPRET`` must be set before ``ln_tutorial`` (and so its kernels) is
imported, which is why it happens here, at collection time.
"""

import os

import pytest
import torch

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
