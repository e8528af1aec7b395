# CUDA Array Interface (v2/v3), NumPy __array_interface__ (v3) and the buffer protocol, in both
# directions.

from cpython.buffer cimport Py_buffer

from ..core._record cimport ViewRecord

# --- in: fill `rec`, return the keep-alive object (the producer, or a buffer holder) ---------
cdef object read_cuda_array_interface(object obj, object stream, ViewRecord* rec)
cdef object read_array_interface(object obj, ViewRecord* rec)
cdef object read_buffer_protocol(object obj, ViewRecord* rec)

# --- out ---------------------------------------------------------------------------------------
# Dicts for __cuda_array_interface__ (device memory only) and __array_interface__ (host only).
cdef dict export_cuda_array_interface(ViewRecord* rec)
cdef dict export_array_interface(ViewRecord* rec)
# Fill a Py_buffer for __getbuffer__ (host memory only); the caller sets buf.obj.
cdef int export_buffer(ViewRecord* rec, Py_buffer* buf, int flags) except -1
# Free what export_buffer allocated (for __releasebuffer__).
cdef void release_buffer(Py_buffer* buf) noexcept
