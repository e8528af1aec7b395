from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["viewable"]

def viewable(*names_or_indices: str | int, stream: str | None = None) -> Callable[[_F], _F]: ...
