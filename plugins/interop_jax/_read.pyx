# The jax reader: a single-device jax.Array -> interop_core_tensor_info, without blocking the
# host, registered through the public C ABI (interop_core.h, version 2) like any third party's
# reader (reader_capsule), with jax's own __dlpack__ as its fallback (read_with_dlpack) and the
# producer strategy the core asks for jax's stream (producer_stream).  It cimports nothing of
# the core but interop_core.abi.
#
# Lifetime: every read holds the buffer (see _hold.pyx).  jax frees an array's buffer on
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
# `prepare` (_validation.pyx) checks the sharding type and that shared reads say what first
# reads say.
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
#   consumer) reads as soon as it has the pointer.  A shared read (one that finds a live hold of
#   the array, _hold.pyx) finds a hold taken after that wait: it waits for nothing.
# - a consumer stream, device memory: the hold is taken on that stream (what
#   __dlpack__(stream=s) does, without its Python wrappers): PJRT makes it wait for the array's
#   definition events; the host does not wait for the computation.  An array already computed
#   (is_ready(): ~0.3 us against ~1.5 us for the hold on a stream, H100 host) has nothing to
#   order: a read whose memory is used within the caller's call (uses_memory IN_CALL, the
#   Triton wrapper) reads it as a view() without a stream, the hold deferred.
# - a read standing in for StridedMemoryView.from_dlpack (the ABI's `protocol` input, v5), no
#   consumer stream: what jax's own __dlpack__() does, the hold taken without a stream (jaxlib
#   waits on the host until the array is computed), or a live hold shared after that wait.
# - a read standing in for StridedMemoryView.from_cuda_array_interface: what jax's interface
#   gives (version 2: no stream, no host wait, no hold past the call), which is a view().

from cpython.object cimport PyObject, PyObject_RichCompareBool, Py_EQ
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t, intptr_t, uint8_t, uint16_t, uintptr_t

from interop_core.abi cimport (
    INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE,
    INTEROP_CORE_PROTOCOL_CUDA_ARRAY_INTERFACE,
    INTEROP_CORE_PROTOCOL_DLPACK,
    INTEROP_CORE_READER_V2_CAPSULE,
    INTEROP_CORE_USES_MEMORY_IN_CALL,
    interop_core_tensor_info,
)

from interop_jax._handles cimport (
    KDL_CPU,
    KDL_CUDA,
    MAX_NDIM,
    _accessor_type,
    _api,
    _aval_getter,
    _pending_error,
    _pointer_method,
    _ready,
    _ready_method,
    _setup,
    _wait_method,
)
from interop_jax._devices cimport (
    _MULTI_DEVICE,
    _jax_stream,
    _locate,
    _located_device,
    _resolve_device,
)
from interop_jax._hold cimport (
    BufferHold,
    _capsule_of,
    _deferred_hold,
    _hand_over,
    _hold_stream,
    _shared_hold,
    _take_hold,
)

__all__ = ["reader_capsule", "read_with_dlpack", "producer_stream", "equivalence_check_capsule"]

_DELETED = (
    "cannot view a deleted jax array: its buffer was freed by array.delete() or donated to a "
    "jitted computation (donate_argnums)")


cdef inline bint _computed(object obj) except -1:
    if type(obj) is _accessor_type:
        return _ready_method(obj)
    return obj.is_ready()


cdef inline int _wait_until_computed(object obj) except -1:
    # Mostly computed already: is_ready() costs less than block_until_ready(), which lets go of
    # the GIL and takes it back even then.
    if not _computed(obj):
        if type(obj) is _accessor_type:
            _wait_method(obj)
        else:
            obj.block_until_ready()
    return 0


cdef inline int _wait_for_host_work(object obj, int32_t device_type) except -1:
    """Host memory: wait until jax has computed `obj` (see "Readiness"); device memory is
    ordered on streams instead, never by a host wait."""
    if device_type != KDL_CPU:
        return 0
    return _wait_until_computed(obj)


