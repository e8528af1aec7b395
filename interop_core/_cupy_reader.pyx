# The reader for exact cupy.ndarray objects.  cupy's own __cuda_array_interface__ builds a dict
# (and asks for the current stream) on every call; reading the array's public attributes from C
# is several times cheaper.  cupy 14 publishes no __dlpack_c_exchange_api__, but a later cupy may:
# then the C exchange API is validated and timed against the attribute path, and the faster of
# the two that validates is used.  Nothing here imports cupy: the first object read proves cupy
# is imported, and the validation takes the module from sys.modules.

import sys

from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport int32_t, int64_t, intptr_t, uintptr_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from .cuda._cuda cimport pointer_device
from .protocols._dlpack cimport has_exchange_api, read_dlpack_exchange_api
from .core._dlpack_abi cimport DLDataType, kDLCUDA, kDLCUDAManaged
from .core._dtypes cimport record_set_dtype_of
from .protocols._interfaces cimport read_cuda_array_interface
from .core._record cimport ViewRecord, extents_free, extents_resize, record_difference, record_init
from .registry._registry cimport add_core_reader

__all__ = ["mode", "failure", "validate", "set_mode", "producer_stream", "stream_reader",
           "locate_fields", "MODES"]

cdef enum:
    MODE_UNCHECKED = 0      # the next read validates and chooses
    MODE_ATTRIBUTES = 1     # .data.ptr / .shape / .strides / .dtype read from C
    MODE_EXCHANGE_API = 2   # the type's __dlpack_c_exchange_api__
    MODE_CAI = 3            # cupy's __cuda_array_interface__ (the fallback)
    MODE_FIELDS = 4         # cupy's own struct fields, at offsets located and checked once

MODES = ("unchecked", "attributes", "dlpack_c_exchange_api", "cuda_array_interface", "fields")

cdef int _mode = MODE_UNCHECKED
cdef object _failure = None        # str: why the attribute path was rejected (None: it was not)
cdef object _current_stream = None  # cupy.cuda.get_current_stream, bound once cupy is seen
cdef object _managed_type = None    # cupy.cuda.memory.ManagedMemory: memory of kind "managed"
cdef object _unowned_type = None    # cupy.cuda.memory.UnownedMemory: any memory; ask the driver

# cupy's current stream on a device, read in C: `cupy_backends.cuda.stream.get_stream_ptr`, a
# Cython function cupy exports for its own modules (its capsule's name is its C signature).
# Set only once it agreed with cupy's Python API; NULL means the Python API is asked instead.
ctypedef intptr_t (*stream_ptr_fn)(int device_id) except? -1
cdef stream_ptr_fn _stream_ptr_of = NULL
cdef const char* _STREAM_PTR_SIGNATURE = b"intptr_t (int)"


# --- what both paths below fill in the same way ------------------------------------------------

cdef inline int _set_extent(ViewRecord* rec, Py_ssize_t i, int64_t extent,
                            int64_t stride_bytes) except -1:
    if stride_bytes % rec.itemsize:
        raise BufferError(f"cupy.ndarray stride of {stride_bytes} bytes is not a multiple of its "
                          f"itemsize {rec.itemsize}")
    rec.ext.shape[i] = extent
    rec.ext.strides[i] = stride_bytes // rec.itemsize
    return 0


cdef int _set_memory(ViewRecord* rec, uintptr_t ptr, int32_t device_id,
                     object mem_type) except -1:
    # `mem_type`: the type of the MemoryPointer's `mem` (the allocation behind the array).
    rec.ptr = ptr
    rec.device_type = kDLCUDA
    rec.device_id = device_id
    rec.readonly = False
    if mem_type is _managed_type:
        rec.device_type = kDLCUDAManaged
    elif mem_type is _unowned_type and ptr != 0:
        # Wrapped foreign memory may be pinned host or managed: the driver knows.
        pointer_device(ptr, &rec.device_type, &rec.device_id)
    return 0


# --- the attribute path ------------------------------------------------------------------------

cdef object _read_attributes(object obj, ViewRecord* rec):
    memptr = obj.data           # cupy.cuda.MemoryPointer: ptr is element 0, offset applied
    shape = obj.shape
    strides = obj.strides
    record_set_dtype_of(rec, obj.dtype)
    cdef Py_ssize_t n = len(<tuple> shape)
    if len(<tuple> strides) != n:
        raise BufferError(f"cupy.ndarray has {n} extents but {len(strides)} strides")
    extents_resize(&rec.ext, <int> n)
    cdef Py_ssize_t i
    for i in range(n):
        _set_extent(rec, i, <int64_t> (<tuple> shape)[i], <int64_t> (<tuple> strides)[i])
    _set_memory(rec, <uintptr_t> <unsigned long long> memptr.ptr, memptr.device_id,
                type(memptr.mem))
    return obj


