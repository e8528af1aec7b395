# The jax reader and exporter: single-device jax.Array <-> interop_core_tensor_info, without
# blocking the host, registered through the public C ABI (interop_core.h, version 2) like any
# third party's reader.  It cimports nothing of the core but interop_core.abi; the exporter uses
# only the core's public Python API (a view's properties and sync()).
#
# Lifetime: every read holds the buffer (see "Holds" below).  jax frees an array's buffer on
# `delete()` and when the array is donated to a jitted computation, whatever Python references
# to the array exist; what keeps the memory is an external reference on the PJRT buffer, which
# jax's own DLPack export takes (jaxlib's buffer_to_dlpack_managed_tensor: the capsule's
# destructor releases it).  While one lives, delete() marks the array deleted but leaves the
# memory, and jax refuses to donate the buffer.  So each view, export, LaunchArgs slot and shard
# view of a jax array holds such a capsule, unconsumed, through a `BufferHold`.
#
# Reading.  The capsule is taken on every read that finds no live hold of the array, so the
# metadata comes from it too (the core's describe_dlpack: pointer, shape, strides, dtype): what
# jax's own export says, custom device layouts included, for what the capsule costs anyway.
# Only the device comes from the array's sharding (`_locate`): several devices, another
# process's devices and memory kinds are told apart there, before the capsule is taken (jaxlib
# would export a sharded array's first shard), and a GPU device names the stream the hold is
# taken on.
# Those are jax internals or near-internals, so the core validates the reader once per process
# (registry `prepare=` / `canaries=`): it reads canary arrays with this reader and with the
# fallback (`read_with_dlpack`, jax's own __dlpack__) and compares them field by field;
# `prepare` checks the sharding type and that shared reads (below) say what first reads say.
# On any difference the fallback serves the rest of the process.
#
# Readiness, per the stream contract (see docs/streams.md for what jax does underneath):
# - device memory, no stream (None, -1): no host wait.  The hold is taken on jax's own stream
#   for external ready events (`_jax_stream`, what producer_stream reports): PJRT makes that
#   stream wait for the array's definition events and returns once the computation is enqueued,
#   not computed.  (stream=None would make jaxlib wait on the host until the array is computed.)
#   The consumer orders itself later (sync(), a stream).
# - host memory (the CPU backend, a GPU's unpinned_host memory kind), with or without a stream:
#   the hold is taken without a stream, and jaxlib waits until the array is computed.  jax's CPU
#   work runs on a thread pool and is not stream-ordered (PJRT's stream wait is "only
#   implemented for GPU"), so nothing a consumer could do later would order it: the host is the
#   only order there is, and every host consumer (numpy, the buffer protocol, a CPU DLPack
#   consumer) reads as soon as it has the pointer.  A shared read (below) finds a hold taken
#   after that wait: it waits for nothing.
# - a consumer stream, device memory: the hold is taken on that stream (what
#   __dlpack__(stream=s) does, without its Python wrappers): PJRT makes it wait for the array's
#   definition events; the host does not wait for the computation.
#
# Exporting (to_jax).  jax.dlpack.from_dlpack costs tens of microseconds, mostly Python: the
# producer's __dlpack_device__, a backend lookup, __dlpack__, then jnp.asarray.  to_jax does the
# same import with one jaxlib call, dlpack_managed_tensor_to_buffer(capsule, device, stream, ...),
# with the device and jax's stream for external ready events cached per DLPack device, after
# checking once per platform that the result equals jax.dlpack.from_dlpack's.  The capsule is
# built here from the view's public properties (a legacy DLPack tensor holding the view).
#
# Nothing here imports jax until an array of jax's is read or a view is exported to jax.

