# The compiled reader for exact numpy.ndarray (see _reader.pyx): reads the array object's C
# struct, declared from numpy's documented C ABI (no numpy headers), and fills the public ABI's
# interop_core_tensor_info (interop_core.h, version 2).

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# The ABI v2 reader behind reader_capsule(): 0, or -1 with BufferError naming a dtype DLPack
# cannot describe.  Strides are reported in bytes (the core divides them by the itemsize).
cdef int read_ndarray(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1
