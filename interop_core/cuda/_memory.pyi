__all__ = ["Allocation"]

class Allocation:
    ptr: int
    size: int
    device_type: int
    device_id: int
    @property
    def kind(self) -> str: ...
    @property
    def stream(self) -> int | None: ...
