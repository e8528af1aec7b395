# The compiled readers for exact cupy.ndarray (see _reader.pyx), on the public C ABI
# (interop_core.h, version 2): both fill interop_core_tensor_info with byte strides and, when
# cupy's C function for it was validated, cupy's current stream.

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# cupy's struct fields at the offsets prepare() located: 0, 1 (declined: not exactly the type
# they were located on, or nothing located yet), or -1 with an exception set.
cdef int read_fields(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1

# cupy's documented attributes read from C: 0, 1 (declined: the object lacks them), or -1 with
# an exception set.
cdef int read_attributes(PyObject* obj, PyObject* stream,
                         interop_core_tensor_info* out) except -1
