"""The launch path for kernel launchers: ``launch_args`` (key, pointer arrays, stream in one
compiled call) and ``@viewable``."""

from ._launch import SCALAR_TYPES

__all__ = ["SCALAR_TYPES"]
