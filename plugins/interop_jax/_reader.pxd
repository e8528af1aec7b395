# The compiled reader for jax.Array implementations (ArrayImpl), see _reader.pyx: single-device
# arrays through jax's own cheap accessors, filling the public ABI's interop_core_tensor_info
# (interop_core.h, version 2), validated once per process by the core against jax's DLPack export.

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# The ABI v2 reader behind reader_capsule().  Never waits on the host for device work: no
# stream -> no wait at all (the address is defined, the contents may be pending; keep-alive:
# the array); a consumer stream -> PJRT orders jax's pending work on it (device memory; the
# keep-alive is then jax's DLPack capsule) or the host waits (the CPU backend, whose work has no
# stream).  Returns 1 (declined: the fallback orders through __dlpack__) for a device stream
# when jaxlib has no ordered export.  Several devices, deleted or donated arrays, other
# processes' devices: -1 with a BufferError naming the problem.
cdef int read_jax_array(PyObject* obj, PyObject* stream,
                        interop_core_tensor_info* out) except -1
