"""Stub for the compiled CAI / array-interface / buffer-protocol module.

It has no Python-visible API: StridedMemoryView's from_cuda_array_interface,
from_array_interface, from_buffer_protocol and its exports call it from C.
"""

__all__: list[str] = []
