"""Shared fixtures and the `gpu` marker: GPU tests skip cleanly where no CUDA device exists."""

from __future__ import annotations

import pytest
from cuda_probe import cuda_device_count


def pytest_collection_modifyitems(config, items):
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found: no libcuda or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
