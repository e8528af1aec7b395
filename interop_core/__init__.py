"""interop-core: zero-copy strided memory views over any tensor, with CUDA stream ordering.

Importing this package imports no framework (torch, cupy, jax, numba) and not even numpy;
numpy is loaded only when a view's ``.dtype`` is asked for.
"""

from ._layout import StridedLayout
from ._streams import resolve_consumer_stream
from ._view import Buffer, StridedMemoryView
from ._viewable import viewable

__all__ = ["Buffer", "StridedLayout", "StridedMemoryView", "resolve_consumer_stream",
           "viewable"]
__version__ = "0.1.0"