# The extents a deferred read hands the core (copied by the core before it runs Python code;
# filled after the read's last Python-level call, GIL held: interop_core.h).
cdef int64_t _shape[MAX_NDIM]

# Device layouts seen to be row-major, per ndim (jax's PjRtLayout objects, at most
# _LEARNED_LAYOUTS each, most recent first): a deferred read describes an array as C-contiguous
# only when its `_pjrt_layout` is one of these; any other array is read through a hold, whose
# capsule states its layout (custom layouts included), and teaches the list.
cdef dict _row_major = {}
cdef enum:
    _LEARNED_LAYOUTS = 4


cdef object _unknown_layout(object obj, Py_ssize_t ndim):
    """None when `obj`'s device layout is known to be row-major, else the layout object."""
    layout = obj._pjrt_layout
    known = _row_major.get(ndim)
    if known is not None:
        # jaxlib hands out one wrapper object per C++ layout while it lives: identity first.
        for ref in <list> known:
            if ref is layout:
                return None
        for ref in <list> known:
            if PyObject_RichCompareBool(layout, ref, Py_EQ):
                (<list> known).insert(0, layout)
                del (<list> known)[_LEARNED_LAYOUTS:]
                return None
    return layout


cdef inline bint _read_row_major(const interop_core_tensor_info* read) noexcept:
    # Row-major (C-contiguous) strides, extents of 1 aside; none given means row-major.
    cdef int32_t i
    cdef int64_t step = 1
    if read.strides == NULL:
        return True
    for i in range(read.ndim - 1, -1, -1):
        if read.shape[i] != 1 and read.strides[i] != step:
            return False
        step *= read.shape[i]
    return True


cdef int _learn_layout(object layout, BufferHold h) except -1:
    """Remember `layout` as row-major when the hold's capsule says the array is C-contiguous."""
    if not _read_row_major(&h.info):
        return 0
    known = _row_major.setdefault(h.info.ndim, [])
    (<list> known).insert(0, layout)
    del (<list> known)[_LEARNED_LAYOUTS:]
    return 0


cdef int _read_deferred(object obj, interop_core_tensor_info* out) except -1:
    """A read without a consumer stream: the array described from its own accessors, the hold
    deferred to the memory's first use (_hold.pyx, "holds taken at first use").  A live hold of
    the array is shared instead; what the accessors cannot describe exactly (a device layout
    not known to be row-major, elements narrower than a byte) is read through a hold now."""
    cdef int32_t device_type, device_id
    cdef uint8_t code, bits
    cdef uint16_t lanes
    cdef Py_ssize_t ndim, i
    cdef int64_t volume = 1
    cdef uintptr_t data
    h = _shared_hold(obj)
    if h is not None:
        return _hand_over(h, out)
    if type(obj) is not _accessor_type:
        return _read_held(obj, out)
    _locate(obj, &device_type, &device_id)
    stream = _hold_stream(device_type, _located_device)
    # The address first: unsafe_buffer_pointer() raises for a deleted or donated array (named
    # by read_jax_array), and jaxlib's `_pjrt_layout` of such an array must never be asked.
    data = <uintptr_t> _pointer_method(obj)
    aval = _aval_getter(obj)
    shape = aval.shape
    ndim = len(<tuple> shape)
    if _api.dtype_of(<PyObject*> aval.dtype, &code, &bits, &lanes) != 0:
        _pending_error()
    if bits % 8 != 0 or lanes != 1 or ndim > MAX_NDIM:
        return _read_held(obj, out)
    layout = _unknown_layout(obj, ndim)
    if layout is not None:
        h = _take_hold(obj, stream, device_type, device_id)
        _learn_layout(layout, h)
        return _hand_over(h, out)
    for i in range(ndim):
        volume *= <int64_t> (<tuple> shape)[i]
    keepalive = _deferred_hold(obj, aval, stream, data, volume == 0, device_type, device_id)
    # No Python code runs from here on: the extents are handed over.
    for i in range(ndim):
        _shape[i] = <int64_t> (<tuple> shape)[i]
    out.data = <void*> data
    out.ndim = <int32_t> ndim
    out.shape = _shape
    out.strides = NULL          # C-contiguous: the layout is row-major
    out.strides_in_bytes = 0
    out.dtype_code = code
    out.dtype_bits = bits
    out.dtype_lanes = lanes
    out.device_type = device_type
    out.device_id = device_id
    out.readonly = 1
    out.has_producer_stream = 0
    Py_INCREF(keepalive)
    out.keepalive = <PyObject*> keepalive
    return 0


