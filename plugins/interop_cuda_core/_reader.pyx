# The cuda.core readers: cuda.core's StridedMemoryView and Buffer -> interop_core_tensor_info,
# registered through the public C ABI (interop_core.h) like any third party's reader.
#
# Both read documented public attributes only (a view's ptr, shape, strides, dtype, device_id,
# readonly and __dlpack_device__(); a buffer's handle and size), from C: no undocumented layout is
# assumed, so there is nothing to validate once.  A view without a dtype (cuda.core's
# StridedMemoryView.from_buffer(..., itemsize=n) without dtype=) is declined to the Python
# fallback, read_untyped_view.
#
# Nothing here imports cuda.core.

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.string cimport memcpy

from interop_core.abi cimport (
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["view_reader_capsule", "buffer_reader_capsule", "read_untyped_view"]


cdef enum:
    MAX_NDIM = 64           # the ABI's limit on ndim
    KDL_CPU = 1
    KDL_UINT = 1

# The core's helper table (dtype conversion, pointer attributes), fetched once on import.
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# The extents handed to the core.  The ABI reads `shape` and `strides` only until the core has
# copied them, which it does before running any Python code; the readers fill these after their
# last call that may run Python code, with the GIL held, so no other call can interleave.
cdef int64_t _shape[MAX_NDIM]
cdef int64_t _strides[MAX_NDIM]


cdef int _pending_error() except -1:
    return -1       # hands on the exception the core's helper set


cdef inline uintptr_t _address(object value) except? 0:
    # cuda.core reports addresses as Python ints (a Buffer's handle may be a driver pointer
    # object that converts with int()).
    if type(value) is int:
        return <uintptr_t> <unsigned long long> value
    return <uintptr_t> <unsigned long long> int(value)


cdef int _extents(object obj, object shape_obj, object strides_obj, int64_t* shape,
                  int64_t* strides) except -1:
    """Copy a view's shape and strides (counts; None: C order) into the arrays; returns ndim."""
    cdef Py_ssize_t i, n
    cdef int64_t step = 1
    if type(shape_obj) is not tuple:
        raise BufferError(f"{type(obj).__name__}.shape is {type(shape_obj).__name__}, not a tuple")
    n = len(<tuple> shape_obj)
    if n > MAX_NDIM:
        raise BufferError(f"{type(obj).__name__} has {n} dimensions; at most {MAX_NDIM} can be "
                          "viewed")
    for i in range(n):
        shape[i] = <int64_t> (<tuple> shape_obj)[i]
    if strides_obj is None:
        for i in range(n - 1, -1, -1):
            strides[i] = step
            step *= shape[i] if shape[i] > 0 else 1
    elif type(strides_obj) is not tuple or len(<tuple> strides_obj) != n:
        raise BufferError(f"{type(obj).__name__}.strides {strides_obj!r} does not match its "
                          f"shape {shape_obj!r}")
    else:
        for i in range(n):
            strides[i] = <int64_t> (<tuple> strides_obj)[i]
    return <int> n


cdef int read_view(PyObject* obj_ptr, PyObject* stream,
                   interop_core_tensor_info* out) except -1:
    # `stream` (the consumer's) is not needed: a cuda.core view names no producer stream (it
    # was ordered, or not, when it was made), and ordering is the core's job.
    cdef object obj = <object> obj_ptr
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int n
    cdef int32_t device_type = KDL_CPU, device_id = 0
    try:
        dtype = obj.dtype
    except TypeError:
        # A DLPack type cuda.core cannot name as a numpy dtype (the float8 family in cuda.core
        # 1.2): read_untyped_view decides.
        return INTEROP_CORE_READ_DECLINED
    if dtype is None:
        return INTEROP_CORE_READ_DECLINED       # no element type: read_untyped_view decides
    if _api.dtype_of(<PyObject*> dtype, &out.dtype_code, &out.dtype_bits,
                     &out.dtype_lanes) != 0:
        _pending_error()
    n = _extents(obj, obj.shape, obj.strides, shape, strides)
    ptr = _address(obj.ptr)
    readonly = obj.readonly
    if obj.device_id != -1:
        # Device-accessible memory: CUDA device memory, pinned or managed memory; cuda.core's
        # own DLPack device says which (device_id is -1 exactly for host-only memory).
        device = obj.__dlpack_device__()
        device_type = <int32_t> device[0]
        device_id = <int32_t> device[1]
    # No Python code runs from here on: hand the extents over.
    memcpy(_shape, shape, n * sizeof(int64_t))
    memcpy(_strides, strides, n * sizeof(int64_t))
    out.data = <void*> ptr
    out.ndim = n
    out.shape = _shape
    out.strides = _strides
    out.device_type = device_type
    out.device_id = device_id
    out.readonly = 1 if readonly else 0
    return 0


cdef int read_buffer(PyObject* obj_ptr, PyObject* stream,
                     interop_core_tensor_info* out) except -1:
    # A cuda.core Buffer is `size` bytes at `handle`: a 1-d uint8 view.  Where the memory is
    # (device, pinned, managed, host) is asked of the CUDA driver, as for any raw pointer;
    # without a driver it is host memory.
    cdef object obj = <object> obj_ptr
    cdef uintptr_t ptr = _address(obj.handle)
    cdef object size = obj.size
    if size < 0:
        raise BufferError(f"{type(obj).__name__}.size is {size}")
    _shape[0] = <int64_t> size
    out.data = <void*> ptr
    out.ndim = 1
    out.shape = _shape
    out.strides = NULL              # C order: one element of one byte
    out.dtype_code = KDL_UINT
    out.dtype_bits = 8
    out.dtype_lanes = 1
    out.device_type = KDL_CPU
    out.device_id = 0
    _api.pointer_device(ptr, &out.device_type, &out.device_id)
    return 0


def view_reader_capsule():
    """The reader of cuda.core's ``StridedMemoryView``, as ``registry.add_type(reader=...)``
    takes it (ABI v2).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.reader_v2"``.
    """
    return PyCapsule_New(<void*> read_view, INTEROP_CORE_READER_V2_CAPSULE, NULL)


def buffer_reader_capsule():
    """The reader of cuda.core's ``Buffer`` (ABI v2).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.reader_v2"``.
    """
    return PyCapsule_New(<void*> read_buffer, INTEROP_CORE_READER_V2_CAPSULE, NULL)


def read_untyped_view(obj, stream=None):
    """Read a cuda.core view that has no dtype (``from_buffer(..., itemsize=n)`` without one),
    or one whose type cuda.core cannot name.

    Its elements are viewed as unsigned integers of its itemsize, the only type that names
    ``n`` bytes without claiming what they hold.  A view whose ``dtype`` cuda.core cannot
    give (a float8 type, in cuda.core 1.2) takes the type of the interop-core view it was made
    from (``to(x, "cuda.core")``), which describes the same memory; any other such view is
    refused.

    Parameters
    ----------
    obj : cuda.core.utils.StridedMemoryView
    stream : None or int
        Not needed (see the compiled reader).

    Returns
    -------
    interop_core.StridedMemoryView

    Raises
    ------
    BufferError
        For an itemsize other than 1, 2, 4 or 8 bytes: no unsigned integer type has it.
    """
    from interop_core import StridedMemoryView

    device = None
    if obj.device_id != -1:
        device = tuple(obj.__dlpack_device__())
    try:
        obj.dtype
    except TypeError as exc:
        source = getattr(obj, "exporting_obj", None)
        if isinstance(source, StridedMemoryView) and source.ptr == int(obj.ptr):
            return StridedMemoryView.from_pointer(
                int(obj.ptr), obj.shape, obj.strides, dtype=source.dlpack_dtype,
                device=device, readonly=bool(obj.readonly), owner=obj)
        raise BufferError(
            f"cannot view a cuda.core StridedMemoryView of shape {obj.shape}: cuda.core cannot "
            f"name its element type ({exc}) and it was not made from an interop-core view; "
            "view the object it was made from instead") from None
    itemsize = obj._layout.itemsize
    if itemsize not in (1, 2, 4, 8):
        raise BufferError(
            f"cannot view a cuda.core StridedMemoryView without a dtype whose itemsize is "
            f"{itemsize} bytes: no unsigned integer type has that size; make the view with "
            "dtype=")
    return StridedMemoryView.from_pointer(
        int(obj.ptr), obj.shape, obj.strides, dtype=(KDL_UINT, itemsize * 8, 1), device=device,
        readonly=bool(obj.readonly), owner=obj)
