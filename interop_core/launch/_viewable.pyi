from collections.abc import Callable, Collection, Mapping
from typing import Literal, TypeVar

_R = TypeVar("_R")

__all__ = ["viewable"]

# The decorated function takes, in the named parameters, any array a view can be made of (a
# numpy, torch, jax, cupy or numba array, a DLPack or interface object, a view), where the
# function itself receives StridedMemoryView objects: its parameters are not kept in the type,
# its return type is.
def viewable(
    *names_or_indices: str | int,
    stream: str | None = None,
    launch: str | None = None,
    key: Literal["static", "dynamic"] | None = "static",
    writable: bool | Collection[str | int] = False,
    same_device: bool = False,
    scalar_types: Mapping[str | int, str] | None = None,
) -> Callable[[Callable[..., _R]], Callable[..., _R]]: ...
