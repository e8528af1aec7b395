# The compiled reader and exporter for jax.Array implementations (ArrayImpl): single-device
# arrays through jax's own cheap accessors, validated once per process against jax's DLPack
# export; to(x, "jax") through one jaxlib import call, checked once per platform.

from .core._record cimport ViewRecord

# The core reader registered as "jax".  Never waits on the host for device work: no stream ->
# no wait at all (the address is defined, the contents may be pending); a consumer stream ->
# PJRT orders jax's pending work on it (device memory; the keep-alive is then jax's DLPack
# tensor) or the host waits (the CPU backend, whose work has no stream).  Keep-alive otherwise:
# the array.  Falls back to __dlpack__ if validation failed.  Several devices, deleted or
# donated arrays, other processes' devices: BufferError naming the problem.
cdef object read_jax(object obj, object stream, ViewRecord* rec)
