"""Element types in DLPack terms, and conversions to and from numpy.

Every view stores its element type as a DLPack ``(code, bits, lanes)`` triple; this module
names the codes and converts between triples and the dtype spellings users have in hand.
numpy (and ml_dtypes, for bfloat16 and the float8/6/4 families) is imported only by
:func:`to_numpy_dtype`, or when a numpy object is passed in.

Examples
--------
>>> from interop_core.dtypes import to_dlpack_dtype, dtype_name
>>> to_dlpack_dtype("bfloat16")
(4, 16, 1)
>>> dtype_name((2, 32, 4))
'float32x4'
"""

# One table: the functions live (and are documented) in core/_dtypes.pyx, the two enums are
# generated from core/_dlpack_abi.pxd; this module is their public name.
from .core._dlpack_abi import DLDataTypeCode, DLDeviceType
from .core._dtypes import dtype_name, itemsize, known_dtypes, to_dlpack_dtype, to_numpy_dtype

__all__ = [
    "DLDataTypeCode",
    "DLDeviceType",
    "dtype_name",
    "itemsize",
    "known_dtypes",
    "to_dlpack_dtype",
    "to_numpy_dtype",
]

DLDataTypeCode.__doc__ = (
    "DLPack 1.3 ``DLDataTypeCode``: the ``code`` of a ``(code, bits, lanes)`` triple (an IntEnum).")
DLDeviceType.__doc__ = (
    "DLPack 1.3 ``DLDeviceType``: where a view's memory lives, ``view.device_type`` (an IntEnum).")
