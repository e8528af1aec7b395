"""CUDA without a CUDA package: the driver loaded lazily from libcuda (``_cuda``), the one
resolver of ``stream=`` arguments (``_streams``), PTX modules and launches (``_module``), and
memory: copies and allocations (``_memory``, whose :class:`Allocation` owns memory that
interop-core allocated).
"""

from ._memory import Allocation

__all__ = ["Allocation"]
