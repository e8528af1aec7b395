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

from enum import IntEnum

from .core._dtypes import as_dlpack_dtype as _as_dlpack_dtype
from .core._dtypes import known_dtypes as _known_dtypes
from .core._dtypes import triple_itemsize as _triple_itemsize
from .core._dtypes import triple_name as _triple_name
from .core._dtypes import triple_to_numpy as _triple_to_numpy

__all__ = [
    "DLDataTypeCode",
    "DLDeviceType",
    "dtype_name",
    "itemsize",
    "known_dtypes",
    "to_dlpack_dtype",
    "to_numpy_dtype",
]


class DLDataTypeCode(IntEnum):
    """DLPack 1.3 ``DLDataTypeCode``: the ``code`` of a ``(code, bits, lanes)`` triple."""

    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17


class DLDeviceType(IntEnum):
    """DLPack 1.3 ``DLDeviceType``: where a view's memory lives (``view.device_type``)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


def to_dlpack_dtype(obj):
    """Convert a dtype, in any spelling this library accepts, into a DLPack triple.

    Parameters
    ----------
    obj : object
        A numpy dtype or scalar type (``np.float32``), an ml_dtypes type
        (``ml_dtypes.bfloat16``), a name (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``,
        ``"bool"``), a typestr (``"<f4"``, ``"f4"``), a Python type (``bool``, ``int``,
        ``float``, ``complex``) or a ``(code, bits, lanes)`` tuple (validated).

    Returns
    -------
    tuple of int
        ``(code, bits, lanes)``.

    Raises
    ------
    TypeError
        If ``obj`` is not a dtype, or is one DLPack cannot express (object, structured,
        datetime, string dtypes).
    ValueError
        For an unknown name, a non-native byte order, or a triple DLPack does not define.
    """
    return _as_dlpack_dtype(obj)


def to_numpy_dtype(triple):
    """The numpy dtype of a DLPack triple.

    Parameters
    ----------
    triple : tuple of int
        ``(code, bits, lanes)``.

    Returns
    -------
    numpy.dtype
        A builtin numpy dtype, or an ml_dtypes one for bfloat16 and the float8/6/4 and
        sub-byte integer types (stored one element per byte).

    Raises
    ------
    TypeError
        If numpy has no such dtype: vector types (lanes > 1), opaque handles, or ml_dtypes
        types when ml_dtypes is not installed.
    """
    return _triple_to_numpy(tuple(triple))


def dtype_name(triple):
    """A readable name for a DLPack triple.

    Parameters
    ----------
    triple : tuple of int
        ``(code, bits, lanes)``.

    Returns
    -------
    str
        ``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``, ``"bool"``; vector types get the
        lane count appended (``"float32x4"``).
    """
    return _triple_name(tuple(triple))


def itemsize(triple, subbyte_padded=False):
    """Bytes per element of a DLPack triple.

    Parameters
    ----------
    triple : tuple of int
        ``(code, bits, lanes)``.
    subbyte_padded : bool, optional
        Whether sub-byte elements (float4, float6, int4, ...) are stored one per byte, as
        ml_dtypes stores them and as DLPack's ``IS_SUBBYTE_TYPE_PADDED`` flag declares.

    Returns
    -------
    int
        ``bits * lanes / 8``, or 1 for a padded sub-byte scalar.

    Raises
    ------
    BufferError
        For packed sub-byte elements that do not fill whole bytes (e.g. a packed float4).
    """
    return _triple_itemsize(tuple(triple), subbyte_padded)


def known_dtypes():
    """Every scalar element type this library knows.

    Returns
    -------
    dict of str to tuple
        Name to ``(code, bits, 1)``, in table order.
    """
    return _known_dtypes()
