from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["viewable"]

def viewable(
    *names_or_indices: str | int,
    stream: str | None = None,
    launch: str | None = None,
    key: Literal["static", "dynamic"] | None = "static",
    writable: bool | Collection[str | int] = False,
    same_device: bool = False,
    scalar_types: Mapping[str | int, str] | None = None,
) -> Callable[[_F], _F]: ...
