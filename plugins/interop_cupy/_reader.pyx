# The cupy readers: exact cupy.ndarray -> interop_core_tensor_info, registered through the
# public C ABI (interop_core.h, version 2) exactly as a third party's would be.  Nothing of the
# core is used but that ABI and its helper table.
#
# cupy's own __cuda_array_interface__ builds a dict (and asks for the current stream) on every
# call.  Two readers here do what it does, several times faster, as a chain of fallbacks:
#
# 1. read_fields, the registered reader.  cupy.ndarray is a Cython class: its shape and strides
#    are std::vector<Py_ssize_t> fields, its dtype and MemoryPointer object fields, and a
#    MemoryPointer holds ptr, device_id and mem.  prepare() locates the byte offsets of these
#    fields once per process, on canary arrays whose values all differ, without following any
#    pointer it is not sure of; the core then reads every canary with this reader and with
#    read_attributes and compares (registry `prepare=` / `canaries=`).  Anything unexpected on
#    a given object (another type, another MemoryPointer type) is declined, so read_attributes
#    reads it.
# 2. read_attributes, its fallback, and its replacement for the process when the fields cannot
#    be located or read differently: cupy's documented attributes (.data.ptr, .data.device_id,
#    .data.mem, .shape, .strides, .dtype) read from C.  Objects without them are declined.
# 3. The core's reader of cupy's own __cuda_array_interface__ reads what read_attributes
#    declines (the plugin registers it by name).
#
# Both readers report strides in bytes, as cupy keeps them (the core divides them by the
# itemsize), and cupy's current stream on the array's device when cupy's exported C function
# for it agreed with cupy's Python API (checked by prepare()).  Nothing here imports cupy: an
# array being read proves cupy is imported, and cupy is taken from sys.modules.

import sys

from cpython.exc cimport PyErr_Clear, PyErr_ExceptionMatches
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from libc.stdint cimport int32_t, int64_t, intptr_t, uint8_t, uint16_t, uintptr_t

from interop_core.abi cimport (
    INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE,
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["fields_reader_capsule", "attributes_reader_capsule", "equivalence_check_capsule",
           "producer_stream", "prepare", "canaries"]

cdef enum:
    KDL_CUDA = 2            # DLPack device types
    KDL_CUDA_MANAGED = 13
    MAX_NDIM = 64           # the most dimensions the core takes (and cupy makes)

# The core's helper table (dtype conversion, pointer attributes from the driver).  The plugin's
# registration hook imports this module, so interop_core is imported by then.
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))


# --- cupy, bound once an array is seen ---------------------------------------------------------

cdef bint _bound = False
# Devices this process has: a stream can be asked only of a real device (validation's
# metadata-only canaries claim device ids a one-GPU machine does not have).
cdef int _device_count = 0
cdef object _current_stream = None      # cupy.cuda.get_current_stream
cdef object _memory_types = ()          # owns the two types below (cupy keeps them too)
cdef PyTypeObject* _managed_type = NULL  # cupy.cuda.memory.ManagedMemory: memory of kind "managed"
cdef PyTypeObject* _unowned_type = NULL  # cupy.cuda.memory.UnownedMemory: any memory; ask the driver

# cupy's current stream on a device, read in C: `cupy_backends.cuda.stream.get_stream_ptr`, a
# Cython function cupy exports for its own modules (its capsule's name is its C signature).
# Set only once it agreed with cupy's Python API (prepare()); NULL: the Python API is asked,
# when ordering needs it, through producer_stream().
ctypedef intptr_t (*stream_ptr_fn)(int device_id) except? -1
cdef stream_ptr_fn _stream_ptr_of = NULL
cdef const char* _STREAM_PTR_SIGNATURE = b"intptr_t (int)"


