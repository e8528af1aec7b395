# The jax reader and exporter: single-device jax.Array <-> interop_core_tensor_info, without
# blocking the host, registered through the public C ABI (interop_core.h, version 2) like any
# third party's reader.  It cimports nothing of the core but interop_core.abi; the exporter uses
# only the core's public Python API (a view's properties and sync()).
#
# Reading.  jax's __dlpack__ costs microseconds per call (Python wrappers, a capsule, an external
# reference on the PJRT buffer) and, without a stream, waits on the host until the array is
# computed.  For single-device arrays the reader asks the array directly: `_sharding` (device and
# memory kind), `aval` (shape, dtype), `_pjrt_layout` (strides) and `unsafe_buffer_pointer()`.
# Those are jax internals or near-internals, so the core validates the reader once per process
# (registry `prepare=` / `canaries=`): it reads canary arrays with this reader and with the
# fallback (`read_with_dlpack`, jax's own DLPack export) and compares them field by field;
# `prepare` checks the sharding type and jaxlib's ordered export.  On any difference the fallback
# serves the rest of the process.
#
# Readiness, per the stream contract (see docs/streams.md for what jax does underneath):
# - no stream (None, -1): no wait at all.  unsafe_buffer_pointer() never waits for the
#   computation: PJRT's external reference on GPU reads an address assigned when the work was
#   enqueued; on the CPU it waits only for the buffer's *allocation*, not for its contents.  The
#   memory may still be being written: the consumer orders itself later (sync(), a stream).
# - a consumer stream, device memory: PJRT makes that stream wait for the array's definition
#   events (jaxlib's buffer_to_dlpack_managed_tensor(array, stream=s), what __dlpack__(stream=s)
#   calls, without its Python wrappers); the host does not wait for the computation.  The view
#   keeps the resulting DLPack capsule unconsumed, i.e. jax's external reference on the buffer
#   (the capsule's destructor releases it).  A jaxlib without that function: declined, and the
#   fallback's __dlpack__(stream=s) orders the same way.
# - a consumer stream, host memory (the CPU backend): jax's CPU work runs on a thread pool and
#   is not stream-ordered (PJRT's stream wait is "only implemented for GPU"), so the only
#   ordering jax offers is the host's: block_until_ready().
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
from libc.stdint cimport int32_t, int64_t, intptr_t
from libc.stdint cimport uintptr_t
from libc.string cimport memcpy, memset

from interop_core.abi cimport (
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["reader_capsule", "read_with_dlpack", "prepare", "canaries", "producer_stream",
           "to_jax", "export_status"]

cdef enum:
    MAX_NDIM = 64           # the ABI's limit on ndim
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_CUDA_HOST = 3
    KDL_ROCM = 10
    KDL_ROCM_HOST = 11
    MAX_LEARNED = 8


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
cdef int _process_index = -1          # jax.process_index(): devices of other processes
cdef dict _devices = {}               # (jax Device, memory kind) -> (DLPack type, device id)
cdef dict _row_major = {}             # ndim -> list of PjRtLayout objects known to be row-major
# The last sharding object seen and its (type, id): arrays from one jitted function share it,
# so the common case costs one identity comparison.  A strong reference, replaced on a miss.
cdef object _last_sharding = None
cdef int32_t _last_type = 0, _last_id = 0

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
    import jax

    _single_sharding = jax.sharding.SingleDeviceSharding
    _to_capsule = _jaxlib_function(array_type, "buffer_to_dlpack_managed_tensor")
    _from_capsule = _jaxlib_function(array_type, "dlpack_managed_tensor_to_buffer")
    _last_sharding = None
    _ready = True
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


cdef int _locate(object obj, int32_t* device_type, int32_t* device_id) except -1:
    """The DLPack device of a single-device array (BufferError for several devices)."""
    global _last_sharding, _last_type, _last_id
    sharding = obj._sharding
    if sharding is _last_sharding:
        device_type[0] = _last_type
        device_id[0] = _last_id
        return 0
    if type(sharding) is _single_sharding:
        device = sharding._device
    else:
        devices = sharding.device_set
        if len(devices) != 1:
            raise BufferError(_MULTI_DEVICE.format(n=len(devices)))
        device = next(iter(devices))
    dev = _resolve_device(device, sharding.memory_kind)
    _last_type = device_type[0] = (<tuple> dev)[0]
    _last_id = device_id[0] = (<tuple> dev)[1]
    _last_sharding = sharding
    return 0


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


cdef int _read_fast(object obj, interop_core_tensor_info* out) except -1:
    """Metadata and address through the array's accessors; waits for nothing."""
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int64_t step = 1
    cdef int i, ndim
    cdef int32_t device_type, device_id
    cdef uintptr_t ptr
    _locate(obj, &device_type, &device_id)
    aval = obj.aval
    shape_obj = <tuple> aval.shape
    # jax stores sub-byte types one element per byte, as the core assumes of every reader.
    if _api.dtype_of(<PyObject*> aval.dtype, &out.dtype_code, &out.dtype_bits,
                     &out.dtype_lanes) != 0:
        _pending_error()
    ndim = len(shape_obj)
    if ndim > MAX_NDIM:
        raise BufferError(f"a jax array of {ndim} dimensions cannot be viewed (at most "
                          f"{MAX_NDIM})")
    for i in range(ndim - 1, -1, -1):
        shape[i] = shape_obj[i]
        strides[i] = step
        step *= shape[i] if shape[i] > 0 else 1
    if ndim >= 2 and not _is_row_major(obj, ndim):
        _layout_strides(obj, shape, strides, ndim)
    ptr = <uintptr_t> obj.unsafe_buffer_pointer()
    # No Python code runs from here on: hand the extents over.
    memcpy(_shape, shape, ndim * sizeof(int64_t))
    memcpy(_strides, strides, ndim * sizeof(int64_t))
    out.data = <void*> ptr
    out.ndim = ndim
    out.shape = _shape
    out.strides = _strides
    out.device_type = device_type
    out.device_id = device_id
    out.readonly = 1
    out.has_producer_stream = 0
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
        obj.block_until_ready()      # jax's CPU work has no stream: the host is the only order
        return _read_fast(obj, out)
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
            obj.block_until_ready()
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
