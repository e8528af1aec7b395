"""Stub for the compiled ``ImportLimits`` (see ``_limits.pyx``)."""

from collections.abc import Callable, Iterable
from typing import Any

from typing_extensions import disjoint_base

__all__ = ["ImportLimits", "ExportRule", "new_export_rule"]

@disjoint_base
class ImportLimits:
    """What a target framework can import: the layouts, memory and dtypes ``to()`` may hand it."""

    negative_strides: bool
    zero_strides: bool
    overlapping: bool
    layout: str
    host_alignment: int
    device_types: tuple[int, ...] | None
    check: Callable[[Any], str | None] | None
    check_dtypes: tuple[tuple[int, int, int], ...] | None
    resolve_device: Callable[[Any], tuple[int, int, Any]] | None
    source_device: Callable[[Any], Any] | None
    name: str | None

    def __init__(self, *, negative_strides: bool = True, zero_strides: bool = True,
                 overlapping: bool = True, layout: str = "strided", host_alignment: int = 1,
                 device_types: Iterable[int] | None = None,
                 check: Callable[[Any], str | None] | None = None,
                 check_dtypes: Iterable[tuple[int, int, int]] | None = None,
                 resolve_device: Callable[[Any], tuple[int, int, Any]] | None = None,
                 source_device: Callable[[Any], Any] | None = None) -> None: ...
    def problem(self, view: Any) -> str | None:
        """What about ``view`` the target cannot import, in words, or None."""

@disjoint_base
class ExportRule:
    """A source type's export rule, as ``to()`` applies it (made by :func:`new_export_rule`)."""

    rule: Any
    subclasses: bool

    def __call__(self, obj: Any) -> None:
        """Apply the rule: None, or the rule's exception raised."""

def new_export_rule(rule: Any, subclasses: bool = False) -> ExportRule:
    """What a plugin registered as an export rule, checked and made applicable."""