cdef BufferHold _hold_of(object obj, bint as_dlpack):
    """A live hold of `obj` shared, else a new one, without a consumer stream: taken on jax's
    stream (no host wait on device work), or, `as_dlpack`, as jax's own ``__dlpack__()`` takes
    it without a stream: the host waits until `obj` is computed (for a shared hold too, which
    was taken on jax's stream without that wait)."""
    cdef int32_t device_type, device_id
    h = _shared_hold(obj)
    if h is None:
        _locate(obj, &device_type, &device_id)
        stream = None if as_dlpack else _hold_stream(device_type, _located_device)
        return _take_hold(obj, stream, device_type, device_id)
    if as_dlpack and h.info.device_type != KDL_CPU:
        _wait_until_computed(obj)
    return h


cdef int _read_held(object obj, interop_core_tensor_info* out) except -1:
    """Metadata, address and a hold of a single-device array, without a consumer stream."""
    return _hand_over(_hold_of(obj, False), out)


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
    if _api.abi_version >= 5 and out.protocol == INTEROP_CORE_PROTOCOL_CUDA_ARRAY_INTERFACE:
        # What jax's own __cuda_array_interface__ gives (version 2, no `stream` field): the
        # address, with neither a host wait nor a hold that outlives the call (jaxlib 0.11,
        # H100).  A view() describes the same, its hold deferred to the memory's first use.
        # A consumer stream is ordered by the core after this read, through producer_stream,
        # as it orders the interface's own view.
        return _read_deferred(obj, out)
    if stream is None:
        if _api.abi_version >= 5 and out.protocol == INTEROP_CORE_PROTOCOL_DLPACK:
            # What jax's own __dlpack__() gives without a stream (from_dlpack, from_any): with
            # a consumer stream the reads below already are what __dlpack__(stream=s) gives.
            return _hand_over(_hold_of(obj, True), out)
        # to(), launch_args: the memory is used at once, so the hold is taken now.  A read used
        # within the call (no stream: TritonKernel.key()) describes device memory as a view()
        # does; host memory is held, for the host wait that comes with it.
        if _api.abi_version >= 4 and out.uses_memory:
            if _api.abi_version >= 6 and out.uses_memory == INTEROP_CORE_USES_MEMORY_IN_CALL:
                _locate(obj, &device_type, &device_id)
                if device_type != KDL_CPU:
                    return _read_deferred(obj, out)
            return _read_held(obj, out)
        return _read_deferred(obj, out)
    _locate(obj, &device_type, &device_id)
    if device_type == KDL_CPU:
        return _read_held(obj, out)  # jaxlib waits for jax's CPU work: the host is the order
    if (_api.abi_version >= 6 and out.uses_memory == INTEROP_CORE_USES_MEMORY_IN_CALL
            and _computed(obj)):
        # Nothing to order, and nothing made from the read outlives the caller's call: read as
        # a view() without a stream, the hold deferred (taken only if Python code runs before
        # the memory is used).  A view() with a stream keeps holding at once: its user passed
        # the stream to use the memory on it.
        _read_deferred(obj, out)
        out.has_producer_stream = 1
        out.producer_stream = <intptr_t> <Py_ssize_t> stream
        return 0
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
    """The reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2): every read
    holds the array's buffer (a ``BufferHold`` as the view's keep-alive).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.reader_v2"``.
    """
    return PyCapsule_New(<void*> read_jax_array, INTEROP_CORE_READER_V2_CAPSULE, NULL)


