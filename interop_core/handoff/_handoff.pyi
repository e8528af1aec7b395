"""Stub for the compiled ``to()`` (see ``_handoff.pyx``)."""

from typing import Any

__all__ = ["to"]

def to(obj: Any, target: Any, stream: Any = None, *, device: Any = None,
       copy: bool | None = None, **options: Any) -> Any:
    """The ``target`` framework's object over the same memory as ``obj``."""
