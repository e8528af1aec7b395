"""interop-core: zero-copy strided memory views over any tensor, with CUDA stream ordering.

Importing this package imports no framework (torch, cupy, jax, numba), not numpy and not pluggy;
plugins are discovered the first time :func:`view` meets a type it does not know.
"""

from .core._key import LaunchKey
from .core._layout import StridedLayout
from .core._view import Buffer, StridedMemoryView
from .cuda._module import Kernel, Module, load_module
from .cuda._streams import resolve_consumer_stream
from .handoff._handoff import to
from .handoff._limits import ImportLimits
from .launch._launch import LaunchArgs, launch_args
from .launch._viewable import viewable
from .plugins import plugin_status, register_plugin, unregister_plugin
from .registry._registry import C_API as _C_API  # noqa: F401  (the ABI helper table, interop_core.h)
from .registry._registry import view
from .shards import Shard, ShardLayout, Shards, shards  # (binds `shards` to the function)

__all__ = [
    "Buffer",
    "ImportLimits",
    "Kernel",
    "LaunchArgs",
    "LaunchKey",
    "Module",
    "Shard",
    "ShardLayout",
    "Shards",
    "StridedLayout",
    "StridedMemoryView",
    "TritonKernel",
    "get_include",
    "hookimpl",
    "launch_args",
    "load_module",
    "plugin_status",
    "register_plugin",
    "resolve_consumer_stream",
    "shards",
    "to",
    "triton_kernel",
    "unregister_plugin",
    "view",
    "viewable",
]
# The one place the version is written: pyproject.toml reads it from here (setuptools'
# dynamic `attr`), and CHANGELOG.md names it.
__version__ = "0.1.0"


def get_include():
    """The folder holding ``interop_core.h``, the C ABI for compiled readers.

    Returns
    -------
    str
        Pass it as ``include_dirs`` when building a plugin's extension; a Cython plugin
        cimports the same declarations from ``interop_core.abi``.
    """
    import os

    return os.path.join(os.path.dirname(__file__), "include")


def __getattr__(name):
    # pluggy takes ~20 ms to import: only plugin modules (which need it anyway) pay for it.
    if name == "hookimpl":
        from .hookspecs import hookimpl

        return hookimpl
    # The Triton wrapper's module is only needed by Triton users.
    if name in ("triton_kernel", "TritonKernel"):
        from .launch import _triton

        return getattr(_triton, name)
    raise AttributeError(f"module 'interop_core' has no attribute {name!r}")
