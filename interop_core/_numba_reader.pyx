# The readers for numba's CUDA arrays.  numba's __cuda_array_interface__ is a Python property
# that builds a dict (and checks contiguity in Python) on every call; reading the same public
# attributes from C skips all of it.  What the attribute path assumes (the pointer conversion, the
# stream field) is validated once per process against __cuda_array_interface__ on the first
# array read and on canaries made like it; if anything differs the reader uses the interface.
# Nothing here imports numba.

import sys

from libc.stdint cimport int32_t, int64_t, intptr_t, uintptr_t

from .cuda._cuda cimport pointer_device
from .core._dlpack_abi cimport DLDataType, kDLCUDA
from .core._dtypes cimport record_set_dtype_of
from .protocols._interfaces cimport read_array_interface, read_cuda_array_interface
from .core._record cimport ViewRecord, extents_free, extents_resize, record_difference, record_init
from .registry._registry cimport add_core_reader

__all__ = ["mode", "failure", "validate", "set_mode", "producer_stream", "MODES"]

cdef enum:
    MODE_UNCHECKED = 0      # the next read validates and chooses
    MODE_ATTRIBUTES = 1     # .shape / .strides / .dtype / .gpu_data / .stream read from C
    MODE_CAI = 2            # numba's __cuda_array_interface__ (the fallback)

MODES = ("unchecked", "attributes", "cuda_array_interface")

cdef int _mode = MODE_UNCHECKED
cdef object _failure = None     # str: why the attribute path was rejected (None: it was not)

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


# --- dtype: numba stores numpy dtypes; builtin ones are singletons, so a few identity slots in
# front of the table's lookup skip hashing a dtype on every call. -----------------------------

# --- the attribute path ------------------------------------------------------------------------

cdef object _read_attributes(object obj, ViewRecord* rec):
    shape = obj.shape
    strides = obj.strides
    record_set_dtype_of(rec, obj.dtype)
    if type(shape) is not tuple or type(strides) is not tuple:
        raise BufferError(f"{type(obj).__name__}.shape/.strides are not tuples")
    cdef Py_ssize_t n = len(<tuple> shape)
    if len(<tuple> strides) != n:
        raise BufferError(f"{type(obj).__name__} has {n} extents but {len(strides)} strides")
    extents_resize(&rec.ext, <int> n)
    cdef Py_ssize_t i
    cdef int64_t itemsize = rec.itemsize
    cdef int64_t s
    cdef int64_t volume = 1
    for i in range(n):
        rec.ext.shape[i] = <int64_t> (<tuple> shape)[i]
        volume *= rec.ext.shape[i]
        s = <int64_t> (<tuple> strides)[i]
        if s % itemsize:
            raise BufferError(
                f"{type(obj).__name__} stride of {s} bytes is not a multiple of its itemsize "
                f"{itemsize}")
        rec.ext.strides[i] = s // itemsize
    gpu_data = obj.gpu_data     # numba MemoryPointer (or OwnedPointer) at element 0
    cdef uintptr_t ptr = 0
    if gpu_data is not None:
        ptr = _pointer_value(gpu_data.device_ctypes_pointer)
    if ptr == 0 and volume != 0:
        raise BufferError(f"{type(obj).__name__} has a null pointer but {volume} elements")
    rec.ptr = ptr
    rec.readonly = False
    # The CAI names no device; like the generic reader, ask the driver (device, mapped pinned
    # host or managed memory, and the ordinal).
    rec.device_type = kDLCUDA
    rec.device_id = 0
    pointer_device(ptr, &rec.device_type, &rec.device_id)
    # The CAI's stream field: the array's bound stream, 0 (none bound) meaning no producer stream.
    stream = obj.stream
    cdef intptr_t handle = 0
    if type(stream) is int:
        handle = <intptr_t> <Py_ssize_t> stream
    elif stream is not None:
        handle = <intptr_t> <Py_ssize_t> int(stream)
    rec.has_producer_stream = handle != 0
    rec.producer_stream = handle
    return obj


cdef object read_numba(object obj, object stream, ViewRecord* rec):
    if _mode == MODE_ATTRIBUTES:
        return _read_attributes(obj, rec)
    if _mode == MODE_CAI:
        return read_cuda_array_interface(obj, stream, rec)
    _choose(obj)
    return read_numba(obj, stream, rec)


cdef object read_numba_simulator(object obj, object stream, ViewRecord* rec):
    # The simulator's "device" arrays are numpy arrays in host memory: view them as such.
    try:
        ary = obj._ary
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} wraps no array (._ary)") from None
    return read_array_interface(ary, rec)


add_core_reader("numba", read_numba)
add_core_reader("numba_simulator", read_numba_simulator)


# --- validation (once per process) -------------------------------------------------------------

cdef str _check(object sample, str what):
    cdef ViewRecord got
    cdef ViewRecord want
    record_init(&got)
    record_init(&want)
    try:
        read_cuda_array_interface(sample, None, &want)
        _read_attributes(sample, &got)
        return record_difference(&got, &want, what, True)
    finally:
        extents_free(&got.ext)
        extents_free(&want.ext)


cdef list _canaries(object first):
    samples = [("first array", first)]
    cuda = sys.modules.get("numba.cuda")
    if cuda is None:
        return samples
    np = sys.modules["numpy"]
    try:
        base = cuda.device_array((4, 6), dtype=np.float32)
    except Exception:
        # No context to allocate in (an object that only looks like a device array): the first
        # array alone is checked.
        return samples
    samples += [
        ("contiguous", base),
        ("sliced", base[1:, ::2]),
        ("column", base[:, 2]),
        ("offset", cuda.device_array(10, dtype=np.complex64)[3:]),
        ("int16", cuda.device_array((3, 5), dtype=np.int16)[:, 1:4]),
        ("zero-size", cuda.device_array((0, 3), dtype=np.int8)),
        ("on a stream", cuda.device_array(8, dtype=np.float64, stream=cuda.stream())),
    ]
    return samples


cdef int _choose(object first) except -1:
    global _mode, _failure
    problem = None
    try:
        for what, sample in _canaries(first):
            problem = _check(sample, what)
            if problem is not None:
                break
    except Exception as exc:
        problem = f"validation raised {type(exc).__name__}: {exc}"
    _failure = problem
    _mode = MODE_ATTRIBUTES if problem is None else MODE_CAI
    return 0


# --- Python API (tests, diagnostics) -----------------------------------------------------------

def mode():
    """The path the numba reader uses in this process.

    Returns
    -------
    str
        One of :data:`MODES`: ``"unchecked"`` until the first device array is read, then
        ``"attributes"`` or ``"cuda_array_interface"`` (the fallback when the attribute path did
        not validate).
    """
    return MODES[_mode]


def failure():
    """Why the attribute path was rejected, or ``None`` when it validated (or is unchecked).

    Returns
    -------
    str or None
    """
    return _failure


def validate(first):
    """Validate the attribute path now on ``first`` and canaries (normally the first read does).

    Parameters
    ----------
    first : numba device array

    Returns
    -------
    str
        The chosen mode (see :func:`mode`).
    """
    _choose(first)
    return MODES[_mode]


def set_mode(str name):
    """Force the path (for tests that simulate a failed validation); ``"unchecked"`` resets.

    Parameters
    ----------
    name : str
        One of :data:`MODES`.
    """
    global _mode, _failure
    if name not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {name!r}")
    _mode = MODES.index(name)
    _failure = None


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
