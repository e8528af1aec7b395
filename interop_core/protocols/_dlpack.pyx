# DLPack in both directions: the Python protocol (__dlpack__ / capsules) and the DLPack 1.3 C
# exchange API (__dlpack_c_exchange_api__).
#
# Ownership rules, which everything below follows:
# - In: a consumed DLManagedTensor(Versioned) is owned by exactly one DLPackTensorHolder, whose
#   __dealloc__ calls the producer's deleter once.  The capsule is renamed "used_*" before the
#   holder takes it, so neither the capsule's destructor nor another consumer can touch it.
# - Out: each exported tensor is one malloc'd block (managed struct + shape + strides) whose
#   manager_ctx holds a strong reference to the view; our deleter drops that reference (taking
#   the GIL, since consumers may call it from any thread) and frees the block.  A capsule that
#   is never consumed deletes its tensor from the capsule destructor.
#
# Behaviour worth knowing (also stated in the user docs):
# - IS_COPIED is accepted and recorded on the holder (DLPackTensorHolder.is_copied); a copy is
#   kept alive and deleted exactly like a shared tensor.
# - Versioned tensors must have major version 1 (a newer minor is fine); anything else is a
#   BufferError and the capsule is left unconsumed for its producer to free.
# - The C exchange API's *_no_sync functions never synchronise.  When the caller passes a
#   consumer stream and the tensor is not on the CPU, the reader falls back to __dlpack__
#   (which hands the stream to the producer); event-based ordering replaces this later.
# - Export: a legacy ("dltensor") capsule cannot carry READ_ONLY, so read-only views refuse
#   to export one (BufferError) rather than let a consumer write.  copy=True and a dl_device
#   other than the view's own are handled by StridedMemoryView.__dlpack__, which copies first
#   (interop_core.copies) and exports the copy here with IS_COPIED set.  A stream other than
#   None / -1 is refused for CPU memory (array-API rule) and, for device memory, accepted but
#   not yet acted on (the producer-side ordering arrives with the CUDA driver binding).
# - StridedMemoryView's exchange table: the allocator reports NotImplementedError through
#   its SetError callback (a view library allocates nothing); current_work_stream reports
#   the default (NULL) stream.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
cimport cython
from cpython.exc cimport PyErr_Occurred, PyErr_SetObject
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.pycapsule cimport (
    PyCapsule_CheckExact,
    PyCapsule_GetName,
    PyCapsule_GetPointer,
    PyCapsule_IsValid,
    PyCapsule_New,
    PyCapsule_SetName,
)
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, intptr_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport strcmp

from ..core._dlpack_abi cimport (
    DLPACK_FLAG_IS_COPIED,
    DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED,
    DLPACK_FLAG_READ_ONLY,
    DLPACK_MAJOR,
    DLPACK_MINOR,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLPackExchangeAPIHeader,
    DLPackSetError,
    DLTensor,
    kDLCPU,
    kDLCUDA,
    kDLROCM,
)
from ..core._dtypes cimport dtype_itemsize, record_set_dtype
from ..core._record cimport (
    MAX_CACHED_TYPES,
    MAX_NDIM,
    ViewRecord,
    extents_free,
    extents_resize,
    record_init,
)
from ..cuda._streams cimport resolve_stream

__all__ = ["DLPackTensorHolder"]

cdef extern from "Python.h":
    int Py_IsInitialized() nogil

# Capsule names.  PyCapsule_SetName keeps the pointer, so these must be static C strings.
cdef const char* _NAME_VERSIONED = b"dltensor_versioned"
cdef const char* _NAME_LEGACY = b"dltensor"
cdef const char* _NAME_USED_VERSIONED = b"used_dltensor_versioned"
cdef const char* _NAME_USED_LEGACY = b"used_dltensor"
cdef const char* _NAME_EXCHANGE_API = b"dlpack_exchange_api"

# The max_version we ask producers for.
cdef tuple _OUR_VERSION = (DLPACK_MAJOR, DLPACK_MINOR)


# ============================================================================================
# In: consuming DLPack tensors
# ============================================================================================

