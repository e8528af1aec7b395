"""Compatibility layers: other libraries' APIs, thin over interop-core's compiled core.

``interop_core.compat.cuda_core``
    cuda.core's ``StridedMemoryView``, ``StridedLayout``, ``args_viewable_as_strided_memory``
    and DLPack device-type names: migrating from cuda.core is one import (see "Migrating from
    cuda.core" in the documentation).

Nothing here is imported by ``import interop_core``; importing a layer imports no framework.
"""

__all__ = ["cuda_core"]
