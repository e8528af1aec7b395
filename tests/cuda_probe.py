"""How many CUDA devices this machine has, asked of the driver directly (no framework)."""

from __future__ import annotations

import ctypes
import functools


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
