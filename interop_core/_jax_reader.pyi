"""Stub for the compiled jax reader (core reader ``"jax"``) and exporter (``to_jax``)."""

from typing import Any

from ._view import StridedMemoryView

__all__ = ["validation_status", "set_validation_result", "revalidate", "to_jax",
           "export_status", "set_export_result", "producer_stream"]

def validation_status() -> tuple[bool, str]:
    """Whether the direct reader is in use, and why (validating first if needed)."""

def set_validation_result(ok: bool | None, reason: str = ...) -> None:
    """Pin the validation result (for tests of the fallback); ``ok=None`` re-validates."""

def revalidate() -> bool:
    """Forget any pinned or cached result and validate again now."""

def producer_stream(obj: Any) -> int | None:
    """Order jax's pending work on ``obj`` onto a stream, and return that stream."""

def to_jax(view: StridedMemoryView, stream: Any = None) -> Any:
    """A ``jax.Array`` over the memory of ``view`` (same pointer), keeping ``view`` alive."""

def set_export_result(platform: str, ok: bool | None, reason: str = ...) -> None:
    """Pin the once-per-platform check of the direct import (for tests of the fallback)."""

def export_status() -> dict[str, tuple[bool, str]]:
    """The once-per-platform checks of ``to(x, "jax")``'s direct import made so far."""
