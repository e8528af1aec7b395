"""The compiled jax reader (registered through interop_core.h, ABI v2), its fallback and the
producer strategy."""

from typing import Any

from interop_core import StridedMemoryView

__all__ = ["reader_capsule", "read_with_dlpack", "producer_stream", "equivalence_check_capsule"]

def reader_capsule() -> Any:
    """The reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""

def read_with_dlpack(obj: Any, stream: int | None = None) -> StridedMemoryView:
    """The fallback reader: jax's own DLPack export, with the reader's clear errors."""

def producer_stream(obj: Any) -> int | None:
    """Order jax's pending work on ``obj`` onto a stream, and return that stream."""

def equivalence_check_capsule() -> Any:
    """The DLPack equivalence check, as ``registry.add_type(equivalence_check=...)`` takes it."""