@cython.final
cdef class DLPackTensorHolder:
    """Owner of one consumed DLPack tensor; calls the producer's deleter exactly once.

    A :class:`~interop_core.StridedMemoryView` made from a DLPack capsule or through a DLPack
    C exchange API keeps one of these alive; when the last view lets go, the producer is told
    (through the tensor's deleter) that the memory is no longer needed.  Users never create
    one; it may appear as a view's ``owner`` when a foreign framework handed a tensor to
    interop-core through the C exchange API.
    """

    cdef DLManagedTensorVersioned* versioned  # owned: deleter called once in __dealloc__
    cdef DLManagedTensor* legacy              # owned likewise; at most one of the two is set

    def __init__(self):
        raise TypeError("DLPackTensorHolder objects are created by interop-core only")

    def __dealloc__(self):
        cdef DLManagedTensorVersioned* v = self.versioned
        cdef DLManagedTensor* lg = self.legacy
        # Clear first so that nothing (not even a re-entrant dealloc) can delete twice.
        self.versioned = NULL
        self.legacy = NULL
        if v != NULL and v.deleter != NULL:
            v.deleter(v)
        if lg != NULL and lg.deleter != NULL:
            lg.deleter(lg)

    @property
    def version(self):
        """tuple of int or None: The tensor's DLPack ``(major, minor)``; None for legacy."""
        if self.versioned == NULL:
            return None
        return (self.versioned.version.major, self.versioned.version.minor)

    @property
    def flags(self):
        """int: The DLPack flag bits (READ_ONLY = 1, IS_COPIED = 2, ...); 0 for legacy."""
        return self.versioned.flags if self.versioned != NULL else 0

    @property
    def is_copied(self):
        """bool: Whether the producer flagged the tensor as a copy (IS_COPIED).

        A copied tensor belongs to the consumer alone until the deleter runs; interop-core
        treats it like any other tensor (the holder keeps it alive and deletes it once).
        """
        return self.versioned != NULL and (self.versioned.flags & DLPACK_FLAG_IS_COPIED) != 0

    @property
    def is_alive(self):
        """bool: Whether the holder still owns a tensor (False once released)."""
        return self.versioned != NULL or self.legacy != NULL


cdef inline DLPackTensorHolder _new_holder():
    return DLPackTensorHolder.__new__(DLPackTensorHolder)


cdef int _propagate_error() except -1:
    # A foreign C function left a Python exception set: hand it on.
    if PyErr_Occurred() == NULL:
        raise BufferError("a DLPack producer reported failure without setting an exception")
    return -1


cdef extern from *:
    """
    /* Overflow-checked int64 / uint64 arithmetic for foreign tensor descriptions (gcc, clang):
       1 when the exact result does not fit in *out. */
    static inline int interop_mul_i64_overflows(int64_t a, int64_t b, int64_t *out) {
        return __builtin_mul_overflow(a, b, out);
    }
    static inline int interop_add_i64_overflows(int64_t a, int64_t b, int64_t *out) {
        return __builtin_add_overflow(a, b, out);
    }
    static inline int interop_sub_i64_overflows(int64_t a, int64_t b, int64_t *out) {
        return __builtin_sub_overflow(a, b, out);
    }
    static inline int interop_add_u64_overflows(uint64_t a, uint64_t b, uint64_t *out) {
        return __builtin_add_overflow(a, b, out);
    }
    """
    bint interop_mul_i64_overflows(int64_t a, int64_t b, int64_t* out) noexcept nogil
    bint interop_add_i64_overflows(int64_t a, int64_t b, int64_t* out) noexcept nogil
    bint interop_sub_i64_overflows(int64_t a, int64_t b, int64_t* out) noexcept nogil
    bint interop_add_u64_overflows(uint64_t a, uint64_t b, uint64_t* out) noexcept nogil


cdef str _layout_text(const DLTensor* t, int64_t itemsize):
    # For error messages only: the tensor's fields as the producer wrote them.
    shape = tuple([t.shape[i] for i in range(t.ndim)])
    strides = None if t.strides == NULL else tuple([t.strides[i] for i in range(t.ndim)])
    return (f"data={<uintptr_t> t.data:#x}, byte_offset={t.byte_offset}, shape={shape}, "
            f"strides={strides}, itemsize={itemsize}")


cdef inline int _check_dltensor(const DLTensor* t, int64_t itemsize) except -1:
    """Refuse a DLTensor whose description cannot be used as it stands: ndim out of range, a
    NULL shape, negative extents, a pointer that wraps (data + byte_offset), a size in bytes or
    a stride reach that overflows int64, or elements outside the address space.  `itemsize` is
    the validated dtype's (at least 1)."""
    cdef int32_t ndim = t.ndim
    cdef int i
    cdef uint64_t start, last
    cdef int64_t extent, term
    cdef int64_t count = 1            # elements, then bytes of all elements
    cdef int64_t ahead = 0            # elements (then bytes) from the first to the furthest forward
    cdef int64_t behind = 0           # elements (then bytes) from the first to the furthest back
    # One pass, flags instead of branches: this runs on every capsule read.
    cdef bint negative = False, empty = False, too_big = False, too_far = False
    if ndim < 0 or ndim > MAX_NDIM:
        raise BufferError(f"DLPack tensor has ndim={ndim}; interop-core supports 0..{MAX_NDIM}")
    if ndim > 0 and t.shape == NULL:
        raise BufferError(f"DLPack tensor has ndim={ndim} but a NULL shape")
    for i in range(ndim):
        extent = t.shape[i]
        negative |= extent < 0
        empty |= extent == 0
        too_big |= interop_mul_i64_overflows(count, extent, &count)
        if t.strides != NULL:
            too_far |= interop_mul_i64_overflows(extent - 1, t.strides[i], &term)
            if term >= 0:
                too_far |= interop_add_i64_overflows(ahead, term, &ahead)
            else:                     # behind - INT64_MIN overflows: caught here
                too_far |= interop_sub_i64_overflows(behind, term, &behind)
    if negative:
        for i in range(ndim):
            if t.shape[i] < 0:
                raise BufferError(f"DLPack tensor has a negative extent {t.shape[i]} in "
                                  f"dimension {i} of its shape")
    if interop_add_u64_overflows(<uintptr_t> t.data, t.byte_offset, &start):
        raise BufferError(f"DLPack tensor's data pointer plus byte_offset wraps past the end of "
                          f"the address space ({_layout_text(t, itemsize)})")
    if empty:
        return 0                      # no element: no address is ever formed
    if too_big or interop_mul_i64_overflows(count, itemsize, &count):
        raise BufferError(f"DLPack tensor's shape holds more than 2**63-1 bytes "
                          f"({_layout_text(t, itemsize)})")
    if t.strides == NULL:
        ahead = count - itemsize      # C-contiguous
    elif (too_far or ahead > INT64_MAX - behind
            or interop_mul_i64_overflows(ahead + behind, itemsize, &term)):
        raise BufferError(f"DLPack tensor's strides reach more than 2**63-1 bytes "
                          f"({_layout_text(t, itemsize)})")
    else:
        ahead *= itemsize             # both fit: so does their sum
        behind *= itemsize
    if (start < <uint64_t> behind
            or interop_add_u64_overflows(start, <uint64_t> ahead + <uint64_t> (itemsize - 1),
                                         &last)):
        raise BufferError(f"DLPack tensor's elements fall outside the address space (data "
                          f"pointer, byte_offset, shape and strides: {_layout_text(t, itemsize)})")
    return 0


