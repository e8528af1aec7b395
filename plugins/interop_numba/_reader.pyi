"""Stub for the compiled numba reader (registered through interop_core.h, ABI v2)."""

from collections.abc import Iterable
from typing import Any

__all__ = ["reader_capsule", "producer_stream", "canaries", "prepare"]

def reader_capsule() -> Any:
    """The attribute reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""

def producer_stream(obj: Any) -> int | None:
    """The producer stream of a numba device array: its CAI ``stream`` field."""

def canaries() -> list[Any]:
    """numba device arrays made like the ones users read, for validation."""

def prepare(samples: Iterable[Any] | None = None) -> dict[str, int] | str:
    """Check the producer stream the reader reports against the CAI ``stream`` field (once)."""
