# The compiled cupy exporter (see _export.pyx): a description of CUDA memory (interop_core.h's
# interop_core_tensor_info, from a compiled reader or from a view through describe_view) becomes
# a cupy.ndarray built with cupy's public constructors, holding the object that keeps the memory
# alive.

from interop_core.abi cimport interop_core_tensor_info

# The interop_core_exporter_v1 behind exporter_capsule(): a new cupy.ndarray whose
# UnownedMemory holds `owner`, or NULL with BufferError set (host memory, element types cupy
# cannot hold).  `stream` is ignored: the core ordered the memory before the consumer already.
cdef object export_cupy_array(const interop_core_tensor_info* info, object owner,
                              object stream)
