"""cuda.core's strided-memory API over interop-core: migrating is one import.

::

    # from cuda.core.utils import StridedMemoryView, args_viewable_as_strided_memory
    # from cuda.core._layout import _StridedLayout
    from interop_core.compat.cuda_core import (
        StridedMemoryView, StridedLayout, args_viewable_as_strided_memory)

The names, signatures and conventions are cuda.core's (``stream_ptr``, ``-1`` for no stream
ordering, ``strides`` ``None`` for C-contiguous memory, ``device_id`` ``-1`` for host memory,
``exporting_obj``, ``required_size_in_bytes()``, error messages); every view is read by
interop-core's compiled core and plugins, as fast as :func:`interop_core.view`, and is an
:class:`interop_core.StridedMemoryView` too.  The differences that remain, and why, are listed in
"Migrating from cuda.core" in the documentation.  cuda.core itself is not needed (its ``Buffer``
objects are accepted where cuda.core takes them).
"""

from __future__ import annotations

import functools
from enum import IntEnum

from ._cuda_core import StridedLayout, StridedMemoryView, _StridedMemoryViewProxy

__all__ = ["DLDeviceType", "StridedLayout", "StridedMemoryView", "args_viewable_as_strided_memory"]

#: cuda.core's name for its layout class (``cuda.core._layout._StridedLayout``).
_StridedLayout = StridedLayout


class DLDeviceType(IntEnum):
    """DLPack device types, with cuda.core's names (``cuda.core._dlpack.DLDeviceType``)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLCUDAManaged = 13


def args_viewable_as_strided_memory(arg_indices: tuple):
    """Decorator: the positional arguments at ``arg_indices`` arrive as proxies whose
    ``view(stream_ptr)`` returns a :class:`StridedMemoryView` (``.obj`` is the argument).

    Parameters
    ----------
    arg_indices : tuple of int

    Returns
    -------
    callable
        The decorator.

    Raises
    ------
    TypeError
        If ``arg_indices`` is not a tuple.
    BufferError
        At a call, for an argument offering neither DLPack nor the CUDA Array Interface.
    """
    if not isinstance(arg_indices, tuple):
        raise TypeError(f"Argument 'arg_indices' has incorrect type (expected tuple, got "
                        f"{type(arg_indices).__name__})")

    def wrapped_func_with_indices(func):
        @functools.wraps(func)
        def wrapped_func(*args, **kwargs):
            args = list(args)
            for idx in arg_indices:
                args[idx] = _StridedMemoryViewProxy(args[idx])
            return func(*args, **kwargs)
        return wrapped_func
    return wrapped_func_with_indices