# --- the field path: what the attribute path reads, straight from cupy's structs -------------
#
# cupy.ndarray is a Cython class: its shape and strides are std::vector<Py_ssize_t> fields, its
# dtype and MemoryPointer object fields, and a MemoryPointer holds ptr, device_id and mem.  The
# attribute path pays a Python attribute read for each (and builds the shape and strides tuples).
# The byte offsets of these fields are located once, on canary arrays whose values differ, and
# the whole path is then checked against the attribute path before it is used; any surprise on a
# given array (an unexpected MemoryPointer type, a missing field) sends that array to the
# attribute path.

cdef Py_ssize_t _data_at = -1       # ndarray.data: MemoryPointer*, borrowed from the array
cdef Py_ssize_t _dtype_at = -1      # ndarray.dtype: PyArray_Descr*, borrowed from the array
cdef Py_ssize_t _shape_at = -1      # ndarray._shape: vector (begin, end) of extents
cdef Py_ssize_t _strides_at = -1    # ndarray._strides: vector (begin, end) of byte strides
cdef Py_ssize_t _ptr_at = -1        # MemoryPointer.ptr: intptr_t
cdef Py_ssize_t _device_at = -1     # MemoryPointer.device_id: int
cdef Py_ssize_t _mem_at = -1        # MemoryPointer.mem: BaseMemory*, borrowed from the pointer
cdef PyTypeObject* _memptr_type = NULL   # cupy.cuda.memory.MemoryPointer (kept by cupy)
cdef PyTypeObject* _fields_type = NULL   # the array type the offsets hold for (kept by cupy)


cdef inline void* _word(object obj, Py_ssize_t at) noexcept:
    return (<void**> (<char*> <PyObject*> obj + at))[0]


cdef object _read_fields(object obj, ViewRecord* rec):
    # Only the exact type whose fields were located (a plugin may name this reader for another).
    if <PyTypeObject*> Py_TYPE(obj) != _fields_type:
        return _read_attributes(obj, rec)
    cdef char* array = <char*> <PyObject*> obj
    cdef PyObject* memptr = (<PyObject**> (array + _data_at))[0]
    cdef PyObject* dtype = (<PyObject**> (array + _dtype_at))[0]
    if memptr == NULL or dtype == NULL or <PyTypeObject*> memptr.ob_type != _memptr_type:
        return _read_attributes(obj, rec)
    # The dtype first: no code runs after the vectors' storage is read below.
    record_set_dtype_of(rec, <object> dtype)
    cdef Py_ssize_t* shape = (<Py_ssize_t**> (array + _shape_at))[0]
    cdef Py_ssize_t n = (<Py_ssize_t**> (array + _shape_at + sizeof(void*)))[0] - shape
    cdef Py_ssize_t* strides = (<Py_ssize_t**> (array + _strides_at))[0]
    if (<Py_ssize_t**> (array + _strides_at + sizeof(void*)))[0] - strides != n:
        return _read_attributes(obj, rec)
    extents_resize(&rec.ext, <int> n)
    cdef Py_ssize_t i
    for i in range(n):
        _set_extent(rec, i, shape[i], strides[i])
    cdef char* pointer = <char*> memptr
    cdef PyObject* mem = (<PyObject**> (pointer + _mem_at))[0]
    _set_memory(rec, (<uintptr_t*> (pointer + _ptr_at))[0], (<int*> (pointer + _device_at))[0],
                None if mem == NULL else <object> mem.ob_type)
    return obj


cdef list _offsets_where(list objects, object matches, Py_ssize_t size):
    # Word-aligned offsets past the object header at which `matches(obj, at)` holds for all.
    cdef Py_ssize_t at
    return [at for at in range(sizeof(PyObject), size - sizeof(void*) + 1, sizeof(void*))
            if all(matches(o, at) for o in objects)]


cdef bint _vector_is(object obj, Py_ssize_t at, tuple values):
    cdef Py_ssize_t* begin = <Py_ssize_t*> _word(obj, at)
    cdef Py_ssize_t* end = <Py_ssize_t*> _word(obj, at + sizeof(void*))
    cdef Py_ssize_t i
    if end - begin != len(values) or (begin == NULL and len(values) != 0):
        return False
    for i in range(len(values)):
        if begin[i] != values[i]:
            return False
    return True


