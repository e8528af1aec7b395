# The compiled numpy exporter (see _export.pyx): a description of host memory (interop_core.h's
# interop_core_tensor_info, from a compiled reader or from a view through describe_view) becomes
# a numpy.ndarray built with numpy's documented C API (PyArray_NewFromDescr,
# PyArray_SetBaseObject; no numpy headers), its base the object that keeps the memory alive.

from interop_core.abi cimport interop_core_tensor_info

# The interop_core_exporter_v1 behind exporter_capsule(): a new ndarray whose base is `owner`,
# or NULL with BufferError (device memory, element types numpy cannot hold) or TypeError
# (ml_dtypes missing) set.  `stream` is ignored: host memory needs no ordering.
cdef object export_ndarray(const interop_core_tensor_info* info, object owner, object stream)
