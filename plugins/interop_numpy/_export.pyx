# The numpy exporter: a description of host memory -> numpy.ndarray over it, in C.
#
# Why not np.asarray(view)?  That goes through the buffer protocol: the view fills a Py_buffer,
# numpy parses its format string, wraps it in a memoryview and builds the array over that (about
# 0.7 us, plus the Python around it).  Here the array is built directly with numpy's documented C
# API, PyArray_NewFromDescr and PyArray_SetBaseObject, from a description of the memory: ~0.1 us.
#
# It is registered as a compiled exporter (interop_core.h, INTEROP_CORE_EXPORTER_CAPSULE):
# `to(x, "numpy")` hands it the source reader's description and keep-alive (the source itself
# for numpy, torch and jax arrays), which becomes the array's base, as torch's Tensor.numpy()
# does; no view object is made.  Called on a view (to(view, "numpy"), copies, `to_numpy`), it
# reads the view through the core's ABI (describe_view) and the view is the base.
#
# numpy's C API is reached as every compiled extension reaches it, through the function table
# numpy publishes as the capsule `_ARRAY_API` (what numpy's import_array() does), without numpy's
# headers: the few slots used here are numpy's ABI, unchanged since numpy 1.x (their indices are
# fixed by numpy's API listing).  The binding checks the ABI version the table reports, as
# import_array() does, and that the table's array type is numpy.ndarray; a numpy whose ABI is
# not one this code knows (1.x, 2.x) gets the Python path, np.asarray through the buffer
# protocol (`interop_numpy.export_numpy_slow`), for the rest of the process.
#
# Element types: the numpy dtype of each DLPack triple comes from the core's dtype table
# (`StridedMemoryView.dtype`, ml_dtypes for bfloat16 / float8), once per triple, and is then
# cached here.

from cpython.object cimport PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t

