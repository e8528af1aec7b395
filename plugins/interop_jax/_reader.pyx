# The jax reader and exporter: single-device jax.Array <-> interop_core_tensor_info, without
# blocking the host, registered through the public C ABI (interop_core.h, version 2) like any
# third party's reader.  It cimports nothing of the core but interop_core.abi; the exporter uses
# only the core's public Python API (a view's properties and sync()).
#
# Reading.  jax's __dlpack__ costs microseconds per call (Python wrappers, a capsule, an external
# reference on the PJRT buffer) and, without a stream, waits on the host until the array is
# computed.  For single-device arrays the reader asks the array directly: `_sharding` (device and
# memory kind), `aval` (shape, dtype), `_pjrt_layout` (strides) and `unsafe_buffer_pointer()`.
# An array read again is answered from a per-array cache (see "The per-array cache" below),
# confirmed per read by `unsafe_buffer_pointer()` and the aval's identity.
# Those are jax internals or near-internals, so the core validates the reader once per process
# (registry `prepare=` / `canaries=`): it reads canary arrays with this reader and with the
# fallback (`read_with_dlpack`, jax's own DLPack export) and compares them field by field;
# `prepare` checks the sharding type and jaxlib's ordered export.  On any difference the fallback
# serves the rest of the process.
#
# Readiness, per the stream contract (see docs/streams.md for what jax does underneath):
# - device memory, no stream (None, -1): no wait at all.  unsafe_buffer_pointer() never waits
#   for the computation: PJRT's external reference on GPU reads an address assigned when the
#   work was enqueued.  The memory may still be being written: the consumer orders itself later
#   (sync(), a stream).
# - host memory (the CPU backend, a GPU's unpinned_host memory kind), with or without a stream:
#   the read waits until the array is computed (is_ready(), else block_until_ready()).  jax's
#   CPU work runs on a thread pool and is not stream-ordered (PJRT's stream wait is "only
#   implemented for GPU"), so nothing a consumer could do later would order it: the host is the
#   only order there is, and every host consumer (numpy, the buffer protocol, a CPU DLPack
#   consumer) reads as soon as it has the pointer.  jax's own DLPack export waits the same way.
#   unsafe_buffer_pointer() alone would not: on the CPU it waits only for the buffer's
#   *allocation*.  A cache entry is made only after that wait, so an array read again (a hit) is
#   known computed and waits for nothing; a sharded array's entry likewise.
# - a consumer stream, device memory: PJRT makes that stream wait for the array's definition
#   events (jaxlib's buffer_to_dlpack_managed_tensor(array, stream=s), what __dlpack__(stream=s)
#   calls, without its Python wrappers); the host does not wait for the computation.  The view
#   keeps the resulting DLPack capsule unconsumed, i.e. jax's external reference on the buffer
#   (the capsule's destructor releases it).  A jaxlib without that function: declined, and the
#   fallback's __dlpack__(stream=s) orders the same way.
#
# Strides: jax buffers are dense, but not always row-major: a user may ask for another device
# layout (jax.experimental.layout.Format).  The reader compares the array's `_pjrt_layout`
# with layouts it has already seen to be row-major for that rank (one rich comparison); any other
# layout is decoded from `array.format` (slow, microseconds) and learned when it is row-major.
# jaxlib returns the same PjRtLayout wrapper for arrays sharing a C++ layout while the wrapper
# lives, so the learned list (which keeps them alive) is mostly matched by identity.
#
# Exporting (to_jax).  jax.dlpack.from_dlpack costs tens of microseconds, mostly Python: the
# producer's __dlpack_device__, a backend lookup, __dlpack__, then jnp.asarray.  to_jax does the
# same import with one jaxlib call, dlpack_managed_tensor_to_buffer(capsule, device, stream, ...),
# with the device and jax's stream for external ready events cached per DLPack device, after
# checking once per platform that the result equals jax.dlpack.from_dlpack's.  The capsule is
# built here from the view's public properties (a legacy DLPack tensor holding the view).
#
# Nothing here imports jax until an array of jax's is read or a view is exported to jax.