cdef object _bind_cupy():
    global _bound, _current_stream, _memory_types, _managed_type, _unowned_type, _device_count
    cupy = sys.modules.get("cupy")
    if cupy is None:
        raise RuntimeError("cupy is not imported")
    try:
        _device_count = cupy.cuda.runtime.getDeviceCount()
    except RuntimeError:     # cupy's CUDARuntimeError: no driver or no device here
        _device_count = 0
    _current_stream = cupy.cuda.get_current_stream
    memory = cupy.cuda.memory
    managed = getattr(memory, "ManagedMemory", None)
    unowned = getattr(memory, "UnownedMemory", None)
    _memory_types = (managed, unowned)
    _managed_type = <PyTypeObject*> managed if isinstance(managed, type) else NULL
    _unowned_type = <PyTypeObject*> unowned if isinstance(unowned, type) else NULL
    _bound = True
    return cupy


# --- what both readers fill in the same way ----------------------------------------------------

# The last dtype converted and its DLPack triple: arrays read one after another mostly share
# their dtype, and a pointer comparison is cheaper than the call into the core's cache.
cdef object _last_dtype = None          # owns the dtype object, so its address is never reused
cdef uint8_t _last_code = 0
cdef uint8_t _last_bits = 0
cdef uint16_t _last_lanes = 0


cdef inline int _set_dtype(PyObject* dtype, interop_core_tensor_info* out) except -1:
    # The core's conversion (cached by the dtype object's identity).  It may run Python code
    # the first time it sees a dtype, so readers call this before reading what they hand on.
    # 1: a dtype with no DLPack type (structured): the reader declines, and the CUDA Array
    # Interface at the end of the chain reads its typestr ("|Vn", opaque bytes).
    global _last_dtype, _last_code, _last_bits, _last_lanes
    cdef uint8_t code, bits
    cdef uint16_t lanes
    if dtype != <PyObject*> _last_dtype:
        held = <object> dtype       # a reference of our own while Python code may run
        if _api.dtype_of(dtype, &code, &bits, &lanes):
            if PyErr_ExceptionMatches(TypeError):
                PyErr_Clear()
                return 1
            return -1       # hands on the exception the core's helper set
        _last_code, _last_bits, _last_lanes = code, bits, lanes
        _last_dtype = held
    out.dtype_code = _last_code
    out.dtype_bits = _last_bits
    out.dtype_lanes = _last_lanes
    return 0


cdef inline int _set_memory(interop_core_tensor_info* out, uintptr_t ptr, int device_id,
                     PyTypeObject* mem_type) except -1:
    # `mem_type`: the type of the MemoryPointer's `mem` (the allocation behind the array), or
    # NULL when it has none.
    if not _bound:
        _bind_cupy()
    out.data = <void*> ptr
    out.device_type = KDL_CUDA
    out.device_id = device_id
    out.readonly = 0
    if mem_type == NULL:
        pass
    elif mem_type == _managed_type:
        out.device_type = KDL_CUDA_MANAGED
    elif mem_type == _unowned_type and ptr != 0:
        # Wrapped foreign memory may be pinned host or managed: the driver knows.
        _api.pointer_device(ptr, &out.device_type, &out.device_id)
    return 0


cdef inline int _set_stream(interop_core_tensor_info* out) except -1:
    # The stream current now is part of what the view says (exports carry it, a later sync()
    # orders after it).  Without the C read, the plugin's producer_stream strategy is asked when
    # ordering needs it rather than paying cupy's Python API on every view.
    if _stream_ptr_of != NULL and 0 <= out.device_id < _device_count:
        out.producer_stream = _stream_ptr_of(out.device_id)
        out.has_producer_stream = 1
    return 0


# --- the fields reader -------------------------------------------------------------------------

