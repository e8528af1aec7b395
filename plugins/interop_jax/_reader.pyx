# The jax plugin's exporter, to(view, "jax") (the section below), and the names its callers
# know: this module re-exports the reader's public functions (reader_capsule, read_with_dlpack,
# producer_stream from _read; canaries, prepare from _validation; read_shards, shard_canaries,
# prepare_shards from _shards_read; BufferHold from _hold), so `interop_jax._reader.X` keeps
# naming them.  The plugin's modules, each a .pyx + .pxd + .pyi, cimported across through
# their .pxd files:
#   _handles      jax's handles and the core's helper table, looked up once; shared constants
#   _devices      where a jax array lives: DLPack devices from shardings, jax's streams
#   _hold         BufferHold: jax's external reference on a buffer, for as long as a view lives
#   _read         the reader (ABI v2 capsule), its fallback and the producer strategy
#   _validation   the reader's canaries and prepare(), run once by the core
#   _shards_read  shards() through a plan per (sharding, global shape)
#   _reader       the exporter (below)
# Registration (interop_jax/__init__.py) goes through the public registry only, and every
# compiled module cimports nothing of the core but interop_core.abi: the plugin is a template a
# third party can copy.
#
# Exporting (to_jax).  jax.dlpack.from_dlpack costs tens of microseconds, mostly Python: the
# producer's __dlpack_device__, a backend lookup, __dlpack__, then jnp.asarray.  to_jax does the
# same import with one jaxlib call, dlpack_managed_tensor_to_buffer(capsule, device, stream, ...),
# with the device and jax's stream for external ready events cached per DLPack device, after
# checking once per platform that the result equals jax.dlpack.from_dlpack's.  The capsule is
# built here from the view's public properties (a legacy DLPack tensor holding the view).
#
# Nothing here imports jax until a view is exported to jax.

cimport cython
from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int32_t, int64_t, intptr_t, uint8_t, uint16_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from interop_core.abi cimport (
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_tensor_info,
)

from interop_jax._handles cimport (
    KDL_CPU,
    KDL_CUDA,
    KDL_CUDA_HOST,
    KDL_ROCM,
    KDL_ROCM_HOST,
    MAX_NDIM,
    _accessor_type,
    _api,
    _aval_getter,
    _from_capsule,
    _jaxlib_function,
    _pending_error,
    _pointer_method,
    _ready,
    _setup,
    _single_sharding,
    _to_capsule,
)
from interop_jax._devices cimport (
    _MULTI_DEVICE,
    _devices,
    _jax_stream,
    _locate,
    _resolve_device,
    _streams,
)

from interop_jax._hold import BufferHold
from interop_jax._read import producer_stream, read_with_dlpack, reader_capsule
from interop_jax._shards_read import prepare_shards, read_shards, shard_canaries
from interop_jax._validation import canaries, prepare

__all__ = ["reader_capsule", "read_with_dlpack", "prepare", "canaries", "producer_stream",
           "to_jax", "export_status", "read_shards", "prepare_shards", "shard_canaries",
           "BufferHold"]


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
        device memory.  None: the device the memory is on (host memory: the CPU device of
        the jax array the view is of, else jax's first CPU device).

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
    if device is None and device_type == KDL_CPU:
        device = _host_device_of(view.owner)
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


cdef object _host_device_of(object owner):
    """The jax CPU device a view's owner lives on, or None (not a single-device jax array).

    DLPack numbers every host device 0, so a view of an array on jax's CPU device 3 says
    (kDLCPU, 0): without this, to(x, "jax") of it would land on jax's first CPU device, and
    mixing the result with x would fail ("incompatible devices").
    """
    if _accessor_type is None or type(owner) is not _accessor_type:
        return None
    try:
        devices = owner.devices()
    except Exception:
        return None     # deleted: the import names the problem
    if len(devices) != 1:
        return None
    device = next(iter(devices))
    return device if device.platform == "cpu" else None


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
        name, colon, index = text.partition(":")
        platform = _DEVICE_PLATFORMS.get(name)
        if platform is None:
            raise ValueError(f"unknown device {device!r} for jax; expected a jax device, 'cpu', "
                             "'cpu:N', 'cuda:N', 'rocm:N' or a (device_type, device_id) pair")
        # Digits only, as jax writes ordinals (the core's parse_device's rule).
        if colon and not (index.isascii() and index.isdigit()
                          and (index == "0" or index[0] != "0")):
            raise ValueError(f"device ordinal in {device!r} is not a non-negative integer "
                             "written in decimal digits")
        ordinal = int(index) if colon else 0
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
                        resolve_device=resolve_device, source_device=source_device)


def source_device(view):
    """The jax CPU device of the jax array ``view`` is of, or None: where ``to(x, "jax")``
    puts a copy of ``x`` (``ImportLimits.source_device`` of :func:`import_limits`).

    Parameters
    ----------
    view : interop_core.StridedMemoryView

    Returns
    -------
    jax.Device or None
    """
    if view.device_type != KDL_CPU:
        return None     # device memory: the copy's DLPack device names the GPU already
    return _host_device_of(view.owner)


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
