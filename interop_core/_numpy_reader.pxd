# The compiled reader for exact numpy.ndarray: reads the array object's C struct directly
# (layout declared in _numpy_reader.pyx from numpy's documented C ABI; no numpy headers).

from libc.stdint cimport int64_t

from .core._dlpack_abi cimport DLDataType
from .core._record cimport ViewRecord

# The core reader registered as "numpy" (see _registry.pxd: core_reader_t).  Returns `obj`, the
# array, as the keep-alive.  Until the struct layout has been validated against numpy's Python
# API on canary arrays (once per process), and forever if that validation failed, it reads
# through the buffer protocol, then numpy's Python API (__array_interface__, dtype).
cdef object read_numpy(object obj, object stream, ViewRecord* rec)

# A numpy dtype object (a PyArray_Descr) -> DLPack triple and itemsize, for other readers whose
# framework hands out numpy dtypes (jax).  Fast for built-in types once the layout is
# validated; BufferError naming the dtype for types DLPack cannot describe.
cdef int numpy_dtype_to_dlpack(object descr, DLDataType* out, int64_t* itemsize) except -1
