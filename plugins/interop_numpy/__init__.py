"""interop-core plugin for numpy: a compiled struct reader for ``numpy.ndarray`` and an exporter.

Reading
-------
Exact ``numpy.ndarray`` objects are read by this package's compiled reader (``_reader.pyx``),
registered through the public C ABI (``interop_core.h``, version 2) exactly as a third party's
would be.  It reads the array's C struct directly (data pointer, dimensions, strides,
descriptor, flags).  The core validates it once per process (``prepare`` checks the raw struct
fields of canary arrays against numpy's Python API; the core then compares every canary read
with the fallback's); if anything differs, the fallback, numpy's documented Python API
(``_reader.read_with_python_api``), serves the rest of the process.  Views are read-only exactly
when the array's ``WRITEABLE`` flag is clear.  Structured, object, string, datetime/timedelta,
long double and non-native byte order dtypes raise a ``BufferError`` naming the dtype.
Subclasses (``np.matrix``, ``np.memmap``, masked arrays, ...) do not take this path: they may
attach meaning to the memory that a plain view loses, so they go through the generic protocols.

Exporting
---------
``interop_core.to(x, "numpy")`` (or ``to(x, numpy.ndarray)``) returns an ndarray over the same
memory, read-only when the memory is, whose base keeps it alive: the source itself (``x``:
a numpy, torch or jax array) or, for ``to(view, "numpy")``, the view.  The compiled exporter
(``_export.pyx``, a compiled exporter on ``interop_core.h``: ``to()`` hands it the source
reader's record, no view object in between) builds it with numpy's documented C API
(``PyArray_NewFromDescr``, ``PyArray_SetBaseObject``, reached through the table numpy publishes
for compiled extensions, after the ABI-version check ``import_array()`` makes); a numpy whose C
ABI version it does not know gets :func:`export_numpy_slow` (``np.asarray`` through the buffer
protocol) instead (``_export.c_api_status()`` says which).  Device memory raises ``BufferError``: it cannot become
a numpy array without a copy, which ``to(x, "numpy", device="cpu")`` makes (the array API's
``from_dlpack(x, device=)`` rule).

Loading this module imports neither numpy nor any other framework.
"""

import interop_core

__all__ = ["interop_core_register", "export_numpy", "export_numpy_slow"]

_EXPORTABLE_THROUGH_BUFFER = {}   # DLPack triple -> bool (the buffer protocol can name it)

#: DLPack device types of memory the host reads, which numpy arrays can stand over: CPU,
#: CUDA-pinned, ROCm-pinned and CUDA-managed memory.
HOST_DEVICE_TYPES = (1, 3, 11, 13)


def export_numpy(view, stream=None):
    """A numpy array over the memory of ``view`` (zero-copy; its base is ``view``).

    The compiled exporter ``to()`` uses (``_export.pyx``), called on a view: numpy's C API
    builds the array from the view's record.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : None, int or stream object, optional
        Ignored: host memory needs no stream ordering.

    Returns
    -------
    numpy.ndarray
        Same pointer, shape, strides and dtype (bfloat16 / float8 through ml_dtypes);
        read-only when ``view`` is.

    Raises
    ------
    TypeError
        If ``view`` is not a view, or its type needs ml_dtypes and that is missing.
    BufferError
        For device memory, or a dtype numpy cannot hold.
    """
    from . import _export  # compiled; imports numpy on its first export

    return _export.to_numpy(view, stream)


def export_numpy_slow(view, stream=None):
    """:func:`export_numpy` through numpy's Python API (``np.asarray`` over the buffer protocol).

    What the compiled exporter falls back to when numpy's C ABI is not one it knows.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : None, int or stream object, optional
        Ignored beyond validation: host memory needs no stream ordering.

    Returns
    -------
    numpy.ndarray
        Same pointer, shape, strides and dtype (bfloat16 / float8 through ml_dtypes);
        read-only when ``view`` is.

    Raises
    ------
    BufferError
        For device memory, or a dtype numpy cannot hold.
    """
    import numpy as np

    if not view.is_host_accessible:
        raise BufferError(
            "device memory cannot become a numpy array without a copy (the view is on DLPack "
            f"device {(view.device_type, view.device_id)}); ask for a copy with "
            "interop_core.to(x, 'numpy', device='cpu')")
    triple = view.dlpack_dtype
    code, bits, lanes = triple
    if lanes != 1 or bits % 8:
        # Vector types and sub-byte types (padded one per byte) mean something else in numpy.
        raise BufferError(f"numpy cannot hold elements of DLPack type {triple}")
    if view.ptr == 0 and view.size:
        raise BufferError("cannot make a numpy array over a NULL pointer")
    through_buffer = _EXPORTABLE_THROUGH_BUFFER.get(triple)
    if through_buffer is None:
        through_buffer = _buffer_can_name(triple)
        _EXPORTABLE_THROUGH_BUFFER[triple] = through_buffer
    if through_buffer:
        # The buffer protocol: numpy's base is a memoryview holding the view.
        return np.asarray(view)
    # bfloat16, float8, ...: the buffer protocol has no format for them; export the same bytes
    # as unsigned integers of the same width and reinterpret (still zero-copy; ml_dtypes names
    # the type).  The dtype is resolved first so that an unknown one fails before any export.
    target = view.dtype
    carrier = interop_core.StridedMemoryView.from_pointer(
        view.ptr, view.shape, view.strides, dtype=f"uint{bits}", readonly=view.readonly,
        owner=view) if bits in (8, 16, 32, 64) else None
    if carrier is None:
        raise BufferError(f"numpy cannot hold elements of DLPack type {triple}")
    return np.asarray(carrier).view(target)


def _buffer_can_name(triple):
    code, bits, lanes = triple
    # int, uint, float (16/32/64), complex, bool: the formats numpy reads natively.
    if lanes != 1:
        return False
    return ((code in (0, 1) and bits in (8, 16, 32, 64)) or (code == 2 and bits in (16, 32, 64))
            or (code == 5 and bits in (64, 128)) or (code == 6 and bits == 8))


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare numpy.ndarray (the compiled struct reader, validated once) and the exporter."""
    from . import _reader  # compiled; imports no numpy

    # The struct reader reads what numpy's DLPack export, __array_interface__ and buffer
    # protocol describe (dtypes those cannot express are refused, and the protocol then
    # answers in its own words): from_dlpack / from_array_interface / from_buffer_protocol use it.
    registry.add_type("numpy:ndarray", reader=_reader.reader_capsule(),
                      fallback=_reader.read_with_python_api, prepare=_reader.prepare,
                      canaries=_reader.canaries,
                      equivalent_to=("dlpack", "array_interface", "buffer_protocol"))
    from . import _export  # compiled; imports no numpy

    # The compiled exporter itself (interop_core.h): to() hands it the source's description,
    # without a view object, and runs no Python of this plugin.  numpy takes every strided
    # layout (negative, zero and overlapping strides, any alignment): its only limit is memory
    # the host can read (device memory needs device='cpu', a copy).
    registry.add_exporter("numpy", _export.exporter_capsule(), types=("numpy:ndarray",),
                          preserves_readonly=True,
                          limits=interop_core.ImportLimits(device_types=HOST_DEVICE_TYPES))
