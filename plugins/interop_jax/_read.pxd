# The jax reader (_read.pyx): single-device jax arrays, each read holding the buffer, filling
# the public ABI's interop_core_tensor_info (interop_core.h, version 2), validated once per
# process by the core against jax's own __dlpack__ (_validation.pyx).

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# The ABI v2 reader behind reader_capsule().  Every read holds the buffer: `out->keepalive` is a
# BufferHold (jaxlib's DLPack capsule of the array, unconsumed: jax's external reference, so
# delete() and donation leave the memory while a view lives).  Never waits on the host for
# device work: no stream -> the hold is taken on jax's own stream (no host wait); a consumer
# stream -> PJRT orders jax's pending work on it; host memory (the CPU backend, whose work has no
# stream) -> jaxlib waits until the array is computed.  Several devices, deleted or donated
# arrays, other processes' devices, arrays jax cannot export: -1 with a BufferError naming the
# problem.
cdef int read_jax_array(PyObject* obj, PyObject* stream,
                        interop_core_tensor_info* out) except -1
# A read without a consumer stream that holds the buffer now (what read_jax_array does for
# stream None when the caller uses the memory at once): `out->keepalive` is a new reference to
# the hold.
cdef int _read_held(object obj, interop_core_tensor_info* out) except -1
# A read without a consumer stream for a view (what read_jax_array does for stream None
# otherwise): the hold deferred to the memory's first use (`out->keepalive` a new reference to
# the core's DeferredKeepalive), or shared with a live one.
cdef int _read_deferred(object obj, interop_core_tensor_info* out) except -1
