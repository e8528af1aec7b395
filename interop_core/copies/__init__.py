"""Copies between strided views: host and CUDA memory, any layout, on a stream.

``_coalesce`` reduces a copy to its fewest dimensions (one pure function every path uses),
``_copy`` runs it (C loops on the host, the driver's memcpy, PTX kernels from ``_ptx``).  The
public entry points are :meth:`interop_core.StridedMemoryView.copy_to`, ``copy_from`` and
``empty_like``.
"""
