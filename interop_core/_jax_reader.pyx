# The jax reader and exporter: single-device jax.Array <-> ViewRecord, without blocking the host.
#
# Reading.  jax's __dlpack__ costs microseconds per call (Python wrappers, a capsule, an external
# reference on the PJRT buffer) and, without a stream, waits on the host until the array is
# computed.  For single-device arrays the reader asks the array directly: `_sharding` (device and
# memory kind), `aval` (shape, dtype), `_pjrt_layout` (strides) and `unsafe_buffer_pointer()`.
# Those are jax internals or near-internals, so the reader checks them once per process against
# jax's own DLPack export on canary arrays and falls back to __dlpack__ if anything differs.
#
# Readiness, per the stream contract (see docs/streams.md for what jax does underneath):
# - no stream (None, -1): no wait at all.  unsafe_buffer_pointer() never waits for the
#   computation: PJRT's external reference on GPU reads an address assigned when the work was
#   enqueued; on the CPU it waits only for the buffer's *allocation*, not for its contents.  The
#   memory may still be being written: the consumer orders itself later (sync(), a stream).
# - a consumer stream, device memory: PJRT makes that stream wait for the array's definition
#   events (jaxlib's buffer_to_dlpack_managed_tensor(array, stream=s), what __dlpack__(stream=s)
#   calls, without its Python wrappers); the host does not wait for the computation.  The view
#   keeps the resulting DLPack tensor, i.e. jax's external reference on the buffer.
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
# checking once per platform that the result equals jax.dlpack.from_dlpack's.

from cpython.object cimport PyObject_RichCompareBool, Py_EQ
from libc.stdint cimport int32_t, int64_t, intptr_t, uintptr_t

from .core._dlpack_abi cimport DLDataType
from .core._dtypes cimport dtype_of_cached, record_set_dtype
from .core._record cimport ViewRecord, extents_free, extents_resize, record_init
from .core._view cimport StridedMemoryView, order_view
from .protocols._dlpack cimport (
    legacy_capsule_for_immutable_consumer,
    read_dlpack,
    read_dlpack_capsule,
)
from .registry._registry cimport add_core_reader

__all__ = ["validation_status", "set_validation_result", "revalidate", "to_jax",
           "export_status", "set_export_result", "producer_stream"]

cdef enum:
    UNVALIDATED = 0
    VALID = 1
    INVALID = 2
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_CUDA_HOST = 3
    KDL_ROCM = 10
    KDL_ROCM_HOST = 11
    MAX_LEARNED = 8

# --- state of the reader (validated once per process) --------------------------------------------
cdef int _state = UNVALIDATED
cdef str _reason = "not validated yet"
cdef bint _forced = False
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

cdef int _layout_strides(object obj, ViewRecord* rec, int ndim) except -1:
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
        rec.ext.strides[d] = step
        step *= rec.ext.shape[d] if rec.ext.shape[d] > 0 else 1
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


cdef int _read_fast(object obj, ViewRecord* rec) except -1:
    """Metadata and address through the array's accessors; waits for nothing."""
    cdef DLDataType dt
    cdef int64_t step = 1
    cdef int i, ndim
    cdef int32_t device_type, device_id
    _locate(obj, &device_type, &device_id)
    aval = obj.aval
    shape = <tuple> aval.shape
    dtype_of_cached(aval.dtype, &dt)
    record_set_dtype(rec, dt, True)       # jax stores sub-byte types one element per byte
    ndim = len(shape)
    extents_resize(&rec.ext, ndim)
    for i in range(ndim - 1, -1, -1):
        rec.ext.shape[i] = shape[i]
        rec.ext.strides[i] = step
        step *= rec.ext.shape[i] if rec.ext.shape[i] > 0 else 1
    if ndim >= 2 and not _is_row_major(obj, ndim):
        _layout_strides(obj, rec, ndim)
    rec.ptr = <uintptr_t> obj.unsafe_buffer_pointer()
    rec.device_type = device_type
    rec.device_id = device_id
    rec.readonly = True
    rec.has_producer_stream = False
    return 0