from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.weakref cimport PyWeakref_GetRef, PyWeakref_NewRef
from libc.stdint cimport int32_t, int64_t, intptr_t, uint8_t, uint16_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from interop_core.abi cimport (
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["reader_capsule", "read_with_dlpack", "prepare", "canaries", "producer_stream",
           "to_jax", "export_status", "read_shards", "prepare_shards", "shard_canaries"]

cdef enum:
    MAX_NDIM = 64           # the ABI's limit on ndim
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_CUDA_HOST = 3
    KDL_ROCM = 10
    KDL_ROCM_HOST = 11
    MAX_LEARNED = 8
    CACHE_SET_BITS = 7      # the per-array cache has 1 << CACHE_SET_BITS sets of two entries
    CACHED_NDIM = 8         # arrays of more dimensions are not cached


# --- state of the reader ---------------------------------------------------------------------

# The core's helper table (dtype conversion, DLPack capsules in and out), fetched once on import: the reader needs it from
# its first call, whether or not validation ran (a test may pin the result).
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# The extents handed to the core.  The ABI reads `shape` and `strides` only until the core has
# copied them, which it does before running any Python code; the reader fills these after its
# last call that may run Python code, with the GIL held, so no other call can interleave.
cdef int64_t _shape[MAX_NDIM]
cdef int64_t _strides[MAX_NDIM]

# jax's handles, looked up once (by prepare(), else by the first read or export).
cdef bint _ready = False
cdef object _single_sharding = None   # jax's SingleDeviceSharding type (a reference owned here)
cdef object _to_capsule = None        # jaxlib's buffer_to_dlpack_managed_tensor (owned here)
cdef object _from_capsule = None      # jaxlib's dlpack_managed_tensor_to_buffer (owned here)
# jax's array type and, for its exact instances, its `aval` getter and `unsafe_buffer_pointer`
# and `is_deleted` methods (owned here; None: attribute lookups).
cdef object _accessor_type = None
cdef object _aval_getter = None
cdef object _pointer_method = None
cdef object _deleted_method = None
cdef object _ready_method = None      # ArrayImpl.is_ready (a reference owned here)
cdef object _wait_method = None       # ArrayImpl.block_until_ready (a reference owned here)
cdef int _process_index = -1          # jax.process_index(): devices of other processes
cdef dict _devices = {}               # (jax Device, memory kind) -> (DLPack type, device id)
cdef dict _row_major = {}             # ndim -> list of PjRtLayout objects known to be row-major
# The last sharding object seen and its (type, id): arrays from one jitted function share it,
# so the common case costs one identity comparison.  A strong reference, replaced on a miss.
cdef object _last_sharding = None
cdef int32_t _last_type = 0, _last_id = 0
# The last (jax Device, SingleDeviceSharding._memory_kind) resolved, and its (type, id): strong
# references, replaced on a miss (so the identities compared are never reused addresses).
cdef object _last_device = None
cdef object _last_kind = None
cdef int32_t _last_device_type = 0, _last_device_id = 0

# The per-array cache.  Reading an array through all its accessors costs ~0.5 us, most of it
# `_pjrt_layout` (jaxlib computes the default layout per call) and the sharding, shape and dtype
# reads; an array read again (a loop handing the same array over, the per-device arrays of one
# sharded array) is answered from an entry holding what the accessors said, confirmed per read
# by two jax calls:
# - `unsafe_buffer_pointer()`, which is needed anyway and raises for a deleted or donated array,
#   so a freed buffer is never described;
# - `aval`, compared by identity with the entry's (which the entry holds, so the address cannot
#   be reused): jaxlib can swap an array's whole contents (`_replace_with`, used for jax's
#   mutable arrays), and then the pointer differs and, for another shape or dtype, the aval too.
# The entry names its array through a weak reference (jax arrays support them): a dead one
# never matches, so a new array at a freed array's address is read afresh.  The facts kept --
# device, shape, dtype, strides -- belong to the buffer and its aval, not to the Python object.
# A table of sets of two entries (the array's address picks the set), no dict: a hit costs a
# few comparisons.  Entries hold owned references (weak reference, aval, sharding) and are only
# replaced, never freed (the table is bounded).
ctypedef struct _Entry:
    PyObject* ref             # a weak reference to the array (owned); NULL: empty
    PyObject* aval            # the array's aval when read (owned): compared by identity
    PyObject* sharding        # its _sharding when read (owned): what the shards path compares
    uintptr_t data
    int32_t ndim
    int32_t device_type
    int32_t device_id
    uint8_t code
    uint8_t bits
    uint16_t lanes
    int64_t shape[CACHED_NDIM]
    int64_t strides[CACHED_NDIM]

cdef _Entry _cache[2 << CACHE_SET_BITS]     # static storage: starts empty (zeroed)
cdef uint8_t _recent[1 << CACHE_SET_BITS]   # per set, the entry hit or filled last (0 or 1)
cdef bint _cache_off = False                # jax's array type takes no weak references
# Admission: an array gets an entry on its second read in a row of its set, not its first.  A
# weak reference costs an allocation (and evicting a live entry its release), which arrays read
# once -- or a working set larger than the table, read in turn -- would pay on every read for
# nothing.  Per set, the address of the array last refused and its buffer's address: plain
# numbers, never dereferenced (a reused address only admits an array one read early).
cdef uintptr_t _candidate[1 << CACHE_SET_BITS]
cdef uintptr_t _candidate_data[1 << CACHE_SET_BITS]


cdef inline Py_ssize_t _address_set(object obj, int bits) noexcept:
    # Fibonacci hashing of the address (objects are 16-byte aligned): consecutive arrays spread
    # over the 1 << bits sets.
    cdef uint64_t h = (<uint64_t> <uintptr_t> <PyObject*> obj) >> 4
    return <Py_ssize_t> ((h * <uint64_t> 0x9E3779B97F4A7C15) >> (64 - bits))


cdef inline Py_ssize_t _set_of(object obj) noexcept:
    return _address_set(obj, CACHE_SET_BITS)


cdef inline _Entry* _find(object obj, object aval, uintptr_t ptr) noexcept:
    """The entry describing `obj` (whose aval and address are these), or NULL."""
    cdef Py_ssize_t s = _set_of(obj)
    cdef _Entry* e = &_cache[2 * s]
    if _is_entry_of(e, obj, aval, ptr):
        _recent[s] = 0
        return e
    e += 1
    if _is_entry_of(e, obj, aval, ptr):
        _recent[s] = 1
        return e
    return NULL


cdef inline PyObject* _referent(object ref) noexcept:
    """The address of the object weak reference `ref` names; NULL when it is gone."""
    cdef PyObject* target = NULL
    PyWeakref_GetRef(ref, &target)
    Py_XDECREF(target)          # only its address is used; a live target's count is unchanged
    return target


cdef inline PyObject* _target(_Entry* e) noexcept:
    """The address of the array `e` names; NULL when empty or when that array is gone."""
    if e.ref == NULL:
        return NULL
    return _referent(<object> e.ref)


cdef inline int _way_to_fill(PyObject* first, PyObject* second, object obj,
                             uint8_t* recent) noexcept:
    """Which entry (0 or 1) of a set of two, naming `first` and `second` (NULL: empty or gone),
    to fill for `obj`: its old one, a free one, else the one used less recently.  `recent`, the
    set's most recently used entry, becomes the one chosen.  Both caches replace by this rule."""
    if second == <PyObject*> obj or (second == NULL and first != <PyObject*> obj):
        recent[0] = 1
    elif first == NULL or first == <PyObject*> obj:
        recent[0] = 0
    else:
        recent[0] ^= 1
    return recent[0]


cdef inline _Entry* _victim(object obj) noexcept:
    """The entry of obj's set to fill for `obj` (see _way_to_fill)."""
    cdef Py_ssize_t s = _set_of(obj)
    cdef _Entry* e = &_cache[2 * s]
    return e + _way_to_fill(_target(e), _target(e + 1), obj, &_recent[s])


cdef inline bint _second_read(uintptr_t* candidate, uintptr_t* candidate_data, Py_ssize_t s,
                              object obj, uintptr_t data) noexcept:
    """Whether `obj` (with `data`: its buffer's or its first per-device array's address) is
    read for the second time in a row of its set `s`: both caches admit an entry then, so that
    arrays read once never evict ones read again and again."""
    if candidate[s] == <uintptr_t> <PyObject*> obj and candidate_data[s] == data:
        candidate[s] = 0
        return True
    candidate[s] = <uintptr_t> <PyObject*> obj
    candidate_data[s] = data
    return False


cdef inline _Entry* _admit(object obj, uintptr_t ptr) noexcept:
    """The entry to fill for `obj` (whose buffer is at `ptr`), or NULL: not on its first read."""
    if _second_read(_candidate, _candidate_data, _set_of(obj), obj, ptr):
        return _victim(obj)
    return NULL


cdef inline bint _is_entry_of(_Entry* e, object obj, object aval, uintptr_t ptr) noexcept:
    """Whether `e` describes `obj`, whose aval and buffer address are `aval` and `ptr`."""
    if e.aval != <PyObject*> aval or e.data != ptr:
        return False
    return _target(e) == <PyObject*> obj


cdef int _remember(_Entry* e, object obj, object aval, object sharding, uintptr_t ptr, int ndim,
                   const int64_t* shape, const int64_t* strides, uint8_t code, uint8_t bits,
                   uint16_t lanes, int32_t device_type, int32_t device_id) except -1:
    """Make `e` describe `obj` (what the accessors said).  Runs Python code (a new weak
    reference, the old entry's references released) only before the entry is written."""
    global _cache_off
    cdef PyObject* old
    try:
        ref = PyWeakref_NewRef(obj, None)
    except TypeError:           # a jax whose arrays take no weak references: no cache at all
        _cache_off = True
        return 0
    # Releasing the old references may run Python code (a finaliser), even a read of another
    # array landing on this entry: empty it until nothing is left, then write it.
    while e.ref != NULL or e.aval != NULL or e.sharding != NULL:
        old = e.ref
        e.ref = NULL
        Py_XDECREF(old)
        old = e.aval
        e.aval = NULL
        Py_XDECREF(old)
        old = e.sharding
        e.sharding = NULL
        Py_XDECREF(old)
    Py_INCREF(ref)
    Py_INCREF(aval)
    Py_INCREF(sharding)
    e.ref = <PyObject*> ref
    e.aval = <PyObject*> aval
    e.sharding = <PyObject*> sharding
    e.data = ptr
    e.ndim = ndim
    e.device_type = device_type
    e.device_id = device_id
    e.code = code
    e.bits = bits
    e.lanes = lanes
    memcpy(e.shape, shape, ndim * sizeof(int64_t))
    memcpy(e.strides, strides, ndim * sizeof(int64_t))
    return 0


cdef object _MISSING = object()     # module-owned sentinel for getattr

_MULTI_DEVICE = (
    "cannot view a jax array sharded over {n} devices as one strided view: use "
    "interop_core.shards() for one view per addressable shard, with its device, its index in "
    "the global array and its replica id")


cdef object _jaxlib_function(object array_type, str name):
    """A function of the jaxlib extension module that defines jax's array type (or None)."""
    import importlib
    modules = ("jax._src.lib._jax", "jaxlib._jax", "jaxlib.xla_extension")
    if array_type is not None:
        modules = (array_type.__module__,) + modules
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


cdef int _setup(object array_type) except -1:
    """Look up jax's handles (jax is imported: one of its arrays exists, or a test asks)."""
    global _ready, _single_sharding, _to_capsule, _from_capsule, _last_sharding
    global _last_device, _last_kind
    import jax

    _single_sharding = jax.sharding.SingleDeviceSharding
    _to_capsule = _jaxlib_function(array_type, "buffer_to_dlpack_managed_tensor")
    _from_capsule = _jaxlib_function(array_type, "dlpack_managed_tensor_to_buffer")
    _last_sharding = None
    _last_device = None
    _last_kind = None
    _bind_accessors(array_type)
    _ready = True
    return 0


cdef int _bind_accessors(object array_type) except -1:
    """The callables behind `aval`, `unsafe_buffer_pointer`, `is_deleted`, `is_ready` and
    `block_until_ready` of jax's array type, called directly on an exact instance: the same
    functions jax's attribute lookup finds (a property's getter, methods of the type), without
    the lookup (the instance has a __dict__ to search first for a method)."""
    global _accessor_type, _aval_getter, _pointer_method, _deleted_method, _ready_method
    global _wait_method
    import inspect

    _accessor_type = _aval_getter = _pointer_method = _deleted_method = None
    _ready_method = _wait_method = None
    if array_type is None:      # set up before any array was read (an export to jax)
        array_type = _jaxlib_function(None, "ArrayImpl")
        if not isinstance(array_type, type):
            return 0
    aval = inspect.getattr_static(array_type, "aval", None)
    method = inspect.getattr_static(array_type, "unsafe_buffer_pointer", None)
    deleted = inspect.getattr_static(array_type, "is_deleted", None)
    ready = inspect.getattr_static(array_type, "is_ready", None)
    wait = inspect.getattr_static(array_type, "block_until_ready", None)
    if (type(aval) is property and aval.fget is not None and callable(method)
            and callable(deleted) and callable(ready) and callable(wait)):
        _aval_getter = aval.fget
        _pointer_method = method
        _deleted_method = deleted
        _ready_method = ready
        _wait_method = wait
        _accessor_type = array_type
    return 0


# --- devices ---------------------------------------------------------------------------------

cdef tuple _resolve_device(object device, object memory_kind):
    """(DLPack device type, id) for a jax device and memory kind; BufferError if unaddressable."""
    global _process_index
    key = (device, memory_kind)
    cached = _devices.get(key)
    if cached is not None:
        return <tuple> cached
    if _process_index < 0:
        import jax
        _process_index = jax.process_index()
    if device.process_index != _process_index:
        raise BufferError(
            f"cannot view a jax array on {device}: that device belongs to jax process "
            f"{device.process_index}, not to this one ({_process_index}), so its memory is not "
            "addressable here")
    platform = device.platform
    if platform == "cpu":
        result = (KDL_CPU, 0)
    elif platform in ("gpu", "cuda", "rocm"):
        rocm = platform == "rocm"
        if memory_kind == "pinned_host":
            result = (KDL_ROCM_HOST if rocm else KDL_CUDA_HOST, 0)
        elif memory_kind == "unpinned_host":
            result = (KDL_CPU, 0)
        else:
            result = (KDL_ROCM if rocm else KDL_CUDA, int(device.local_hardware_id))
    else:
        raise BufferError(f"cannot view a jax array on a {platform!r} device ({device}): only "
                          "cpu, cuda and rocm memory can be addressed")
    _devices[key] = result
    return result


cdef object _locate(object obj, int32_t* device_type, int32_t* device_id):
    """The DLPack device of a single-device array (BufferError for several devices); returns
    the array's `_sharding`."""
    global _last_sharding, _last_type, _last_id, _last_device, _last_kind
    global _last_device_type, _last_device_id
    sharding = obj._sharding
    if sharding is _last_sharding:
        device_type[0] = _last_type
        device_id[0] = _last_id
        return sharding
    if type(sharding) is _single_sharding:
        # Every new array has a new sharding object, but mostly the same device and memory
        # kind: those are compared with the last ones met (`_memory_kind` is what the sharding
        # was made with, None for the device's default: the public `memory_kind` resolves that
        # at ~3x the cost, so only for a device or kind not met last).
        device = sharding._device
        kind = sharding._memory_kind
        if device is not _last_device or not (kind is _last_kind or (
                type(kind) is str and type(_last_kind) is str and kind == _last_kind)):
            dev = _resolve_device(device, sharding.memory_kind)
            _last_device_type = (<tuple> dev)[0]
            _last_device_id = (<tuple> dev)[1]
            _last_device = device
            _last_kind = kind
        _last_type = device_type[0] = _last_device_type
        _last_id = device_id[0] = _last_device_id
        _last_sharding = sharding
        return sharding
    devices = sharding.device_set
    if len(devices) != 1:
        raise BufferError(_MULTI_DEVICE.format(n=len(devices)))
    dev = _resolve_device(next(iter(devices)), sharding.memory_kind)
    _last_type = device_type[0] = (<tuple> dev)[0]
    _last_id = device_id[0] = (<tuple> dev)[1]
    _last_sharding = sharding
    return sharding


# --- reading ---------------------------------------------------------------------------------

cdef int _layout_strides(object obj, int64_t* shape, int64_t* strides, int ndim) except -1:
    """Strides from `array.format` for a layout not yet known to be row-major."""
    layout = obj.format.layout
    if layout is None:
        raise BufferError("jax reports no layout for this array")
    tiling = tuple(getattr(layout, "tiling", ()) or ())
    if tiling or getattr(layout, "sub_byte_element_size_in_bits", 0):
        raise BufferError(f"cannot view a jax array with a tiled or packed device layout "
                          f"({layout}); relayout it first")
    order = tuple(layout.major_to_minor)
    if sorted(order) != list(range(ndim)):
        raise BufferError(f"unexpected jax layout {layout} for a {ndim}-d array")
    cdef int64_t step = 1
    cdef int i
    for i in range(ndim - 1, -1, -1):
        d = order[i]
        strides[d] = step
        step *= shape[d] if shape[d] > 0 else 1
    if order == tuple(range(ndim)):
        # Most recent first: another platform's row-major layouts (a GPU's, learned by the
        # canaries) may not compare equal to this one's, so the list must not fill up for good.
        known = _row_major.setdefault(ndim, [])
        known.insert(0, obj._pjrt_layout)
        if len(known) > MAX_LEARNED:
            known.pop()
    return 0


cdef bint _is_row_major(object obj, int ndim) except -1:
    known = _row_major.get(ndim)
    if known is None:
        return False
    layout = obj._pjrt_layout
    # jaxlib hands out the same wrapper object for the same C++ layout while one is alive (the
    # list holds them): identity first, then equality (a nanobind call), learning the object.
    for ref in <list> known:
        if ref is layout:
            return True
    for ref in <list> known:
        if PyObject_RichCompareBool(layout, ref, Py_EQ):
            (<list> known).insert(0, layout)
            if len(<list> known) > MAX_LEARNED:
                (<list> known).pop()
            return True
    return False


cdef int _pending_error() except -1:
    return -1       # hands on the exception the core's helper set


cdef inline int _wait_for_host_work(object obj, int32_t device_type) except -1:
    """Host memory: wait until jax has computed `obj` (see "Readiness" above); device memory is
    ordered on streams instead, never by a host wait."""
    if device_type != KDL_CPU:
        return 0
    # Mostly computed already: is_ready() costs less than block_until_ready(), which lets go of
    # the GIL and takes it back even then.
    if type(obj) is _accessor_type:
        if not _ready_method(obj):
            _wait_method(obj)
    elif not obj.is_ready():
        obj.block_until_ready()
    return 0


cdef int _read_fast(object obj, interop_core_tensor_info* out) except -1:
    """Metadata and address of a single-device array; waits only for host memory's contents.

    An array read before (its cache entry's weak reference still names it) costs two jax
    calls, `unsafe_buffer_pointer()` and `aval`, which confirm the entry; any other array is
    read through all the accessors (`_read_accessors`), which fills its entry.
    """
    cdef _Entry* e
    cdef uintptr_t ptr
    if _cache_off:
        return _read_accessors(obj, out, NULL, None, 0)
    try:
        # Raises for a deleted or donated array (and for several devices): then the accessor
        # path, which names the problem.
        if type(obj) is _accessor_type:
            ptr = <uintptr_t> _pointer_method(obj)
            aval = _aval_getter(obj)
        else:
            ptr = <uintptr_t> obj.unsafe_buffer_pointer()
            aval = obj.aval
    except Exception:
        return _read_accessors(obj, out, NULL, None, 0)
    e = _find(obj, aval, ptr)
    # No Python code runs from the check to the hand-over: the entry cannot change in between.
    if e != NULL:
        _hand_over(out, ptr, e.ndim, e.shape, e.strides, e.code, e.bits, e.lanes,
                   e.device_type, e.device_id)
        return 0
    return _read_accessors(obj, out, _admit(obj, ptr), aval, ptr)


cdef int _hand_over(interop_core_tensor_info* out, uintptr_t ptr, int ndim,
                    const int64_t* shape, const int64_t* strides, uint8_t code, uint8_t bits,
                    uint16_t lanes, int32_t device_type, int32_t device_id) noexcept:
    """Fill `out`; the extents through the module's buffers (the caller runs no Python code
    after this, so the core copies them before anything can overwrite them)."""
    memcpy(_shape, shape, ndim * sizeof(int64_t))
    memcpy(_strides, strides, ndim * sizeof(int64_t))
    out.data = <void*> ptr
    out.ndim = ndim
    out.shape = _shape
    out.strides = _strides
    out.dtype_code = code
    out.dtype_bits = bits
    out.dtype_lanes = lanes
    out.device_type = device_type
    out.device_id = device_id
    out.readonly = 1
    out.has_producer_stream = 0
    return 0


cdef int _read_accessors(object obj, interop_core_tensor_info* out, _Entry* e, object aval,
                         uintptr_t ptr) except -1:
    """Metadata and address through all the array's accessors; fills cache entry `e` (unless
    NULL).  `aval` and `ptr` are what the caller already read (None and 0: not read)."""
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int64_t step = 1
    cdef int i, ndim
    cdef int32_t device_type, device_id
    cdef uint8_t code, bits
    cdef uint16_t lanes
    sharding = _locate(obj, &device_type, &device_id)
    if aval is None:
        aval = obj.aval
    shape_obj = <tuple> aval.shape
    # jax stores sub-byte types one element per byte, as the core assumes of every reader.
    if _api.dtype_of(<PyObject*> aval.dtype, &code, &bits, &lanes) != 0:
        _pending_error()
    ndim = len(shape_obj)
    if ndim > MAX_NDIM:
        raise BufferError(f"a jax array of {ndim} dimensions cannot be viewed (at most "
                          f"{MAX_NDIM})")
    for i in range(ndim - 1, -1, -1):
        shape[i] = shape_obj[i]
        strides[i] = step
        step *= shape[i] if shape[i] > 0 else 1
    if ptr == 0:
        # Before the layout: jaxlib's `_pjrt_layout` of a deleted or donated array crashes the
        # process (jax 0.10), while this raises (read_jax_array then names the problem).
        ptr = <uintptr_t> obj.unsafe_buffer_pointer()
    if ndim >= 2 and not _is_row_major(obj, ndim):
        _layout_strides(obj, shape, strides, ndim)
    # Before the entry is made: an entry names only arrays known computed.
    _wait_for_host_work(obj, device_type)
    if e != NULL and ndim <= CACHED_NDIM:
        _remember(e, obj, aval, sharding, ptr, ndim, shape, strides, code, bits, lanes,
                  device_type, device_id)
    # No Python code runs from here on: hand the extents over.
    _hand_over(out, ptr, ndim, shape, strides, code, bits, lanes, device_type, device_id)
    return 0


cdef int _read_capsule(object capsule, interop_core_tensor_info* out) except -1:
    """Describe jaxlib's DLPack capsule (unconsumed: it stays the owner of jax's tensor)."""
    if _api.describe_dlpack(<PyObject*> capsule, out) != 0:
        return _pending_error()
    return 0


cdef int _read_ordered(object obj, intptr_t consumer, interop_core_tensor_info* out) except -1:
    """Device memory, a consumer stream: PJRT makes `consumer` wait for the array's definition
    events; the view keeps jax's DLPack capsule (an external reference on the buffer)."""
    capsule = _to_capsule(obj, stream=consumer)
    _read_capsule(capsule, out)
    Py_INCREF(capsule)
    out.keepalive = <PyObject*> capsule     # a new reference, handed to the core
    out.readonly = 1
    # Relative to `consumer` the memory is ready: it is the stream the writes are ordered on.
    out.has_producer_stream = 1
    out.producer_stream = consumer
    return 0


cdef int _read(object obj, object stream, interop_core_tensor_info* out) except -1:
    cdef int32_t device_type, device_id
    if stream is None:
        return _read_fast(obj, out)
    _locate(obj, &device_type, &device_id)
    if device_type == KDL_CPU:
        return _read_fast(obj, out)  # waits for jax's CPU work: the host is the only order
    if _to_capsule is None:          # jaxlib without it: the fallback's __dlpack__(stream=s)
        return INTEROP_CORE_READ_DECLINED
    return _read_ordered(obj, <intptr_t> <Py_ssize_t> stream, out)


cdef int read_jax_array(PyObject* obj_ptr, PyObject* stream_ptr,
                        interop_core_tensor_info* out) except -1:
    cdef object obj = <object> obj_ptr
    stream = None if stream_ptr == NULL else <object> stream_ptr
    try:
        if not _ready:
            _setup(type(obj))
        return _read(obj, stream, out)
    except BufferError:
        raise
    except Exception as exc:
        _raise_if_deleted(obj, exc)
        raise


cdef int _raise_if_deleted(object obj, object exc) except -1:
    deleted = obj.is_deleted()
    if deleted:
        raise BufferError(
            "cannot view a deleted jax array: its buffer was freed by array.delete() or "
            "donated to a jitted computation (donate_argnums)") from None
    return 0


def reader_capsule():
    """The accessor reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.reader_v2"``.
    """
    return PyCapsule_New(<void*> read_jax_array, INTEROP_CORE_READER_V2_CAPSULE, NULL)


def read_with_dlpack(obj, stream=None):
    """The fallback reader: jax's own DLPack export, with the reader's clear errors.

    jax's ``__dlpack__`` orders on the consumer's stream when given one; without one it waits
    on the host until the array is ready (the fallback's cost).

    Parameters
    ----------
    obj : jax.Array
    stream : None or int
        The consumer stream, resolved by the core.

    Returns
    -------
    interop_core.StridedMemoryView
        Read-only (jax arrays are immutable).

    Raises
    ------
    BufferError
        For arrays over several devices, on another process's device, deleted or donated.
    """
    from interop_core import StridedMemoryView

    try:
        sharding = obj.sharding
        devices = sharding.device_set
        if len(devices) != 1:
            raise BufferError(_MULTI_DEVICE.format(n=len(devices)))
        if not obj.is_fully_addressable:
            raise BufferError(f"cannot view a jax array on {next(iter(devices))}: that device "
                              "belongs to another jax process, so its memory is not "
                              "addressable here")
        return StridedMemoryView.from_dlpack(obj, stream)
    except BufferError:
        raise
    except Exception as exc:
        _raise_if_deleted(obj, exc)
        raise


def producer_stream(obj):
    """Order jax's pending work on ``obj`` onto a stream, and return that stream.

    jax has no notion of a current stream that a consumer could wait on.  For device memory,
    PJRT makes jax's stream for external ready events wait for the array's definition events
    (no host wait) and that stream is returned: an event recorded on it later completes after
    jax's writes.  For host memory (the CPU backend) jax's work is not stream-ordered: the host
    waits for the array and ``None`` is returned (nothing left to order).

    Parameters
    ----------
    obj : jax.Array
        A single-device array.

    Returns
    -------
    int or None
    """
    try:
        if not _ready:
            _setup(type(obj))
        # jax's public accessors: this runs whether or not the reader passed its validation.
        sharding = obj.sharding
        devices = sharding.device_set
        if len(devices) != 1:
            raise BufferError(_MULTI_DEVICE.format(n=len(devices)))
        device = next(iter(devices))
        device_type = (<tuple> _resolve_device(device, sharding.memory_kind))[0]
        if device_type == KDL_CPU:
            _wait_for_host_work(obj, device_type)      # what every read of host memory does
            return None
        stream = _jax_stream(device)
        if stream is None:
            obj.block_until_ready()
            return None
        if _to_capsule is not None:
            _to_capsule(obj, stream=stream)
        else:
            obj.__dlpack__(stream=stream)
        return stream
    except BufferError:
        raise
    except Exception as exc:
        _raise_if_deleted(obj, exc)
        raise


cdef dict _streams = {}   # jax Device -> its stream for external ready events (int) or None


cdef object _jax_stream(object device):
    """jax's stream for external ready events on `device` (None where jax has none: CPU)."""
    if device in _streams:
        return _streams[device]
    try:
        stream = int(device.get_stream_for_external_ready_events())
    except Exception as exc:
        if "UNIMPLEMENTED" not in str(exc) and not isinstance(exc, AttributeError):
            raise
        stream = None
    _streams[device] = stream
    return stream


# --- validation (run once by the core, see interop_core/registry/_validation.py) --------------

def canaries():
    """jax arrays made like the ones users read, on jax's default device, for validation.

    Returns
    -------
    list
        Contiguous, sliced, transposed, 0-d, zero-size and many-dimensional arrays of several
        dtypes (jax materialises every slice as a new dense array).
    """
    import jax.numpy as jnp

    base = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
    return [base, base[1], base[:, 1:, ::2], base.T, jnp.zeros((), jnp.int32),
            jnp.zeros((0, 3), jnp.float32), jnp.arange(5, dtype=jnp.int8),
            jnp.ones((3, 2), jnp.bool_), jnp.ones((2, 2), jnp.complex64),
            jnp.ones((4, 3), jnp.float16), jnp.ones((2, 5), jnp.uint8),
            jnp.ones((2, 3, 1, 2, 1, 2, 2, 3), jnp.int16)]


cdef tuple _info_key(interop_core_tensor_info* info):
    """The fields of a read that describe the memory (strides left out: see prepare)."""
    shape = tuple(info.shape[i] for i in range(info.ndim))
    return (<uintptr_t> info.data, info.dtype_code, info.dtype_bits, info.dtype_lanes,
            info.device_type, info.device_id, shape)


def prepare(samples=None):
    """Check what the core's comparison with the fallback leaves out (once per process).

    Looks jax's handles up again, checks that a single-device array's ``_sharding`` is jax's
    ``SingleDeviceSharding`` (the reader's fast case), and that jaxlib's ordered export
    (``buffer_to_dlpack_managed_tensor``, what the reader calls for a consumer stream)
    describes the same memory as the accessors.  The core then compares the accessor reads
    with :func:`read_with_dlpack` on :func:`canaries`.

    Parameters
    ----------
    samples : iterable, optional
        jax arrays to check (default: :func:`canaries`).

    Returns
    -------
    dict or str
        Details when the reader may be used; otherwise why not.
    """
    cdef interop_core_tensor_info fast, ordered
    import jax.numpy as jnp

    probe = jnp.zeros(3, jnp.float32)
    _setup(type(probe))
    if type(probe._sharding) is not _single_sharding:
        return f"_sharding is a {type(probe._sharding).__name__}, not SingleDeviceSharding"
    # The reader compares `_memory_kind` (what the sharding was made with) with the last one
    # met, and resolves `memory_kind` (the public one) only for a new one.
    kind = getattr(probe._sharding, "_memory_kind", _MISSING)
    if kind is _MISSING:
        return "SingleDeviceSharding has no _memory_kind"
    if kind is not None and kind != probe._sharding.memory_kind:
        return f"_memory_kind {kind!r} != memory_kind {probe._sharding.memory_kind!r}"
    checked = 0
    if _to_capsule is not None:
        for x in (canaries() if samples is None else samples):
            memset(&fast, 0, sizeof(fast))
            memset(&ordered, 0, sizeof(ordered))
            _read_fast(x, &fast)
            a = _info_key(&fast)
            if a[6] != tuple(x.shape):
                return f"shape {a[6]} != {x.shape}"
            capsule = _to_capsule(x)
            _read_capsule(capsule, &ordered)
            b = _info_key(&ordered)
            if b != a and (x.size or b[1:] != a[1:]):
                return f"buffer_to_dlpack_managed_tensor {b} != the accessors' {a}"
            checked += 1
    return {"ordered_export": _to_capsule is not None, "ordered_reads_checked": checked,
            "direct_import": _from_capsule is not None}


# --- sharded arrays: shards() without jax's Shard objects ----------------------------------------
#
# jax's public answer, array.addressable_shards, builds a Python Shard per device and computes
# each one's index and replica id in Python (cached on the array, but recomputed for every new
# array): per shard it costs about as much again as viewing the shard.  What it computes depends
# only on the sharding and the global shape, so it is asked once per (sharding, shape) -- of
# jax's public answer -- and kept as a plan: the core's ShardLayout (indices, replica ids,
# tiling checked once) and, per slot, the device jax puts there.  Per call the array's own list
# of per-device arrays (`_arrays`, in the order of the sharding's addressable devices: the order
# jax's own __array__ relies on) is read slot by slot with the reader's accessors, each slot's
# device confirmed, and the views are made in one loop here (the core's view_from_info) rather
# than through one view() call each.  A slot that does not match the plan (another device, an
# unexpected shape) sends the call to the public path.  All of it is jax internals: the core
# validates this path once per process against the public one (prepare_shards,
# shard_canaries), and installs the public path instead if anything differs.  An array read
# again skips the plan and the accessors: see "the per-sharded-array cache" below.

cdef enum:
    MAX_PLANS = 64          # (sharding, shape) plans kept; all are forgotten when full
    SHARDS_ON_STACK = 16    # shards read with per-call scratch on the stack (more: malloc)
    SHARD_SET_BITS = 5      # the per-sharded-array cache has 1 << SHARD_SET_BITS sets of two


cdef class _ShardPlan:
    """What jax says of one (sharding, global shape), and the last objects seen per slot."""
    cdef Py_ssize_t count           # addressable shards
    cdef int ndim
    cdef object make_shards         # the core ShardLayout's bound `shards` method (owned here;
                                    # it owns the layout)
    cdef list devices               # per slot, the jax Device jax puts there (owned here)
    cdef list shard_shapes          # per slot, the shape tuple of that device's array (owned)
    cdef list kinds                 # per slot (owned here), the _memory_kind of the sharding
                                    # jax gave that device's array when planned (a
                                    # SingleDeviceSharding), else _NO_KIND
    cdef list seen_sharding         # per slot, the last per-device sharding confirmed there, or
                                    # None (owned here: compared by identity)
    cdef list seen_aval             # per slot, the last per-device aval confirmed there, or
                                    # None (owned here)
    cdef int32_t* device_types      # per slot, the DLPack device type: one malloc'd block owned
                                    # here holds this and every array below
    cdef int32_t* device_ids        # per slot, the DLPack device id (in that block)
    cdef int64_t* extents           # count x ndim block extents (in that block)
    cdef uint8_t* dtypes            # per slot, (code, bits) of the aval in seen_aval (in that block)
    cdef uint16_t* lanes            # per slot, its lanes (in that block)

    def __dealloc__(self):
        free(self.device_types)      # every per-slot array shares this one allocation


# (sharding, shape) -> _ShardPlan, or None where jax's per-device arrays are not their blocks
# (owned here, with the shardings in the keys; bounded by MAX_PLANS).
cdef dict _plans = {}
# The last plan used and its key, so that arrays of one jitted function cost one identity check
# (strong references owned here, replaced on a miss).
cdef object _last_plan_sharding = None
cdef object _last_plan_shape = None
cdef _ShardPlan _last_plan = None
cdef object _layout_type = None     # interop_core.ShardLayout, looked up once (a reference)
cdef object _public_shards = None   # interop_jax._sharded.jax_shards, the public path (a reference)


cdef object _NO_KIND = object()     # module-owned sentinel: "no memory kind planned here"


_DELETED_SHARDS = (
    "cannot read the shards of a deleted jax array: its buffers were freed by array.delete() "
    "or donated to a jitted computation (donate_argnums)")


cdef _ShardPlan _make_plan(object array, object sharding, tuple shape):
    """The plan of (sharding, shape), from jax's public answer for `array`."""
    global _layout_type
    cdef _ShardPlan plan = _ShardPlan.__new__(_ShardPlan)
    cdef Py_ssize_t k, n, d, ndim = len(shape)
    import jax
    if _layout_type is None:
        from interop_core import ShardLayout
        _layout_type = ShardLayout
    local = array.addressable_shards
    n = len(local)
    complete = jax.process_count() == 1 or sharding.is_fully_addressable
    layout = _layout_type(shape, [s.index for s in local], [s.replica_id for s in local],
                          complete=complete)
    plan.count = n
    plan.ndim = ndim
    plan.make_shards = layout.shards
    plan.devices = [s.device for s in local]
    plan.kinds = [s.data._sharding._memory_kind if type(s.data._sharding) is _single_sharding
                  else _NO_KIND for s in local]
    plan.shard_shapes = [tuple(s.data.aval.shape) for s in local]
    plan.seen_sharding = [None] * n
    plan.seen_aval = [None] * n
    cdef size_t width = ndim if ndim else 1
    cdef size_t slots = n if n else 1
    cdef char* block = <char*> malloc(slots * (2 * sizeof(int32_t) + width * sizeof(int64_t)
                                               + sizeof(uint8_t) * 2 + sizeof(uint16_t)))
    if block == NULL:
        raise MemoryError()
    plan.device_types = <int32_t*> block
    plan.device_ids = plan.device_types + slots
    plan.extents = <int64_t*> (plan.device_ids + slots)
    plan.lanes = <uint16_t*> (plan.extents + slots * width)
    plan.dtypes = <uint8_t*> (plan.lanes + slots)
    memory_kind = sharding.memory_kind
    for k in range(n):
        dev = <tuple> _resolve_device(plan.devices[k], memory_kind)
        plan.device_types[k] = dev[0]
        plan.device_ids[k] = dev[1]
        index = layout.indices[k]
        for d in range(ndim):
            plan.extents[k * ndim + d] = index[d].stop - index[d].start
        if plan.shard_shapes[k] != tuple([plan.extents[k * ndim + d] for d in range(ndim)]):
            return None          # jax's per-device array is not its block: public path only
    return plan


cdef _ShardPlan _plan_for(object array, object sharding, tuple shape):
    global _last_plan, _last_plan_sharding, _last_plan_shape
    if sharding is _last_plan_sharding and (shape is _last_plan_shape
                                            or shape == _last_plan_shape):
        return _last_plan
    key = (sharding, shape)
    try:
        found = _plans[key]
    except KeyError:
        found = _make_plan(array, sharding, shape)
        if len(_plans) >= MAX_PLANS:
            _plans.clear()
        _plans[key] = found
    except TypeError:            # an unhashable sharding: the public path
        return None
    if found is not None:
        _last_plan, _last_plan_sharding, _last_plan_shape = found, sharding, shape
    return <_ShardPlan> found


# --- the per-sharded-array cache -----------------------------------------------------------
#
# Through the plan alone a sharded array costs, besides its views, work per call that over a few
# devices weighs as much as the views: the array's `aval` and `_sharding`, the plan lookup, and
# per slot `unsafe_buffer_pointer()` (jaxlib takes and drops an external reference on the
# buffer: the dearest accessor), `aval`, the per-array cache's lookup and the device and dtype
# confirmation.  An array read again (the same parameters handed over every step) is answered
# from an entry holding what its last full read found: the plan, and per slot the address,
# strides and dtype.  Every read confirms the entry by what changes when jax changes the array:
# - the sharded array is the one the entry names through a weak reference (a new array at a
#   freed one's address is another array);
# - `_arrays` is not None (it is once the array is deleted or donated: BufferError) and holds,
#   slot by slot, the per-device arrays the entry names through weak references, by identity.
#   jaxlib keeps the per-device arrays it hands out while the array's contents stay, and
#   `_replace_with` (what jax's mutable arrays do to a whole array) hands out new ones; a dead
#   reference never matches, so a new per-device array at a freed one's address is read afresh;
# - per slot, `is_deleted()` is False: deleting or donating one per-device buffer (`delete()` on
#   a shard's `data`) leaves `_arrays` a list and the array's own `is_deleted()` False -- jaxlib
#   asks only the first buffer -- so each slot is asked (BufferError).
# A per-device array's buffer, shape and dtype are then the ones the entry read: jax changes
# them only through the whole array.  (Not seen: `_replace_with` called by hand on one
# per-device array, which jax never does; it would leave the array itself as it was.)
# prepare_shards checks once per process that jaxlib behaves so, and that cached reads of its
# canaries equal full reads; until it has, or where it finds otherwise, the cache is off.  A read
# that does not confirm goes through the plan, which refills the entry on the next read.
# The entry never keeps an array, its per-device arrays or their buffers alive: what it owns --
# weak references and the plan (shardings, devices, avals) -- holds no buffer.  A hit makes new
# views and a new Shards, as every read does (callers keep or drop what they got
# independently); the index tuples are the plan's layout's, made once.  Bounded as the per-array
# cache is: sets of two entries picked by the array's address, an entry admitted on its array's
# second read in a row of its set, replaced, never freed.  Only reads without a stream use it
# (ordered reads go through view() per piece).

cdef class _ShardedEntry:
    """What one full read of a sharded array found; never changed once in the table."""
    cdef object ref             # a weak reference to the sharded array (owned)
    cdef _ShardPlan plan        # the plan it was read through (owned; its layout makes Shards)
    cdef tuple slot_refs        # per slot, a weak reference to that per-device array (owned)
    cdef Py_ssize_t count       # slots (the plan's count, at least 1)
    cdef int ndim
    cdef uint8_t code           # the element type every slot has (DLPack code, bits, lanes)
    cdef uint8_t bits
    cdef uint16_t lanes
    cdef uintptr_t* ptrs        # per slot, the buffer's address: one malloc'd block owned here
                                # holds this and the two arrays below
    cdef int64_t* strides       # count x ndim strides, meaningful where `custom` says (in it)
    cdef uint8_t* custom        # per slot, whether its strides are not row-major (in it)

    def __dealloc__(self):
        free(self.ptrs)          # strides and custom share this one allocation


# Set by prepare_shards once jaxlib was seen to behave as the confirmation assumes.
cdef bint _sharded_cache_on = False
cdef object _sharded_cache_note = "not checked yet (prepare_shards runs on the first shards())"
# 2 << SHARD_SET_BITS entries (_ShardedEntry, or None: empty), owned here; sets of two.
cdef list _sharded_cache = [None] * (2 << SHARD_SET_BITS)
cdef uint8_t _sharded_recent[1 << SHARD_SET_BITS]     # per set, the entry hit or filled last
# Admission, as for the per-array cache: per set, the address of the sharded array last refused
# and of its first per-device array (plain numbers, never dereferenced).
cdef uintptr_t _sharded_candidate[1 << SHARD_SET_BITS]
cdef uintptr_t _sharded_candidate_data[1 << SHARD_SET_BITS]


cdef inline _ShardedEntry _sharded_entry(object array):
    """The entry naming `array` (not yet confirmed), or None."""
    cdef Py_ssize_t s = _address_set(array, SHARD_SET_BITS), i
    cdef PyObject* e
    for i in range(2):
        e = PyList_GET_ITEM(_sharded_cache, 2 * s + i)
        if (<object> e is not None
                and _referent((<_ShardedEntry> e).ref) == <PyObject*> array):
            _sharded_recent[s] = <uint8_t> i
            return <_ShardedEntry> e
    return None


cdef object _cached_shards(_ShardedEntry e, object array, object arrays):
    """`array`'s shards from its entry `e`, or None where `arrays` (its `_arrays`, just read and
    not None) are not the per-device arrays `e` read: then the plan reads them."""
    cdef Py_ssize_t k, n = e.count
    cdef int ndim = e.ndim
    if type(arrays) is not list or PyList_GET_SIZE(arrays) != n:
        return None
    for k in range(n):
        if (_referent(<object> PyTuple_GET_ITEM(e.slot_refs, k))
                != PyList_GET_ITEM(arrays, k)):
            return None
    for k in range(n):
        a = <object> PyList_GET_ITEM(arrays, k)
        if _deleted_method(a) if type(a) is _accessor_type else a.is_deleted():
            raise BufferError(_DELETED_SHARDS)
    # `arrays` holds each per-device array: the view takes it as owner, as a full read does.
    views = [_slot_view(e.plan, k, PyList_GET_ITEM(arrays, k), e.ptrs[k],
                        e.strides + k * ndim if e.custom[k] else NULL, e.code, e.bits, e.lanes)
             for k in range(n)]
    return e.plan.make_shards(views, None, array)


cdef object _slot_view(_ShardPlan plan, Py_ssize_t k, PyObject* owner, uintptr_t ptr,
                       const int64_t* strides, uint8_t code, uint8_t bits, uint16_t lanes):
    """The view of slot `k` of `plan`: `owner`'s buffer at `ptr`, of the slot's block extents
    and device; `strides` NULL for row-major (the core computes them)."""
    cdef interop_core_tensor_info info
    cdef PyObject* made
    memset(&info, 0, sizeof(info))
    info.strides = strides
    info.data = <void*> ptr
    info.ndim = plan.ndim
    info.shape = plan.extents + k * plan.ndim
    info.dtype_code = code
    info.dtype_bits = bits
    info.dtype_lanes = lanes
    info.device_type = plan.device_types[k]
    info.device_id = plan.device_ids[k]
    info.readonly = 1
    made = _api.view_from_info(owner, &info)
    if made == NULL:
        _pending_error()
    v = <object> made
    Py_XDECREF(made)             # <object> took its own reference
    return v


cdef inline bint _admit_shards(object array, object first) noexcept:
    """Whether `array` (whose first per-device array is `first`) gets an entry: on its second
    read in a row of its set, not its first."""
    return _second_read(_sharded_candidate, _sharded_candidate_data,
                        _address_set(array, SHARD_SET_BITS), array,
                        <uintptr_t> <PyObject*> first)


cdef inline PyObject* _sharded_target(Py_ssize_t i) noexcept:
    """The sharded array entry `i` names; NULL when empty or when that array is gone."""
    cdef PyObject* e = PyList_GET_ITEM(_sharded_cache, i)
    if <object> e is None:
        return NULL
    return _referent((<_ShardedEntry> e).ref)


cdef Py_ssize_t _sharded_victim(object array) noexcept:
    """The entry of `array`'s set to fill for it (see _way_to_fill)."""
    cdef Py_ssize_t s = _address_set(array, SHARD_SET_BITS)
    return 2 * s + _way_to_fill(_sharded_target(2 * s), _sharded_target(2 * s + 1), array,
                                &_sharded_recent[s])


cdef int _remember_shards(object array, list arrays, _ShardPlan plan, const uintptr_t* ptrs,
                          const int64_t* strides, const uint8_t* custom) except -1:
    """Fill an entry for `array` from the full read just made through `plan`."""
    cdef Py_ssize_t n = plan.count
    cdef int ndim = plan.ndim
    cdef size_t width = ndim if ndim else 1
    cdef _ShardedEntry e = _ShardedEntry.__new__(_ShardedEntry)
    e.ptrs = <uintptr_t*> malloc(n * (sizeof(uintptr_t) + width * sizeof(int64_t) + 1))
    if e.ptrs == NULL:
        raise MemoryError()
    e.strides = <int64_t*> (e.ptrs + n)
    e.custom = <uint8_t*> (e.strides + n * width)
    memcpy(e.ptrs, ptrs, n * sizeof(uintptr_t))
    memcpy(e.strides, strides, n * ndim * sizeof(int64_t))
    memcpy(e.custom, custom, n)
    e.count = n
    e.ndim = ndim
    # make_shards checked every slot's dtype against the first: the last slot's names the
    # element type of all.
    e.code = plan.dtypes[2 * (n - 1)]
    e.bits = plan.dtypes[2 * (n - 1) + 1]
    e.lanes = plan.lanes[n - 1]
    e.plan = plan
    try:
        e.ref = PyWeakref_NewRef(array, None)
        e.slot_refs = tuple([PyWeakref_NewRef(a, None) for a in arrays])
    except TypeError:           # an object without weak references (a stand-in): not cached
        return 0
    # Nothing runs between choosing the entry and storing it; the old one is released after.
    _sharded_cache[_sharded_victim(array)] = e
    return 0


cdef bint _slot_matches(_ShardPlan plan, Py_ssize_t k, object sharding,
                        object aval) except -1:
    """Whether a per-device array whose `_sharding` and `aval` are these sits where the plan
    says slot `k` is (caches what it saw)."""
    cdef uint8_t code, bits
    cdef uint16_t lanes
    cdef bint same_kind
    if sharding is not plan.seen_sharding[k]:
        # Every new array has new per-device shardings: the device by identity (jax's devices
        # are unique) and the memory kind as planned are enough; anything else is resolved as
        # the reader resolves it and compared with the plan.
        if type(sharding) is _single_sharding:
            device = sharding._device
            kind = sharding._memory_kind
            same_kind = kind is plan.kinds[k] or kind == plan.kinds[k]
        else:
            # An array over one device under another sharding type (a one-device mesh): its
            # device as jax's own _get_device finds it.
            devices = sharding._internal_device_list
            if len(devices) != 1:
                return False
            device = devices[0]
            same_kind = False
        if device is not plan.devices[k]:
            return False
        if not same_kind:
            dev = <tuple> _resolve_device(device, sharding.memory_kind)
            if dev[0] != plan.device_types[k] or dev[1] != plan.device_ids[k]:
                return False
        plan.seen_sharding[k] = sharding
    if aval is not plan.seen_aval[k]:
        if aval.shape != plan.shard_shapes[k]:
            return False
        if _api.dtype_of(<PyObject*> aval.dtype, &code, &bits, &lanes) != 0:
            _pending_error()
        plan.dtypes[2 * k] = code
        plan.dtypes[2 * k + 1] = bits
        plan.lanes[k] = lanes
        plan.seen_aval[k] = aval
    return True


cdef object _read_shards(object array, object stream):
    cdef Py_ssize_t k, n
    cdef int ndim
    cdef _ShardPlan plan
    cdef uintptr_t stack_ptrs[SHARDS_ON_STACK]
    cdef int64_t stack_strides[SHARDS_ON_STACK * CACHED_NDIM]
    cdef uint8_t stack_custom[SHARDS_ON_STACK]
    cdef uintptr_t* ptrs = stack_ptrs
    cdef int64_t* strides = stack_strides
    cdef uint8_t* custom = stack_custom
    cdef char* block = NULL
    cdef bint admitted
    cdef _ShardedEntry entry
    arrays = array._arrays
    if arrays is None:
        raise BufferError(_DELETED_SHARDS)
    if stream is None and _sharded_cache_on:
        entry = _sharded_entry(array)
        if entry is not None:
            found = _cached_shards(entry, array, arrays)
            if found is not None:
                return found
    aval = array.aval
    plan = _plan_for(array, array._sharding, <tuple> aval.shape)
    if plan is None or type(arrays) is not list or len(<list> arrays) != plan.count:
        return None
    n = plan.count
    ndim = plan.ndim
    admitted = (stream is None and n > 0 and ndim <= CACHED_NDIM and _sharded_cache_on
                and _admit_shards(array, (<list> arrays)[0]))
    if n > SHARDS_ON_STACK or ndim > CACHED_NDIM:
        block = <char*> malloc(n * (sizeof(uintptr_t) + ndim * sizeof(int64_t) + 1) + 1)
        if block == NULL:
            raise MemoryError()
        ptrs = <uintptr_t*> block
        strides = <int64_t*> (ptrs + n)
        custom = <uint8_t*> (strides + n * ndim)
    try:
        # Every slot is confirmed before any view is made: a mismatch means the public path.
        for k in range(n):
            if not _read_slot(plan, k, (<list> arrays)[k], stream is None, &ptrs[k],
                              strides + k * ndim, &custom[k]):
                return None
        if n == 0:
            return plan.make_shards(arrays, stream, array, dtype=aval.dtype)
        if stream is not None:
            # Ordered reads go through view() per piece, as the public path does (the reader
            # orders each on its device's stream, or waits for jax's CPU work).
            return plan.make_shards(arrays, stream, array)
        views = [_slot_view(plan, k, PyList_GET_ITEM(arrays, k), ptrs[k],
                            strides + k * ndim if custom[k] else NULL, plan.dtypes[2 * k],
                            plan.dtypes[2 * k + 1], plan.lanes[k]) for k in range(n)]
        found = plan.make_shards(views, None, array)
        if admitted:
            _remember_shards(array, <list> arrays, plan, ptrs, strides, custom)
        return found
    finally:
        free(block)


cdef bint _read_slot(_ShardPlan plan, Py_ssize_t k, object a, bint want_extents,
                     uintptr_t* ptr, int64_t* strides, uint8_t* custom) except -1:
    """Confirm per-device array `a` against slot `k` of the plan; with `want_extents`, its
    address (host memory waited for), and its strides where they are not row-major (`custom`).
    A per-device array read before is answered from the reader's cache (its sharding and aval
    as the entry says)."""
    cdef _Entry* e
    cdef int ndim = plan.ndim
    cdef int64_t step = 1
    cdef int i
    if not want_extents:
        return _slot_matches(plan, k, a._sharding, a.aval)
    # The address first: it raises for a deleted array, whose layout jaxlib cannot read.
    if type(a) is _accessor_type:
        ptr[0] = <uintptr_t> _pointer_method(a)
        aval = _aval_getter(a)
    else:
        ptr[0] = <uintptr_t> a.unsafe_buffer_pointer()
        aval = a.aval
    e = NULL if _cache_off else _find(a, aval, ptr[0])
    if e != NULL and e.ndim == ndim:
        sharding = <object> e.sharding
        custom[0] = 0
        for i in range(ndim - 1, -1, -1):
            if e.strides[i] != step:
                custom[0] = 1
            step *= e.shape[i] if e.shape[i] > 0 else 1
        # A hit's entry holds what the accessors said of this array (shape and dtype are its
        # aval's): _slot_matches compares them with the plan, by identity once seen.
        if not _slot_matches(plan, k, sharding, aval):
            return False
        if custom[0]:
            memcpy(strides, e.strides, ndim * sizeof(int64_t))
        return True
    sharding = a._sharding
    if not _slot_matches(plan, k, sharding, aval):
        return False
    # A hit above was made after this wait; the sharded array's entry after every slot's.
    _wait_for_host_work(a, plan.device_types[k])
    custom[0] = 0
    if ndim >= 2 and not _is_row_major(a, ndim):
        _layout_strides(a, plan.extents + k * ndim, strides, ndim)
        custom[0] = 1
    else:
        for i in range(ndim - 1, -1, -1):
            strides[i] = step
            step *= plan.extents[k * ndim + i] if plan.extents[k * ndim + i] > 0 else 1
    e = NULL if _cache_off or ndim > CACHED_NDIM else _admit(a, ptr[0])
    if e != NULL:
        _remember(e, a, aval, sharding, ptr[0], ndim, plan.extents + k * ndim, strides,
                  plan.dtypes[2 * k], plan.dtypes[2 * k + 1], plan.lanes[k],
                  plan.device_types[k], plan.device_ids[k])
    return True


cdef bint _is_partly_deleted(object array):
    """Whether any buffer of `array` was deleted or donated (jaxlib's `is_deleted()` asks only
    the first one; a shard's `data` may be deleted alone)."""
    try:
        if array.is_deleted():
            return True
        arrays = array._arrays
        return arrays is None or any([a.is_deleted() for a in arrays])
    except Exception:
        return False            # not a jax array as we know it: its own error stands


def read_shards(array, stream=None):
    """The addressable shards of a jax array, without jax's ``Shard`` objects (the fast path).

    ``registry.add_sharded_type`` callable.  Reads jax internals (the array's per-device arrays
    and the reader's accessors), validated once per process against :func:`jax_shards
    <interop_jax._sharded.jax_shards>` (the public path), which also serves any array whose
    per-device arrays do not sit where the plan of its sharding says.

    Parameters
    ----------
    array : jax.Array
    stream : None, int, stream object or dict, optional
        The consumer stream(s), as :func:`interop_core.shards` takes them.

    Returns
    -------
    interop_core.Shards

    Raises
    ------
    BufferError
        If the array, or any of its per-device buffers, was deleted or donated.
    """
    global _public_shards
    try:
        if not _ready:
            _setup(type(array))
        found = _read_shards(array, stream)
    except BufferError:
        raise
    except Exception as exc:
        if _is_partly_deleted(array):
            raise BufferError(_DELETED_SHARDS) from None
        raise
    if found is None:
        if _public_shards is None:
            from interop_jax._sharded import jax_shards
            _public_shards = jax_shards
        found = _public_shards(array, stream)
    return found


def shard_canaries():
    """Sharded jax arrays over this process's devices of jax's default backend (validation).

    Returns
    -------
    list
        Split by rows, by columns and both ways, fully and partially replicated, on one device,
        of several dtypes and ranks, empty, and a jitted computation's output (whose per-device
        arrays jax arranges without checks).
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    devices = jax.local_devices()
    n = len(devices)
    line = Mesh(np.array(devices), ("x",))
    rows = NamedSharding(line, PartitionSpec("x"))
    # 2n x 2n: every mesh below divides both dimensions.
    base = np.arange(4 * n * n, dtype=np.float32).reshape(2 * n, 2 * n)
    out = [jax.device_put(base, rows),
           jax.device_put(np.ascontiguousarray(base.T), NamedSharding(line, PartitionSpec(None, "x"))),
           jax.device_put(base, NamedSharding(line, PartitionSpec())),
           jax.device_put(base[:2], SingleDeviceSharding(devices[n - 1])),
           jax.device_put(base.astype(np.int8), rows),
           jax.device_put(base > 7, rows),
           jax.device_put(base.astype(np.float16), rows),
           jax.device_put(base.astype(np.complex64), rows),
           jax.device_put(base.reshape(-1), rows),
           jax.device_put(np.zeros((0, 2 * n), np.float32), rows),
           jax.device_put(base.reshape(2, n, 2 * n),
                          NamedSharding(line, PartitionSpec(None, "x"))),
           jax.jit(jax.numpy.negative)(jax.device_put(base, rows))]
    if n >= 4 and n % 2 == 0:
        grid = Mesh(np.array(devices).reshape(2, n // 2), ("x", "y"))
        out += [jax.device_put(base, NamedSharding(grid, PartitionSpec("x", "y"))),
                jax.device_put(base, NamedSharding(grid, PartitionSpec("x"))),
                jax.device_put(base, NamedSharding(grid, PartitionSpec(None, "y")))]
    return out


def prepare_shards():
    """Check what the comparison with the public path leaves out (once per process).

    The fast path reads the reader's accessors too, so it is used only where the reader passed
    its own validation; it also needs each array's per-device arrays (``_arrays``) to be jax's
    own shards' data, in order, each on a ``SingleDeviceSharding``.  The core then splits
    :func:`shard_canaries` both ways and compares.  It also turns the per-sharded-array cache
    on where jaxlib behaves as the cache's confirmation assumes and cached reads of the
    canaries equal full reads (off otherwise: every read is then a full one).

    Returns
    -------
    dict or str
        Details when the fast path may be used (``sharded_cache``: ``"on: ..."`` or
        ``"off: why"``); otherwise why not.
    """
    import jax

    from interop_core import plugins

    probe = jax.device_put(jax.numpy.zeros(3, jax.numpy.float32))
    _setup(type(probe))
    entry = plugins.reader_for(type(probe))
    if entry is None or entry.reader is read_with_dlpack:
        return ("the jax reader did not pass its validation in this process (see doctor), and "
                "the sharded path reads the same accessors")
    checked = 0
    samples = shard_canaries()
    for x in samples:
        arrays = x._arrays
        local = x.addressable_shards
        if type(arrays) is not list or len(arrays) != len(local):
            return f"_arrays is {type(arrays).__name__}, not a list of the {len(local)} shards"
        for a, shard in zip(arrays, local):
            if a is not shard.data:
                return "_arrays does not hold jax's own shards' data, in their order"
            if (type(a._sharding) is _single_sharding and a._sharding._device is not shard.device
                    or tuple(a._sharding._internal_device_list) != (shard.device,)):
                return f"a per-device array's _sharding is {a._sharding!r}, not {shard.device}'s"
        checked += 1
    return {"plans": "one per (sharding, global shape), from addressable_shards",
            "arrays_checked": checked, "devices": len(jax.local_devices()),
            "sharded_cache": _check_sharded_cache(samples)}


cdef tuple _split_key(object found):
    return tuple([(s.view.ptr, s.view.shape, s.view.strides, s.view.dlpack_dtype, s.device,
                   s.view.owner, s.index, s.replica) for s in found])


cdef str _check_sharded_cache(list samples):
    """Turn the per-sharded-array cache on where jaxlib behaves as its confirmation assumes and
    its cached reads of `samples` equal full reads; returns what was found (for doctor)."""
    global _sharded_cache_on, _sharded_cache_note
    cdef _ShardedEntry entry
    _sharded_cache_on = False
    try:
        why = _sharded_cache_refusal()
        hits = 0
        if why is None:
            _sharded_cache_on = True
            for x in samples:
                full = _read_shards(x, None)
                if full is None:            # the public path's (the plan does not fit)
                    continue
                _read_shards(x, None)       # admitted on this second read
                entry = _sharded_entry(x)
                cached = None if entry is None else _cached_shards(entry, x, x._arrays)
                if cached is None:
                    why = "a sharded array read twice is not answered from the cache"
                elif _split_key(cached) != _split_key(full):
                    why = (f"a cached read {_split_key(cached)} differs from the full read "
                           f"{_split_key(full)}")
                if why is not None:
                    break
                hits += 1
        if why is None:
            _sharded_cache_note = f"on: {hits} cached reads agree with full reads"
            return _sharded_cache_note
    except Exception as exc:
        why = f"checking it raised {type(exc).__name__}: {exc}"
    _sharded_cache_on = False
    _sharded_cache_note = f"off: {why}"
    return _sharded_cache_note


cdef str _sharded_cache_refusal():
    """Why the cache's confirmation would miss a change of a sharded array on this jaxlib, or
    None."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if _accessor_type is None:
        return "jax's array type has no accessors bound (see _bind_accessors)"
    devices = jax.local_devices()
    rows = NamedSharding(Mesh(np.array(devices), ("x",)), PartitionSpec("x"))
    base = np.arange(4 * len(devices), dtype=np.float32)
    x = jax.device_put(base, rows)
    arrays = x._arrays
    if type(arrays) is not list or any([a is not b for a, b in zip(arrays, x._arrays)]):
        return "_arrays hands out new per-device arrays on every call"
    last = len(devices) - 1
    arrays[last].delete()
    if x._arrays is not None and not (x._arrays[last] is arrays[last]
                                      and _deleted_method(arrays[last]) is True):
        return "a deleted per-device array is neither dropped from _arrays nor reported deleted"
    if hasattr(x, "_replace_with"):
        x = jax.device_put(base, rows)
        before = x._arrays
        x._replace_with(jax.device_put(base + 1, rows))
        after = x._arrays
        if after is None or any([a is b for a, b in zip(before, after)]):
            return "_replace_with keeps the per-device arrays, or leaves no _arrays"
    return None


# --- exporting: to(x, "jax") -------------------------------------------------------------------

# (DLPack device type, id) -> (jax Device, jax's stream for it or None), for the platforms whose
# import was checked; None for a device the direct import does not take (then the plugin's
# jax.dlpack.from_dlpack path does).
cdef dict _import_targets = {}
cdef dict _platform_checks = {}       # platform -> (ok, reason) of the once-per-platform check
cdef object _slow_export = None       # interop_jax.export_jax_slow (jax.dlpack.from_dlpack)


cdef object _platform_of(int32_t device_type):
    if device_type == KDL_CPU:
        return "cpu"
    if device_type == KDL_CUDA or device_type == KDL_CUDA_HOST:
        return "gpu"
    if device_type == KDL_ROCM or device_type == KDL_ROCM_HOST:
        return "rocm"
    return None


cdef object _import_target(int32_t device_type, int32_t device_id):
    key = (device_type, device_id)
    if key in _import_targets:
        return _import_targets[key]
    target = None
    platform = _platform_of(device_type)
    if platform is not None and _check_platform(platform):
        import jax
        host = device_type in (KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST)
        for device in jax.local_devices(backend=platform):
            if host or device.local_hardware_id == device_id:
                # Host kinds: jax imports them without a stream, as jax.dlpack.from_dlpack does.
                target = (device, None if host else _jax_stream(device))
                break
    _import_targets[key] = target
    return target


cdef bint _is_compact(int ndim, const int64_t* shape, const int64_t* strides) noexcept:
    """Strides that permute a dense layout (what jax's DLPack import takes)."""
    cdef int i, j
    cdef int64_t expected = 1
    cdef int best
    cdef bint used[MAX_NDIM]
    for i in range(ndim):
        used[i] = False
        if shape[i] == 0:
            return True
    for i in range(ndim):
        # The unused dimension of extent > 1 with the smallest stride must have stride `expected`.
        best = -1
        for j in range(ndim):
            if not used[j] and shape[j] > 1 and (best < 0 or strides[j] < strides[best]):
                best = j
        if best < 0:
            return True
        if strides[best] != expected:
            return False
        used[best] = True
        expected *= shape[best]
    return True


cdef object _direct_import(object view, tuple target):
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int i, ndim
    shape_obj = view.shape
    strides_obj = view.strides
    ndim = len(shape_obj)
    for i in range(ndim):
        shape[i] = shape_obj[i]
        strides[i] = strides_obj[i]
    return _import_extents(view, target, ndim, shape, strides, view.dlpack_dtype,
                           view.device_type, view.device_id)


cdef object _import_extents(object view, tuple target, int ndim, const int64_t* shape,
                            const int64_t* strides, tuple dtype, int32_t device_type,
                            int32_t device_id):
    device, stream = target
    if stream is not None:
        view.sync(stream)      # the producer, before jax's stream
    # The core's legacy capsule over the view, holding it (jax never writes into an import,
    # so read-only views go too).
    cdef PyObject* made = _api.legacy_capsule_for_immutable_consumer(<PyObject*> view)
    if made == NULL:
        _pending_error()
    capsule = <object> made
    Py_XDECREF(made)        # <object> took its own reference
    try:
        # copy=False: jaxlib raises rather than copying what it cannot alias.
        return _from_capsule(capsule, device, stream, False, device_type)
    except Exception as exc:
        if type(exc).__name__ not in ("XlaRuntimeError", "JaxRuntimeError", "ValueError"):
            raise
        raise BufferError(f"jax cannot import this view onto {device} without a copy: "
                          f"{exc}") from exc


def to_jax(view not None, stream=None, device=None):
    """A ``jax.Array`` over the memory of ``view`` (same pointer), keeping ``view`` alive.

    One jaxlib call (``dlpack_managed_tensor_to_buffer``, told never to copy) with the device
    and jax's stream for external ready events cached per device; device memory is first
    ordered before that stream (as ``jax.dlpack.from_dlpack`` does).  A platform whose
    once-per-platform check failed takes the plugin's ``jax.dlpack.from_dlpack`` path.  It
    never copies: what jax could only take as a copy is refused (``to()`` checks the plugin's
    :func:`import_limits` first and hands over a copy where the call allows one).

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : optional
        Accepted for the exporter protocol: ``to()`` has already ordered the view on it.
    device : jax.Device, optional
        The jax device to import onto (what :func:`resolve_device` returned for ``to(...,
        device=)``): one of jax's host devices for host memory, the GPU the memory is on for
        device memory.  None: the device the memory is on (host memory: jax's first CPU
        device).

    Returns
    -------
    jax.Array

    Raises
    ------
    BufferError
        If jax could take the view only as a copy or a conversion: a layout that is not
        compact (a permutation of a dense array), host memory not aligned to 64 bytes, 64-bit
        types without ``jax_enable_x64``; or not at all: vector and padded sub-byte element
        types, memory that is not on ``device``.
    """
    global _slow_export
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int i, ndim
    cdef int32_t device_type, device_id
    cdef int64_t volume = 1
    shape_obj = view.shape
    strides_obj = view.strides
    ndim = len(shape_obj)
    for i in range(ndim):
        shape[i] = shape_obj[i]
        strides[i] = strides_obj[i]
        volume *= shape[i]
    if not _is_compact(ndim, shape, strides):
        raise BufferError(
            f"jax imports only compact layouts (a transposition of a dense array); this view "
            f"has shape {shape_obj} and strides {strides_obj}: make it contiguous first "
            "(interop_core.to(x, 'jax') hands jax a copy)")
    device_type = view.device_type
    device_id = view.device_id
    dtype = <tuple> view.dlpack_dtype
    itemsize = view.itemsize
    if dtype[2] != 1:
        raise BufferError(f"jax cannot hold vector element types (DLPack {dtype})")
    if dtype[1] * dtype[2] < 8:
        raise BufferError("padded sub-byte element types need a versioned DLPack capsule, "
                          "which jax does not take")
    if _is_64_bit(dtype[0], itemsize):
        refused = x64_refusal(view)
        if refused is not None:
            raise BufferError(refused)
    if (volume and (device_type == KDL_CPU or device_type == KDL_CUDA_HOST
                    or device_type == KDL_ROCM_HOST) and view.ptr % JAX_HOST_ALIGNMENT):
        raise BufferError(
            f"jax imports only host memory aligned to {JAX_HOST_ALIGNMENT} bytes without a "
            f"copy; this view's address is {view.ptr:#x} (interop_core.to(x, 'jax') hands jax "
            "an aligned copy)")
    if device is not None:
        target = _device_target(view, device)
    else:
        target = _import_target(device_type, device_id)
    if target is None:
        if _slow_export is None:
            from interop_jax import export_jax_slow
            _slow_export = export_jax_slow
        return _slow_export(view, stream)
    if device is not None and (<tuple> target)[1] is None and device_type != KDL_CPU:
        # Pinned host memory onto one of jax's CPU devices: it is host memory to jax.
        from interop_core import StridedMemoryView
        view = StridedMemoryView.from_pointer(view.ptr, shape_obj, strides_obj, dtype=dtype,
                                              device=(KDL_CPU, 0), readonly=view.readonly,
                                              owner=view)
        device_type = KDL_CPU
    return _import_extents(view, <tuple> target, ndim, shape, strides, dtype, device_type,
                           device_id)


cdef enum:
    JAX_HOST_ALIGNMENT = 64      # jax's CPU backend aliases host memory only at this alignment


cdef object _device_target(object view, object device):
    """(device, jax's stream or None) for importing `view` onto the jax device `device`."""
    platform = device.platform
    host = view.device_type in (KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST)
    if platform == "cpu":
        if not host:
            raise BufferError(f"the view is on DLPack device ({view.device_type}, "
                              f"{view.device_id}), not in host memory: it cannot be imported "
                              f"onto {device} (to(x, 'jax', device=...) copies it there)")
        return (device, None)
    if host or view.device_id != device.local_hardware_id or (
            platform in ("gpu", "cuda") and view.device_type != KDL_CUDA) or (
            platform == "rocm" and view.device_type != KDL_ROCM):
        raise BufferError(f"the view is on DLPack device ({view.device_type}, "
                          f"{view.device_id}), not on {device}: it cannot be imported there "
                          "without a copy (to(x, 'jax', device=...) makes it)")
    return (device, _jax_stream(device))


# DLPack (code, bits, lanes) of the types jax turns into 32-bit ones without jax_enable_x64.
cdef tuple _X64_TYPES = ((0, 64, 1), (1, 64, 1), (2, 64, 1), (5, 128, 1))
cdef dict _NARROWED = {(0, 64, 1): "int32", (1, 64, 1): "uint32", (2, 64, 1): "float32",
                       (5, 128, 1): "complex64"}


def x64_refusal(view):
    """Why jax cannot take ``view`` as it is configured, or None: a 64-bit element type while
    ``jax_enable_x64`` is off (jax would turn it into a 32-bit one: another array, not a copy).

    The dynamic check of :func:`import_limits` (asked only for 64-bit types).

    Parameters
    ----------
    view : interop_core.StridedMemoryView

    Returns
    -------
    str or None
    """
    if _x64_enabled():
        return None
    triple = tuple(view.dlpack_dtype)
    narrowed = _NARROWED.get(triple)
    if narrowed is None:
        return None
    return (f"jax is running without 64-bit types (jax_enable_x64 is off): it would turn this "
            f"{view.dtype} array into {narrowed}, a different array rather than a copy, so it is "
            "not handed over; enable them first with jax.config.update('jax_enable_x64', True), "
            f"or convert the source to {narrowed} yourself")


cdef dict _DEVICE_PLATFORMS = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "rocm": "rocm"}
cdef dict _DLPACK_PLATFORMS = {KDL_CPU: "cpu", KDL_CUDA: "gpu", KDL_ROCM: "rocm"}


