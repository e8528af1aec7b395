# Where a jax array lives.  `_locate` reads a single-device array's sharding (jax internals:
# `_sharding`, and for jax's SingleDeviceSharding its `_device` and `_memory_kind`), the reader's
# one source for the device: several devices, another process's devices and memory kinds are
# told apart here, before anything is taken from the array.  The common case costs an identity
# comparison: arrays from one jitted function share their sharding object, and most new
# shardings name the device and memory kind met last.

from libc.stdint cimport int32_t

from interop_jax._handles cimport KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST
from interop_jax._handles cimport _single_sharding

__all__ = []

_devices = {}
_streams = {}
_located_device = None
_MULTI_DEVICE = (
    "cannot view a jax array sharded over {n} devices as one strided view: use "
    "interop_core.shards() for one view per addressable shard, with its device, its index in "
    "the global array and its replica id")

cdef int _process_index = -1          # jax.process_index(): devices of other processes
# The last sharding object seen and its (type, id): strong references, replaced on a miss.
cdef object _last_sharding = None
cdef int32_t _last_type = 0, _last_id = 0
# The last (jax Device, SingleDeviceSharding._memory_kind) resolved, and its (type, id): strong
# references, replaced on a miss (so the identities compared are never reused addresses).
cdef object _last_device = None
cdef object _last_kind = None
cdef int32_t _last_device_type = 0, _last_device_id = 0


cdef tuple _resolve_device(object device, object memory_kind):
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


cdef object _jax_stream(object device):
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