cdef object _read_ordered(object obj, intptr_t consumer, ViewRecord* rec):
    """Device memory, a consumer stream: PJRT makes `consumer` wait for the array's definition
    events; the view keeps jax's DLPack tensor (an external reference on the buffer)."""
    capsule = _to_capsule(obj, stream=consumer)
    keep = read_dlpack_capsule(capsule, rec)
    rec.readonly = True
    # Relative to `consumer` the memory is ready: it is the stream the writes are ordered on.
    rec.has_producer_stream = True
    rec.producer_stream = consumer
    return keep


cdef object _read_valid(object obj, object stream, ViewRecord* rec):
    cdef int32_t device_type, device_id
    if stream is None:
        _read_fast(obj, rec)
        return obj
    _locate(obj, &device_type, &device_id)
    if device_type == KDL_CPU:
        obj.block_until_ready()      # jax's CPU work has no stream: the host is the only order
        _read_fast(obj, rec)
        return obj
    if _to_capsule is None:          # jaxlib without it: the same ordering via __dlpack__
        keep = read_dlpack(obj, stream, rec)
        rec.readonly = True
        return keep
    return _read_ordered(obj, <intptr_t> <Py_ssize_t> stream, rec)


cdef object read_jax(object obj, object stream, ViewRecord* rec):
    try:
        if _state != VALID:
            if _state == UNVALIDATED:
                _validate()
            if _state != VALID:
                return _read_fallback(obj, stream, rec)
        return _read_valid(obj, stream, rec)
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


cdef object _read_fallback(object obj, object stream, ViewRecord* rec):
    sharding = obj.sharding
    if len(sharding.device_set) != 1:
        raise BufferError(_MULTI_DEVICE.format(n=len(sharding.device_set)))
    if not obj.is_fully_addressable:
        raise BufferError(f"cannot view a jax array on {next(iter(sharding.device_set))}: that "
                          "device belongs to another jax process, so its memory is not "
                          "addressable here")
    # jax's DLPack export orders on the consumer's stream when given one; without one it waits
    # on the host until the array is ready (the fallback's cost).
    keep = read_dlpack(obj, stream, rec)
    rec.readonly = True
    return keep


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
    cdef int32_t device_type, device_id
    if _state == UNVALIDATED:
        _validate()
    try:
        if _state == VALID:
            _locate(obj, &device_type, &device_id)
        else:
            device_type, device_id = obj.__dlpack_device__()
        if device_type == KDL_CPU:
            obj.block_until_ready()
            return None
        device = next(iter(obj.sharding.device_set))
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


# --- validation of the reader, once per process -------------------------------------------------

cdef tuple _record_key(ViewRecord* rec):
    shape = tuple(rec.ext.shape[i] for i in range(rec.ext.ndim))
    strides = tuple(rec.ext.strides[i] for i in range(rec.ext.ndim))
    return (rec.ptr, rec.dtype.code, rec.dtype.bits, rec.dtype.lanes, rec.itemsize,
            rec.device_type, rec.device_id, shape, strides)


cdef str _check_one(object x):
    cdef ViewRecord mine, ref, ordered
    record_init(&mine)
    record_init(&ref)
    record_init(&ordered)
    try:
        _read_fast(x, &mine)
        keep = read_dlpack(x, None, &ref)
        a, b = _record_key(&mine), _record_key(&ref)
        if a[7] != tuple(x.shape):
            return f"shape {a[7]} != {x.shape}"
        # Strides only matter where some extent exceeds 1 (DLPack producers differ otherwise).
        if a[:8] != b[:8] or (a[8] != b[8] and min(a[7], default=1) > 1):
            return f"fast read {a} != DLPack read {b} for {x.dtype}{x.shape}"
        if _to_capsule is not None:
            keep_ordered = read_dlpack_capsule(_to_capsule(x), &ordered)
            c = _record_key(&ordered)
            if c[:8] != b[:8]:
                return f"buffer_to_dlpack_managed_tensor {c} != __dlpack__ {b}"
    finally:
        extents_free(&mine.ext)
        extents_free(&ref.ext)
        extents_free(&ordered.ext)
    return None


