"""The ``to()`` targets installed here, and how to read back what each one returns.

Targets are the exporters of every loaded plugin (``interop_core.plugin_status()``), so a new
plugin is covered by every test that loops over them.  ``read_result`` turns a target's object
back into numpy through the target framework's own API (torch: a same-size integer view, then
``.numpy()``; jax: ``np.asarray``; numba's simulator: ``copy_to_host``; bytetensor: ``tolist``),
and for a target it does not know, through interop-core's reader of the object's type.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np

import interop_core

__all__ = ["WORKER_ENVIRONMENT", "installed_targets", "numpy_dtype", "read_result", "zero_result"]

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

#: For worker processes: numba's exporter then targets its CUDA simulator (host memory), so the
#: numba target is exercised without a GPU.  Never set in the test process itself.
WORKER_ENVIRONMENT = {"NUMBA_ENABLE_CUDASIM": "1"}


#: Where installed_targets() keeps its answer for this process and the workers it starts.
_TARGETS_VARIABLE = "INTEROP_CORE_TEST_TARGETS"

_ASK = ("import interop_core\n"
        "print(','.join(sorted({t for info in interop_core.plugin_status()\n"
        "                      if info.status == 'loaded' for t in info.exporters})))\n")


def installed_targets():
    """Every exporter target of a loaded plugin whose framework is installed here.

    Asked once, in a separate interpreter: discovering the plugins in the test process at
    collection time would change the order in which later tests meet them (discovery before
    torch is imported makes validating torch.nn.Parameter recurse on main, a core bug of its
    own).  The answer is kept in the environment, so worker processes started afterwards
    inherit it.
    """
    known = os.environ.get(_TARGETS_VARIABLE)
    if known is None:
        done = subprocess.run([sys.executable, "-c", _ASK], capture_output=True, text=True,
                              timeout=300, check=True)
        known = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        os.environ[_TARGETS_VARIABLE] = known
    return [name for name in known.split(",") if name]


def numpy_dtype(name):
    """The numpy dtype of a name, ml_dtypes' (bfloat16, float8_*) included."""
    if ml_dtypes is not None and hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _changed(dtype, got):
    return AssertionError(f"dtype changed: {dtype.name} became {got}")


_TORCH_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _read_torch(result, dtype):
    import torch

    if str(result.dtype) != f"torch.{dtype.name}":
        raise _changed(dtype, result.dtype)
    result = result.detach()
    if dtype.itemsize in _TORCH_BITS and dtype.kind != "c":
        # Bits through a same-size integer view: .numpy() knows no bfloat16 or float8.
        values = result.view(getattr(torch, _TORCH_BITS[dtype.itemsize])).numpy().view(dtype)
    else:
        values = result.numpy()
    return values, result.data_ptr(), True


def _read_jax(result, dtype):
    if np.dtype(result.dtype) != dtype:
        raise _changed(dtype, result.dtype)
    pointer = result.unsafe_buffer_pointer() if result.size else None
    return np.asarray(result), pointer, False


def _read_numpy(result, dtype):
    if not isinstance(result, np.ndarray):
        raise AssertionError(f"to(..., 'numpy') gave a {type(result).__name__}")
    if result.dtype != dtype:
        raise _changed(dtype, result.dtype)
    return result, result.__array_interface__["data"][0], result.flags.writeable


def _read_numba(result, dtype):
    if result.dtype != dtype:
        raise _changed(dtype, result.dtype)
    # The CUDA simulator's array wraps a numpy array over the memory it was given.
    return result.copy_to_host(), result.__array_interface__["data"][0], False


def _read_bytetensor(result, dtype):
    if result.dtype != dtype.name:
        raise _changed(dtype, result.dtype)
    # Through its public buffer, offset and byte strides (tolist() is pure Python: slow).
    values = np.ndarray(result.shape, dtype, buffer=result.buffer, offset=result.offset,
                        strides=result.strides)
    return values, result.data_ptr, False


def _read_generic(result, dtype):
    v = interop_core.view(result)
    if v.dtype != dtype:
        raise _changed(dtype, v.dtype)
    if v.size == 0:
        return np.empty(v.shape, dtype), None, False
    low = sum(s * (n - 1) for s, n in zip(v.strides_in_bytes, v.shape, strict=True) if s < 0)
    high = sum(s * (n - 1) for s, n in zip(v.strides_in_bytes, v.shape, strict=True) if s > 0)
    raw = (ctypes.c_char * (high - low + v.itemsize)).from_address(v.ptr + low)
    first = np.frombuffer(raw, np.uint8, v.itemsize, offset=-low).view(dtype)
    values = np.lib.stride_tricks.as_strided(first, v.shape, v.strides_in_bytes, writeable=False)
    return np.array(values), v.ptr, False


_READERS = {"torch": _read_torch, "jax": _read_jax, "numpy": _read_numpy, "numba": _read_numba,
            "bytetensor": _read_bytetensor}


def read_result(target, result, dtype):
    """(numpy array of the values, address of element 0 or None, whether it can be written).

    Raises AssertionError when the result's dtype is not ``dtype``.
    """
    return _READERS.get(target, _read_generic)(result, np.dtype(dtype))


def zero_result(target, result):
    """Write zero bits into a writable result; False where this file cannot write one."""
    if target == "numpy" and result.flags.writeable:
        result[...] = np.zeros((), result.dtype)
        return True
    if target == "torch":
        result.detach().zero_()
        return True
    return False
