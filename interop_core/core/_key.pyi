from typing import Literal

from typing_extensions import disjoint_base

__all__ = ["LaunchKey"]

@disjoint_base
class LaunchKey:
    @property
    def policy(self) -> Literal["static", "dynamic"] | None: ...
    @property
    def words(self) -> tuple[int, ...]: ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
