"""Stub for the compiled cupy exporter (cupy's public constructors, from a record)."""

from typing import Any

from interop_core import StridedMemoryView

__all__ = ["to_cupy", "exporter_capsule"]

def to_cupy(view: StridedMemoryView, stream: Any = None) -> Any:
    """A ``cupy.ndarray`` over the device memory of ``view`` (same pointer), holding ``view``."""

def exporter_capsule() -> Any:
    """The compiled exporter, as the capsule ``registry.add_exporter(exporter=...)`` takes."""
