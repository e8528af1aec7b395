"""Stub for the compiled numpy reader (registered through interop_core.h, ABI v2)."""

from typing import Any

from interop_core import StridedMemoryView

__all__ = ["reader_capsule", "read_with_python_api", "prepare", "canaries"]

def reader_capsule() -> Any:
    """The struct reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""

def read_with_python_api(obj: Any, stream: int | None) -> StridedMemoryView:
    """The fallback: numpy's documented Python API only."""

def canaries() -> list[Any]:
    """numpy arrays covering every built-in dtype and layout, for validation."""

def prepare() -> str | None:
    """Check numpy's struct layout on canaries; ``None`` when the struct reader may be used."""
