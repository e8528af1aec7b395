"""shards() of jax arrays without jax's Shard objects: the fast path and its validation."""

from typing import Any

from interop_core import Shards

__all__ = ["read_shards", "shard_canaries", "prepare_shards"]

def read_shards(array: Any, stream: Any = None) -> Shards:
    """The addressable shards of a jax array, without jax's ``Shard`` objects (the fast path)."""

def shard_canaries() -> list[Any]:
    """Sharded jax arrays over this process's devices of jax's default backend (validation)."""

def prepare_shards() -> dict[str, Any] | str:
    """Check what the comparison with the public path leaves out (once per process)."""