def resolve_device(device):
    """Where ``to(x, "jax", device=device)`` puts the result: ``(DLPack device type, device
    id, jax device)`` (``ImportLimits.resolve_device`` of :func:`import_limits`).

    Parameters
    ----------
    device : jax.Device, jax.sharding.Sharding, str, tuple or device object
        A jax device, or a sharding over one; ``"cpu"`` / ``"cpu:N"`` (the N-th of jax's local
        CPU devices: several with ``XLA_FLAGS=--xla_force_host_platform_device_count``),
        ``"cuda:N"`` / ``"gpu:N"`` / ``"rocm:N"``, a DLPack ``(device_type, device_id)`` pair,
        or an object whose ``str()`` is such a name (``torch.device``).

    Returns
    -------
    tuple
        ``(1, 0, cpu_device)`` for jax's CPU devices (they all read host memory), ``(2, N,
        gpu_device)`` for the GPU with CUDA ordinal N, ``(10, N, ...)`` for ROCm.

    Raises
    ------
    ValueError
        For a device jax does not have here, a sharding over several devices, or a spelling
        that names no jax device.
    """
    import jax

    if isinstance(device, jax.sharding.Sharding):
        devices = device.device_set
        if len(devices) != 1:
            raise ValueError(f"device={device!r}: to(x, 'jax') places onto one device; this "
                             f"sharding has {len(devices)} (assemble shards with "
                             "to(shards, 'jax', sharding=...))")
        device = next(iter(devices))
    if isinstance(device, jax.Device):
        return _dlpack_of_jax_device(device) + (device,)
    if isinstance(device, tuple) and len(device) == 2:
        kind, ordinal = device
        if (type(kind) is bool or type(ordinal) is bool or not isinstance(kind, int)
                or not isinstance(ordinal, int)):
            raise TypeError(f"device tuple must hold two ints, got {device!r}")
        platform = _DLPACK_PLATFORMS.get(int(kind))
        if platform is None:
            raise ValueError(f"device={device!r}: jax imports DLPack device types 1 (CPU), 2 "
                             f"(CUDA) and 10 (ROCm), not {int(kind)}")
        ordinal = int(ordinal)
    else:
        text = device if isinstance(device, str) else str(device)
        name, _, index = text.partition(":")
        platform = _DEVICE_PLATFORMS.get(name)
        if platform is None:
            raise ValueError(f"unknown device {device!r} for jax; expected a jax device, 'cpu', "
                             "'cpu:N', 'cuda:N', 'rocm:N' or a (device_type, device_id) pair")
        try:
            ordinal = int(index) if index else 0
        except ValueError:
            raise ValueError(f"device ordinal in {device!r} is not an integer") from None
    if ordinal < 0:
        raise ValueError(f"device={device!r}: the ordinal must be >= 0")
    try:
        local = jax.local_devices(backend=platform)
    except RuntimeError:
        raise ValueError(f"device={device!r}: jax has no {platform} backend here") from None
    if platform == "cpu":
        if ordinal >= len(local):
            raise ValueError(
                f"device={device!r}: jax has {len(local)} CPU device(s) here, so ordinal "
                f"{ordinal} names none (XLA_FLAGS=--xla_force_host_platform_device_count=N "
                "makes N)")
        chosen = local[ordinal]
    else:
        found = [d for d in local if d.local_hardware_id == ordinal]
        if not found:
            raise ValueError(f"device={device!r}: jax has no {platform} device with hardware "
                             f"ordinal {ordinal} here (it has "
                             f"{sorted(d.local_hardware_id for d in local)})")
        chosen = found[0]
    return _dlpack_of_jax_device(chosen) + (chosen,)


