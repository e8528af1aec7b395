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
# Per call, two costs are avoided (on the H200 host, 2026-11-27, they were ~140 ns of a 288 ns
# view):
# - The CUDA driver query for the memory kind and device of the pointer (cuPointerGetAttributes,
#   ~110 ns): its answer cannot change while the allocation lives, so it is cached per pointer
#   object (`gpu_data`), see "the device cache" below.
# - numba's `device_ctypes_pointer`, a Python property (reached on an OwnedPointer through a
#   Python `__getattr__` in numba releases before numba-cuda 0.21): for numba's own pointer
#   classes the same int is read from the attribute that property reads, see "the device
#   pointer" below.  (On the dev VM's numba 0.68 a view of a device_array read 10,051
#   instructions before, 2,996 after, callgrind, with a stand-in driver.)
# - Five attribute lookups through the type's MRO: the attributes are read from the array's
#   instance dict, see "the attributes, from the instance dict" below.
#
# Nothing here imports numba.

import sys
import types

from cpython.object cimport PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int32_t, int64_t, intptr_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

from interop_core.abi cimport (
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["reader_capsule", "producer_stream", "canaries", "prepare", "device_cache_info"]


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


# --- the device cache ----------------------------------------------------------------------------
# The driver's answer for a pointer (memory kind and device ordinal), cached per pointer object:
# an allocation's kind and device never change while it lives, and a numba pointer object keeps
# its allocation alive (or is the view of an owner that does).  A fixed table in C, two ways per
# set, the set chosen by the object's address.  An entry holds a weak reference to the object (so
# that it never keeps it alive), the pointer value it answered for, and the answer.  A hit needs
# the weak reference to point at this very object, alive, and the same pointer value: an address
# reused by a new object after the old one died never hits, since the old one's weak reference
# was cleared when it died.  Objects without weak-reference support are never cached.
#
# Thread safety: every step runs with the GIL held.  A lookup reads an entry and uses it with no
# Python code in between; a fill makes its weak reference first (an allocation, which may run the
# garbage collector and so Python code, even other threads), then re-reads the set and writes the
# entry, and only then drops the evicted entry's reference (which runs no Python code: a weak
# reference without a callback).

cdef extern from *:
    """
    /* Whether the weak reference `ref` refers to `obj`, alive.  The caller holds `obj`. */
    static inline int interop_numba_weakref_is(PyObject* ref, PyObject* obj) {
    #if PY_VERSION_HEX >= 0x030D0000
        PyObject* got = NULL;
        int alive = PyWeakref_GetRef(ref, &got);
        if (alive < 0) {
            PyErr_Clear();
            return 0;
        }
        if (alive == 0)
            return 0;
        Py_DECREF(got);     /* alive elsewhere too: this releases no object */
        return got == obj;
    #else
        return PyWeakref_GET_OBJECT(ref) == obj;
    #endif
    }

    /* The referent of a weak proxy, borrowed; NULL when it died. */
    static inline PyObject* interop_numba_proxy_referent(PyObject* proxy) {
    #if PY_VERSION_HEX >= 0x030D0000
        PyObject* got = NULL;
        int alive = PyWeakref_GetRef(proxy, &got);
        if (alive <= 0) {
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(got);     /* the proxy's referent is alive elsewhere: still valid */
        return got;
    #else
        PyObject* got = PyWeakref_GET_OBJECT(proxy);
        return got == Py_None ? NULL : got;
    #endif
    }

    /* The type's attribute-cache version: any change to the type or its bases changes it; 0
     * when it has none (then nothing about the type is remembered). */
    static inline unsigned int interop_numba_type_version(PyTypeObject* t) {
    #if PY_VERSION_HEX < 0x030C0000
        if (!(t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
            return 0;
    #endif
        return t->tp_version_tag;
    }
    """
    int interop_numba_weakref_is(PyObject* ref, PyObject* obj) noexcept
    PyObject* interop_numba_proxy_referent(PyObject* proxy) noexcept
    unsigned int interop_numba_type_version(PyTypeObject* t) noexcept
    bint PyType_SUPPORTS_WEAKREFS(PyTypeObject* t) noexcept
    bint PyWeakref_CheckProxy(PyObject* o) noexcept
    PyObject* PyWeakref_NewRef(PyObject* obj, PyObject* callback)
    void PyErr_Clear() noexcept
    PyTypeObject* _type_of "Py_TYPE"(PyObject* o) noexcept

cdef enum:
    CACHE_SET_BITS = 8                  # 256 sets of 2: 512 pointer objects
    CACHE_SETS = 1 << CACHE_SET_BITS

ctypedef struct DeviceEntry:
    PyObject* ref           # an owned weak reference to the pointer object; NULL: empty
    uintptr_t ptr           # the pointer value answered for
    int32_t device_type
    int32_t device_id

# Way 0 of a set is its most recently used entry.
cdef DeviceEntry _cache[CACHE_SETS][2]
cdef uint64_t _cache_hits = 0
cdef uint64_t _cache_misses = 0

# What asks the driver: the core's helper (interop_core.h's pointer_device), or a test's stand-in.
ctypedef int (*query_t)(uintptr_t ptr, int32_t* device_type, int32_t* device_id) noexcept


cdef inline DeviceEntry* _cache_set(PyObject* key) noexcept:
    # Fibonacci hashing of the address: its low bits are alignment, its high bits shared.
    return _cache[(<uint64_t> <uintptr_t> key * <uint64_t> 0x9E3779B97F4A7C15) >>
                  (64 - CACHE_SET_BITS)]


cdef int _cached_device(PyObject* key, uintptr_t ptr, query_t query, int32_t* device_type,
                        int32_t* device_id) noexcept:
    """The driver's answer for `ptr`, the value of the pointer object `key`: 1 with
    device_type/device_id set, or 0 (no answer: left as they were)."""
    global _cache_hits, _cache_misses
    cdef DeviceEntry* s = _cache_set(key)
    cdef DeviceEntry hit
    cdef PyObject* ref
    cdef PyObject* evicted
    cdef int32_t answer_type = device_type[0], answer_id = device_id[0]
    if s[0].ref != NULL and s[0].ptr == ptr and interop_numba_weakref_is(s[0].ref, key):
        device_type[0] = s[0].device_type
        device_id[0] = s[0].device_id
        _cache_hits += 1
        return 1
    if s[1].ref != NULL and s[1].ptr == ptr and interop_numba_weakref_is(s[1].ref, key):
        device_type[0] = s[1].device_type
        device_id[0] = s[1].device_id
        hit = s[1]                      # now the most recently used: way 0
        s[1] = s[0]
        s[0] = hit
        _cache_hits += 1
        return 1
    _cache_misses += 1
    if not query(ptr, &answer_type, &answer_id):
        return 0                        # no driver, or memory it does not know: not cached
    device_type[0] = answer_type
    device_id[0] = answer_id
    if not PyType_SUPPORTS_WEAKREFS(_type_of(key)):
        return 1
    ref = PyWeakref_NewRef(key, NULL)   # may run Python code (see above)
    if ref == NULL:
        PyErr_Clear()
        return 1
    evicted = s[1].ref
    s[1] = s[0]
    s[0].ref = ref
    s[0].ptr = ptr
    s[0].device_type = answer_type
    s[0].device_id = answer_id
    Py_XDECREF(evicted)
    return 1


cdef int _cache_recall(PyObject* key, uintptr_t* ptr, int32_t* device_type,
                       int32_t* device_id) noexcept:
    """1 with the pointer value and the driver's answer stored for the pointer object `key`
    itself (alive, the caller holds it), else 0.  numba gives a pointer object its value once,
    when it makes it (MemoryPointer.device_pointer, OwnedPointer.device_ctypes_pointer), so
    the value stored for this very object is its value now: the reader skips numba's pointer
    conversion (cuda.bindings' CUdeviceptr.__int__ and the attribute reads before it)."""
    global _cache_hits
    cdef DeviceEntry* s = _cache_set(key)
    cdef int way
    for way in range(2):
        if s[way].ref != NULL and interop_numba_weakref_is(s[way].ref, key):
            ptr[0] = s[way].ptr
            device_type[0] = s[way].device_type
            device_id[0] = s[way].device_id
            _cache_hits += 1
            return 1
    return 0


# Test hooks: the cache with a stand-in for the driver (tests/test_numba_device_cache.py).
cdef int32_t _fake_type = -1
cdef int32_t _fake_id = 0
cdef uint64_t _fake_queries = 0


cdef int _fake_query(uintptr_t ptr, int32_t* device_type, int32_t* device_id) noexcept:
    global _fake_queries
    _fake_queries += 1
    if _fake_type < 0:
        return 0
    device_type[0] = _fake_type
    device_id[0] = _fake_id
    return 1


def _device_cache_recall(key):
    """Test hook: what the reader recalls for the pointer object ``key`` without reading it.

    Parameters
    ----------
    key : object

    Returns
    -------
    tuple or None
        ``(ptr, (device_type, device_id))`` stored for this very object, or ``None``.
    """
    cdef uintptr_t ptr = 0
    cdef int32_t device_type = 0, device_id = 0
    if not _cache_recall(<PyObject*> key, &ptr, &device_type, &device_id):
        return None
    return ptr, (device_type, device_id)


def _device_cache_probe(key, ptr, answer):
    """Test hook: look ``key`` up in the device cache as the reader does, with a stand-in driver.

    Parameters
    ----------
    key : object
        The pointer object.
    ptr : int
        Its pointer value.
    answer : tuple of int or None
        What the stand-in driver answers if asked: ``(device_type, device_id)``, or ``None``
        for no answer (no driver, unknown memory).

    Returns
    -------
    tuple
        ``((device_type, device_id) or None, asked)``: the answer the reader would use and
        whether the stand-in driver was asked (a miss).
    """
    global _fake_type, _fake_id
    cdef int32_t device_type = 2, device_id = 0
    cdef uint64_t before = _fake_queries
    if answer is None:
        _fake_type = -1
    else:
        _fake_type, _fake_id = answer
    found = _cached_device(<PyObject*> key, <uintptr_t> ptr, _fake_query, &device_type,
                           &device_id)
    return ((device_type, device_id) if found else None), _fake_queries != before


def _device_cache_clear():
    """Test hook: empty the device cache and zero its counters."""
    global _cache_hits, _cache_misses
    cdef int i, way
    cdef PyObject* ref
    for i in range(CACHE_SETS):
        for way in range(2):
            ref = _cache[i][way].ref
            _cache[i][way].ref = NULL
            Py_XDECREF(ref)
    _cache_hits = 0
    _cache_misses = 0


def _device_cache_set_of(obj):
    """Test hook: the index of the set of two entries that `obj`'s answer is cached in."""
    return (_cache_set(<PyObject*> obj) - &_cache[0][0]) // 2


def device_cache_info():
    """How the cache of the driver's answers per pointer object has served this process.

    Returns
    -------
    dict
        ``hits``, ``misses`` (driver queries, answered or not) and ``capacity`` (entries).
    """
    return {"hits": _cache_hits, "misses": _cache_misses, "capacity": 2 * CACHE_SETS}


# --- the device pointer --------------------------------------------------------------------------
# What the CUDA Array Interface's pointer is: `gpu_data.device_ctypes_pointer` (numba's own
# DeviceNDArray.device_ctypes_pointer reads exactly that).  On numba's own pointer classes it is
# a Python property of MemoryPointer (`self.device_pointer`, or in later numba-cuda releases a
# ctypes c_size_t made from `int(self.device_pointer)`: the same int either way), reached on an
# OwnedPointer through a Python `__getattr__` that forwards to its `_view` (a MemoryPointer or a
# weak proxy of one) unless the OwnedPointer carries the value itself (numba-cuda 0.21 and
# later).  For these classes the reader reads `device_pointer` directly, which is what that
# property reads.  Which path a pointer type takes is decided once per type and per version of
# the type (CPython changes a type's version tag whenever it or a base is modified, so a patched
# class is looked at again) by looking at the classes themselves: numba's property, not
# overridden, and numba's `__getattr__`.  Any other type reads `device_ctypes_pointer`.  The
# validation once per process (canaries(), against the CUDA Array Interface) covers device,
# sliced, foreign, mapped and managed arrays.

cdef enum:
    PTR_GENERIC = 0         # p.device_ctypes_pointer
    PTR_MEMORY = 1          # numba's MemoryPointer family: p.device_pointer
    PTR_OWNED = 2           # numba's OwnedPointer family: p._view (unwrapped), then PTR_MEMORY
    TYPE_SLOTS = 8

ctypedef struct PointerType:
    PyObject* type          # an owned reference; NULL: empty
    unsigned int version    # the type's version tag when it was looked at
    int kind

cdef PointerType _ptr_types[TYPE_SLOTS]
cdef int _ptr_types_next = 0    # the slot the next new type takes (round robin)

_NUMBA_DRIVERS = ("numba.cuda.cudadrv.driver", "numba_cuda.numba.cuda.cudadrv.driver")


def _mro_lookup(t, str name):
    for klass in t.__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return found
    return None


def _is_numbas(fn, str qualname):
    return (type(fn) is types.FunctionType and fn.__module__ in _NUMBA_DRIVERS
            and fn.__qualname__ == qualname)


def _pointer_kind_of(t, p):
    """How pointer objects of type ``t`` (``p`` one of them) give their pointer."""
    prop = _mro_lookup(t, "device_ctypes_pointer")
    if (type(prop) is property and _is_numbas(prop.fget, "MemoryPointer.device_ctypes_pointer")
            and _mro_lookup(t, "__getattribute__") is object.__getattribute__):
        return PTR_MEMORY
    if (prop is None and _is_numbas(_mro_lookup(t, "__getattr__"), "OwnedPointer.__getattr__")
            and _mro_lookup(t, "__getattribute__") is object.__getattribute__
            and "device_ctypes_pointer" not in getattr(p, "__dict__", ())
            and "_view" in getattr(p, "__dict__", ())):
        return PTR_OWNED
    return PTR_GENERIC


cdef int _pointer_kind(object p) except -1:
    global _ptr_types_next
    cdef PyTypeObject* t = _type_of(<PyObject*> p)
    cdef unsigned int version = interop_numba_type_version(t)
    cdef int i, kind
    cdef PyObject* old
    for i in range(TYPE_SLOTS):
        if _ptr_types[i].type == <PyObject*> t:
            # Version 0 (a type CPython gives no version tag) is stored with PTR_GENERIC only.
            if _ptr_types[i].version == version:
                return _ptr_types[i].kind
            break
    kind = _pointer_kind_of(<object> t, p)      # Python code: the table is re-read below
    version = interop_numba_type_version(t)     # tagged by the lookups above, if it can be
    if version == 0:
        kind = PTR_GENERIC      # a change to the type could not be seen: the generic path
    for i in range(TYPE_SLOTS):
        if _ptr_types[i].type == <PyObject*> t:
            _ptr_types[i].version = version
            _ptr_types[i].kind = kind
            return kind
    i = _ptr_types_next
    _ptr_types_next = (i + 1) % TYPE_SLOTS
    old = _ptr_types[i].type
    Py_INCREF(<object> t)
    _ptr_types[i].type = <PyObject*> t
    _ptr_types[i].version = version
    _ptr_types[i].kind = kind
    Py_XDECREF(old)
    return kind


cdef uintptr_t _gpu_data_pointer(object p) except? 0:
    """`p.device_ctypes_pointer` as an int, for a numba pointer object `p` (not None)."""
    cdef int kind = _pointer_kind(p)
    cdef PyObject* target
    if kind == PTR_MEMORY:
        return _pointer_value(p.device_pointer)
    if kind == PTR_OWNED:
        view = p._view
        if PyWeakref_CheckProxy(<PyObject*> view):
            target = interop_numba_proxy_referent(<PyObject*> view)
            if target == NULL:
                # A dead proxy: the generic path raises what numba's own path raises.
                return _pointer_value(p.device_ctypes_pointer)
            view = <object> target      # a strong reference before any Python code runs
        if _pointer_kind(view) == PTR_MEMORY:
            return _pointer_value(view.device_pointer)
    return _pointer_value(p.device_ctypes_pointer)


def _pointer_path(gpu_data):
    """Test hook: how the reader reads a pointer object's value.

    Parameters
    ----------
    gpu_data : object

    Returns
    -------
    str
        ``"device_pointer"`` (numba's MemoryPointer family), ``"_view.device_pointer"``
        (numba's OwnedPointer family) or ``"device_ctypes_pointer"`` (anything else).
    """
    kind = _pointer_kind(gpu_data)
    return {PTR_MEMORY: "device_pointer", PTR_OWNED: "_view.device_pointer"}.get(
        kind, "device_ctypes_pointer")


def _pointer_of(gpu_data):
    """Test hook: the pointer value the reader takes from a numba pointer object.

    Parameters
    ----------
    gpu_data : object
        A DeviceNDArray's ``gpu_data``.

    Returns
    -------
    int
        ``gpu_data.device_ctypes_pointer``'s value, read the way the reader reads it.
    """
    return _gpu_data_pointer(gpu_data)


cdef object _NO_GPU_DATA = object()    # module-owned sentinel: the attribute is missing


# --- the attributes, from the instance dict -----------------------------------------------------
#
# numba sets .shape, .strides, .dtype, .gpu_data and .stream in DeviceNDArrayBase.__init__: they
# live in each array's __dict__, and no class of numba's defines them.  Python's attribute lookup
# searches the type's MRO for a descriptor before it looks in the instance dict, five times per
# array; reading the dict directly gives the same objects for a type none of whose classes
# defines those names (checked once per type: a numpy subclass such as MappedNDArray gets
# ndarray's descriptors, and a subclass may add properties, so those types keep getattr).  A
# name missing from the dict is looked up as before.

cdef extern from "Python.h":
    object PyObject_GenericGetDict(object obj, void* context)
    PyObject* PyDict_GetItem(object d, object key)    # borrowed, NULL if missing (no error)

cdef tuple _ATTRIBUTES = ("shape", "strides", "dtype", "gpu_data", "stream")
cdef object _dict_type = None     # owned: the type last asked about (types outlive their arrays)
cdef bint _dict_type_ok = False   # whether _dict_type's instances are read from their __dict__
cdef dict _dict_ok_by_type = {}   # owned: the answer for every type asked about


cdef bint _reads_instance_dict(type t) except -1:
    global _dict_type, _dict_type_ok
    if t is _dict_type:
        return _dict_type_ok
    ok = _dict_ok_by_type.get(t)
    if ok is None:
        ok = t.__dictoffset__ != 0 and not any(
            name in vars(klass) for klass in t.__mro__ for name in _ATTRIBUTES)
        _dict_ok_by_type[t] = ok
    _dict_type = t
    _dict_type_ok = ok
    return ok


cdef inline object _attribute(object d, object obj, str name):
    cdef PyObject* found = PyDict_GetItem(d, name) if d is not None else NULL
    if found != NULL:
        return <object> found
    return getattr(obj, name)


def _reads_attributes_from_dict(t):
    """Test hook: whether the reader takes ``type``'s five attributes from instance dicts.

    Parameters
    ----------
    t : type

    Returns
    -------
    bool
    """
    return _reads_instance_dict(t)


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
    cdef int32_t device_type = KDL_CUDA, device_id = 0
    cdef object attrs = None      # the instance dict (a new reference), when it is read
    cdef PyObject* found          # borrowed from attrs
    cdef bint recalled = True     # the pointer and its device came from the device cache
    if _reads_instance_dict(type(obj)):
        attrs = PyObject_GenericGetDict(obj, NULL)
    shape_obj = _attribute(attrs, obj, "shape")
    strides_obj = _attribute(attrs, obj, "strides")
    dtype = _attribute(attrs, obj, "dtype")
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
    # MemoryPointer (or OwnedPointer) at element 0
    found = PyDict_GetItem(attrs, "gpu_data") if attrs is not None else NULL
    gpu_data = <object> found if found != NULL else getattr(obj, "gpu_data", _NO_GPU_DATA)
    if gpu_data is _NO_GPU_DATA:
        # numpy indexing of a mapped or managed array (numpy subclasses) makes a numpy view of
        # that type without numba's attributes: numba cannot describe it either.
        raise BufferError(
            f"{type(obj).__name__} of shape {shape_obj} has no gpu_data: numpy indexing of a "
            "numba mapped or managed array gives a numpy view that carries no device pointer; "
            "view the numba array itself and slice the view, or read the numpy view's host "
            "memory with StridedMemoryView.from_array_interface")
    if gpu_data is not None and not _cache_recall(<PyObject*> gpu_data, &ptr, &device_type,
                                                  &device_id):
        recalled = False
        ptr = _gpu_data_pointer(gpu_data)
    if ptr == 0 and volume != 0:
        raise BufferError(f"{type(obj).__name__} has a null pointer but {volume} elements")
    # The CAI's stream field: the array's bound stream, 0 (none bound) meaning no producer stream.
    bound = _attribute(attrs, obj, "stream")
    if type(bound) is int:
        handle = <intptr_t> <Py_ssize_t> bound
    elif bound is not None:
        handle = <intptr_t> <Py_ssize_t> int(bound)
    # The CAI names no device: ask the driver (device, mapped pinned host or managed memory, and
    # the ordinal), as the interface's reader does, once per pointer object (the device cache;
    # filling it may run Python code, so it comes before the extents are handed over).
    if ptr != 0 and not recalled:
        _cached_device(<PyObject*> gpu_data, ptr, <query_t> _api.pointer_device,
                       &device_type, &device_id)
    # No Python code runs from here on: hand the extents over.
    memcpy(_shape, shape, n * sizeof(int64_t))
    memcpy(_strides, strides, n * sizeof(int64_t))
    out.data = <void*> ptr
    out.ndim = <int> n
    out.shape = _shape
    out.strides = _strides
    out.strides_in_bytes = 1
    out.readonly = 0
    out.device_type = device_type
    out.device_id = device_id
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
        to a stream, one over foreign memory (``from_cuda_array_interface``), and mapped and
        managed arrays where the platform has them.  Empty when no
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
    # Foreign memory: numba's MemoryPointer over another producer's pointer (the reader's
    # pointer path differs by pointer class, so each class numba makes is a canary).
    try:
        out.append(cuda.from_cuda_array_interface(base.__cuda_array_interface__, owner=base,
                                                  sync=False))
    except Exception:   # a numba without it: nothing to check
        pass
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
