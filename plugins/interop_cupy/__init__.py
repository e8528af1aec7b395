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
``interop_core.to(x, "cupy")`` returns a ``cupy.ndarray`` over the same device memory, built
with cupy's own constructors (``UnownedMemory`` holding the source, ``MemoryPointer``,
``ndarray``) by the compiled exporter ``_export.pyx``, which ``to()`` hands the source reader's
description directly (a compiled exporter on ``interop_core.h``: no view object, no Python of
this plugin).  Element types cupy's constructor does not take (bfloat16, float8) go through
``cupy.from_dlpack``.  cupy arrays cannot be read-only: ``to()`` of a read-only source (every
jax array) warns with ``ReadOnlyHandoffWarning`` unless the warning filters ignore it.

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


def export_cupy(view: Any, stream: Any = None) -> Any:
    """A ``cupy.ndarray`` over the same device memory as ``view``, keeping ``view`` alive.

    The compiled exporter ``to()`` uses (``_export.to_cupy``).

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
    from . import _export  # compiled; imports cupy on its first export

    return _export.to_cupy(view, stream)


@interop_core.hookimpl
def interop_core_register(registry: Any) -> None:
    """Declare cupy's array type (the fields reader, validated once, and its fallbacks), stream
    types and exporter (imports no cupy)."""
    from . import _reader  # compiled; imports no cupy

    for path in ARRAY_TYPES:
        registry.add_type(path, reader=_reader.fields_reader_capsule(),
                          fallback=(_reader.attributes_reader_capsule(), "cuda_array_interface"),
                          prepare=_reader.prepare, canaries=_reader.canaries,
                          producer_stream=_reader.producer_stream,
                          # cupy's current stream is both the interface's `stream` field and
                          # what its __dlpack__(stream=) orders the consumer after.
                          equivalent_to=("cuda_array_interface", "dlpack"),
                          # ...except that the interface gives arrays of no element address 0.
                          equivalence_check={
                              "cuda_array_interface": _reader.equivalence_check_capsule()})
    for path in STREAM_TYPES:
        registry.add_stream_type(path, handle=_stream_handle, keep_last="weak")
    from . import _export  # compiled; imports no cupy

    # The compiled exporter itself (interop_core.h): to() hands it the source's description.
    # cupy arrays take every strided layout (negative, zero and overlapping strides: cupy's
    # own slicing and as_strided make them) over CUDA device, pinned and managed memory.
    registry.add_exporter("cupy", _export.exporter_capsule(), types=ARRAY_TYPES,
                          preserves_readonly=False,
                          limits=interop_core.ImportLimits(device_types=_CUPY_DEVICE_TYPES))