cdef tuple _dlpack_of_jax_device(object device):
    import jax

    if device.process_index != jax.process_index():
        raise ValueError(f"device={device!r} belongs to process {device.process_index}, not "
                         "this one: jax imports only onto this process's devices")
    platform = device.platform
    if platform == "cpu":
        return (KDL_CPU, 0)
    if platform in ("gpu", "cuda"):
        return (KDL_CUDA, int(device.local_hardware_id))
    if platform == "rocm":
        return (KDL_ROCM, int(device.local_hardware_id))
    raise ValueError(f"device={device!r}: jax's {platform!r} devices cannot import memory "
                     "through DLPack")


def import_limits():
    """The :class:`interop_core.ImportLimits` of ``to(x, "jax")``.

    Found by experiment (jax 0.10, CPU; CUDA per jaxlib's DLPack import): compact layouts
    only, host memory aligned to 64 bytes (jax copies other host memory), 64-bit types only
    with ``jax_enable_x64`` (:func:`x64_refusal`), host, CUDA and ROCm memory; jax devices,
    ``"cpu:N"`` and DLPack pairs as ``device=`` (:func:`resolve_device`).

    Returns
    -------
    interop_core.ImportLimits
    """
    from interop_core import ImportLimits

    return ImportLimits(layout="compact", host_alignment=JAX_HOST_ALIGNMENT,
                        device_types=(KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST),
                        check=x64_refusal, check_dtypes=_X64_TYPES,
                        resolve_device=resolve_device)