cdef Py_ssize_t _data_at = -1       # ndarray.data: MemoryPointer*, borrowed from the array
cdef Py_ssize_t _dtype_at = -1      # ndarray.dtype: PyArray_Descr*, borrowed from the array
cdef Py_ssize_t _shape_at = -1      # ndarray._shape: vector (begin, end) of extents
cdef Py_ssize_t _strides_at = -1    # ndarray._strides: vector (begin, end) of byte strides
cdef Py_ssize_t _ptr_at = -1        # MemoryPointer.ptr: intptr_t
cdef Py_ssize_t _device_at = -1     # MemoryPointer.device_id: int
cdef Py_ssize_t _mem_at = -1        # MemoryPointer.mem: BaseMemory*, borrowed from the pointer
cdef object _located_types = ()      # owns the two types below (cupy keeps them too)
cdef PyTypeObject* _fields_type = NULL   # the array type the offsets hold for (NULL: none)
cdef PyTypeObject* _memptr_type = NULL   # cupy.cuda.memory.MemoryPointer


cdef inline void* _word(object obj, Py_ssize_t at) noexcept:
    return (<void**> (<char*> <PyObject*> obj + at))[0]


cdef int read_fields(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1:
    # Only the exact type whose fields were located (the capsule may be registered for another,
    # and before prepare() ran nothing is located).
    if obj.ob_type != _fields_type:
        return INTEROP_CORE_READ_DECLINED
    cdef char* array = <char*> obj
    cdef PyObject* dtype = (<PyObject**> (array + _dtype_at))[0]
    if dtype == NULL:
        return INTEROP_CORE_READ_DECLINED
    if _set_dtype(dtype, out):
        return INTEROP_CORE_READ_DECLINED
    cdef PyObject* memptr = (<PyObject**> (array + _data_at))[0]
    if memptr == NULL or <PyTypeObject*> memptr.ob_type != _memptr_type:
        return INTEROP_CORE_READ_DECLINED
    cdef char* pointer = <char*> memptr
    cdef PyObject* mem = (<PyObject**> (pointer + _mem_at))[0]
    _set_memory(out, (<uintptr_t*> (pointer + _ptr_at))[0], (<int*> (pointer + _device_at))[0],
                NULL if mem == NULL else <PyTypeObject*> mem.ob_type)
    _set_stream(out)
    # The vectors last: the core copies them before any Python code can run again (a reshape
    # through cupy's API would move their storage), and cupy's stream read above may run some.
    cdef Py_ssize_t* shape = (<Py_ssize_t**> (array + _shape_at))[0]
    cdef Py_ssize_t n = (<Py_ssize_t**> (array + _shape_at + sizeof(void*)))[0] - shape
    cdef Py_ssize_t* strides = (<Py_ssize_t**> (array + _strides_at))[0]
    if (<Py_ssize_t**> (array + _strides_at + sizeof(void*)))[0] - strides != n:
        return INTEROP_CORE_READ_DECLINED
    out.ndim = <int> n
    out.shape = <const int64_t*> shape
    out.strides = <const int64_t*> strides
    out.strides_in_bytes = 1
    return 0


# --- the attributes reader ---------------------------------------------------------------------

cdef extern from *:
    """
    /* obj.name, or `missing` (a new reference) when obj has no such attribute: the reader
       declines such objects.  Any other exception is passed on (NULL). */
    static inline PyObject *ic_cupy_attribute(PyObject *obj, PyObject *name, PyObject *missing) {
        getattrofunc get = Py_TYPE(obj)->tp_getattro;   /* the slot, as `obj.name` calls it */
        PyObject *found = get != NULL ? get(obj, name) : PyObject_GetAttr(obj, name);
        if (found == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            Py_INCREF(missing);
            return missing;
        }
        return found;
    }
    """
    object _attribute "ic_cupy_attribute" (object obj, object name, object missing)

cdef object _MISSING = object()     # an attribute read_attributes found missing

# Where read_attributes hands the core the shape and strides: the core copies them before it
# runs any Python code (interop_core.h), so one buffer serves every call.
cdef int64_t _shape_out[MAX_NDIM]
cdef int64_t _strides_out[MAX_NDIM]


cdef int read_attributes(PyObject* obj, PyObject* stream,
                         interop_core_tensor_info* out) except -1:
    cdef object array = <object> obj
    cdef Py_ssize_t i, n
    # What a cupy.ndarray has.  Objects without it are declined, for cupy's interface to read.
    memptr = _attribute(array, "data", _MISSING)    # cupy.cuda.MemoryPointer: ptr is element 0
    ptr = _attribute(memptr, "ptr", _MISSING)
    device_id = _attribute(memptr, "device_id", _MISSING)
    mem = _attribute(memptr, "mem", _MISSING)
    extents = _attribute(array, "shape", _MISSING)
    steps = _attribute(array, "strides", _MISSING)
    dtype = _attribute(array, "dtype", _MISSING)
    if (ptr is _MISSING or device_id is _MISSING or mem is _MISSING or dtype is _MISSING
            or type(extents) is not tuple or type(steps) is not tuple):
        return INTEROP_CORE_READ_DECLINED
    n = len(<tuple> extents)
    if len(<tuple> steps) != n:
        raise BufferError(f"{type(array).__qualname__} has {n} extents but {len(steps)} strides")
    if n > MAX_NDIM:
        raise BufferError(f"{type(array).__qualname__} has {n} dimensions; at most {MAX_NDIM} "
                          "can be viewed")
    if _set_dtype(<PyObject*> dtype, out):
        return INTEROP_CORE_READ_DECLINED
    _set_memory(out, <uintptr_t> <unsigned long long> ptr, device_id,
                <PyTypeObject*> Py_TYPE(mem))
    _set_stream(out)
    # Last, and only from exact ints, whose conversion runs no Python code: nothing can call
    # this reader again before the core has copied the buffers.
    for i in range(n):
        if type((<tuple> extents)[i]) is not int or type((<tuple> steps)[i]) is not int:
            return INTEROP_CORE_READ_DECLINED
        _shape_out[i] = (<tuple> extents)[i]
        _strides_out[i] = (<tuple> steps)[i]
    out.ndim = <int> n
    out.shape = _shape_out
    out.strides = _strides_out
    out.strides_in_bytes = 1
    return 0


# Made once: the registered entries hold them (and tests compare them by identity).
cdef object _FIELDS_CAPSULE = PyCapsule_New(<void*> read_fields, INTEROP_CORE_READER_V2_CAPSULE,
                                            NULL)
cdef object _ATTRIBUTES_CAPSULE = PyCapsule_New(<void*> read_attributes,
                                                INTEROP_CORE_READER_V2_CAPSULE, NULL)


# --- from_cuda_array_interface: when cupy's own interface gives the readers' view -------------
#
# cupy's __cuda_array_interface__ (version 3) says what the readers read -- the address, the
# extents, the byte strides (omitted when C-contiguous), the element type and cupy's current
# stream -- except for an array of no element, whose address it gives as 0.  Those go to the
# interface itself.

cdef int _same_as_interface(PyObject* obj, int32_t protocol,
                            const interop_core_tensor_info* read) except -1:
    cdef int32_t i
    for i in range(read.ndim):
        if read.shape[i] == 0:
            return 0
    return 1


cdef object _EQUIVALENCE_CAPSULE = PyCapsule_New(
    <void*> _same_as_interface, INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE, NULL)


def equivalence_check_capsule():
    """The check ``registry.add_type(equivalence_check={"cuda_array_interface": ...})`` takes:
    whether cupy's own ``__cuda_array_interface__`` gives the readers' view of an array (it
    does, except for arrays of no element, whose address it gives as 0).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.equivalence_check_v1"``.
    """
    return _EQUIVALENCE_CAPSULE


def fields_reader_capsule():
    """The fields reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2).

    It reads cupy's struct fields at the offsets :func:`prepare` located, and declines every
    object until then, and every object not of exactly the type they were located on.
    """
    return _FIELDS_CAPSULE


def attributes_reader_capsule():
    """The attributes reader (cupy's documented attributes, read from C), as a capsule (ABI v2).

    It declines objects without ``.data.ptr``, ``.data.device_id``, ``.data.mem``, ``.shape``,
    ``.strides`` and ``.dtype``.
    """
    return _ATTRIBUTES_CAPSULE


cdef intptr_t _current_stream_on(int device_id) except? -1:
    # cupy's current stream on `device_id`; ptr 0 is the legacy default stream, which is what
    # cupy launches on then, so it is reported as handle 0 rather than as "none".
    if _stream_ptr_of != NULL:
        return _stream_ptr_of(device_id)
    if _current_stream is None:
        _bind_cupy()
    return <intptr_t> <Py_ssize_t> _current_stream(device_id).ptr


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


def _stream_reader():
    """``"c_api"`` when cupy's current stream is read in C as every view is made, else
    ``"python"`` (asked of cupy's Python API when ordering needs it).  For tests."""
    return "c_api" if _stream_ptr_of != NULL else "python"


# --- validation (run once by the core, see interop_core/registry/_validation.py) --------------

cdef list _offsets_where(list objects, object matches, Py_ssize_t size):
    # Word-aligned offsets past the object header at which `matches(obj, at)` holds for all.
    cdef Py_ssize_t at
    return [at for at in range(sizeof(PyObject), size - sizeof(void*) + 1, sizeof(void*))
            if all(matches(o, at) for o in objects)]


cdef bint _vector_is(object obj, Py_ssize_t at, tuple values):
    # Whether the (begin, end) pair at `at` holds `values`.  A pair of other words is followed
    # only when it spans exactly len(values) aligned elements away from the lowest page.
    cdef Py_ssize_t* begin = <Py_ssize_t*> _word(obj, at)
    cdef Py_ssize_t* end = <Py_ssize_t*> _word(obj, at + sizeof(void*))
    cdef Py_ssize_t i
    if <uintptr_t> end - <uintptr_t> begin != len(values) * sizeof(Py_ssize_t):
        return False
    if len(values) == 0:
        return True
    if <uintptr_t> begin < 65536 or <uintptr_t> begin % sizeof(Py_ssize_t):
        return False
    for i in range(len(values)):
        if begin[i] != values[i]:
            return False
    return True


cdef str _locate(list arrays):
    """Find the field offsets from ``arrays`` (cupy.ndarray objects); None or what failed."""
    global _data_at, _dtype_at, _shape_at, _strides_at, _ptr_at, _device_at, _mem_at
    global _located_types, _fields_type, _memptr_type
    _data_at = _dtype_at = _shape_at = _strides_at = _ptr_at = _device_at = _mem_at = -1
    _fields_type = _memptr_type = NULL
    _located_types = ()
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
    if device_at + <Py_ssize_t> sizeof(int) > found["mem"][0] or any(
            (<int*> (<char*> <PyObject*> p + device_at))[0] != p.device_id for p in pointers):
        return "cupy's MemoryPointer.device_id is not where its declaration puts it"
    if len({p.device_id for p in pointers}) < 2:
        return "the canaries must span two device ids to check MemoryPointer.device_id"
    _data_at, _dtype_at = found["data"][0], found["dtype"][0]
    _shape_at, _strides_at = found["shape"][0], found["strides"][0]
    _ptr_at, _mem_at, _device_at = found["ptr"][0], found["mem"][0], device_at
    _located_types = (array_type, pointer_type)
    _memptr_type = <PyTypeObject*> pointer_type
    _fields_type = <PyTypeObject*> array_type
    return None


def _locate_fields(arrays):
    """Locate cupy's fields from ``arrays`` (what :func:`prepare` does with :func:`canaries`);
    the reason they could not be, or None.  For tests; a failure forgets the offsets."""
    _bind_cupy()
    return _locate(list(arrays))


cdef str _check_stream_reader(object cupy):
    """Read cupy's current stream in C from now on, if cupy exports the function and it agrees
    with cupy's Python API on the default stream and inside ``with stream:``; says which."""
    global _stream_ptr_of
    _stream_ptr_of = NULL
    backend = sys.modules.get("cupy_backends.cuda.stream")
    capsule = getattr(backend, "__pyx_capi__", {}).get("get_stream_ptr")
    if capsule is None or not PyCapsule_IsValid(capsule, _STREAM_PTR_SIGNATURE):
        return "python (cupy exports no get_stream_ptr of signature 'intptr_t (int)')"
    cdef stream_ptr_fn candidate = <stream_ptr_fn> PyCapsule_GetPointer(
        capsule, _STREAM_PTR_SIGNATURE)
    try:
        device_id = cupy.cuda.Device().id
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            if candidate(device_id) != cupy.cuda.get_current_stream(device_id).ptr:
                return "python (get_stream_ptr disagreed with cupy inside `with stream:`)"
        if candidate(device_id) != cupy.cuda.get_current_stream(device_id).ptr:
            return "python (get_stream_ptr disagreed with cupy on the default stream)"
    except Exception as exc:  # no driver, no device: the check cannot run, the Python API serves
        return f"python (the check raised {type(exc).__name__}: {exc})"
    _stream_ptr_of = candidate
    return "c_api"


def canaries():
    """cupy arrays whose pointers, shapes, strides, dtypes and device ids all differ.

    Metadata-only arrays over host buffers, never touched by a device (some claim other device
    ids: that is what locates ``MemoryPointer.device_id``), and, when cupy has a device, arrays
    in device memory of every layout the readers meet.
    """
    import numpy as np

    cupy = _bind_cupy()

    def over(host, device_id=0):
        memory = cupy.cuda.UnownedMemory(host.ctypes.data, host.nbytes, host,
                                         device_id=device_id)
        return cupy.ndarray(host.shape, host.dtype, cupy.cuda.MemoryPointer(memory, 0),
                            host.strides)

    grid = over(np.zeros((4, 6), np.float32))
    out = [grid, grid[1:, ::2], grid.T, grid[::-1, 1:], grid[2:2], grid[2, 3],
           over(np.arange(10.0), device_id=3)[2:],
           over(np.zeros((2, 3, 4, 5), np.int16), device_id=1).transpose(3, 1, 0, 2),
           over(np.zeros((), np.complex64), device_id=2),
           over(np.ones(5, np.bool_))[::2],
           over(np.zeros((2,) * 9, np.uint8))[..., ::2].transpose()]
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except RuntimeError:     # cupy's CUDARuntimeError: no driver or no device here
        devices = 0
    if devices:
        base = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
        out += [base, base[1:, ::2], base.T, base[::-1, 1:],
                cupy.arange(10, dtype=cupy.complex64)[3:],
                cupy.zeros((3, 5), dtype=cupy.int16)[:, 1:4],
                cupy.ones((5,), dtype=cupy.bool_)[::2],
                cupy.zeros((0, 3), dtype=cupy.int8),
                base[2, 3],
                cupy.zeros((2, 3, 4, 5), dtype=cupy.float64).transpose(3, 1, 0, 2)]
    return out


def prepare():
    """Locate cupy's struct fields on :func:`canaries` and check cupy's stream function (once).

    Returns
    -------
    dict or str
        Details (where the fields are, how cupy's current stream is read) when the fields
        reader may be used; otherwise why not (the attributes reader is then used).
    """
    if sizeof(Py_ssize_t) != sizeof(int64_t):
        return "Py_ssize_t is not 64-bit here: cupy's vectors cannot be handed on as they are"
    cupy = _bind_cupy()
    stream_reader = _check_stream_reader(cupy)
    problem = _locate(canaries())
    if problem is not None:
        return f"{problem} (cupy's current stream: {stream_reader})"
    return {"fields": f"ndarray data@{_data_at} dtype@{_dtype_at} _shape@{_shape_at} "
                      f"_strides@{_strides_at}; MemoryPointer ptr@{_ptr_at} "
                      f"device_id@{_device_at} mem@{_mem_at}",
            "stream_reader": stream_reader}
