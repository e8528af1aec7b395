# The compiled reader for exact torch.Tensor / torch.nn.Parameter (see _reader.pyx): reads the
# tensor through the PyTorch AOTI stable C ABI (aoti_torch_get_*), resolved at run time from
# torch's already-loaded libraries, and fills the public ABI's interop_core_tensor_info
# (interop_core.h, version 2).

from cpython.object cimport PyObject

from interop_core.abi cimport interop_core_tensor_info

# The ABI v2 reader behind reader_capsule(): 0 (strides in elements, `keepalive` left NULL so the
# view holds the tensor), or 1 to decline a tensor the fallback must read or refuse; -1 only with
# an exception raised by torch's Python API (used per call when the key set word is unknown).
cdef int read_tensor(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1
