# PLACEHOLDER (being replaced): minimal bodies so the package compiles.
from cpython.buffer cimport Py_buffer
from ._record cimport ViewRecord

cdef object read_cuda_array_interface(object obj, object stream, ViewRecord* rec):
    raise NotImplementedError
cdef object read_array_interface(object obj, ViewRecord* rec):
    raise NotImplementedError
cdef object read_buffer_protocol(object obj, ViewRecord* rec):
    raise NotImplementedError
cdef dict export_cuda_array_interface(ViewRecord* rec):
    raise NotImplementedError
cdef dict export_array_interface(ViewRecord* rec):
    raise NotImplementedError
cdef int export_buffer(ViewRecord* rec, Py_buffer* buf, int flags) except -1:
    raise BufferError("not yet")
cdef void release_buffer(Py_buffer* buf) noexcept:
    pass
