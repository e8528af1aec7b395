"""DLPack's enumerations (compiled from _dlpack_abi.pxd)."""

from enum import IntEnum

__all__ = ["DLDataTypeCode", "DLDeviceType"]

class DLDataTypeCode(IntEnum): ...
class DLDeviceType(IntEnum): ...
