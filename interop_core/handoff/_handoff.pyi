"""Stub for the compiled ``to()`` (see ``_handoff.pyx``)."""

from typing import Any

__all__ = ["to", "export_checked"]

def to(obj: Any, target: Any, stream: Any = None, *, device: Any = None,
       copy: bool | None = None, **options: Any) -> Any:
    """The ``target`` framework's object over the same memory as ``obj``."""

def export_checked(view: Any, target: Any, stream: Any = None) -> Any:
    """``view`` handed to ``target``'s exporter after the target's limits are checked."""
