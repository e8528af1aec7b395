from collections.abc import Collection, Sequence
from typing import Any, Literal

from typing_extensions import disjoint_base

from ..core._key import LaunchKey
from ..core._view import StridedMemoryView

__all__ = ["LaunchArgs", "launch_args", "SCALAR_TYPES"]

SCALAR_TYPES: tuple[str, ...]

@disjoint_base
class LaunchArgs:
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def key(self) -> LaunchKey | None: ...
    @property
    def stream(self) -> int | None: ...
    @property
    def address(self) -> int: ...
    @property
    def kernel_params_address(self) -> int: ...
    @property
    def pointers(self) -> memoryview: ...
    @property
    def kernel_params(self) -> memoryview: ...
    @property
    def views(self) -> tuple[StridedMemoryView | int | float | bool | None, ...]: ...
    def scalar_type(self, position: int) -> str | None: ...
    def __len__(self) -> int: ...

def launch_args(
    args: Sequence[Any],
    stream: Any = None,
    *,
    key: Literal["static", "dynamic"] | None = "static",
    writable: bool | Collection[int] = False,
    same_device: bool = False,
    scalar_types: Sequence[str | None] | None = None,
) -> LaunchArgs: ...
