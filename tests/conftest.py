"""Shared fixtures and the `gpu` marker: GPU tests skip cleanly where no CUDA device exists."""

from __future__ import annotations

import ctypes
import functools

import pytest


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports, 0 where there is no driver (no framework used)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    if libcuda.cuInit(0) != 0:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def pytest_collection_modifyitems(config, items):
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found: no libcuda or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
