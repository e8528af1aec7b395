# Type stub for interop_core.protocols._dlpack (compiled).  The readers and exporters are C-level only
# (see _dlpack.pxd); StridedMemoryView exposes them as from_dlpack / __dlpack__ /
# __dlpack_device__ / __dlpack_c_exchange_api__.

from typing import final

__all__ = ["DLPackTensorHolder"]

@final
class DLPackTensorHolder:
    """Owner of one consumed DLPack tensor; calls the producer's deleter exactly once."""

    def __init__(self) -> None: ...
    @property
    def version(self) -> tuple[int, int] | None:
        """The tensor's DLPack ``(major, minor)``; None for a legacy tensor."""
    @property
    def flags(self) -> int:
        """The DLPack flag bits (READ_ONLY = 1, IS_COPIED = 2, IS_SUBBYTE_TYPE_PADDED = 4)."""
    @property
    def is_copied(self) -> bool:
        """Whether the producer flagged the tensor as a copy (IS_COPIED)."""
    @property
    def is_alive(self) -> bool:
        """Whether the holder still owns a tensor."""
