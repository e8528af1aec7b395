# The numba reader: numba's CUDA device arrays (DeviceNDArray, MappedNDArray, ManagedNDArray)
# -> interop_core_tensor_info, registered through the public C ABI (interop_core.h) like any
# third party's reader.
#
# Why not the CUDA Array Interface?  numba's __cuda_array_interface__ is a Python property that
# builds a dict (and checks contiguity in Python) on every call; reading the same public
# attributes (.shape, .strides, .dtype, .gpu_data, .stream) from C skips all of it.
#
# Safety: what this path assumes (the pointer conversion, the stream field, the attributes
# describing what the interface describes) is validated once per process by the core before the
# reader's first use (registry `prepare=` / `canaries=`): the core reads canary device arrays
# with this reader and with the fallback, the core's CUDA Array Interface reader, and compares
# them field by field; `prepare` compares the producer stream, which that comparison leaves out.
# On any difference the interface serves the rest of the process.
#
# Nothing here imports numba.

import sys

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int64_t, intptr_t, uintptr_t
from libc.string cimport memcpy, memset

from interop_core.abi cimport (
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["reader_capsule", "producer_stream", "canaries", "prepare"]


cdef enum:
    MAX_NDIM = 64           # the ABI's limit on ndim
    KDL_CUDA = 2

# The core's helper table (dtype conversion, pointer attributes), fetched once on import: the
# reader needs it from its first call, whether or not validation ran (a test may pin the result).
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# The extents handed to the core.  The ABI reads `shape` and `strides` only until the core has
# copied them, which it does before running any Python code; the reader fills these after its
# last call that may run Python code, with the GIL held, so no other call can interleave.
cdef int64_t _shape[MAX_NDIM]
cdef int64_t _strides[MAX_NDIM]

# How a device pointer object converts to an int, learnt per pointer type: ctypes pointers
# (c_void_p, c_uint64: .value, None meaning 0) or cuda-bindings' CUdeviceptr (int()).
cdef object _ptr_type = None    # the pointer type last seen (a strong reference to a type)
cdef bint _ptr_has_value = False


cdef uintptr_t _pointer_value(object p) except? 0:
    global _ptr_type, _ptr_has_value
    if type(p) is int:
        return <uintptr_t> <unsigned long long> p
    if type(p) is not _ptr_type:
        _ptr_has_value = hasattr(type(p), "value")
        _ptr_type = type(p)
    if _ptr_has_value:
        v = p.value
        return 0 if v is None else <uintptr_t> <unsigned long long> v
    return <uintptr_t> <unsigned long long> int(p)


cdef int _pending_error() except -1:
    return -1       # hands on the exception the core's helper set


cdef int read_device_array(PyObject* obj_ptr, PyObject* stream,
                           interop_core_tensor_info* out) except -1:
    # `stream` (the consumer's) is not needed: ordering after the producer is the core's job.
    cdef object obj = <object> obj_ptr
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef Py_ssize_t i, n
    cdef int64_t volume = 1
    cdef uintptr_t ptr = 0
    cdef intptr_t handle = 0
    shape_obj = obj.shape
    strides_obj = obj.strides
    dtype = obj.dtype
    if _api.dtype_of(<PyObject*> dtype, &out.dtype_code, &out.dtype_bits,
                     &out.dtype_lanes) != 0:
        _pending_error()
    if type(shape_obj) is not tuple or type(strides_obj) is not tuple:
        raise BufferError(f"{type(obj).__name__}.shape/.strides are not tuples")
    n = len(<tuple> shape_obj)
    if len(<tuple> strides_obj) != n:
        raise BufferError(f"{type(obj).__name__} has {n} extents but {len(strides_obj)} strides")
    if n > MAX_NDIM:
        raise BufferError(f"{type(obj).__name__} has {n} dimensions; at most {MAX_NDIM} can be "
                          "viewed")
    for i in range(n):
        shape[i] = <int64_t> (<tuple> shape_obj)[i]
        volume *= shape[i]
        strides[i] = <int64_t> (<tuple> strides_obj)[i]   # bytes: the core checks the itemsize
    gpu_data = obj.gpu_data     # numba MemoryPointer (or OwnedPointer) at element 0
    if gpu_data is not None:
        ptr = _pointer_value(gpu_data.device_ctypes_pointer)
    if ptr == 0 and volume != 0:
        raise BufferError(f"{type(obj).__name__} has a null pointer but {volume} elements")
    # The CAI's stream field: the array's bound stream, 0 (none bound) meaning no producer stream.
    bound = obj.stream
    if type(bound) is int:
        handle = <intptr_t> <Py_ssize_t> bound
    elif bound is not None:
        handle = <intptr_t> <Py_ssize_t> int(bound)
    # No Python code runs from here on: hand the extents over.
    memcpy(_shape, shape, n * sizeof(int64_t))
    memcpy(_strides, strides, n * sizeof(int64_t))
    out.data = <void*> ptr
    out.ndim = <int> n
    out.shape = _shape
    out.strides = _strides
    out.strides_in_bytes = 1
    out.readonly = 0
    # The CAI names no device: ask the driver (device, mapped pinned host or managed memory, and
    # the ordinal), as the interface's reader does.
    out.device_type = KDL_CUDA
    out.device_id = 0
    _api.pointer_device(ptr, &out.device_type, &out.device_id)
    out.has_producer_stream = handle != 0
    out.producer_stream = handle
    return 0


def reader_capsule():
    """The attribute reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.reader_v2"``.
    """
    return PyCapsule_New(<void*> read_device_array, INTEROP_CORE_READER_V2_CAPSULE, NULL)


def producer_stream(obj):
    """The producer stream of a numba device array: its CAI ``stream`` field.

    Parameters
    ----------
    obj : numba device array

    Returns
    -------
    int or None
        The handle of the stream the array is bound to, ``None`` when none is (stream 0).
    """
    stream = obj.stream
    if stream is None:
        return None
    handle = stream if type(stream) is int else int(stream)
    return handle or None


# --- validation (run once by the core, see interop_core/registry/_validation.py) --------------

cdef bint _simulator(object cuda) except -1:
    # The simulator's arrays are host memory, read by another reader (FakeCUDAArray).
    return bool(getattr(cuda, "simulator_enabled", False)) or (
        "simulator" in getattr(cuda.to_device, "__module__", ""))


def canaries():
    """numba device arrays made like the ones users read, for validation.

    Returns
    -------
    list
        Contiguous, sliced, column, offset, zero-size and 0-d arrays of several dtypes, one bound
        to a stream, and mapped and managed arrays where the platform has them.  Empty when no
        real device array can exist in this process (numba's CUDA not imported, the simulator
        on, or no CUDA device).
    """
    cuda = sys.modules.get("numba.cuda") or sys.modules.get("numba_cuda.numba.cuda")
    if cuda is None or _simulator(cuda) or not cuda.is_available():
        return []
    import numpy as np

    base = cuda.device_array((4, 6), dtype=np.float32)
    out = [base, base[1:, ::2], base[:, 2],
           cuda.device_array(10, dtype=np.complex64)[3:],
           cuda.device_array((3, 5), dtype=np.int16)[:, 1:4],
           cuda.device_array((2, 3), dtype=np.bool_),
           cuda.device_array((0, 3), dtype=np.int8),
           cuda.device_array((), dtype=np.float64),
           cuda.device_array(8, dtype=np.float64, stream=cuda.stream())]
    for make in (cuda.mapped_array, cuda.managed_array):
        try:
            out.append(make(8, dtype=np.float32))
        except Exception:   # a platform without mapped or managed memory: nothing to check
            pass
    return out


def prepare(samples=None):
    """Check the producer stream the reader reports against the CAI's ``stream`` field (once).

    The core then compares everything else (pointer, shape, strides, dtype, device, read-only
    flag) on :func:`canaries`.

    Parameters
    ----------
    samples : iterable, optional
        Device arrays to check (default: :func:`canaries`).

    Returns
    -------
    dict or str
        ``{"stream_fields_checked": n}`` when the reader may be used; otherwise why not.
    """
    cdef interop_core_tensor_info info
    cdef int checked = 0
    for obj in (canaries() if samples is None else samples):
        memset(&info, 0, sizeof(info))
        read_device_array(<PyObject*> obj, NULL, &info)
        got = info.producer_stream if info.has_producer_stream else None
        want = obj.__cuda_array_interface__.get("stream")
        if got != want:
            return (f"{type(obj).__name__} of shape {obj.shape}: producer stream {got} but its "
                    f"__cuda_array_interface__ stream field is {want}")
        checked += 1
    return {"stream_fields_checked": checked}
