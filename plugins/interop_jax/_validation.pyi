"""The jax reader's validation: canaries and the checks the core's comparison leaves out."""

from collections.abc import Iterable
from typing import Any

__all__ = ["canaries", "prepare"]

def canaries() -> list[Any]:
    """jax arrays made like the ones users read, on jax's default device, for validation."""

def prepare(samples: Iterable[Any] | None = None) -> dict[str, Any] | str:
    """Check what the core's comparison with the fallback leaves out (once per process)."""
