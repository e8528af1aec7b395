from collections.abc import Sequence
from typing import Any

__all__ = ["coalesce_copy"]

def coalesce_copy(
    shape: Sequence[int],
    dst_strides: Sequence[int],
    src_strides: Sequence[int],
    itemsize: int,
    dst_ptr: int = 0,
    src_ptr: int = 0,
) -> dict[str, Any]: ...