cdef object _jaxlib_function(object array_type, str name):
    """A function of the jaxlib extension module that defines jax's array type (or None)."""
    import importlib
    for module in (array_type.__module__, "jax._src.lib._jax", "jaxlib._jax",
                   "jaxlib.xla_extension"):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


cdef int _validate() except -1:
    global _state, _reason, _single_sharding, _to_capsule, _from_capsule, _last_sharding
    if _forced:
        return 0
    _state = VALID
    _last_sharding = None
    try:
        import jax
        import jax.numpy as jnp

        _single_sharding = jax.sharding.SingleDeviceSharding
        base = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
        _to_capsule = _jaxlib_function(type(base), "buffer_to_dlpack_managed_tensor")
        _from_capsule = _jaxlib_function(type(base), "dlpack_managed_tensor_to_buffer")
        canaries = [base, base[1], base[:, 1:, ::2], base.T, jnp.zeros((), jnp.int32),
                    jnp.zeros((0, 3), jnp.float32), jnp.arange(5, dtype=jnp.int8),
                    jnp.ones((3, 2), jnp.bool_), jnp.ones((2, 2), jnp.complex64),
                    jnp.ones((4, 3), jnp.float16), jnp.ones((2, 5), jnp.uint8),
                    jnp.ones((2, 3, 1, 2, 1, 2, 2, 3), jnp.int16)]
        if type(base._sharding) is not _single_sharding:
            _state, _reason = INVALID, f"_sharding is a {type(base._sharding).__name__}"
            return 0
        for x in canaries:
            why = _check_one(x)
            if why is not None:
                _state, _reason = INVALID, why
                return 0
    except Exception as exc:
        _state, _reason = INVALID, f"validation raised {type(exc).__name__}: {exc}"
        return 0
    _state, _reason = VALID, "jax accessors match jax's DLPack export"
    return 0


def validation_status():
    """Whether the direct reader is in use, and why (validating first if needed).

    Returns
    -------
    tuple of (bool, str)
        ``(True, ...)`` when ``view()`` reads jax arrays through their accessors; ``(False,
        reason)`` when it falls back to ``__dlpack__``.
    """
    if _state == UNVALIDATED:
        _validate()
    return _state == VALID, _reason


def set_validation_result(ok, reason="set by set_validation_result()"):
    """Pin the validation result (for tests of the fallback); ``ok=None`` re-validates.

    Parameters
    ----------
    ok : bool or None
        ``False`` forces the ``__dlpack__`` fallback; ``None`` validates again on next use.
    reason : str
        Reported by :func:`validation_status`.
    """
    global _state, _reason, _forced
    if ok is None:
        _forced, _state, _reason = False, UNVALIDATED, "not validated yet"
        return
    if ok and _single_sharding is None:
        raise ValueError("validate once (validation_status()) before pinning True")
    _forced = True
    _state = VALID if ok else INVALID
    _reason = str(reason)


def revalidate():
    """Forget any pinned or cached result and validate again now.

    Returns
    -------
    bool
        Whether the direct reader is in use.
    """
    set_validation_result(None)
    _validate()
    return _state == VALID


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


cdef bint _is_compact(ViewRecord* rec) noexcept:
    """Strides that permute a dense layout (what jax's DLPack import takes)."""
    cdef int i, j, n = rec.ext.ndim
    cdef int64_t expected = 1, best
    cdef int used[64]
    for i in range(n):
        used[i] = 0
        if rec.ext.shape[i] == 0:
            return True
    for i in range(n):
        # The unused dimension of extent > 1 with the smallest stride must have stride `expected`.
        best = -1
        for j in range(n):
            if not used[j] and rec.ext.shape[j] > 1 and (
                    best < 0 or rec.ext.strides[j] < rec.ext.strides[best]):
                best = j
        if best < 0:
            return True
        if rec.ext.strides[best] != expected:
            return False
        used[best] = 1
        expected *= rec.ext.shape[best]
    return True


