# Holds: jax's external reference on a buffer, for as long as a view or export of it lives.
#
# A hold is jaxlib's DLPack capsule of the array, never consumed: jax's external reference on
# the PJRT buffer, released by the capsule's destructor when the hold dies.  Views, exports,
# LaunchArgs slots and shard views take the hold as their keep-alive (the ABI's `keepalive`), so
# the buffer outlives `delete()` and refuses donation exactly while one of them lives -- as
# after `torch.from_dlpack(x)`.  The view's owner stays the array itself.
#
# What a hold costs.  jaxlib's buffer_to_dlpack_managed_tensor, with the capsule's release, is
# most of what jax's own x.__dlpack__() costs without its Python layers, and most of a view:
# perf samples of a view(x) loop put ~40% of the time in jaxlib and ~10% in this plugin's
# modules (2-core dev VM, Python 3.11.7, jax 0.10.2 CPU, a 16 x 16 float32 array).  Two readers
# taking it were measured, in alternating processes, each against x.__dlpack__() in its run
# (wall clock on a loaded machine, so ratios only):
# - the accessor reader kept (`_sharding`, `aval`, `_pjrt_layout`, `unsafe_buffer_pointer()`
#   and a per-array cache of what they said) with a capsule taken beside it: view(x)
#   0.26-0.34x __dlpack__() (median of 4 runs 0.30);
# - the metadata read from the capsule itself (the core's describe_dlpack), the accessors and
#   the per-array metadata cache dropped, only `_locate` (the device) kept: 0.25-0.28x
#   (median 0.26).
# The second is kept: no slower and far simpler (no layout decoding, no weak-reference cache;
# jax's own export states its layouts), and the capsule replaces `unsafe_buffer_pointer()`,
# which took and dropped an external reference of its own.  In CPU time (perf task-clock) a
# view(x) costs ~0.6 us against ~2.4 us for x.__dlpack__().  Before holds a view cost ~0.1x
# __dlpack__() and held nothing.
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

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from libc.stdint cimport int32_t, uint8_t, uint64_t, uintptr_t

from interop_core.abi cimport interop_core_tensor_info

from interop_jax._handles cimport (
    KDL_CPU,
    KDL_CUDA_HOST,
    KDL_ROCM_HOST,
    _accessor_type,
    _api,
    _aval_getter,
    _pending_error,
    _pointer_method,
    _shard_method,
    _to_capsule,
)
from interop_jax._devices cimport _jax_stream

__all__ = ["BufferHold", "PendingHold"]

cdef enum:
    HOLD_SET_BITS = 7       # the table of live holds has 1 << HOLD_SET_BITS sets of two

cdef PyObject* _holds[2 << HOLD_SET_BITS]     # borrowed: each live hold clears its own entry
cdef uint8_t _hold_recent[1 << HOLD_SET_BITS]  # per set, the entry hit or filled last (0 or 1)


cdef inline Py_ssize_t _address_set(object obj) noexcept:
    # Fibonacci hashing of the address (objects are 16-byte aligned): consecutive arrays spread
    # over the sets.
    cdef uint64_t h = (<uint64_t> <uintptr_t> <PyObject*> obj) >> 4
    return <Py_ssize_t> ((h * <uint64_t> 0x9E3779B97F4A7C15) >> (64 - HOLD_SET_BITS))


@cython.freelist(16)
cdef class BufferHold:
    """jax's external reference on one jax array's buffer, shared by the views and exports of
    it alive at once: while this object lives, ``array.delete()`` leaves the memory in place
    and jax declines to donate the buffer.  Made by the jax plugin's reader; never by hand.

    Attributes
    ----------
    array : jax.Array
        The array whose buffer is held.
    """

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
    cdef Py_ssize_t s = _address_set(obj)
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
    """Name `h` in its array's set: the way naming that array, else a free one, else the one
    used less recently (a hold named there before for another array stays alive, unnamed)."""
    cdef Py_ssize_t s = _address_set(h.array)
    cdef PyObject* first = _holds[2 * s]
    cdef PyObject* second = _holds[2 * s + 1]
    cdef int way
    if second != NULL and (<BufferHold> second).array is h.array or (
            second == NULL and not (first != NULL and (<BufferHold> first).array is h.array)):
        way = 1
    elif first == NULL or (<BufferHold> first).array is h.array:
        way = 0
    else:
        way = _hold_recent[s] ^ 1
    _hold_recent[s] = <uint8_t> way
    h.slot = 2 * s + way
    _holds[h.slot] = <PyObject*> h
    return 0


