"""Stub for the compiled jax reader (registered through interop_core.h, ABI v2) and exporter."""

from collections.abc import Iterable
from typing import Any

from interop_core import Shards, StridedMemoryView

__all__ = ["reader_capsule", "read_with_dlpack", "prepare", "canaries", "producer_stream",
           "to_jax", "export_status", "read_shards", "prepare_shards", "shard_canaries",
           "BufferHold"]

class BufferHold:
    """jax's external reference on one jax array's buffer, shared by the views and exports of
    it alive at once (the keep-alive every read of the jax reader hands the core)."""
    @property
    def array(self) -> Any:
        """The jax array whose buffer is held."""

def reader_capsule() -> Any:
    """The accessor reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""

def read_with_dlpack(obj: Any, stream: int | None = None) -> StridedMemoryView:
    """The fallback reader: jax's own DLPack export, with the reader's clear errors."""

def canaries() -> list[Any]:
    """jax arrays made like the ones users read, on jax's default device, for validation."""

def prepare(samples: Iterable[Any] | None = None) -> dict[str, Any] | str:
    """Check what the core's comparison with the fallback leaves out (once per process)."""

def producer_stream(obj: Any) -> int | None:
    """Order jax's pending work on ``obj`` onto a stream, and return that stream."""

def to_jax(view: StridedMemoryView, stream: Any = None) -> Any:
    """A ``jax.Array`` over the memory of ``view`` (same pointer), keeping ``view`` alive."""

def export_status() -> dict[str, tuple[bool, str]]:
    """The once-per-platform checks of ``to(x, "jax")``'s direct import made so far."""

def read_shards(array: Any, stream: Any = None) -> Shards:
    """The addressable shards of a jax array, without jax's ``Shard`` objects (the fast path)."""

def shard_canaries() -> list[Any]:
    """Sharded jax arrays over this process's devices of jax's default backend (validation)."""

def prepare_shards() -> dict[str, Any] | str:
    """Check what the comparison with the public path leaves out (once per process)."""
