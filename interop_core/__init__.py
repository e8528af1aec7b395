"""interop-core: zero-copy strided memory views over any tensor, with CUDA stream ordering.

Importing this package imports no framework (torch, cupy, jax, numba), not numpy and not pluggy;
plugins are discovered the first time :func:`view` meets a type it does not know.
"""

from .core._layout import StridedLayout
from .core._view import Buffer, StridedMemoryView
from .cuda._streams import resolve_consumer_stream
from .handoff._handoff import to
from .launch._viewable import viewable
from .plugins import plugin_status, register_plugin, unregister_plugin
from .registry._registry import view
from .shards import Shard, Shards, shards  # (binds the name `shards` to the function)

__all__ = [
    "Buffer",
    "Shard",
    "Shards",
    "StridedLayout",
    "StridedMemoryView",
    "hookimpl",
    "plugin_status",
    "register_plugin",
    "resolve_consumer_stream",
    "shards",
    "to",
    "unregister_plugin",
    "view",
    "viewable",
]
__version__ = "0.1.0"


def __getattr__(name):
    # pluggy takes ~20 ms to import: only plugin modules (which need it anyway) pay for it.
    if name == "hookimpl":
        from .hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'interop_core' has no attribute {name!r}")
