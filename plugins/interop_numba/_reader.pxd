# The compiled reader for numba's CUDA device arrays (see _reader.pyx): reads the arrays' public
# attributes from C and fills the public ABI's interop_core_tensor_info (interop_core.h,
# version 2).

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# The ABI v2 reader behind reader_capsule(): 0, or -1 with an exception set (BufferError for
# attributes that do not describe an array, a dtype DLPack cannot describe, ...).  Strides are
# reported in bytes (the core divides them by the itemsize).  The keep-alive is the array.
cdef int read_device_array(PyObject* obj, PyObject* stream,
                           interop_core_tensor_info* out) except -1
