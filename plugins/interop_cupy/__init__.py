"""interop-core plugin for cupy: compiled readers for ``cupy.ndarray``, streams and an exporter.

Reading
-------
Exact ``cupy.ndarray`` objects are read by this package's compiled readers (``_reader.pyx``),
registered through the public C ABI (``interop_core.h``, version 2) exactly as a third party's
would be, as a chain of fallbacks:

1. the *fields reader* reads what the array's public attributes (``.data.ptr``, ``.shape``,
   ``.strides``, ``.dtype``, ``.data.device_id``) say straight from cupy's Cython structs, at
   byte offsets located once per process on canary arrays whose values all differ.  The core
   validates it once (``prepare`` locates the fields; the core then reads every canary with it
   and with the attributes reader and compares); it only ever reads exactly the type the fields
   were located on, and declines anything unexpected to the next reader;
2. the *attributes reader* reads those attributes themselves from C.  It serves the rest of the
   process when the fields cannot be located or read differently
   (``python -m interop_core doctor`` says which, and why);
3. cupy's own ``__cuda_array_interface__`` (the core's reader) reads objects the attributes
   reader declines.

The producer stream is cupy's current stream on the array's device (handle ``0``: the legacy
default stream), read in C as every view is made through cupy's exported ``get_stream_ptr``
once it agreed with cupy's Python API (``doctor`` shows ``stream_reader: c_api``); otherwise
cupy's Python API is asked when ordering needs it.  Stream objects are remembered through a
weak reference (``keep_last="weak"``): passing the same one again skips its ``.ptr`` lookup.

Exporting
---------
``interop_core.to(x, "cupy")`` returns a ``cupy.ndarray`` over the same device memory.

Loading this plugin never imports cupy: types are named as strings and resolved once cupy has
been imported by the user.
"""

from __future__ import annotations

import operator
from typing import Any

import interop_core

__all__ = ["interop_core_register", "export_cupy", "producer_stream", "ARRAY_TYPES",
           "STREAM_TYPES"]

#: Exact array types read by the compiled reader ("module:QualName", resolved lazily).
ARRAY_TYPES = ("cupy:ndarray",)
#: cupy's stream classes (``.ptr`` is the ``CUstream``).
STREAM_TYPES = ("cupy.cuda.stream:Stream", "cupy.cuda.stream:ExternalStream",
                "cupy.cuda:Stream", "cupy.cuda:ExternalStream")

# Device types a cupy array can stand over: CUDA device memory, pinned host memory (mapped
# into the device's address space) and managed memory.
_CUPY_DEVICE_TYPES = (2, 3, 13)

# "memory" (cupy.ndarray over an UnownedMemory that holds the view) or "dlpack"
# (cupy.from_dlpack(view)).  Both are zero-copy; "memory" skips building and parsing a DLPack
# capsule, and falls back to "dlpack" for dtypes cupy's constructor does not take.
EXPORT_PATH = "memory"


def producer_stream(obj: Any) -> int:
    """cupy's current stream on ``obj``'s device, as a ``CUstream`` handle (0: legacy default)."""
    from . import _reader

    return _reader.producer_stream(obj)


# A cupy stream's handle: a C getter, so resolving a stream argument runs no Python frame here.
_stream_handle = operator.attrgetter("ptr")


def _byte_span(view: Any) -> tuple[int, int]:
    """(lowest byte offset from element 0, bytes spanned) of a non-empty view."""
    itemsize = view.itemsize
    low = high = 0
    for extent, stride in zip(view.shape, view.strides, strict=True):
        if extent == 0:
            return 0, 0
        reach = (extent - 1) * stride * itemsize
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high - low + itemsize


def export_cupy(view: Any, stream: Any = None) -> Any:
    """A ``cupy.ndarray`` over the same device memory as ``view``, keeping ``view`` alive.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
        Of CUDA device, pinned host or managed memory.
    stream : optional
        The consumer stream (ordering was done by :func:`interop_core.view`).

    Returns
    -------
    cupy.ndarray
        Same pointer, shape, strides and dtype.  cupy arrays cannot be read-only: ``to()``
        warns when ``view`` is.

    Raises
    ------
    BufferError
        For host memory (cupy holds device memory; copy with ``cupy.asarray`` instead), or a
        dtype cupy has no type for.
    """
    import cupy

    if view.device_type not in _CUPY_DEVICE_TYPES:
        raise BufferError(
            f"cannot hand {view.device_type == 1 and 'host' or 'non-CUDA'} memory to cupy "
            f"without a copy (device type {view.device_type}); cupy arrays hold CUDA memory: "
            "copy it with cupy.asarray(...) instead")
    if EXPORT_PATH == "memory":
        try:
            dtype = view.dtype
        except TypeError:
            dtype = None
        if dtype is not None and dtype.kind in "biufc":
            low, span = _byte_span(view)
            memory = cupy.cuda.UnownedMemory(view.ptr + low, span, view,
                                             device_id=view.device_id)
            pointer = cupy.cuda.MemoryPointer(memory, -low)
            return cupy.ndarray(view.shape, dtype, pointer, view.strides_in_bytes)
    try:
        return cupy.from_dlpack(view)
    except Exception as exc:
        raise BufferError(f"cupy cannot take this view ({view.dlpack_dtype} on device "
                          f"{view.device_type}): {exc}") from exc


@interop_core.hookimpl
def interop_core_register(registry: Any) -> None:
    """Declare cupy's array type (the fields reader, validated once, and its fallbacks), stream
    types and exporter (imports no cupy)."""
    from . import _reader  # compiled; imports no cupy

    for path in ARRAY_TYPES:
        registry.add_type(path, reader=_reader.fields_reader_capsule(),
                          fallback=(_reader.attributes_reader_capsule(), "cuda_array_interface"),
                          prepare=_reader.prepare, canaries=_reader.canaries,
                          producer_stream=_reader.producer_stream)
    for path in STREAM_TYPES:
        registry.add_stream_type(path, handle=_stream_handle, keep_last="weak")
    registry.add_exporter("cupy", export_cupy, types=ARRAY_TYPES, preserves_readonly=False)