cdef str _locate(list arrays):
    """Find the field offsets from ``arrays`` (cupy.ndarray objects); None or what failed."""
    global _data_at, _dtype_at, _shape_at, _strides_at, _ptr_at, _device_at, _mem_at
    global _memptr_type, _fields_type
    _data_at = _dtype_at = _shape_at = _strides_at = _ptr_at = _device_at = _mem_at = -1
    _memptr_type = _fields_type = NULL
    if len(arrays) < 3:
        return "too few canary arrays to locate cupy's fields"
    array_type = type(arrays[0])
    pointers = [a.data for a in arrays]
    pointer_type = type(pointers[0])
    if any(type(a) is not array_type for a in arrays) or any(
            type(p) is not pointer_type for p in pointers):
        return "canary arrays of mixed types"
    cdef Py_ssize_t array_size = array_type.__basicsize__
    cdef Py_ssize_t pointer_size = pointer_type.__basicsize__
    found = {
        "data": _offsets_where(arrays, lambda a, at: _word(a, at) == <void*> a.data, array_size),
        "dtype": _offsets_where(arrays, lambda a, at: _word(a, at) == <void*> a.dtype,
                                array_size),
        "shape": _offsets_where(arrays, lambda a, at: _vector_is(a, at, a.shape), array_size),
        "strides": _offsets_where(arrays, lambda a, at: _vector_is(a, at, a.strides),
                                  array_size),
        "ptr": _offsets_where(pointers, lambda p, at: <uintptr_t> _word(p, at)
                              == <uintptr_t> <unsigned long long> p.ptr, pointer_size),
        "mem": _offsets_where(pointers, lambda p, at: _word(p, at) == <void*> p.mem,
                              pointer_size),
    }
    for name, offsets in found.items():
        if len(offsets) != 1:
            return f"cupy's {name} field: {len(offsets)} candidate offsets"
    # device_id is a C int, declared between ptr and mem: that slot must hold every canary's.
    cdef Py_ssize_t device_at = found["ptr"][0] + sizeof(void*)
    if device_at + sizeof(int) > found["mem"][0] or any(
            (<int*> (<char*> <PyObject*> p + device_at))[0] != p.device_id for p in pointers):
        return "cupy's MemoryPointer.device_id is not where its declaration puts it"
    if len({p.device_id for p in pointers}) < 2:
        return "the canaries must span two device ids to check MemoryPointer.device_id"
    _data_at, _dtype_at = found["data"][0], found["dtype"][0]
    _shape_at, _strides_at = found["shape"][0], found["strides"][0]
    _ptr_at, _mem_at, _device_at = found["ptr"][0], found["mem"][0], device_at
    _memptr_type = <PyTypeObject*> pointer_type
    _fields_type = <PyTypeObject*> array_type
    return None


cdef intptr_t _current_stream_on(int device_id) except? -1:
    # cupy's current stream on `device_id`; ptr 0 is the legacy default stream, which is what
    # cupy launches on then, so it is reported as handle 0 rather than as "none".
    if _stream_ptr_of != NULL:
        return _stream_ptr_of(device_id)
    if _current_stream is None:
        _bind_cupy()
    return <intptr_t> <Py_ssize_t> _current_stream(device_id).ptr


cdef object read_cupy(object obj, object stream, ViewRecord* rec):
    if _mode == MODE_FIELDS or _mode == MODE_ATTRIBUTES:
        keepalive = (_read_fields(obj, rec) if _mode == MODE_FIELDS
                     else _read_attributes(obj, rec))
        # The stream current now is part of what the view says (exports carry it, a later
        # sync() orders after it).  Without the C read, the plugin's strategy is asked when
        # ordering needs it rather than paying cupy's Python API on every view.
        if _stream_ptr_of != NULL:
            rec.producer_stream = _stream_ptr_of(rec.device_id)
            rec.has_producer_stream = True
        return keepalive
    if _mode == MODE_EXCHANGE_API:
        return read_dlpack_exchange_api(obj, stream, rec)
    if _mode == MODE_CAI:
        return read_cuda_array_interface(obj, stream, rec)
    _choose(type(obj))
    return read_cupy(obj, stream, rec)


add_core_reader("cupy", read_cupy)


# --- validation (once per process) -------------------------------------------------------------

