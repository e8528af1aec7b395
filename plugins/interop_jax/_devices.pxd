# Where a jax array lives: its DLPack device from its sharding (_devices.pyx), and jax's stream
# per device.  Cimported by the reader's other modules.

from libc.stdint cimport int32_t

cdef dict _devices                  # (jax Device, memory kind) -> (DLPack type, id)
cdef dict _streams                  # jax Device -> its stream for external ready events, or None
cdef object _located_device         # the jax Device the last _locate found
cdef str _MULTI_DEVICE              # the error for an array over several devices ({n}: count)

# (DLPack device type, id) of a jax device and memory kind; BufferError if not addressable here.
cdef tuple _resolve_device(object device, object memory_kind)
# The DLPack device of a single-device array (BufferError for several devices); returns the
# array's `_sharding` and leaves its jax Device in `_located_device`.
cdef object _locate(object obj, int32_t* device_type, int32_t* device_id)
# jax's stream for external ready events on `device` (None where jax has none: CPU).
cdef object _jax_stream(object device)
