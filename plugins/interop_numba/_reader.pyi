"""Stub for the compiled numba reader (registered through interop_core.h, ABI v2)."""

from collections.abc import Iterable
from typing import Any

__all__ = ["reader_capsule", "producer_stream", "canaries", "prepare", "device_cache_info"]

def reader_capsule() -> Any:
    """The attribute reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""

def producer_stream(obj: Any) -> int | None:
    """The producer stream of a numba device array: its CAI ``stream`` field."""

def canaries() -> list[Any]:
    """numba device arrays made like the ones users read, for validation."""

def prepare(samples: Iterable[Any] | None = None) -> dict[str, int] | str:
    """Check the producer stream the reader reports against the CAI ``stream`` field (once)."""

def device_cache_info() -> dict[str, int]:
    """How the cache of the driver's answers per pointer object has served this process."""

def _device_cache_probe(key: Any, ptr: int,
                        answer: tuple[int, int] | None) -> tuple[tuple[int, int] | None, bool]:
    """Test hook: look ``key`` up in the device cache as the reader does, with a stand-in driver."""

def _device_cache_set_of(obj: object) -> int:
    """Test hook: the index of the set of two entries that ``obj``'s answer is cached in."""

def _device_cache_clear() -> None:
    """Test hook: empty the device cache and zero its counters."""

def _pointer_of(gpu_data: Any) -> int:
    """Test hook: the pointer value the reader takes from a numba pointer object."""

def _pointer_path(gpu_data: Any) -> str:
    """Test hook: how the reader reads a pointer object's value."""