cimport cython
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM
from libc.stdint cimport int32_t, int64_t, intptr_t, uint8_t, uint16_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from interop_core.abi cimport (
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["reader_capsule", "read_with_dlpack", "prepare", "canaries", "producer_stream",
           "to_jax", "export_status", "read_shards", "prepare_shards", "shard_canaries",
           "BufferHold"]

cdef enum:
    MAX_NDIM = 64           # the ABI's limit on ndim
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_CUDA_HOST = 3
    KDL_ROCM = 10
    KDL_ROCM_HOST = 11
    HOLD_SET_BITS = 7       # the table of live holds has 1 << HOLD_SET_BITS sets of two


# --- state of the reader ---------------------------------------------------------------------

# The core's helper table (dtype conversion, DLPack capsules in and out), fetched once on import: the reader needs it from
# its first call, whether or not validation ran (a test may pin the result).
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# jax's handles, looked up once (by prepare(), else by the first read or export).
cdef bint _ready = False
cdef object _single_sharding = None   # jax's SingleDeviceSharding type (a reference owned here)
cdef object _to_capsule = None        # jaxlib's buffer_to_dlpack_managed_tensor (owned here)
cdef object _from_capsule = None      # jaxlib's dlpack_managed_tensor_to_buffer (owned here)
# jax's array type and, for its exact instances, its `aval` getter and `unsafe_buffer_pointer`,
# `is_ready` and `block_until_ready` methods (owned here; None: attribute lookups).
cdef object _accessor_type = None
cdef object _aval_getter = None
cdef object _pointer_method = None
cdef object _ready_method = None
cdef object _wait_method = None
cdef object _shard_method = None      # ArrayImpl._fully_replicated_shard (see "Holds")
cdef int _process_index = -1          # jax.process_index(): devices of other processes
cdef dict _devices = {}               # (jax Device, memory kind) -> (DLPack type, id)
# The last sharding object seen, its (type, id) and its jax Device: arrays from one jitted
# function share it, so the common case costs one identity comparison.  Strong references,
# replaced on a miss.
cdef object _last_sharding = None
cdef int32_t _last_type = 0, _last_id = 0
cdef object _located_device = None    # the jax Device of _last_sharding (what _locate found)
# The last (jax Device, SingleDeviceSharding._memory_kind) resolved, and its (type, id): strong
# references, replaced on a miss (so the identities compared are never reused addresses).
cdef object _last_device = None
cdef object _last_kind = None
cdef int32_t _last_device_type = 0, _last_device_id = 0


cdef inline Py_ssize_t _address_set(object obj, int bits) noexcept:
    # Fibonacci hashing of the address (objects are 16-byte aligned): consecutive arrays spread
    # over the 1 << bits sets.
    cdef uint64_t h = (<uint64_t> <uintptr_t> <PyObject*> obj) >> 4
    return <Py_ssize_t> ((h * <uint64_t> 0x9E3779B97F4A7C15) >> (64 - bits))


cdef inline int _way_to_fill(PyObject* first, PyObject* second, object obj,
                             uint8_t* recent) noexcept:
    """Which entry (0 or 1) of a set of two, naming `first` and `second` (NULL: empty), to fill
    for `obj`: its old one, a free one, else the one used less recently.  `recent`, the set's
    most recently used entry, becomes the one chosen."""
    if second == <PyObject*> obj or (second == NULL and first != <PyObject*> obj):
        recent[0] = 1
    elif first == NULL or first == <PyObject*> obj:
        recent[0] = 0
    else:
        recent[0] ^= 1
    return recent[0]


cdef object _MISSING = object()     # module-owned sentinel for getattr

_MULTI_DEVICE = (
    "cannot view a jax array sharded over {n} devices as one strided view: use "
    "interop_core.shards() for one view per addressable shard, with its device, its index in "
    "the global array and its replica id")

_DELETED = (
    "cannot view a deleted jax array: its buffer was freed by array.delete() or donated to a "
    "jitted computation (donate_argnums)")


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
    global _last_device, _last_kind, _located_device
    import jax

    _single_sharding = jax.sharding.SingleDeviceSharding
    _to_capsule = _jaxlib_function(array_type, "buffer_to_dlpack_managed_tensor")
    _from_capsule = _jaxlib_function(array_type, "dlpack_managed_tensor_to_buffer")
    _last_sharding = None
    _located_device = None
    _last_device = None
    _last_kind = None
    _bind_accessors(array_type)
    _ready = True
    return 0


cdef int _bind_accessors(object array_type) except -1:
    """The callables behind `aval`, `unsafe_buffer_pointer`, `is_ready` and `block_until_ready`
    of jax's array type, called directly on an exact instance: the same functions jax's
    attribute lookup finds (a property's getter, methods of the type), without the lookup (the
    instance has a __dict__ to search first for a method)."""
    global _accessor_type, _aval_getter, _pointer_method, _ready_method, _wait_method
    global _shard_method
    import inspect

    _accessor_type = _aval_getter = _pointer_method = _ready_method = _wait_method = None
    _shard_method = None
    if array_type is None:      # set up before any array was read (an export to jax)
        array_type = _jaxlib_function(None, "ArrayImpl")
        if not isinstance(array_type, type):
            return 0
    aval = inspect.getattr_static(array_type, "aval", None)
    method = inspect.getattr_static(array_type, "unsafe_buffer_pointer", None)
    ready = inspect.getattr_static(array_type, "is_ready", None)
    wait = inspect.getattr_static(array_type, "block_until_ready", None)
    shard = inspect.getattr_static(array_type, "_fully_replicated_shard", None)
    if (type(aval) is property and aval.fget is not None and callable(method)
            and callable(ready) and callable(wait) and callable(shard)):
        _shard_method = shard
        _aval_getter = aval.fget
        _pointer_method = method
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
    the array's `_sharding`, and leaves its jax Device in `_located_device`."""
    global _last_sharding, _last_type, _last_id, _last_device, _last_kind
    global _last_device_type, _last_device_id, _located_device
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
        _located_device = device
        _last_sharding = sharding
        return sharding
    devices = sharding.device_set
    if len(devices) != 1:
        raise BufferError(_MULTI_DEVICE.format(n=len(devices)))
    device = next(iter(devices))
    dev = _resolve_device(device, sharding.memory_kind)
    _last_type = device_type[0] = (<tuple> dev)[0]
    _last_id = device_id[0] = (<tuple> dev)[1]
    _located_device = device
    _last_sharding = sharding
    return sharding


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


cdef inline object _hold_stream(int32_t device_type, object device):
    """The stream a hold without a consumer is taken on: None for host memory (jaxlib then
    waits until the array is computed: host consumers read at once), else jax's own stream for
    external ready events (no host wait; None where jax has none, which waits on the host)."""
    if device_type == KDL_CPU:
        return None
    return _jax_stream(device)


# --- holds: jax's external reference on a buffer, for as long as a view or export of it lives --
#
# A hold is jaxlib's DLPack capsule of the array, never consumed: jax's external reference on
# the PJRT buffer, released by the capsule's destructor when the hold dies.  Views, exports,
# LaunchArgs slots and shard views take the hold as their keep-alive (the ABI's `keepalive`), so
# the buffer outlives `delete()` and refuses donation exactly while one of them lives -- as
# after `torch.from_dlpack(x)`.  The view's owner stays the array itself.
#
# What a hold costs.  jaxlib's buffer_to_dlpack_managed_tensor, with the capsule's release, is
# most of what jax's own x.__dlpack__() costs without its Python layers (~0.4-0.7 us of ~2.3-6 us
# on the 2-core dev VM, Python 3.11.7, jax 0.10.2 CPU, 16 x 16 float32, loaded).  Two readers
# taking it were measured, in alternating processes, each against x.__dlpack__() in its run:
# - the accessor reader kept (`_sharding`, `aval`, `_pjrt_layout`, `unsafe_buffer_pointer()`
#   and a per-array cache of what they said) with a capsule taken beside it: view(x) 1.5-2.1 us,
#   0.28-0.31x __dlpack__();
# - the metadata read from the capsule itself (the core's describe_dlpack), the accessors and
#   the per-array metadata cache dropped, only `_locate` (the device) kept: 0.41-0.61 us,
#   0.07-0.09x __dlpack__().
# The second is kept: faster and far simpler (no layout decoding, no weak-reference cache; jax's
# own export states its layouts), and the capsule replaces `unsafe_buffer_pointer()`, which
# took and dropped an external reference of its own.  (Before holds, view(x) cost ~0.2 us,
# 0.09x __dlpack__(), and held nothing.)
#
# Sharing.  Views of one array alive at once (a loop `v = view(x)` makes the next view while
# the last lives; a launcher's arguments read again while the last LaunchArgs lives; shards of
# an array read again) share one hold: a table, sets of two picked by the array's address,
# names the live holds by borrowed pointer -- in effect a weak reference: a hold clears its own
# entry when it dies, so the table never keeps a buffer held (jax would refuse a later donation
# spuriously) and never names a dead hold.  A hold keeps its array alive, so while the entry
# names a live hold, the array at that address is the hold's own.  A shared read confirms that
# the hold still covers the array's current buffer: `unsafe_buffer_pointer()` (raises for a
# deleted or donated array; the capsule path then names the problem) equal to the hold's data
# pointer, and the array's `aval` the hold's by identity (jaxlib can swap an array's whole
# contents, `_replace_with`, behind jax's mutable arrays).  A shared read costs ~0.2 us (a loop
# `v = view(x)` on the dev VM), and the confirmation is only paid when a live hold of that very
# array exists.
#
# Which array the capsule is of matters.  jaxlib aborts the process ("Non-zero type 1 hold on
# destruction") when the last jax array over a held buffer is deleted while the external
# reference lives: a capsule of `x` itself, then `x.delete()`, kills the interpreter.  jax's own
# __dlpack__ exports `x.addressable_data(0)`, the array's fully replicated shard: another jax
# array over the same buffer, made once and kept by `x`, which `x.delete()` leaves alone (it
# deletes `x` and its `_arrays`, not that shard); the capsule keeps the shard, so the buffer
# object outlives `x`.  The holds here take exactly that (`_fully_replicated_shard()`, ~30 ns
# once made), for single-device arrays and per-device arrays of a sharded one alike.  What jax
# cannot survive either way: deleting that shard object too (`x.addressable_data(0).delete()`
# and `x.delete()`) while any DLPack export holds the buffer -- jax's own included -- aborts in
# jaxlib; no public call of ours hands that shard out.
#
# Where no hold can be taken -- jaxlib's DLPack export refuses the array (element types DLPack
# has no code for: int4, uint4, float4 ...; tiled device layouts) -- the read refuses with a
# BufferError: nothing made from it could keep its memory, so nothing is made.  A jaxlib without
# buffer_to_dlpack_managed_tensor takes the same hold through the array's public __dlpack__.

cdef PyObject* _holds[2 << HOLD_SET_BITS]     # borrowed: each live hold clears its own entry
cdef uint8_t _hold_recent[1 << HOLD_SET_BITS]  # per set, the entry hit or filled last (0 or 1)


@cython.freelist(16)
cdef class BufferHold:
    """jax's external reference on one jax array's buffer, shared by the views and exports of
    it alive at once: while this object lives, ``array.delete()`` leaves the memory in place
    and jax refuses to donate the buffer.  Made by the jax plugin's reader; never by hand.

    Attributes
    ----------
    array : jax.Array
        The array whose buffer is held.
    """
    # The array read (owned: while this lives, the table's entry naming it is its own).
    cdef readonly object array
    # Its `aval` when the hold was taken (owned): a shared read compares it by identity.
    cdef object aval
    # jaxlib's DLPack capsule of the array, never consumed (owned): its destructor releases
    # jax's external reference on the buffer.
    cdef object capsule
    # describe_dlpack's answer: shape and strides point into the capsule's tensor; the device
    # is the one `_locate` found (memory kinds); `keepalive` NULL.
    cdef interop_core_tensor_info info
    cdef Py_ssize_t slot            # the table entry filed with this hold, -1 before

    def __cinit__(self):
        self.slot = -1

    def __dealloc__(self):
        # Before the capsule (a field) is released: the table never names a dying hold.
        if self.slot >= 0 and _holds[self.slot] == <PyObject*> self:
            _holds[self.slot] = NULL

    def __repr__(self):
        what = "" if self.aval is None else f" of {self.aval.str_short()}"
        return f"<interop_jax BufferHold: jax's external reference on a buffer{what}>"


cdef inline BufferHold _filed_hold(object obj):
    """The hold the table names for `obj` (not yet confirmed to cover its current buffer)."""
    cdef Py_ssize_t s = _address_set(obj, HOLD_SET_BITS)
    cdef PyObject* h = _holds[2 * s]
    if h != NULL and (<BufferHold> h).array is obj:
        _hold_recent[s] = 0
        return <BufferHold> h
    h = _holds[2 * s + 1]
    if h != NULL and (<BufferHold> h).array is obj:
        _hold_recent[s] = 1
        return <BufferHold> h
    return None


cdef BufferHold _shared_hold(object obj):
    """A live hold on `obj`'s current buffer (a view or export of it lives), or None."""
    cdef BufferHold h = _filed_hold(obj)     # a strong reference from here on
    if h is None:
        return None
    try:
        if type(obj) is _accessor_type:
            ptr = _pointer_method(obj)
            aval = _aval_getter(obj)
        else:
            ptr = obj.unsafe_buffer_pointer()
            aval = obj.aval
    except Exception:
        return None         # deleted or donated: taking a hold names the problem
    if <uintptr_t> ptr != <uintptr_t> h.info.data or aval is not h.aval:
        return None
    return h


cdef int _file_hold(BufferHold h) noexcept:
    """Name `h` in the table (a hold named before for another array stays alive, unnamed)."""
    cdef Py_ssize_t s = _address_set(h.array, HOLD_SET_BITS)
    cdef PyObject* first = _holds[2 * s]
    cdef PyObject* second = _holds[2 * s + 1]
    cdef int way = _way_to_fill(NULL if first == NULL else <PyObject*> (<BufferHold> first).array,
                                NULL if second == NULL
                                else <PyObject*> (<BufferHold> second).array,
                                h.array, &_hold_recent[s])
    h.slot = 2 * s + way
    _holds[h.slot] = <PyObject*> h
    return 0


cdef object _capsule_of(object obj, object stream):
    """jax's DLPack capsule of `obj`'s buffer, ordered on `stream` (None: jaxlib waits on the
    host), of the array jax's own __dlpack__ exports: the array's fully replicated shard (see
    "Holds": never `obj` itself)."""
    if _to_capsule is None:
        return obj.__dlpack__(stream=stream)
    # `stream` positionally: a keyword would cost a dict per call.
    if type(obj) is _accessor_type:
        return _to_capsule(_shard_method(obj), stream)
    return _to_capsule(obj.addressable_data(0), stream)


cdef BufferHold _take_hold(object obj, object stream, int32_t device_type, int32_t device_id):
    """A new hold on `obj`'s buffer, its capsule taken on `stream` (see "Readiness"), filed in
    the table; the device is the one `_locate` found.  BufferError where jax refuses it."""
    cdef BufferHold h = BufferHold.__new__(BufferHold)
    try:
        h.capsule = _capsule_of(obj, stream)
    except Exception as exc:
        if obj.is_deleted():
            raise       # the callers name it (a deleted array; a deleted shard)
        raise BufferError(
            f"cannot view this jax array ({obj.aval.str_short()}): interop-core keeps a jax "
            "buffer alive as jax's own DLPack export does (an external reference, which "
            "delete() and donation respect), and jax refused that export: "
            f"{type(exc).__name__}: {exc}") from None
    if _api.describe_dlpack(<PyObject*> h.capsule, &h.info) != 0:
        _pending_error()
    h.array = obj
    h.aval = _aval_getter(obj) if type(obj) is _accessor_type else obj.aval
    h.info.device_type = device_type
    h.info.device_id = device_id
    h.info.readonly = 1
    h.info.has_producer_stream = 0
    h.info.keepalive = NULL
    _file_hold(h)
    return h


cdef inline int _hand_over(BufferHold h, interop_core_tensor_info* out) noexcept:
    """Fill `out` from `h`, which becomes the read's keep-alive (a new reference)."""
    out.data = h.info.data
    out.ndim = h.info.ndim
    out.shape = h.info.shape
    out.strides = h.info.strides
    out.strides_in_bytes = h.info.strides_in_bytes
    out.dtype_code = h.info.dtype_code
    out.dtype_bits = h.info.dtype_bits
    out.dtype_lanes = h.info.dtype_lanes
    out.device_type = h.info.device_type
    out.device_id = h.info.device_id
    out.readonly = 1
    out.has_producer_stream = 0
    Py_INCREF(h)
    out.keepalive = <PyObject*> h
    return 0


# --- reading ---------------------------------------------------------------------------------

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


cdef int _read_held(object obj, interop_core_tensor_info* out) except -1:
    """Metadata, address and a hold of a single-device array, without a consumer stream."""
    cdef int32_t device_type, device_id
    h = _shared_hold(obj)
    if h is None:
        _locate(obj, &device_type, &device_id)
        h = _take_hold(obj, _hold_stream(device_type, _located_device), device_type, device_id)
    return _hand_over(h, out)


cdef int _read_ordered(object obj, intptr_t consumer, interop_core_tensor_info* out) except -1:
    """Device memory, a consumer stream: PJRT makes `consumer` wait for the array's definition
    events as the hold is taken on it."""
    cdef int32_t device_type, device_id
    _locate(obj, &device_type, &device_id)
    h = _take_hold(obj, consumer, device_type, device_id)
    _hand_over(h, out)
    # Relative to `consumer` the memory is ready: it is the stream the writes are ordered on.
    out.has_producer_stream = 1
    out.producer_stream = consumer
    return 0


cdef int _read(object obj, object stream, interop_core_tensor_info* out) except -1:
    cdef int32_t device_type, device_id
    if stream is None:
        return _read_held(obj, out)
    _locate(obj, &device_type, &device_id)
    if device_type == KDL_CPU:
        return _read_held(obj, out)  # jaxlib waits for jax's CPU work: the host is the order
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
        raise BufferError(_DELETED) from None
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
    on the host until the array is ready (the fallback's cost).  The view keeps jax's capsule,
    which holds the buffer as the compiled reader's views do.

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
        _capsule_of(obj, stream)       # dropped at once: the stream is ordered
        return stream
    except BufferError:
        raise
    except Exception as exc:
        _raise_if_deleted(obj, exc)
        raise


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
    """The fields of a read that describe the memory."""
    shape = tuple(info.shape[i] for i in range(info.ndim))
    strides = None if info.strides == NULL else tuple(info.strides[i] for i in range(info.ndim))
    return (<uintptr_t> info.data, info.dtype_code, info.dtype_bits, info.dtype_lanes,
            info.device_type, info.device_id, shape, strides, info.strides_in_bytes)


def prepare(samples=None):
    """Check what the core's comparison with the fallback leaves out (once per process).

    Looks jax's handles up again, checks that a single-device array's ``_sharding`` is jax's
    ``SingleDeviceSharding`` (the reader's fast case), and that a read made while a hold of the
    same array lives (a shared read, which the core's comparison never makes: its reads are
    first reads) says what the first read said and shares its hold.  The core then compares the
    reads with :func:`read_with_dlpack` on :func:`canaries`.

    Parameters
    ----------
    samples : iterable, optional
        jax arrays to check (default: :func:`canaries`).

    Returns
    -------
    dict or str
        Details when the reader may be used; otherwise why not.
    """
    cdef interop_core_tensor_info first, again
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
    shared = 0
    for x in (canaries() if samples is None else samples):
        memset(&first, 0, sizeof(first))
        memset(&again, 0, sizeof(again))
        try:
            _read_held(x, &first)
            a = _info_key(&first)
            if a[6] != tuple(x.shape):
                return f"shape {a[6]} != {x.shape}"
            _read_held(x, &again)          # while the first read's hold lives
            b = _info_key(&again)
            if b != a:
                return f"a read sharing a live hold {b} != the first read {a}"
            if first.keepalive == again.keepalive:
                shared += 1
            elif x.size:
                return "a second read of an array whose hold lives took a new hold"
        finally:
            Py_XDECREF(first.keepalive)
            Py_XDECREF(again.keepalive)
    return {"holds": ("jaxlib buffer_to_dlpack_managed_tensor" if _to_capsule is not None
                      else "jax __dlpack__ (jaxlib has no buffer_to_dlpack_managed_tensor)"),
            "shared_reads_checked": shared, "direct_import": _from_capsule is not None}


# --- sharded arrays: shards() without jax's Shard objects ----------------------------------------
#
# jax's public answer, array.addressable_shards, builds a Python Shard per device and computes
# each one's index and replica id in Python (cached on the array, but recomputed for every new
# array): per shard it costs about as much again as viewing the shard.  What it computes depends
# only on the sharding and the global shape, so it is asked once per (sharding, shape) -- of
# jax's public answer -- and kept as a plan: the core's ShardLayout (indices, replica ids,
# tiling checked once) and, per slot, the device jax puts there.  Per call the array's own list
# of per-device arrays (`_arrays`, in the order of the sharding's addressable devices: the order
# jax's own __array__ relies on) is confirmed slot by slot against the plan (device, shape),
# then each per-device array is held and described as the reader holds a single-device array
# (a live hold of it shared, else a new capsule), and the views are made in one loop here (the
# core's view_from_info) rather than through one view() call each.  Each shard view keeps its
# per-device buffer's hold; nothing here keeps one beyond the views.  A slot that does not
# match the plan (another device, an unexpected shape) sends the call to the public path.  All
# of it is jax internals: the core validates this path once per process against the public one
# (prepare_shards, shard_canaries), and installs the public path instead if anything differs.

cdef enum:
    MAX_PLANS = 64          # (sharding, shape) plans kept; all are forgotten when full


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
                                    # here holds this and the ids
    cdef int32_t* device_ids        # per slot, the DLPack device id (in that block)

    def __dealloc__(self):
        free(self.device_types)      # the ids share this one allocation


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
    cdef size_t slots = n if n else 1
    plan.device_types = <int32_t*> malloc(slots * 2 * sizeof(int32_t))
    if plan.device_types == NULL:
        raise MemoryError()
    plan.device_ids = plan.device_types + slots
    memory_kind = sharding.memory_kind
    for k in range(n):
        dev = <tuple> _resolve_device(plan.devices[k], memory_kind)
        plan.device_types[k] = dev[0]
        plan.device_ids[k] = dev[1]
        index = layout.indices[k]
        block = tuple([index[d].stop - index[d].start for d in range(ndim)])
        if plan.shard_shapes[k] != block:
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


cdef bint _slot_matches(_ShardPlan plan, Py_ssize_t k, object sharding,
                        object aval) except -1:
    """Whether a per-device array whose `_sharding` and `aval` are these sits where the plan
    says slot `k` is (caches what it saw)."""
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
        plan.seen_aval[k] = aval
    return True


cdef object _slot_view(_ShardPlan plan, Py_ssize_t k, object a):
    """The view of slot `k`'s per-device array `a`, holding its buffer (a live hold of it
    shared, else a new one taken as the reader takes one)."""
    cdef interop_core_tensor_info info
    cdef PyObject* made
    cdef int32_t device_type = plan.device_types[k]
    h = _shared_hold(a)
    if h is None:
        h = _take_hold(a, _hold_stream(device_type, plan.devices[k]), device_type,
                       plan.device_ids[k])
    memset(&info, 0, sizeof(info))
    _hand_over(h, &info)            # the keep-alive, taken over by view_from_info
    made = _api.view_from_info(<PyObject*> a, &info)
    if made == NULL:
        _pending_error()
    v = <object> made
    Py_XDECREF(made)             # <object> took its own reference
    return v


cdef object _read_shards(object array, object stream):
    cdef Py_ssize_t k, n
    cdef _ShardPlan plan
    arrays = array._arrays
    if arrays is None:
        raise BufferError(_DELETED_SHARDS)
    aval = array.aval
    plan = _plan_for(array, array._sharding, <tuple> aval.shape)
    if plan is None or type(arrays) is not list or len(<list> arrays) != plan.count:
        return None
    n = plan.count
    # Every slot is confirmed before any hold is taken: a mismatch means the public path.
    for k in range(n):
        a = <object> PyList_GET_ITEM(arrays, k)
        if not _slot_matches(plan, k, a._sharding, a.aval):
            return None
    if n == 0:
        return plan.make_shards(arrays, stream, array, dtype=aval.dtype)
    if stream is not None:
        # Ordered reads go through view() per piece, as the public path does (the reader
        # orders each on its device's stream, or jaxlib waits for jax's CPU work).
        return plan.make_shards(arrays, stream, array)
    views = [_slot_view(plan, k, <object> PyList_GET_ITEM(arrays, k)) for k in range(n)]
    return plan.make_shards(views, None, array)


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

    ``registry.add_sharded_type`` callable.  Reads jax internals (the array's per-device
    arrays, confirmed against a plan of jax's public answer), validated once per process
    against :func:`jax_shards <interop_jax._sharded.jax_shards>` (the public path), which also
    serves any array whose per-device arrays do not sit where the plan of its sharding says.
    Each shard's view holds its per-device buffer as a view of a single-device array does.

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

    The fast path holds and describes per-device arrays as the reader does, so it is used only
    where the reader passed its own validation; it also needs each array's per-device arrays
    (``_arrays``) to be jax's own shards' data, in order, each on a ``SingleDeviceSharding``.
    The core then splits :func:`shard_canaries` both ways and compares.

    Returns
    -------
    dict or str
        Details when the fast path may be used; otherwise why not.
    """
    import jax

    from interop_core import plugins

    probe = jax.device_put(jax.numpy.zeros(3, jax.numpy.float32))
    _setup(type(probe))
    entry = plugins.reader_for(type(probe))
    if entry is None or entry.reader is read_with_dlpack:
        return ("the jax reader did not pass its validation in this process (see doctor), and "
                "the sharded path holds and reads per-device arrays as it does")
    checked = 0
    for x in shard_canaries():
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
            "holds": "one per shard view: its per-device buffer's, as the reader takes them"}

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
    return _from_capsule(capsule, device, stream, None, device_type)


def to_jax(view not None, stream=None):
    """A ``jax.Array`` over the memory of ``view`` (same pointer), keeping ``view`` alive.

    One jaxlib call (``dlpack_managed_tensor_to_buffer``) with the device and jax's stream for
    external ready events cached per device; device memory is first ordered before that stream
    (as ``jax.dlpack.from_dlpack`` does).  Views jax would convert (64-bit types without
    ``jax_enable_x64``) or a platform whose check failed take the plugin's
    ``jax.dlpack.from_dlpack`` path.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : optional
        Accepted for the exporter protocol: ``to()`` has already ordered the view on it.

    Returns
    -------
    jax.Array

    Raises
    ------
    BufferError
        If the layout is not compact (a transposition of a dense array), or the elements are
        padded sub-byte types (a legacy DLPack capsule cannot describe them).
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
            f"has shape {shape_obj} and strides {strides_obj}: make it contiguous first")
    device_type = view.device_type
    device_id = view.device_id
    dtype = <tuple> view.dlpack_dtype
    itemsize = view.itemsize
    target = _import_target(device_type, device_id)
    if target is None or dtype[2] != 1 or (_is_64_bit(dtype[0], itemsize)
                                           and not _x64_enabled()):
        if _slow_export is None:
            from interop_jax import export_jax_slow
            _slow_export = export_jax_slow
        return _slow_export(view, stream)
    if dtype[1] * dtype[2] < 8:
        raise BufferError("padded sub-byte element types need a versioned DLPack capsule")
    result = _import_extents(view, <tuple> target, ndim, shape, strides, dtype, device_type,
                             device_id)
    # jax copies host memory it cannot alias (not 64-byte aligned) instead of failing.
    if device_type == KDL_CPU and volume and result.unsafe_buffer_pointer() != view.ptr:
        from interop_jax import warn_copied
        warn_copied(view)
    return result


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