cdef int _fill_record(const DLTensor* t, uint64_t flags, ViewRecord* rec) except -1:
    """Copy a DLTensor's description into `rec` (validating it first)."""
    cdef int32_t ndim = t.ndim
    cdef int i
    cdef int64_t stride = 1
    record_set_dtype(rec, t.dtype, (flags & DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0)
    _check_dltensor(t, rec.itemsize)
    extents_resize(&rec.ext, ndim)
    for i in range(ndim):
        rec.ext.shape[i] = t.shape[i]
    if t.strides != NULL:
        for i in range(ndim):
            rec.ext.strides[i] = t.strides[i]
    else:
        # NULL strides mean C-contiguous (legacy producers and pre-1.2 versioned ones).  With
        # an empty extent the product is not bounded by the size check: it may overflow.
        for i in range(ndim - 1, -1, -1):
            rec.ext.strides[i] = stride
            if interop_mul_i64_overflows(stride, t.shape[i] if t.shape[i] > 0 else 1, &stride):
                raise BufferError(f"DLPack tensor's contiguous strides overflow int64 "
                                  f"({_layout_text(t, rec.itemsize)})")
    rec.ptr = <uintptr_t> t.data + <uintptr_t> t.byte_offset
    rec.device_type = t.device.device_type
    rec.device_id = t.device.device_id
    rec.readonly = (flags & DLPACK_FLAG_READ_ONLY) != 0
    return 0


cdef int _check_version(const DLManagedTensorVersioned* mt) except -1:
    if mt.version.major != DLPACK_MAJOR:
        raise BufferError(
            f"DLPack tensor has version {mt.version.major}.{mt.version.minor}; interop-core "
            f"reads major version {DLPACK_MAJOR} (up to {DLPACK_MAJOR}.{DLPACK_MINOR})")
    return 0


cdef object read_dlpack_capsule(object capsule, ViewRecord* rec):
    cdef const char* name
    cdef DLManagedTensorVersioned* mtv
    cdef DLManagedTensor* mtl
    cdef DLPackTensorHolder holder
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    name = PyCapsule_GetName(capsule)
    if name == NULL:
        raise TypeError("expected a DLPack capsule, got a capsule without a name")
    # Everything is validated before the capsule is renamed: if anything fails, the capsule
    # is left untouched and its own destructor releases the tensor.
    if strcmp(name, _NAME_VERSIONED) == 0:
        mtv = <DLManagedTensorVersioned*> PyCapsule_GetPointer(capsule, _NAME_VERSIONED)
        if mtv == NULL:
            raise BufferError("DLPack capsule holds a NULL tensor")
        _check_version(mtv)
        _fill_record(&mtv.dl_tensor, mtv.flags, rec)
        holder = _new_holder()
        PyCapsule_SetName(capsule, _NAME_USED_VERSIONED)
        holder.versioned = mtv
        return holder
    if strcmp(name, _NAME_LEGACY) == 0:
        mtl = <DLManagedTensor*> PyCapsule_GetPointer(capsule, _NAME_LEGACY)
        if mtl == NULL:
            raise BufferError("DLPack capsule holds a NULL tensor")
        _fill_record(&mtl.dl_tensor, 0, rec)
        holder = _new_holder()
        PyCapsule_SetName(capsule, _NAME_USED_LEGACY)
        holder.legacy = mtl
        return holder
    pyname = (<bytes> name).decode("utf-8", "replace")
    if strcmp(name, _NAME_USED_VERSIONED) == 0 or strcmp(name, _NAME_USED_LEGACY) == 0:
        raise BufferError(
            f"DLPack capsule {pyname!r} was already consumed; a capsule can be used only once")
    raise TypeError(
        f"expected a capsule named 'dltensor_versioned' or 'dltensor', got one named {pyname!r}")


# DLPack's stream value for "no synchronisation" (compared by identity: it is a cached small int).
cdef object _NO_SYNC = -1


cdef object _producer_stream(object obj, object stream):
    """The `stream` argument for obj.__dlpack__, per the array-API rules."""
    cdef intptr_t handle = 0
    cdef bint sync = resolve_stream(stream, &handle)
    try:
        device = obj.__dlpack_device__()
    except AttributeError:
        return None
    except (TypeError, ValueError, BufferError):
        raise       # the producer's own refusal, as it is
    except Exception as exc:
        raise BufferError(f"{type(obj).__name__}.__dlpack_device__() raised "
                          f"{type(exc).__name__}: {exc}") from exc
    cdef long device_type = _device_type_of(obj, device)
    if device_type == kDLCUDA:
        if not sync:
            return _NO_SYNC
        # DLPack spells CUDA's legacy default stream 1 (0 is ambiguous and forbidden).
        return 1 if handle == 0 else handle
    if device_type == kDLROCM:
        return handle if sync else _NO_SYNC
    # Streams mean nothing for host and other memory; producers (numpy) insist on None.
    return None


cdef long _device_type_of(object obj, object device) except? -1:
    """The device type of what `obj.__dlpack_device__()` returned, checked: DLPack asks for a
    (device_type, device_id) pair of ints (IntEnums included)."""
    if (type(device) is tuple and PyTuple_GET_SIZE(device) == 2
            and type(<object> PyTuple_GET_ITEM(device, 0)) is int
            and type(<object> PyTuple_GET_ITEM(device, 1)) is int):
        item = <object> PyTuple_GET_ITEM(device, 0)
        ordinal = <object> PyTuple_GET_ITEM(device, 1)
    else:
        try:
            kind, ordinal = device
            if (isinstance(kind, bool) or isinstance(ordinal, bool)
                    or not isinstance(kind, int) or not isinstance(ordinal, int)):
                raise TypeError
        except (TypeError, ValueError):
            raise TypeError(
                f"{type(obj).__name__}.__dlpack_device__() returned {device!r}; DLPack asks "
                "for a (device_type, device_id) pair of ints, e.g. (1, 0) for the CPU") from None
        item = kind
    if not 0 <= item < (1 << 31):
        raise ValueError(f"{type(obj).__name__}.__dlpack_device__() returned {device!r}: device "
                         f"type {item} is not a DLPack device type")
    if not 0 <= ordinal < (1 << 31):
        raise ValueError(f"{type(obj).__name__}.__dlpack_device__() returned {device!r}: device "
                         f"id {ordinal} is not a device ordinal (0 to 2**31 - 1)")
    return item


cdef inline int _remember(set types, type t) except -1:
    if len(types) >= MAX_CACHED_TYPES:
        types.clear()
    types.add(t)
    return 0


# Types whose __dlpack__ rejected max_version once (pre-1.0 producers): asked without it from
# then on, so they do not pay for a raised TypeError on every call.
cdef set _LEGACY_ONLY_TYPES = set()
# Types whose __dlpack__ failed on stream=-1, DLPack's "no synchronisation" (jax 0.11 on CUDA
# raises CUDA_ERROR_INVALID_HANDLE): asked with stream=None from then on, which such producers
# honour by making the buffer ready first.
cdef set _REJECTS_NO_SYNC_TYPES = set()


cdef object _call_dlpack(object obj, type t, object producer_stream):
    if t in _LEGACY_ONLY_TYPES:
        return _legacy_call(obj, producer_stream)
    try:
        return obj.__dlpack__(stream=producer_stream, max_version=_OUR_VERSION)
    except TypeError:
        # Producers older than DLPack 1.0 do not know max_version; ask again without it.
        capsule = _legacy_call(obj, producer_stream)
        _remember(_LEGACY_ONLY_TYPES, t)
        return capsule


cdef object read_dlpack(object obj, object stream, ViewRecord* rec):
    cdef type t = type(obj)
    method = getattr(t, "__dlpack__", None)
    if method is None:
        raise TypeError(f"{t.__name__} does not implement __dlpack__")
    if not callable(method):
        raise TypeError(f"{t.__name__}.__dlpack__ is {type(method).__name__} {method!r}, not a "
                        "method")
    producer_stream = _producer_stream(obj, stream)
    if producer_stream is _NO_SYNC and t in _REJECTS_NO_SYNC_TYPES:
        producer_stream = None
    try:
        try:
            capsule = _call_dlpack(obj, t, producer_stream)
        except Exception:
            if producer_stream is not _NO_SYNC:
                raise
            capsule = _call_dlpack(obj, t, None)   # if this fails too, its error is raised
            _remember(_REJECTS_NO_SYNC_TYPES, t)
    except (TypeError, ValueError, BufferError, MemoryError, RecursionError):
        raise
    except Exception as exc:
        # What else a producer raises (an AttributeError from inside it, a framework's
        # RuntimeError) is named as the array interfaces' errors are, the original chained.
        # Running out of memory or stack is not a refusal: those pass as they are.
        raise BufferError(f"{t.__module__}.{t.__qualname__}.__dlpack__ raised "
                          f"{type(exc).__name__}: {exc}") from exc
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(
            f"{type(obj).__name__}.__dlpack__ returned {type(capsule).__name__}, not a capsule")
    try:
        keepalive = read_dlpack_capsule(capsule, rec)
    except BaseException:
        # A refused capsule is left to its own destructor.  It runs here, with our error set
        # aside: a producer's destructor may raise an error of its own and swallow it (numpy's
        # does for a capsule renamed by a broken __dlpack__), which would lose ours.
        capsule = None
        raise
    if producer_stream is not None and producer_stream is not _NO_SYNC:
        # The producer ordered its work before the consumer stream: the memory is ready there.
        rec.has_producer_stream = True
        rec.producer_stream = <intptr_t> <Py_ssize_t> producer_stream
    return keepalive


cdef object _legacy_call(object obj, object producer_stream):
    if producer_stream is None:
        return obj.__dlpack__()
    return obj.__dlpack__(stream=producer_stream)


# --- C exchange API, consumer side -----------------------------------------------------------

# type -> (capsule or None, address of the usable DLPackExchangeAPI or 0, reason if 0).  The
# dict keeps every looked-up type alive, so the one-entry cache below may borrow it.
cdef dict _API_BY_TYPE = {}
cdef PyObject* _last_type = NULL              # borrowed from _API_BY_TYPE's keys
cdef const DLPackExchangeAPI* _last_api = NULL


cdef enum:
    _MAX_API_CHAIN = 16


cdef tuple _probe_exchange_api(type t):
    cdef const DLPackExchangeAPIHeader* header
    cdef int links
    try:
        capsule = getattr(t, "__dlpack_c_exchange_api__", None)
    except Exception as exc:
        return (None, 0, f"reading the attribute raised {exc!r}")
    if capsule is None:
        return (None, 0, "the type has no __dlpack_c_exchange_api__")
    if not PyCapsule_IsValid(capsule, _NAME_EXCHANGE_API):
        return (None, 0, "__dlpack_c_exchange_api__ is not a capsule named 'dlpack_exchange_api'")
    header = <const DLPackExchangeAPIHeader*> PyCapsule_GetPointer(capsule, _NAME_EXCHANGE_API)
    first_major = header.version.major
    # A producer may chain older tables behind a newer one; take the first we understand (a
    # chain longer than any producer makes, a cycle included, is not followed to its end).
    links = 0
    while header != NULL and header.version.major != DLPACK_MAJOR and links < _MAX_API_CHAIN:
        header = header.prev_api
        links += 1
    if header == NULL or header.version.major != DLPACK_MAJOR:
        return (None, 0, f"exchange API major version {first_major} is not {DLPACK_MAJOR}")
    if (<const DLPackExchangeAPI*> header).managed_tensor_from_py_object_no_sync == NULL:
        return (None, 0, "managed_tensor_from_py_object_no_sync is NULL")
    return (capsule, <uintptr_t> header, None)


cdef const DLPackExchangeAPI* _lookup_exchange_api(type t) except? NULL:
    global _last_type, _last_api
    if <PyObject*> t == _last_type:
        return _last_api
    entry = _API_BY_TYPE.get(t)
    if entry is None:
        entry = _probe_exchange_api(t)
        if len(_API_BY_TYPE) >= MAX_CACHED_TYPES:
            _API_BY_TYPE.clear()        # bounded as the sets above are
        _API_BY_TYPE[t] = entry
    _last_api = <const DLPackExchangeAPI*> <uintptr_t> (<tuple> entry)[1]
    _last_type = <PyObject*> t
    return _last_api


cdef bint has_exchange_api(type t) except -1:
    return _lookup_exchange_api(t) != NULL


cdef object read_dlpack_exchange_api(object obj, object stream, ViewRecord* rec):
    cdef type t = type(obj)
    cdef const DLPackExchangeAPI* api = _lookup_exchange_api(t)
    cdef intptr_t handle = 0
    cdef DLManagedTensorVersioned* mt = NULL
    cdef DLPackTensorHolder holder
    if api == NULL:
        raise TypeError(
            f"{t.__name__} has no usable DLPack C exchange API: {_API_BY_TYPE[t][2]}")
    cdef bint sync = resolve_stream(stream, &handle)
    # Made first so that nothing can fail between receiving the tensor and owning it.
    holder = _new_holder()
    if api.managed_tensor_from_py_object_no_sync(<void*> obj, &mt) != 0:
        _propagate_error()
    if mt == NULL:
        raise BufferError(f"{t.__name__}'s DLPack exchange API returned no tensor")
    holder.versioned = mt
    if sync and mt.dl_tensor.device.device_type != kDLCPU:
        # The exchange API never synchronises; until event-based ordering arrives, let the
        # producer order its work through __dlpack__(stream=...).  Releasing the holder
        # returns the tensor we will not use.
        holder = None
        return read_dlpack(obj, stream, rec)
    _check_version(mt)
    _fill_record(&mt.dl_tensor, mt.flags, rec)
    return holder


# ============================================================================================
# Out: exporting views
# ============================================================================================

cdef type _view_type = None                   # the StridedMemoryView class (kept alive here)
cdef record_of_t _record_of = NULL
cdef view_from_record_t _make_view = NULL


cdef void register_view_type(type view_type, record_of_t record_of, view_from_record_t make_view):
    global _view_type, _record_of, _make_view
    _view_type = view_type
    _record_of = record_of
    _make_view = make_view


cdef void _release_context(void* ctx) noexcept with gil:
    Py_XDECREF(<PyObject*> ctx)


cdef void _versioned_deleter(DLManagedTensorVersioned* mt) noexcept nogil:
    if mt == NULL:
        return
    cdef void* ctx = mt.manager_ctx
    mt.manager_ctx = NULL
    free(mt)
    # After interpreter shutdown there is no GIL to take and nothing left to release.
    if ctx != NULL and Py_IsInitialized():
        _release_context(ctx)


cdef void _legacy_deleter(DLManagedTensor* mt) noexcept nogil:
    if mt == NULL:
        return
    cdef void* ctx = mt.manager_ctx
    mt.manager_ctx = NULL
    free(mt)
    if ctx != NULL and Py_IsInitialized():
        _release_context(ctx)


cdef void _versioned_capsule_destructor(object capsule) noexcept:
    # Only an unconsumed capsule still owns its tensor; a consumer renames it "used_*".
    cdef DLManagedTensorVersioned* mt
    if PyCapsule_IsValid(capsule, _NAME_VERSIONED):
        mt = <DLManagedTensorVersioned*> PyCapsule_GetPointer(capsule, _NAME_VERSIONED)
        if mt.deleter != NULL:
            mt.deleter(mt)


cdef void _legacy_capsule_destructor(object capsule) noexcept:
    cdef DLManagedTensor* mt
    if PyCapsule_IsValid(capsule, _NAME_LEGACY):
        mt = <DLManagedTensor*> PyCapsule_GetPointer(capsule, _NAME_LEGACY)
        if mt.deleter != NULL:
            mt.deleter(mt)


cdef inline bint _subbyte_padded(const ViewRecord* rec) noexcept nogil:
    return rec.dtype.bits * rec.dtype.lanes < 8 and rec.itemsize == 1


cdef void _fill_dltensor(DLTensor* t, const ViewRecord* rec, int64_t* arrays) noexcept nogil:
    """Describe `rec` in `t`, copying shape and strides into `arrays` (2 * ndim slots)."""
    cdef int i
    cdef int ndim = rec.ext.ndim
    t.data = <void*> rec.ptr
    t.byte_offset = 0
    t.device.device_type = rec.device_type
    t.device.device_id = rec.device_id
    t.ndim = ndim
    t.dtype = rec.dtype
    t.shape = arrays
    t.strides = arrays + ndim
    for i in range(ndim):
        arrays[i] = rec.ext.shape[i]
        arrays[ndim + i] = rec.ext.strides[i]


cdef DLManagedTensorVersioned* _new_versioned(object keepalive, const ViewRecord* rec,
                                              uint32_t minor, bint is_copied=False) except NULL:
    cdef size_t size = sizeof(DLManagedTensorVersioned) + 2 * rec.ext.ndim * sizeof(int64_t)
    cdef DLManagedTensorVersioned* mt = <DLManagedTensorVersioned*> malloc(size)
    if mt == NULL:
        raise MemoryError()
    mt.version.major = DLPACK_MAJOR
    mt.version.minor = minor
    mt.flags = 0
    if rec.readonly:
        mt.flags |= DLPACK_FLAG_READ_ONLY
    if _subbyte_padded(rec):
        mt.flags |= DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED
    if is_copied:
        mt.flags |= DLPACK_FLAG_IS_COPIED
    _fill_dltensor(&mt.dl_tensor, rec,
                   <int64_t*> (<char*> mt + sizeof(DLManagedTensorVersioned)))
    Py_INCREF(keepalive)
    mt.manager_ctx = <void*> keepalive     # strong reference, dropped by _versioned_deleter
    mt.deleter = _versioned_deleter
    return mt


cdef DLManagedTensor* _new_legacy(object keepalive, const ViewRecord* rec) except NULL:
    cdef size_t size = sizeof(DLManagedTensor) + 2 * rec.ext.ndim * sizeof(int64_t)
    cdef DLManagedTensor* mt = <DLManagedTensor*> malloc(size)
    if mt == NULL:
        raise MemoryError()
    _fill_dltensor(&mt.dl_tensor, rec, <int64_t*> (<char*> mt + sizeof(DLManagedTensor)))
    Py_INCREF(keepalive)
    mt.manager_ctx = <void*> keepalive     # strong reference, dropped by _legacy_deleter
    mt.deleter = _legacy_deleter
    return mt


cdef object export_dlpack(object keepalive, ViewRecord* rec, object stream, object max_version,
                          object dl_device, object copy, bint is_copied):
    cdef intptr_t handle = 0
    cdef bint versioned = False
    cdef uint32_t minor = DLPACK_MINOR
    cdef DLManagedTensorVersioned* mtv
    cdef DLManagedTensor* mtl
    # stream: validated; host memory has no streams (the array-API rule).  For device memory
    # the stream is accepted but not yet acted on: ordering arrives with the CUDA binding.
    if resolve_stream(stream, &handle) and rec.device_type == kDLCPU:
        raise BufferError(
            f"__dlpack__: stream must be None or -1 for host (CPU) memory, got {stream!r}")
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"__dlpack__: copy must be None, True or False, got {copy!r}")
    if copy and not is_copied:
        raise BufferError("__dlpack__: copy=True, but this export was not given a copy")
    if dl_device is not None:
        try:
            dev_type, dev_id = dl_device
            dev_type = int(dev_type)
            dev_id = int(dev_id)
        except (TypeError, ValueError):
            raise TypeError(
                f"__dlpack__: dl_device must be a (device_type, device_id) pair, got "
                f"{dl_device!r}") from None
        if dev_type != rec.device_type or dev_id != rec.device_id:
            raise BufferError(
                f"__dlpack__: the view is on device ({rec.device_type}, {rec.device_id}) and "
                f"cannot be exported to ({dev_type}, {dev_id}) without a copy")
    if max_version is not None:
        if (not isinstance(max_version, tuple) or len(max_version) != 2
                or not isinstance(max_version[0], int) or not isinstance(max_version[1], int)):
            raise TypeError(
                f"__dlpack__: max_version must be a (major, minor) tuple of ints, got "
                f"{max_version!r}")
        versioned = max_version[0] >= DLPACK_MAJOR
        if max_version[0] == DLPACK_MAJOR:
            minor = max(0, min(<int64_t> max_version[1], DLPACK_MINOR))
    if versioned:
        mtv = _new_versioned(keepalive, rec, minor, is_copied)
        try:
            return PyCapsule_New(mtv, _NAME_VERSIONED, _versioned_capsule_destructor)
        except BaseException:
            mtv.deleter(mtv)
            raise
    # A legacy capsule has no READ_ONLY flag: its consumer would feel free to write.
    if rec.readonly:
        raise BufferError(
            "__dlpack__: this view is read-only and a legacy (unversioned) DLPack capsule "
            "cannot say so; ask for max_version=(1, 0) or newer")
    if _subbyte_padded(rec):
        raise BufferError(
            "__dlpack__: padded sub-byte element types need a versioned DLPack capsule; "
            "ask for max_version=(1, 0) or newer")
    mtl = _new_legacy(keepalive, rec)
    try:
        return PyCapsule_New(mtl, _NAME_LEGACY, _legacy_capsule_destructor)
    except BaseException:
        mtl.deleter(mtl)
        raise


