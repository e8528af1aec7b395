# Holds (_hold.pyx): jax's external reference on a buffer, kept for as long as a view, export,
# LaunchArgs slot or shard view of it lives.  Cimported by the reader and the sharded path.

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, uintptr_t

from interop_core.abi cimport interop_core_tensor_info


cdef class BufferHold:
    # The array read (owned: while this lives, the table's entry naming it is its own).
    cdef readonly object array
    # Its `aval` when the hold was taken (owned): a shared read compares it by identity.
    cdef object aval
    # jaxlib's DLPack capsule of the array's fully replicated shard, never consumed (owned): its
    # destructor releases jax's external reference on the buffer.
    cdef object capsule
    # describe_dlpack's answer: shape and strides point into the capsule's tensor; the device is
    # the one `_locate` found (memory kinds); `keepalive` NULL.
    cdef interop_core_tensor_info info
    cdef Py_ssize_t slot            # the table entry filed with this hold, -1 before


cdef class PendingHold:
    # What a read made without a hold (_read.pyx: _read_deferred) needs to take one when the
    # memory is first used: the state of the core's DeferredKeepalive.
    cdef object array               # owned: the array read
    cdef object aval                # owned: its aval at the read (compared by identity)
    cdef object stream              # owned: the stream to take the hold on (_hold_stream)
    cdef uintptr_t data             # the address the read described
    cdef bint empty                 # no elements: no address to compare
    cdef int32_t device_type
    cdef int32_t device_id


# The core's deferred keep-alive for a read of `obj` that took no hold: jax's external
# reference is taken at the first use of the memory (_acquire_pending), after checking that
# the buffer is still the one read (BufferError if it was deleted, donated or replaced).  A new
# reference.
cdef object _deferred_hold(object obj, object aval, object stream, uintptr_t data, bint empty,
                           int32_t device_type, int32_t device_id)

# A live hold on `obj`'s current buffer (a view or export of it lives), or None.
cdef BufferHold _shared_hold(object obj)
# A new hold on `obj`'s buffer, its capsule taken on `stream` (None: jaxlib waits on the host
# until the array is computed), filed in the table; the device is the one `_locate` found.
# BufferError where jax refuses the export; jax's own error where the array was deleted.
cdef BufferHold _take_hold(object obj, object stream, int32_t device_type, int32_t device_id)
# jax's DLPack capsule of `obj`'s buffer, of the array jax's own __dlpack__ exports (the
# array's fully replicated shard, never `obj` itself), ordered on `stream`.
cdef object _capsule_of(object obj, object stream)
# The stream a hold without a consumer stream is taken on: None for host memory (jaxlib waits
# until the array is computed: host consumers read at once), else jax's own stream for external
# ready events (no host wait; None where jax has none, which waits on the host).
cdef object _hold_stream(int32_t device_type, object device)


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