cdef bint _is_64_bit(int code, Py_ssize_t itemsize) noexcept:
    """Element types jax converts to 32 bits unless jax_enable_x64 is set."""
    return (itemsize == 8 and code != 5) or (itemsize == 16 and code == 5)


cdef bint _x64_enabled() except -1:
    import jax
    return bool(jax.config.jax_enable_x64)


cdef bint _check_platform(str platform) except -1:
    """Compare the direct import with jax.dlpack.from_dlpack once for `platform`."""
    checked = _platform_checks.get(platform)
    if checked is None:
        try:
            why = _compare_imports(platform)
        except Exception as exc:
            why = f"the check raised {type(exc).__name__}: {exc}"
        checked = _platform_checks[platform] = (why is None, why or
                                                "direct import matches jax.dlpack.from_dlpack")
    return (<tuple> checked)[0]


cdef str _compare_imports(str platform):
    import jax
    import jax.dlpack
    import jax.numpy as jnp
    import numpy as np

    from interop_core import StridedMemoryView as SMV, view as view_of

    if not _ready:
        _setup(None)
    if _from_capsule is None:
        return "jaxlib has no dlpack_managed_tensor_to_buffer"
    try:
        device = jax.local_devices(backend=platform)[0]
    except RuntimeError:
        return f"jax has no {platform} backend"

    base = jax.device_put(jnp.arange(24, dtype=jnp.float32).reshape(4, 6), device)
    samples = [base, base.astype(jnp.int8), base.astype(jnp.bool_), base.astype(jnp.float16),
               base.astype(jnp.complex64), base[1, 2], base[:0]]
    host = device.platform == "cpu"
    for x in samples:
        v = view_of(x)
        views = [v]
        if v.ndim == 2:    # the transposition, as jax imports it (a custom layout)
            views.append(SMV.from_pointer(v.ptr, v.shape[::-1], v.strides[::-1],
                                          dtype=v.dlpack_dtype,
                                          device=(v.device_type, v.device_id), owner=v))
        for one in views:
            target = (device, None if host else _jax_stream(device))
            mine = _direct_import(one, target)
            twin = SMV.from_pointer(one.ptr, one.shape, one.strides, dtype=one.dlpack_dtype,
                                    device=(one.device_type, one.device_id), readonly=False,
                                    owner=one)
            ref = jax.dlpack.from_dlpack(twin)
            a = (type(mine), mine.dtype, mine.shape, mine.sharding, mine.committed,
                 mine.aval.weak_type, mine.format)
            b = (type(ref), ref.dtype, ref.shape, ref.sharding, ref.committed,
                 ref.aval.weak_type, ref.format)
            if a != b:
                return f"direct import {a} != jax.dlpack.from_dlpack {b}"
            if one.size and mine.unsafe_buffer_pointer() != ref.unsafe_buffer_pointer():
                return "the direct import and jax.dlpack.from_dlpack gave different buffers"
            if not np.array_equal(np.asarray(mine), np.asarray(ref)):
                return f"different values for {one.shape} {mine.dtype}"
    return None


def export_status():
    """The once-per-platform checks of ``to(x, "jax")``'s direct import made so far.

    Returns
    -------
    dict
        ``{platform: (ok, reason)}``; a platform not yet exported to is absent.
    """
    return dict(_platform_checks)
