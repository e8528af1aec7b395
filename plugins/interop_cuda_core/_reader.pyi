"""Stub for the compiled cuda.core readers (registered through interop_core.h, ABI v2)."""

from typing import Any

__all__ = ["view_reader_capsule", "buffer_reader_capsule", "read_untyped_view"]

def view_reader_capsule() -> Any:
    """The reader of cuda.core's StridedMemoryView, as ``registry.add_type(reader=...)`` takes."""

def buffer_reader_capsule() -> Any:
    """The reader of cuda.core's Buffer, as ``registry.add_type(reader=...)`` takes."""

def read_untyped_view(obj: Any, stream: Any = None) -> Any:
    """Read a cuda.core view without a dtype as unsigned integers of its itemsize."""
