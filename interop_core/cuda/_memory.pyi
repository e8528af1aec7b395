from typing_extensions import disjoint_base

__all__ = ["Allocation"]

@disjoint_base
class Allocation:
    ptr: int
    size: int
    device_type: int
    device_id: int
    @property
    def kind(self) -> str: ...
    @property
    def stream(self) -> int | None: ...