cdef object _direct_import(StridedMemoryView view, tuple target):
    device, stream = target
    if stream is not None:
        order_view(view, <intptr_t> <Py_ssize_t> stream)    # the producer, before jax's stream
    capsule = legacy_capsule_for_immutable_consumer(view, &view.rec)
    return _from_capsule(capsule, device, stream, None, view.rec.device_type)


def to_jax(StridedMemoryView view not None, stream=None):
    """A ``jax.Array`` over the memory of ``view`` (same pointer), keeping ``view`` alive.

    One jaxlib call (``dlpack_managed_tensor_to_buffer``) with the device and jax's stream for
    external ready events cached per device; device memory is first ordered before that stream
    (as ``jax.dlpack.from_dlpack`` does).  Views jax would convert (64-bit types without
    ``jax_enable_x64``) or a platform whose check failed take the plugin's
    ``jax.dlpack.from_dlpack`` path.

    Parameters
    ----------
    view : StridedMemoryView
    stream : optional
        Accepted for the exporter protocol: ``to()`` has already ordered the view on it.

    Returns
    -------
    jax.Array

    Raises
    ------
    BufferError
        If the layout is not compact (a transposition of a dense array).
    """
    global _slow_export
    if not _is_compact(&view.rec):
        raise BufferError(
            f"jax imports only compact layouts (a transposition of a dense array); this view "
            f"has shape {view.shape} and strides {view.strides}: make it contiguous first")
    target = _import_target(view.rec.device_type, view.rec.device_id)
    if target is None or view.rec.dtype.lanes != 1 or (_is_64_bit(&view.rec)
                                                       and not _x64_enabled()):
        if _slow_export is None:
            from interop_jax import export_jax_slow
            _slow_export = export_jax_slow
        return _slow_export(view, stream)
    result = _direct_import(view, <tuple> target)
    # jax copies host memory it cannot alias (not 64-byte aligned) instead of failing.
    if view.rec.device_type == KDL_CPU and _volume(&view.rec) and \
            result.unsafe_buffer_pointer() != view.rec.ptr:
        from interop_jax import warn_copied
        warn_copied(view)
    return result


cdef bint _is_64_bit(ViewRecord* rec) noexcept:
    """Element types jax converts to 32 bits unless jax_enable_x64 is set."""
    return (rec.itemsize == 8 and rec.dtype.code != 5) or (rec.itemsize == 16
                                                           and rec.dtype.code == 5)


cdef int64_t _volume(ViewRecord* rec) noexcept:
    cdef int64_t n = 1
    cdef int i
    for i in range(rec.ext.ndim):
        n *= rec.ext.shape[i]
    return n


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

    if _state == UNVALIDATED:
        _validate()
    if _from_capsule is None:
        return "jaxlib has no dlpack_managed_tensor_to_buffer"
    try:
        device = jax.local_devices(backend=platform)[0]
    except RuntimeError:
        return f"jax has no {platform} backend"
    from interop_core import StridedMemoryView as SMV, view as view_of

    base = jax.device_put(jnp.arange(24, dtype=jnp.float32).reshape(4, 6), device)
    canaries = [base, base.astype(jnp.int8), base.astype(jnp.bool_), base.astype(jnp.float16),
                base.astype(jnp.complex64), base[1, 2], base[:0]]
    host = device.platform == "cpu"
    for x in canaries:
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


def set_export_result(platform, ok, reason="set by set_export_result()"):
    """Pin the once-per-platform check of the direct import (for tests of the fallback).

    Parameters
    ----------
    platform : str
        ``"cpu"``, ``"gpu"`` or ``"rocm"``.
    ok : bool or None
        ``False`` sends ``to(x, "jax")`` on that platform through ``jax.dlpack.from_dlpack``;
        ``None`` forgets the result (checked again on next use).
    reason : str
    """
    _import_targets.clear()
    if ok is None:
        _platform_checks.pop(platform, None)
    else:
        _platform_checks[platform] = (bool(ok), str(reason))


def export_status():
    """The once-per-platform checks of ``to(x, "jax")``'s direct import made so far.

    Returns
    -------
    dict
        ``{platform: (ok, reason)}``; a platform not yet exported to is absent.
    """
    return dict(_platform_checks)


add_core_reader("jax", read_jax)
