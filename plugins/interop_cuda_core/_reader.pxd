# The compiled readers for cuda.core's StridedMemoryView and Buffer (see _reader.pyx): read the
# objects' public attributes from C and fill the public ABI's interop_core_tensor_info
# (interop_core.h, version 2).

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# A cuda.core StridedMemoryView: 0, 1 (declined: the view has no dtype), or -1 with an exception
# set.  Strides are reported in elements.  The keep-alive is the view (it holds what it views).
cdef int read_view(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1

# A cuda.core Buffer: `size` bytes of uint8 at `handle`, device from the CUDA driver.
cdef int read_buffer(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1