cdef DLTensor* unconsumed_tensor(object capsule, bint* readonly) except NULL:
    # Validated as a capsule that is consumed is: its description is handed on as it stands.
    cdef DLManagedTensorVersioned* mt
    cdef DLTensor* t
    if PyCapsule_IsValid(capsule, _NAME_LEGACY):
        readonly[0] = False
        t = &(<DLManagedTensor*> PyCapsule_GetPointer(capsule, _NAME_LEGACY)).dl_tensor
        _check_dltensor(t, dtype_itemsize(t.dtype, False))
        return t
    if PyCapsule_IsValid(capsule, _NAME_VERSIONED):
        mt = <DLManagedTensorVersioned*> PyCapsule_GetPointer(capsule, _NAME_VERSIONED)
        _check_version(mt)
        readonly[0] = (mt.flags & DLPACK_FLAG_READ_ONLY) != 0
        t = &mt.dl_tensor
        _check_dltensor(
            t, dtype_itemsize(t.dtype, (mt.flags & DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0))
        return t
    raise BufferError(
        f"expected an unconsumed DLPack capsule ('dltensor' or 'dltensor_versioned'), got "
        f"{type(capsule).__name__}")


cdef object legacy_capsule_for_immutable_consumer(object keepalive, ViewRecord* rec):
    cdef DLManagedTensor* mtl
    if _subbyte_padded(rec):
        raise BufferError("padded sub-byte element types need a versioned DLPack capsule")
    mtl = _new_legacy(keepalive, rec)
    try:
        return PyCapsule_New(mtl, _NAME_LEGACY, _legacy_capsule_destructor)
    except BaseException:
        mtl.deleter(mtl)
        raise


cdef tuple export_dlpack_device(ViewRecord* rec):
    return (rec.device_type, rec.device_id)


# --- C exchange API, producer side (StridedMemoryView's table) ------------------------------
# These are called from other frameworks' C code, possibly without the GIL: each takes it,
# reports failure as -1 with a Python exception set, and never lets an exception escape.

cdef void _set_error(BaseException exc) noexcept:
    # Keep the exception in the thread's error indicator for the C caller.
    PyErr_SetObject(type(exc), exc)


cdef int _api_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                        DLPackSetError set_error) noexcept nogil:
    # A view library owns no allocator: report it through the callback, as the spec asks.
    if out != NULL:
        out[0] = NULL
    if set_error != NULL:
        set_error(error_ctx, b"NotImplementedError",
                  b"interop-core StridedMemoryView does not allocate memory")
    return -1