from interop_core.abi cimport (
    INTEROP_CORE_EXPORTER_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["to_numpy", "exporter_capsule", "c_api_status"]

cdef enum:
    MAX_NDIM = 64                   # the core's limit (numpy's own is 64 in 2.x, 32 in 1.x)
    NPY_ARRAY_WRITEABLE = 0x0400
    # Slots of numpy's C-API table (numpy/_core/code_generators/numpy_api.py), part of its ABI.
    SLOT_ABI_VERSION = 0            # unsigned int PyArray_GetNDArrayCVersion(void)
    SLOT_NDARRAY_TYPE = 2           # PyTypeObject PyArray_Type
    SLOT_NEW_FROM_DESCR = 94        # PyObject *PyArray_NewFromDescr(...)
    SLOT_SET_BASE_OBJECT = 282      # int PyArray_SetBaseObject(PyArrayObject *, PyObject *)
    # DLPack device types the host can read (the core's is_host_accessible).
    KDL_CPU = 1
    KDL_CUDA_HOST = 3
    KDL_ROCM_HOST = 11
    KDL_CUDA_MANAGED = 13
    # Element types cached in the direct table: DLPack codes below N_CODES, 8..128 bits.
    N_CODES = 32
    N_WIDTHS = 5

# numpy's C ABI versions whose slots above are known (NPY_ABI_VERSION of numpy 1.x and 2.x).
cdef unsigned int _ABI_1 = 0x01000009
cdef unsigned int _ABI_2 = 0x02000000

ctypedef unsigned int (*abi_version_fn)() noexcept
ctypedef PyObject* (*new_from_descr_fn)(PyTypeObject* subtype, PyObject* descr, int nd,
                                        const Py_ssize_t* dims, const Py_ssize_t* strides,
                                        void* data, int flags, PyObject* obj) noexcept
ctypedef int (*set_base_fn)(PyObject* array, PyObject* base) noexcept

# The core's helper table (describe_view), fetched once on import.
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# numpy's functions, bound on the first export (numpy is imported then, never on load).
cdef int _state = 0                      # 0 not bound yet, 1 numpy's C API, -1 the Python path
cdef str _reason = None                  # why, for c_api_status()
cdef object _numpy_capsule = None        # owns numpy's _ARRAY_API capsule, and so the table
cdef PyTypeObject* _ndarray = NULL       # numpy.ndarray (numpy's module keeps the type alive)
cdef new_from_descr_fn _new_from_descr = NULL
cdef set_base_fn _set_base = NULL
cdef object _slow_export = None          # interop_numpy.export_numpy_slow (owned here)

# numpy dtype objects by DLPack (code, bits) for lanes == 1; borrowed from _descr_owner, which
# holds one reference to each for the life of the process.
cdef PyObject* _descrs[N_CODES][N_WIDTHS]
cdef list _descr_owner = []
cdef dict _other_descrs = {}             # (code, bits, lanes) -> dtype, outside the table


cdef int _bind() except -1:
    """Bind numpy's C API (first export), or choose the Python path, saying why."""
    global _state, _reason, _numpy_capsule, _ndarray, _new_from_descr, _set_base
    import numpy

    capsule = None
    for module in ("numpy._core._multiarray_umath", "numpy.core.multiarray"):
        try:
            capsule = getattr(__import__(module, fromlist=["_ARRAY_API"]), "_ARRAY_API", None)
        except ImportError:
            continue
        if capsule is not None:
            break
    if capsule is None:
        return _use_python("numpy publishes no _ARRAY_API capsule")
    cdef void** table = <void**> PyCapsule_GetPointer(capsule, NULL)
    cdef unsigned int abi = (<abi_version_fn> table[SLOT_ABI_VERSION])()
    if abi != _ABI_1 and abi != _ABI_2:
        return _use_python(f"numpy's C ABI version {abi:#x} is not one this plugin knows")
    if <PyObject*> table[SLOT_NDARRAY_TYPE] != <PyObject*> numpy.ndarray:
        return _use_python("numpy's C-API table does not hold numpy.ndarray where expected")
    if sizeof(Py_ssize_t) != sizeof(int64_t):
        return _use_python("npy_intp is not 64-bit on this platform")
    _numpy_capsule = capsule
    _ndarray = <PyTypeObject*> table[SLOT_NDARRAY_TYPE]
    _new_from_descr = <new_from_descr_fn> table[SLOT_NEW_FROM_DESCR]
    _set_base = <set_base_fn> table[SLOT_SET_BASE_OBJECT]
    _state = 1
    _reason = f"numpy's C API (ABI {abi:#x}): PyArray_NewFromDescr, PyArray_SetBaseObject"
    return 0


cdef int _use_python(str why) except -1:
    global _state, _reason
    _state = -1
    _reason = why
    return 0


cdef inline int _width_index(int bits) noexcept:
    # 8, 16, 32, 64, 128 bits -> 0 .. 4; anything else -1.
    if bits == 8:
        return 0
    if bits == 16:
        return 1
    if bits == 32:
        return 2
    if bits == 64:
        return 3
    if bits == 128:
        return 4
    return -1


cdef PyObject* _descr_for(const interop_core_tensor_info* info,
                          Py_ssize_t* itemsize) except NULL:
    """numpy's dtype for the view's DLPack triple (borrowed), and its itemsize."""
    cdef int code = info.dtype_code, bits = info.dtype_bits, lanes = info.dtype_lanes
    cdef int w = _width_index(bits)
    if lanes != 1 or w < 0:
        # Vector types and sub-byte types (padded one per byte by the core) have no numpy
        # equivalent with the same meaning.
        raise BufferError(f"numpy cannot hold elements of DLPack type {(code, bits, lanes)}")
    itemsize[0] = bits // 8
    if code < N_CODES and _descrs[code][w] != NULL:
        return _descrs[code][w]
    key = (code, bits, lanes)
    found = _other_descrs.get(key)
    if found is None:
        # The core's dtype table (numpy, ml_dtypes), through an empty view of that type:
        # TypeError naming what is missing.
        from interop_core import StridedMemoryView

        found = StridedMemoryView.from_pointer(0, (0,), dtype=key).dtype
        if found.itemsize != itemsize[0]:
            raise BufferError(f"numpy's {found} holds {found.itemsize} bytes, DLPack type "
                              f"{key} {itemsize[0]}")
        if code < N_CODES:
            _descr_owner.append(found)
            _descrs[code][w] = <PyObject*> found
        else:
            _other_descrs[key] = found
    return <PyObject*> found


cdef object _build(const interop_core_tensor_info* info, object base):
    cdef Py_ssize_t dims[MAX_NDIM]
    cdef Py_ssize_t strides[MAX_NDIM]
    cdef Py_ssize_t itemsize = 0
    cdef int i
    cdef int nd = info.ndim
    cdef bint empty = False
    cdef PyObject* descr = _descr_for(info, &itemsize)
    for i in range(nd):
        dims[i] = info.shape[i]
        strides[i] = info.strides[i] * itemsize
        empty = empty or dims[i] == 0
    if info.data == NULL and not empty:
        raise BufferError("cannot make a numpy array over a NULL pointer")
    Py_INCREF(<object> descr)               # PyArray_NewFromDescr steals a reference
    cdef PyObject* made = _new_from_descr(
        _ndarray, descr, nd, dims, strides,
        # numpy allocates when handed NULL; an empty array's address is never read.
        info.data if info.data != NULL else <void*> _descrs,
        0 if info.readonly else NPY_ARRAY_WRITEABLE, NULL)
    if made == NULL:
        raise_pending()
    Py_INCREF(base)                         # PyArray_SetBaseObject steals it, also on failure
    if _set_base(made, <PyObject*> base) != 0:
        Py_DECREF(<object> made)
        raise_pending()
    array = <object> made                   # a reference of its own ...
    Py_DECREF(array)                        # ... so drop the one numpy handed over
    return array


cdef int raise_pending() except -1:
    return -1           # hands on the exception numpy set


cdef object export_ndarray(const interop_core_tensor_info* info, object owner, object stream):
    """The compiled exporter (interop_core_exporter_v1): an ndarray whose base is `owner`."""
    global _slow_export
    if not (info.device_type == KDL_CPU or info.device_type == KDL_CUDA_HOST
            or info.device_type == KDL_CUDA_MANAGED or info.device_type == KDL_ROCM_HOST):
        raise BufferError(
            "device memory cannot become a numpy array without a copy (the view is on DLPack "
            f"device {(info.device_type, info.device_id)}); ask for a copy with "
            "interop_core.to(x, 'numpy', device='cpu')")
    if _state == 0:
        _bind()
    if _state > 0:
        return _build(info, owner)
    if _slow_export is None:
        from interop_numpy import export_numpy_slow
        _slow_export = export_numpy_slow
    return _slow_export(_as_view(info, owner), stream)


cdef object _as_view(const interop_core_tensor_info* info, object owner):
    """`owner` itself when it is a view (the description came from it), else a view of `info`
    held by `owner`, for the Python path."""
    from interop_core import StridedMemoryView

    if isinstance(owner, StridedMemoryView):
        return owner
    shape = tuple(info.shape[i] for i in range(info.ndim))
    strides = tuple(info.strides[i] for i in range(info.ndim))
    return StridedMemoryView.from_pointer(
        <size_t> info.data, shape, strides,
        dtype=(info.dtype_code, info.dtype_bits, info.dtype_lanes),
        device=(info.device_type, info.device_id), readonly=info.readonly != 0, owner=owner)


def exporter_capsule():
    """The compiled exporter, as the capsule ``registry.add_exporter(exporter=...)`` takes.

    Returns
    -------
    PyCapsule
        Named ``"interop_core.exporter_v1"`` (``interop_core.h``).
    """
    return PyCapsule_New(<void*> export_ndarray, INTEROP_CORE_EXPORTER_CAPSULE, NULL)


def to_numpy(view, stream=None):
    """A ``numpy.ndarray`` over the memory of ``view`` (same pointer), whose base is ``view``.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
        Of host-accessible memory.
    stream : optional
        Ignored: host memory needs no ordering (``to()`` has already waited where the producer
        needed it, e.g. jax's CPU work).

    Returns
    -------
    numpy.ndarray
        Same pointer, shape, strides and dtype (bfloat16 / float8 through ml_dtypes);
        not writeable when ``view`` is read-only.

    Raises
    ------
    TypeError
        If ``view`` is not a ``StridedMemoryView``, or its type needs ml_dtypes and that is
        not installed.
    BufferError
        For device memory, or element types numpy cannot hold (vector and sub-byte types).
    """
    cdef interop_core_tensor_info info
    if _api.describe_view(<PyObject*> view, &info) != 0:
        raise_pending()
    return export_ndarray(&info, view, stream)


def c_api_status():
    """Whether ``to(x, "numpy")`` builds arrays with numpy's C API, and why.

    Returns
    -------
    tuple or None
        ``(True, how)`` or ``(False, why not)``; ``None`` before the first export.
    """
    if _state == 0:
        return None
    return (_state > 0, _reason)


def _force_python_path(why):
    """Use the Python path (``why`` a str) or bind numpy's C API again (``None``); tests only."""
    global _state, _reason
    if why is None:
        _state = 0
        _reason = None
    else:
        _use_python(str(why))
