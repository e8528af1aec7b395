# The cupy exporter, compiled: a description of CUDA memory -> cupy.ndarray over it.
#
# cupy builds an array over foreign memory from three public constructors: UnownedMemory(ptr,
# size, owner, device_id) (holding the owner), MemoryPointer(memory, offset) and ndarray(shape,
# dtype, memptr, strides) -- what cupy.asarray does with a __cuda_array_interface__.  Those cost
# what they cost (~1.7 us, most of it ndarray.__init__); the exporter around them was Python
# (an import, a dozen attribute reads, the byte span in a Python loop, tuples built from the
# view's properties: ~1.8 us more on the development VM).  Here the span and the tuples are
# computed in C from the record, cupy's classes and the dtype of each element type are looked
# up once, and the constructors are called directly.
#
# It is registered as a compiled exporter (interop_core.h, INTEROP_CORE_EXPORTER_CAPSULE): to()
# hands it the source reader's description and keep-alive (a jax array, a torch tensor, ...),
# which the UnownedMemory holds, without making a view object.  Called on a view, the view is
# the owner.  Loading this module imports no cupy: the first export does.

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uintptr_t

from interop_core.abi cimport (
    INTEROP_CORE_EXPORTER_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["to_cupy", "exporter_capsule"]

cdef enum:
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_CUDA_HOST = 3
    KDL_CUDA_MANAGED = 13

# The core's helper table (describe_view), fetched once on import.
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# cupy's handles, looked up on the first export (cupy's modules own them too).
cdef bint _bound = False
cdef object _unowned_memory = None    # cupy.cuda.UnownedMemory
cdef object _memory_pointer = None    # cupy.cuda.MemoryPointer
cdef object _ndarray = None           # cupy.ndarray
cdef object _from_dlpack = None       # cupy.from_dlpack (element types the constructor lacks)
cdef object _plugin = None            # the interop_cupy module (its EXPORT_PATH switch)

# (code, bits, lanes) -> the numpy dtype cupy's constructor takes, or None (cupy.from_dlpack).
# Owned here; the last one found is remembered by its triple, so a repeat costs no lookup.
cdef dict _dtypes = {}
cdef object _last_dtype = None        # owned (also held by _dtypes)
cdef int _last_code = -1, _last_bits = -1, _last_lanes = -1


cdef int _bind() except -1:
    global _bound, _unowned_memory, _memory_pointer, _ndarray, _from_dlpack, _plugin
    import cupy
    import interop_cupy

    _unowned_memory = cupy.cuda.UnownedMemory
    _memory_pointer = cupy.cuda.MemoryPointer
    _ndarray = cupy.ndarray
    _from_dlpack = cupy.from_dlpack
    _plugin = interop_cupy
    _bound = True
    return 0


cdef object _dtype_for(const interop_core_tensor_info* info):
    """The dtype cupy's ndarray constructor takes for the element type, or None."""
    global _last_dtype, _last_code, _last_bits, _last_lanes
    if (info.dtype_code == _last_code and info.dtype_bits == _last_bits
            and info.dtype_lanes == _last_lanes):
        return _last_dtype
    key = (info.dtype_code, info.dtype_bits, info.dtype_lanes)
    if key in _dtypes:
        found = _dtypes[key]
    else:
        from interop_core import StridedMemoryView

        try:
            # The core's dtype table, through an empty view of that type.
            found = StridedMemoryView.from_pointer(0, (0,), dtype=key).dtype
        except TypeError:
            found = None         # no numpy dtype (vector types, ml_dtypes missing)
        if found is not None and found.kind not in "biufc":
            found = None         # bfloat16, float8, ...: cupy's constructor refuses them
        _dtypes[key] = found
    _last_dtype = found
    _last_code = info.dtype_code
    _last_bits = info.dtype_bits
    _last_lanes = info.dtype_lanes
    return found


cdef object export_cupy_array(const interop_core_tensor_info* info, object owner,
                              object stream):
    """The compiled exporter (interop_core_exporter_v1): a cupy.ndarray holding `owner`."""
    cdef int i, nd = info.ndim
    cdef int64_t itemsize, extent, step, reach, span, low = 0, high = 0
    cdef bint empty = False
    cdef object item        # a Python int: each goes into a tuple with a reference of its own
    if not (info.device_type == KDL_CUDA or info.device_type == KDL_CUDA_HOST
            or info.device_type == KDL_CUDA_MANAGED):
        raise BufferError(
            f"cannot hand {'host' if info.device_type == KDL_CPU else 'non-CUDA'} memory to "
            f"cupy without a copy (device type {info.device_type}); cupy arrays hold CUDA "
            "memory: copy it with cupy.asarray(...) instead")
    if not _bound:
        _bind()
    dtype = _dtype_for(info)
    if dtype is None or _plugin.EXPORT_PATH != "memory":
        return _through_dlpack(info, owner)
    itemsize = dtype.itemsize
    shape = PyTuple_New(nd)
    strides = PyTuple_New(nd)
    for i in range(nd):
        extent = info.shape[i]
        step = info.strides[i] * itemsize
        empty = empty or extent == 0
        # The bytes the array spans around element 0 (strides may be negative).
        reach = (extent - 1) * step if extent > 0 else 0
        if reach < 0:
            low += reach
        else:
            high += reach
        item = extent
        Py_INCREF(item)                    # PyTuple_SET_ITEM steals a reference
        PyTuple_SET_ITEM(shape, i, item)
        item = step
        Py_INCREF(item)
        PyTuple_SET_ITEM(strides, i, item)
    if empty:
        low = high = 0
        span = 0
    else:
        span = high - low + itemsize
    memory = _unowned_memory(<uintptr_t> info.data + low, span, owner, info.device_id)
    pointer = _memory_pointer(memory, -low)
    return _ndarray(shape, dtype, pointer, strides)


cdef object _through_dlpack(const interop_core_tensor_info* info, object owner):
    from interop_core import StridedMemoryView

    if isinstance(owner, StridedMemoryView):
        view = owner
    else:
        view = StridedMemoryView.from_pointer(
            <uintptr_t> info.data, tuple(info.shape[i] for i in range(info.ndim)),
            tuple(info.strides[i] for i in range(info.ndim)),
            dtype=(info.dtype_code, info.dtype_bits, info.dtype_lanes),
            device=(info.device_type, info.device_id), readonly=info.readonly != 0,
            owner=owner)
    try:
        return _from_dlpack(view)
    except Exception as exc:
        raise BufferError(f"cupy cannot take this view ({view.dlpack_dtype} on device "
                          f"{view.device_type}): {exc}") from exc


def exporter_capsule():
    """The compiled exporter, as the capsule ``registry.add_exporter(exporter=...)`` takes.

    Returns
    -------
    PyCapsule
        Named ``"interop_core.exporter_v1"`` (``interop_core.h``).
    """
    return PyCapsule_New(<void*> export_cupy_array, INTEROP_CORE_EXPORTER_CAPSULE, NULL)


def to_cupy(view, stream=None):
    """A ``cupy.ndarray`` over the device memory of ``view`` (same pointer), holding ``view``.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
        Of CUDA device, pinned host or managed memory.
    stream : optional
        The consumer stream (ordering was done by :func:`interop_core.view`).

    Returns
    -------
    cupy.ndarray

    Raises
    ------
    TypeError
        If ``view`` is not a ``StridedMemoryView``.
    BufferError
        For host memory, or an element type cupy has no type for.
    """
    cdef interop_core_tensor_info info
    if _api.describe_view(<PyObject*> view, &info) != 0:
        raise_pending()
    return export_cupy_array(&info, view, stream)


cdef int raise_pending() except -1:
    return -1           # hands on the exception the core's helper set