cdef object _bind_cupy():
    global _current_stream, _managed_type, _unowned_type
    cupy = sys.modules.get("cupy")
    if cupy is None:
        raise RuntimeError("cupy is not imported")
    _current_stream = cupy.cuda.get_current_stream
    memory = cupy.cuda.memory
    _managed_type = getattr(memory, "ManagedMemory", None)
    _unowned_type = getattr(memory, "UnownedMemory", None)
    return cupy


cdef str _check_path(int path, object sample, str what):
    cdef ViewRecord got
    cdef ViewRecord want
    record_init(&got)
    record_init(&want)
    try:
        read_cuda_array_interface(sample, None, &want)
        if path == MODE_ATTRIBUTES:
            _read_attributes(sample, &got)
        elif path == MODE_FIELDS:
            _read_fields(sample, &got)
        else:
            keep = read_dlpack_exchange_api(sample, None, &got)  # noqa: F841 (holds the tensor)
        problem = record_difference(&got, &want, what, False)
        if problem is None and path != MODE_EXCHANGE_API:
            # The Python API, too: the pointer and device cupy itself reports.
            if sample.size and got.ptr != <uintptr_t> <unsigned long long> sample.data.ptr:
                problem = f"{what}: ptr differs from .data.ptr"
            elif got.device_id != sample.device.id:
                problem = f"{what}: device differs from .device.id"
        return problem
    finally:
        extents_free(&got.ext)
        extents_free(&want.ext)


cdef list _canaries(cupy):
    base = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
    return [
        ("contiguous", base),
        ("sliced", base[1:, ::2]),
        ("transposed", base.T),
        ("negative strides", base[::-1, 1:]),
        ("offset", cupy.arange(10, dtype=cupy.complex64)[3:]),
        ("int16", cupy.zeros((3, 5), dtype=cupy.int16)[:, 1:4]),
        ("bool", cupy.ones((5,), dtype=cupy.bool_)[::2]),
        ("zero-size", cupy.zeros((0, 3), dtype=cupy.int8)),
        ("0-d", base[2, 3]),
        ("4-d", cupy.zeros((2, 3, 4, 5), dtype=cupy.float64).transpose(3, 1, 0, 2)),
    ]


cdef double _time_path(int path, object sample):
    # Best of a few short batches: enough to rank two paths that differ by tens of ns.
    cdef ViewRecord rec
    cdef timespec start, end
    cdef double best = 1e300, elapsed
    cdef int rounds, i
    record_init(&rec)
    try:
        for rounds in range(5):
            clock_gettime(CLOCK_MONOTONIC, &start)
            for i in range(200):
                if path == MODE_ATTRIBUTES:
                    _read_attributes(sample, &rec)
                elif path == MODE_FIELDS:
                    _read_fields(sample, &rec)
                else:
                    read_dlpack_exchange_api(sample, None, &rec)
            clock_gettime(CLOCK_MONOTONIC, &end)
            elapsed = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)
            if elapsed < best:
                best = elapsed
    finally:
        extents_free(&rec.ext)
    return best / 200


cdef int _check_stream_reader(object cupy) except -1:
    """Read cupy's current stream in C from now on, if cupy exports the function and it agrees
    with cupy's Python API on the default stream and inside ``with stream:``."""
    global _stream_ptr_of
    _stream_ptr_of = NULL
    backend = sys.modules.get("cupy_backends.cuda.stream")
    capsule = getattr(backend, "__pyx_capi__", {}).get("get_stream_ptr")
    if capsule is None or not PyCapsule_IsValid(capsule, _STREAM_PTR_SIGNATURE):
        return 0
    cdef stream_ptr_fn candidate = <stream_ptr_fn> PyCapsule_GetPointer(
        capsule, _STREAM_PTR_SIGNATURE)
    device_id = cupy.cuda.Device().id
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        if candidate(device_id) != cupy.cuda.get_current_stream(device_id).ptr:
            return 0
    if candidate(device_id) != cupy.cuda.get_current_stream(device_id).ptr:
        return 0
    _stream_ptr_of = candidate
    return 0


cdef str _fields_check(object cupy, list samples):
    """Locate cupy's fields and check the field path on every canary; None when usable."""
    arrays = [sample for _, sample in samples]
    # Metadata-only arrays claiming other devices (never touched): device ids must differ.
    base = arrays[0]
    device_id = base.data.device_id
    for other in (device_id + 1, device_id + 2):
        memory = cupy.cuda.UnownedMemory(base.data.ptr, base.nbytes, base, device_id=other)
        arrays.append(cupy.ndarray(base.shape, base.dtype, cupy.cuda.MemoryPointer(memory, 0),
                                   base.strides))
    problem = _locate(arrays)
    for what, sample in samples:
        if problem is not None:
            break
        problem = _check_path(MODE_FIELDS, sample, what)
    if problem is not None:
        _locate([])         # forget the offsets
    return problem