cdef object _capsule_of(object obj, object stream):
    if _to_capsule is None:
        return obj.__dlpack__(stream=stream)
    # `stream` positionally: a keyword would cost a dict per call.
    if type(obj) is _accessor_type:
        return _to_capsule(_shard_method(obj), stream)
    return _to_capsule(obj.addressable_data(0), stream)


cdef object _hold_stream(int32_t device_type, object device):
    if device_type == KDL_CPU:
        return None
    return _jax_stream(device)


cdef BufferHold _take_hold(object obj, object stream, int32_t device_type, int32_t device_id):
    cdef BufferHold h = BufferHold.__new__(BufferHold)
    try:
        h.capsule = _capsule_of(obj, stream)
    except Exception as exc:
        if obj.is_deleted():
            raise       # the callers name it (a deleted array; a deleted shard)
        if stream is not None and (device_type == KDL_CUDA_HOST or device_type == KDL_ROCM_HOST):
            # Pinned host memory jax will not order on a stream: held after a host wait, as
            # jax's own __dlpack__ of it is (host consumers read it at once anyway).
            return _take_hold(obj, None, device_type, device_id)
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


# --- holds taken at first use ---------------------------------------------------------------
#
# A view made without a stream does not hold the buffer yet: it holds a PendingHold through the
# core's DeferredKeepalive (interop_core.h, `deferred_keepalive`), and the core calls
# _acquire_pending before anything uses the memory -- the view's `ptr`, every export, copies,
# to(), launch_args.  The hold is the one above (shared with any live hold of the array), so
# from then on delete() and donation leave the memory exactly as after an eager hold.  Between
# the read and that first use jax may free the buffer (delete(), donation) or swap the array's
# contents (`_replace_with`): then the use raises BufferError, and nothing reads the memory.
# Why: the hold costs what jaxlib's DLPack export costs (~1.0-1.3 us on the H100 host, about
# half of jax's own __dlpack__()), while a read that only describes the array costs a fraction
# of that; a view used only for its metadata (shape, dtype, device checks) never pays it.

_GONE = (
    "the jax array was deleted or donated (donate_argnums) after this view of it was made and "
    "before its memory was first used, so the memory is gone; view the array again while it "
    "is alive (a view holds a jax buffer from the first use of its memory: ptr, an export, a "
    "copy, to() or launch_args)")
_REPLACED = (
    "the jax array's buffer was replaced after this view of it was made and before its memory "
    "was first used (jax swapped the array's contents); view the array again")


# Out of the garbage collector: it refers to the array, its aval and a stream handle, none of
# which refers back to it.
@cython.final
@cython.no_gc
cdef class PendingHold:
    """What a view of a jax array made without a hold needs to take one at its first use (the
    state of the core's ``DeferredKeepalive``).  Made by the jax plugin's reader; never by hand.
    """

    def __init__(self):
        raise TypeError("PendingHold objects are made by the jax plugin's reader")

    def __repr__(self):
        return f"<interop_jax PendingHold of {self.aval.str_short()}>"


cdef int _acquire_pending(PyObject* state, PyObject** held) except -1:
    # The core's DeferredKeepalive calls this (GIL held) before the memory's first use.
    cdef PendingHold p = <PendingHold> <object> state
    cdef BufferHold h = _shared_hold(p.array)
    if h is None:
        try:
            h = _take_hold(p.array, p.stream, p.device_type, p.device_id)
        except BufferError:
            raise
        except Exception:
            if p.array.is_deleted():
                raise BufferError(_GONE) from None
            raise
    if h.aval is not p.aval or (not p.empty and <uintptr_t> h.info.data != p.data):
        raise BufferError(_REPLACED)
    Py_INCREF(h)
    held[0] = <PyObject*> h
    return 0


cdef object _deferred_hold(object obj, object aval, object stream, uintptr_t data, bint empty,
                           int32_t device_type, int32_t device_id):
    cdef PendingHold p = PendingHold.__new__(PendingHold)
    p.array = obj
    p.aval = aval
    p.stream = stream
    p.data = data
    p.empty = empty
    p.device_type = device_type
    p.device_id = device_id
    cdef PyObject* made = _api.deferred_keepalive(
        <int (*)(PyObject*, PyObject**) noexcept> _acquire_pending, <PyObject*> p)
    if made == NULL:
        _pending_error()
    result = <object> made
    Py_DECREF(result)       # <object> took a reference of its own; `made` was a new one
    return result
