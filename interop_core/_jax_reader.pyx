# The jax reader: a single-device jax.Array -> ViewRecord without DLPack.
#
# jax's __dlpack__ costs several microseconds per call (a capsule, a DLManagedTensor and a
# reference on the PJRT buffer), so for single-device arrays we ask the array directly:
# `_sharding` (its device), `aval` (shape, numpy dtype), `block_until_ready()` and
# `unsafe_buffer_pointer()`.  Those are jax internals or near-internals, so the reader checks
# them once per process against jax's own DLPack export on canary arrays and falls back to
# __dlpack__ for the rest of the process if anything differs.
#
# Strides: jax buffers are dense, but not always row-major: a user may ask for another device
# layout (jax.experimental.layout.Format).  The reader compares the array's `_pjrt_layout`
# with layouts it has already seen to be row-major for that rank (one rich comparison); any other
# layout is decoded from `array.format` (slow, microseconds) and learned when it is row-major.
#
# Readiness: block_until_ready() before reading the pointer, on every call.  Cost: a few hundred
# ns when the array is ready (the common case); when jax is still computing, the host waits for
# it.  Chosen over DLPack's stream argument because it works the same on every backend and jax
# version (jax 0.11 on CUDA rejects stream=-1), needs no consumer stream, and leaves no
# producer work pending: the record carries no producer stream.

from cpython.object cimport PyObject, PyObject_RichCompareBool, Py_EQ
from libc.stdint cimport int64_t, intptr_t, uintptr_t

from .protocols._dlpack cimport read_dlpack
from .core._dlpack_abi cimport DLDataType
from .core._dtypes cimport dtype_of_cached, record_set_dtype
from .core._record cimport ViewRecord, extents_free, extents_resize, record_init
from .registry._registry cimport add_core_reader

__all__ = ["validation_status", "set_validation_result", "revalidate"]

cdef enum:
    UNVALIDATED = 0
    VALID = 1
    INVALID = 2
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_ROCM = 10
    MAX_LEARNED = 8

cdef int _state = UNVALIDATED
cdef str _reason = "not validated yet"
cdef bint _forced = False
cdef object _single_sharding = None   # jax's SingleDeviceSharding type (owned here)
cdef dict _devices = {}               # jax Device -> (DLPack device_type, device_id)
cdef dict _row_major = {}             # ndim -> list of PjRtLayout objects known to be row-major

_MULTI_DEVICE = (
    "cannot view a jax array sharded over {n} devices as one strided view: use "
    "interop_core.shards() for one view per addressable shard, with its device, its index in "
    "the global array and its replica id")


cdef tuple _device_of(object device):
    cached = _devices.get(device)
    if cached is not None:
        return <tuple> cached
    platform = device.platform
    if platform == "cpu":
        result = (KDL_CPU, 0)
    elif platform in ("gpu", "cuda"):
        result = (KDL_CUDA, int(device.local_hardware_id))
    elif platform == "rocm":
        result = (KDL_ROCM, int(device.local_hardware_id))
    else:
        raise BufferError(f"cannot view a jax array on a {platform!r} device (only cpu, cuda "
                          "and rocm memory can be addressed)")
    _devices[device] = result
    return result


cdef object _only_device(object obj, object sharding):
    """The device of an array whose sharding is not SingleDeviceSharding (slow, rare)."""
    devices = sharding.device_set
    if len(devices) != 1:
        raise BufferError(_MULTI_DEVICE.format(n=len(devices)))
    return next(iter(devices))


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
        known = _row_major.setdefault(ndim, [])
        if len(known) < MAX_LEARNED:
            known.append(obj._pjrt_layout)
    return 0


cdef int _read_fast(object obj, ViewRecord* rec) except -1:
    cdef DLDataType dt
    cdef int64_t step
    cdef int i, ndim
    sharding = obj._sharding
    if type(sharding) is _single_sharding:
        device = sharding._device
    else:
        device = _only_device(obj, sharding)
    dev = _device_of(device)
    aval = obj.aval
    shape = <tuple> aval.shape
    dtype_of_cached(aval.dtype, &dt)
    record_set_dtype(rec, dt, True)
    ndim = len(shape)
    extents_resize(&rec.ext, ndim)
    step = 1
    for i in range(ndim - 1, -1, -1):
        rec.ext.shape[i] = shape[i]
        rec.ext.strides[i] = step
        step *= rec.ext.shape[i] if rec.ext.shape[i] > 0 else 1
    if ndim >= 2 and not _is_row_major(obj, ndim):
        _layout_strides(obj, rec, ndim)
    obj.block_until_ready()
    rec.ptr = <uintptr_t> obj.unsafe_buffer_pointer()
    rec.device_type = (<tuple> dev)[0]
    rec.device_id = (<tuple> dev)[1]
    rec.readonly = True
    rec.has_producer_stream = False
    return 0


cdef bint _is_row_major(object obj, int ndim) except -1:
    known = _row_major.get(ndim)
    if known is None:
        return False
    layout = obj._pjrt_layout
    for ref in <list> known:
        if PyObject_RichCompareBool(layout, ref, Py_EQ):
            return True
    return False


cdef object read_jax(object obj, object stream, ViewRecord* rec):
    # After block_until_ready nothing is pending: no ordering, whatever the (validated) stream.
    if _state != VALID:
        if _state == UNVALIDATED:
            _validate()
        if _state != VALID:
            return _read_fallback(obj, stream, rec)
    _read_fast(obj, rec)
    return obj


cdef object _read_fallback(object obj, object stream, ViewRecord* rec):
    sharding = obj.sharding
    if len(sharding.device_set) != 1:
        raise BufferError(_MULTI_DEVICE.format(n=len(sharding.device_set)))
    obj.block_until_ready()
    keep = read_dlpack(obj, stream, rec)
    rec.readonly = True
    rec.has_producer_stream = False
    return keep


# --- validation, once per process ---------------------------------------------------------------

cdef str _check_one(object x):
    cdef ViewRecord mine, ref
    record_init(&mine)
    record_init(&ref)
    try:
        _read_fast(x, &mine)
        read_dlpack(x, None, &ref)
        # (No negative indexing here: the core is compiled with wraparound off.)
        shape = tuple(mine.ext.shape[i] for i in range(mine.ext.ndim))
        strides = tuple(mine.ext.strides[i] for i in range(mine.ext.ndim))
        ref_shape = tuple(ref.ext.shape[i] for i in range(ref.ext.ndim))
        ref_strides = tuple(ref.ext.strides[i] for i in range(ref.ext.ndim))
        a = (mine.ptr, mine.dtype.code, mine.dtype.bits, mine.dtype.lanes, mine.itemsize,
             mine.device_type, mine.device_id, shape)
        b = (ref.ptr, ref.dtype.code, ref.dtype.bits, ref.dtype.lanes, ref.itemsize,
             ref.device_type, ref.device_id, ref_shape)
        if shape != tuple(x.shape):
            return f"shape {shape} != {x.shape}"
        # Strides only matter where some extent exceeds 1 (DLPack producers differ otherwise).
        if a != b or (strides != ref_strides and min(shape, default=1) > 1):
            return f"fast read {a + (strides,)} != DLPack read {b + (ref_strides,)} for {x.dtype}{x.shape}"
    finally:
        extents_free(&mine.ext)
        extents_free(&ref.ext)
    return None


cdef int _validate() except -1:
    global _state, _reason, _single_sharding
    if _forced:
        return 0
    _state = VALID
    try:
        import jax
        import jax.numpy as jnp

        _single_sharding = jax.sharding.SingleDeviceSharding
        base = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
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


add_core_reader("jax", read_jax)
