"""interop-core plugin for cuda.core: readers for its ``StridedMemoryView`` and ``Buffer``, its
streams, and a ``"cuda.core"`` exporter.

Reading
-------
cuda.core's ``StridedMemoryView`` (``cuda.core.utils.StridedMemoryView``) and ``Buffer`` (and
``ManagedBuffer``) are read by this package's compiled readers (``_reader.pyx``), registered
through the public C ABI (``interop_core.h``, version 2) exactly as a third party's would be.
They read documented public attributes only, from C:

* a view: ``ptr``, ``shape``, ``strides`` (in elements; ``None`` means C order), ``dtype``,
  ``readonly``, and the device from ``device_id`` (``-1``: host memory) and, for memory a GPU
  can reach, ``__dlpack_device__()`` (CUDA device, pinned or managed memory).  The view's owner
  is the cuda.core view, which holds what it views.  A view made without a dtype
  (``from_buffer(..., itemsize=n)``) reads as unsigned integers of its itemsize
  (``_reader.read_untyped_view``);
* a buffer: ``size`` bytes of ``uint8`` at ``handle``; where the memory is comes from the CUDA
  driver (device, pinned, managed), host memory without one.  A ``Buffer`` that is closed
  (``buffer.close()``) frees its memory whatever holds it: do not close one while a view or an
  export of it is in use.

Streams
-------
cuda.core's ``Stream`` objects are accepted as ``stream=`` arguments (their ``handle``).  cuda.core
views name no producer stream: cuda.core orders them when they are made (``stream_ptr``).

Exporting
---------
``interop_core.to(x, "cuda.core")`` (or ``to(x, cuda.core.utils.StridedMemoryView)``) returns a
cuda.core ``StridedMemoryView`` over the same memory, made by cuda.core's own
``StridedMemoryView.from_dlpack`` from the view's DLPack export (with ``stream_ptr=-1``:
ordering, when asked for, is done by ``to()`` before the export).  It keeps the view, and so the
source, alive; read-only memory stays read-only.

Loading this plugin imports no cuda.core: types are named as strings and resolved once cuda.core
has been imported by the user.
"""

from __future__ import annotations

from typing import Any

import interop_core

__all__ = ["interop_core_register", "export_cuda_core", "stream_handle", "VIEW_TYPES",
           "BUFFER_TYPES", "STREAM_TYPES"]

#: cuda.core's view class ("module:QualName", resolved lazily; absent ones never resolve).
VIEW_TYPES = ("cuda.core._memoryview:StridedMemoryView",
              "cuda.core.experimental._memoryview:StridedMemoryView")
#: cuda.core's buffer classes (exact types: a subclass may mean something else).
BUFFER_TYPES = ("cuda.core._memory._buffer:Buffer",
                "cuda.core._memory._managed_buffer:ManagedBuffer",
                "cuda.core.experimental._memory:Buffer")
#: cuda.core's stream class.
STREAM_TYPES = ("cuda.core._stream:Stream", "cuda.core.experimental._stream:Stream")


def stream_handle(stream: Any) -> int:
    """The ``CUstream`` of a cuda.core ``Stream``.

    Parameters
    ----------
    stream : cuda.core.Stream

    Returns
    -------
    int
    """
    return int(stream.handle)


_from_dlpack = None    # cuda.core's StridedMemoryView.from_dlpack, looked up on first export


def _cuda_core_from_dlpack() -> Any:
    global _from_dlpack
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        from cuda.core.experimental.utils import StridedMemoryView
    _from_dlpack = StridedMemoryView.from_dlpack
    return _from_dlpack


def export_cuda_core(view: Any, stream: Any = None) -> Any:
    """A cuda.core ``StridedMemoryView`` over the memory of ``view``, keeping ``view`` alive.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : optional
        The consumer stream (ordering was done by :func:`interop_core.to` before this call).

    Returns
    -------
    cuda.core.utils.StridedMemoryView
        Same pointer, shape, strides, dtype and device; read-only when ``view`` is; its
        ``exporting_obj`` is ``view``.

    Raises
    ------
    BufferError
        For memory cuda.core cannot describe (devices other than the host, CUDA devices, pinned
        and managed memory).
    """
    return (_from_dlpack or _cuda_core_from_dlpack())(view, -1)


@interop_core.hookimpl
def interop_core_register(registry: Any) -> None:
    """Declare cuda.core's view and buffer types (compiled readers of their public attributes),
    its stream type and the ``"cuda.core"`` exporter (imports no cuda.core)."""
    from . import _reader  # compiled; imports no cuda.core

    for path in VIEW_TYPES:
        registry.add_type(path, reader=_reader.view_reader_capsule(),
                          fallback=_reader.read_untyped_view)
    for path in BUFFER_TYPES:
        registry.add_type(path, reader=_reader.buffer_reader_capsule())
    for path in STREAM_TYPES:
        # A cuda.core Stream owns its CUstream and takes no weak references: not remembered.
        registry.add_stream_type(path, handle=stream_handle)
    registry.add_exporter("cuda.core", export_cuda_core, types=VIEW_TYPES,
                          preserves_readonly=True)