cdef int _api_from_py_object(void* py_object, DLManagedTensorVersioned** out) noexcept with gil:
    try:
        if out == NULL:
            raise ValueError("managed_tensor_from_py_object_no_sync: out is NULL")
        out[0] = NULL
        if py_object == NULL:
            raise TypeError("managed_tensor_from_py_object_no_sync: py_object is NULL")
        if _record_of == NULL:
            raise RuntimeError("interop_core.core._view is not initialised")
        obj = <object> py_object
        out[0] = _new_versioned(obj, _record_of(obj), DLPACK_MINOR)
        return 0
    except BaseException as exc:
        _set_error(exc)
        return -1


cdef int _api_to_py_object(DLManagedTensorVersioned* tensor, void** out_py_object
                           ) noexcept with gil:
    cdef ViewRecord rec
    cdef DLPackTensorHolder holder = None
    record_init(&rec)
    try:
        if out_py_object == NULL:
            raise ValueError("managed_tensor_to_py_object_no_sync: out_py_object is NULL")
        out_py_object[0] = NULL
        if tensor == NULL:
            raise ValueError("managed_tensor_to_py_object_no_sync: tensor is NULL")
        # Ownership is ours from here on, even if we fail: the holder deletes it.
        holder = _new_holder()
        holder.versioned = tensor
        if _make_view == NULL:
            raise RuntimeError("interop_core.core._view is not initialised")
        _check_version(tensor)
        _fill_record(&tensor.dl_tensor, tensor.flags, &rec)
        view = _make_view(&rec, holder, holder)
        Py_INCREF(view)
        out_py_object[0] = <void*> view
        return 0
    except BaseException as exc:
        if holder is None and tensor != NULL and tensor.deleter != NULL:
            tensor.deleter(tensor)     # the holder could not even be made
        _set_error(exc)
        return -1
    finally:
        extents_free(&rec.ext)