cdef inline bint _interface_dtype(const interop_core_tensor_info* read) noexcept:
    # The element types jax's __cuda_array_interface__ exports: bool, integers of 8 to 64 bits,
    # float16/32/64 and complex64/128.  It raises AttributeError for the rest (bfloat16, the
    # float8 and 4-bit types), which the interface's own reading then says in its own words.
    cdef uint8_t code = read.dtype_code
    cdef uint8_t bits = read.dtype_bits
    if read.dtype_lanes != 1:
        return False
    if code == 0 or code == 1:          # kDLInt, kDLUInt
        return bits == 8 or bits == 16 or bits == 32 or bits == 64
    if code == 2:                       # kDLFloat
        return bits == 16 or bits == 32 or bits == 64
    if code == 5:                       # kDLComplex
        return bits == 64 or bits == 128
    return code == 6 and bits == 8      # kDLBool


cdef int _same_as_protocol(PyObject* obj, int32_t protocol,
                           const interop_core_tensor_info* read) noexcept:
    cdef int64_t volume = 1
    cdef int32_t i
    if protocol == INTEROP_CORE_PROTOCOL_DLPACK:
        # The hold is jax's own DLPack capsule, so pointer, layout and dtype are what __dlpack__
        # says; the device is the reader's (the array's sharding and memory kind), which the
        # core's validation compares with the capsule's on plain host and device memory.
        # Other memory kinds (pinned host) are left to jax's export to name.
        return 1 if read.device_type == KDL_CPU or read.device_type == KDL_CUDA else 0
    # The CUDA Array Interface: device memory in row-major order (jax raises for another
    # layout), an element type it exports, and some memory: it gives address 0 for an empty
    # array, where the reader may give the buffer's.  Pinned host memory, which jax exports
    # with its host address, is left to the interface.
    if read.device_type != KDL_CUDA or not _interface_dtype(read) or not _read_row_major(read):
        return 0
    for i in range(read.ndim):
        volume *= read.shape[i]
    return 1 if volume != 0 else 0


def equivalence_check_capsule():
    """The check ``registry.add_type(equivalence_check=...)`` takes for DLPack and the CUDA Array
    Interface, a capsule named ``"interop_core.equivalence_check_v1"``: whether jax's own
    ``__dlpack__`` names the device the reader named (plain host and device memory), and whether
    jax's own ``__cuda_array_interface__`` exports the array (device memory in row-major order,
    an element type it knows, some memory).

    Returns
    -------
    PyCapsule
    """
    return PyCapsule_New(<void*> _same_as_protocol, INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE, NULL)


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
        if stream is None:
            # DLPack's "no synchronisation" (stream=-1) reaches cuStreamWaitEvent as a handle in
            # jaxlib (CUDA_ERROR_INVALID_HANDLE, which the core would retry with None: a host
            # wait).  Device memory is ordered before jax's own stream for external ready
            # events instead, as the holds are: no host wait, no invalid handle.
            device = next(iter(devices))
            if (<tuple> _resolve_device(device, sharding.memory_kind))[0] != KDL_CPU:
                stream = _jax_stream(device)
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
        try:
            _capsule_of(obj, stream)   # dropped at once: the stream is ordered
        except Exception:
            if not obj.is_deleted():
                raise
            # Deleted or donated after a view of it was made: only a live view's hold can ask
            # (a fresh read refuses a deleted array), and that hold keeps the buffer and made
            # this very stream wait for jax's writes when it was taken.
        return stream
    except BufferError:
        raise
    except Exception as exc:
        _raise_if_deleted(obj, exc)
        raise