cdef int _choose(type t) except -1:
    global _mode, _failure
    try:
        cupy = _bind_cupy()
        try:
            _check_stream_reader(cupy)
        except Exception:
            pass            # the Python API stays in use; nothing else depends on it
        samples = _canaries(cupy)
        problem = None
        for what, sample in samples:
            problem = _check_path(MODE_ATTRIBUTES, sample, what)
            if problem is not None:
                break
    except Exception as exc:
        samples = None
        problem = f"validation raised {type(exc).__name__}: {exc}"
    chosen = MODE_ATTRIBUTES if problem is None else MODE_CAI
    _failure = problem
    if chosen == MODE_ATTRIBUTES:
        try:
            if _fields_check(cupy, samples) is None:
                chosen = MODE_FIELDS
        except Exception:
            pass            # the attribute path stays in use
    if samples is not None and has_exchange_api(t):
        try:
            for what, sample in samples:
                if _check_path(MODE_EXCHANGE_API, sample, what) is not None:
                    break
            else:
                if (chosen == MODE_CAI or _time_path(MODE_EXCHANGE_API, samples[0][1])
                        < _time_path(chosen, samples[0][1])):
                    chosen = MODE_EXCHANGE_API
        except Exception:
            pass
    _mode = chosen
    return 0


# --- Python API (tests, diagnostics) -----------------------------------------------------------

def mode():
    """The path the cupy reader uses in this process.

    Returns
    -------
    str
        One of :data:`MODES`: ``"unchecked"`` until the first cupy array is read, then
        ``"fields"`` (cupy's struct fields read at located offsets), ``"attributes"`` (its
        Python attributes read from C), ``"dlpack_c_exchange_api"`` or
        ``"cuda_array_interface"`` (the fallback when the faster paths did not validate).
    """
    return MODES[_mode]


def failure():
    """Why the attribute path was rejected, or ``None`` when it validated (or is unchecked).

    Returns
    -------
    str or None
    """
    return _failure


def validate(type t=None):
    """Validate the fast paths now (normally done by the first read) and choose one.

    Parameters
    ----------
    t : type, optional
        The array type, to look for a DLPack C exchange API (``cupy.ndarray`` by default).

    Returns
    -------
    str
        The chosen mode (see :func:`mode`).
    """
    if t is None:
        cupy = sys.modules.get("cupy")
        if cupy is None:
            raise RuntimeError("cupy is not imported")
        t = cupy.ndarray
    _choose(t)
    return MODES[_mode]


def locate_fields(arrays):
    """Locate cupy's struct fields from ``arrays`` for the ``"fields"`` path (normally done by
    the first read's validation, on canaries it makes itself).

    Parameters
    ----------
    arrays : list of cupy.ndarray
        At least three arrays of one type whose pointers, shapes, strides, dtypes and devices
        differ (device ids: at least two).

    Returns
    -------
    str or None
        Why the fields could not be located, or None when they were.
    """
    _bind_cupy()
    return _locate(list(arrays))


def set_mode(str name):
    """Force the path (for tests that simulate a failed validation); ``"unchecked"`` resets.

    Parameters
    ----------
    name : str
        One of :data:`MODES`; ``"fields"`` only once the fields were located.
    """
    global _mode, _failure
    if name not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {name!r}")
    if name == "fields" and _memptr_type == NULL:
        raise ValueError("the fields path needs cupy's fields located first (locate_fields)")
    _mode = MODES.index(name)
    _failure = None


def producer_stream(obj):
    """cupy's current stream on the device of ``obj`` (a cupy array), as a CUstream handle.

    Parameters
    ----------
    obj : cupy.ndarray

    Returns
    -------
    int
        ``0`` is the legacy default stream (cupy's default when no stream is current).
    """
    return _current_stream_on(obj.data.device_id)


def stream_reader():
    """How views of cupy arrays learn cupy's current stream.

    Returns
    -------
    str
        ``"c_api"``: read in C (cupy's exported ``get_stream_ptr``) as every view is made;
        ``"python"``: ``cupy.cuda.get_current_stream()`` is asked when ordering needs it (the
        C function is missing, disagreed with cupy, or no array was read yet).
    """
    return "c_api" if _stream_ptr_of != NULL else "python"