cdef int _api_dltensor_from_py_object(void* py_object, DLTensor* out) noexcept with gil:
    cdef ViewRecord* rec
    try:
        if out == NULL or py_object == NULL:
            raise ValueError("dltensor_from_py_object_no_sync: NULL argument")
        if _record_of == NULL:
            raise RuntimeError("interop_core.core._view is not initialised")
        rec = _record_of(<object> py_object)
        # Borrowed: shape and strides point into the view, valid while the caller holds it.
        out.data = <void*> rec.ptr
        out.byte_offset = 0
        out.device.device_type = rec.device_type
        out.device.device_id = rec.device_id
        out.ndim = rec.ext.ndim
        out.dtype = rec.dtype
        out.shape = rec.ext.shape
        out.strides = rec.ext.strides
        return 0
    except BaseException as exc:
        _set_error(exc)
        return -1


cdef int _api_current_work_stream(int device_type, int32_t device_id,
                                  void** out_current_stream) noexcept nogil:
    # A view is not a framework with a notion of "current" stream: report the default
    # (NULL) stream, which is also what the spec asks for on the CPU.
    if out_current_stream == NULL:
        with gil:
            _set_error(ValueError("current_work_stream: out_current_stream is NULL"))
        return -1
    out_current_stream[0] = NULL
    return 0


# Lives for the whole process, as the spec requires; published through a capsule.
cdef DLPackExchangeAPI _VIEW_API
_VIEW_API.header.version.major = DLPACK_MAJOR
_VIEW_API.header.version.minor = DLPACK_MINOR
_VIEW_API.header.prev_api = NULL
_VIEW_API.managed_tensor_allocator = _api_allocator
_VIEW_API.managed_tensor_from_py_object_no_sync = _api_from_py_object
_VIEW_API.managed_tensor_to_py_object_no_sync = _api_to_py_object
_VIEW_API.dltensor_from_py_object_no_sync = _api_dltensor_from_py_object
_VIEW_API.current_work_stream = _api_current_work_stream

cdef object _VIEW_API_CAPSULE = PyCapsule_New(&_VIEW_API, _NAME_EXCHANGE_API, NULL)


cdef object exchange_api_capsule():
    return _VIEW_API_CAPSULE
