"""The dtype table: DLPack triples <-> numpy / ml_dtypes dtypes, names, typestrs and formats."""

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from interop_core.core._dtypes import triple_from_buffer_format, triple_from_typestr
from interop_core.dtypes import (
    DLDataTypeCode,
    DLDeviceType,
    dtype_name,
    itemsize,
    known_dtypes,
    to_dlpack_dtype,
    to_numpy_dtype,
)

ml_dtypes = pytest.importorskip("ml_dtypes")

NUMPY_TYPES = {
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64),
    "complex64": (5, 64), "complex128": (5, 128), "bool": (6, 8),
}
# Codes taken from the DLPack 1.3 specification (dlpack.h, DLDataTypeCode).
ML_TYPES = {
    "bfloat16": (4, 16),
    "float8_e3m4": (7, 8), "float8_e4m3": (8, 8), "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8), "float8_e4m3fnuz": (11, 8), "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8), "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6), "float6_e3m2fn": (16, 6), "float4_e2m1fn": (17, 4),
    "int1": (0, 1), "int2": (0, 2), "int4": (0, 4),
    "uint1": (1, 1), "uint2": (1, 2), "uint4": (1, 4),
}
ALL_TYPES = {**NUMPY_TYPES, **ML_TYPES}
# DLPack types numpy and ml_dtypes have no type for (opaque handles aside).
NO_NUMPY_TYPES = {"complex32": (5, 32)}


def test_table_covers_every_dlpack_code():
    codes = {code for code, _, _ in known_dtypes().values()}
    assert codes == set(range(18))
    assert ({name: t[:2] for name, t in known_dtypes().items() if t[0] != 3}
            == {**ALL_TYPES, **NO_NUMPY_TYPES})


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_name_to_triple_and_back(name):
    code, bits = ALL_TYPES[name]
    assert to_dlpack_dtype(name) == (code, bits, 1)
    assert dtype_name((code, bits, 1)) == name


@pytest.mark.parametrize("name", sorted(NUMPY_TYPES))
def test_numpy_dtype_and_scalar_type_map_to_triple(name):
    code, bits = NUMPY_TYPES[name]
    dt = np.dtype(name)
    assert to_dlpack_dtype(dt) == (code, bits, 1)
    assert to_dlpack_dtype(dt.type) == (code, bits, 1)
    assert to_dlpack_dtype(dt.str) == (code, bits, 1)
    assert to_numpy_dtype((code, bits, 1)) == dt


@pytest.mark.parametrize("name", sorted(ML_TYPES))
def test_ml_dtypes_map_to_triple_and_back(name):
    scalar = getattr(ml_dtypes, name)
    code, bits = ML_TYPES[name]
    assert to_dlpack_dtype(scalar) == (code, bits, 1)
    assert to_dlpack_dtype(np.dtype(scalar)) == (code, bits, 1)
    assert to_numpy_dtype((code, bits, 1)) == np.dtype(scalar)


@pytest.mark.parametrize("name", [n for n in ML_TYPES if n.startswith(("float8", "float6", "float4"))])
def test_codes_match_the_public_enum(name):
    assert to_dlpack_dtype(name)[0] == DLDataTypeCode["kDL" + name[0].upper() + name[1:]]


def test_enums_hold_dlpack_values():
    assert DLDataTypeCode.kDLBfloat == 4 and DLDataTypeCode.kDLBool == 6
    assert DLDataTypeCode.kDLFloat4_e2m1fn == 17 and DLDataTypeCode.kDLOpaqueHandle == 3
    assert DLDeviceType.kDLCPU == 1 and DLDeviceType.kDLCUDA == 2
    assert DLDeviceType.kDLCUDAManaged == 13 and DLDeviceType.kDLTrn == 18


@pytest.mark.parametrize(
    "pytype, triple",
    [(bool, (6, 8, 1)), (int, (0, 64, 1)), (float, (2, 64, 1)), (complex, (5, 128, 1))],
)
def test_python_types_map_like_numpy(pytype, triple):
    assert to_dlpack_dtype(pytype) == triple
    assert to_numpy_dtype(triple) == np.dtype(pytype)


@pytest.mark.parametrize(
    "spelling, triple",
    [("<f4", (2, 32, 1)), ("=f8", (2, 64, 1)), ("|b1", (6, 8, 1)), ("<c8", (5, 64, 1)),
     ("|u1", (1, 8, 1)), (">i1", (0, 8, 1)), ("f4", (2, 32, 1)), ("i8", (0, 64, 1)),
     ("b1", (6, 8, 1)), ("double", (2, 64, 1)), ("bool_", (6, 8, 1))],
)
def test_string_spellings(spelling, triple):
    assert to_dlpack_dtype(spelling) == triple


def test_triple_passes_through_validated():
    assert to_dlpack_dtype((2, 32, 1)) == (2, 32, 1)
    assert to_dlpack_dtype((17, 4, 2)) == (17, 4, 2)


def test_lanes_are_recorded_but_numpy_has_no_dtype():
    assert dtype_name((2, 32, 4)) == "float32x4"
    assert itemsize((2, 32, 4)) == 16
    with pytest.raises(TypeError, match="4 lanes"):
        to_numpy_dtype((2, 32, 4))


@pytest.mark.parametrize(
    "triple, padded, expected",
    [((17, 4, 1), True, 1), ((15, 6, 1), True, 1), ((0, 4, 1), True, 1),
     ((17, 4, 2), False, 1), ((17, 4, 2), True, 1), ((2, 32, 1), False, 4),
     ((4, 16, 1), False, 2), ((5, 128, 1), False, 16), ((6, 8, 1), False, 1)],
)
def test_itemsize(triple, padded, expected):
    assert itemsize(triple, padded) == expected


@pytest.mark.parametrize("triple", [(17, 4, 1), (15, 6, 1), (16, 6, 3), (0, 4, 1)])
def test_packed_subbyte_is_a_buffer_error(triple):
    with pytest.raises(BufferError, match="packed sub-byte"):
        itemsize(triple, False)


@pytest.mark.parametrize(("triple", "name"), [((3, 64, 1), "opaque64"), ((5, 32, 1), "complex32")])
def test_types_numpy_lacks_are_named_and_have_no_numpy_dtype(triple, name):
    assert dtype_name(triple) == name
    with pytest.raises(TypeError, match=name):
        to_numpy_dtype(triple)


def test_numpy_dtype_is_cached_object():
    assert to_numpy_dtype((4, 16, 1)) is to_numpy_dtype((4, 16, 1))


@pytest.mark.parametrize(
    "bad, exc, message",
    [
        (np.dtype([("a", "<f4"), ("b", "<i4")]), TypeError, "structured"),
        (np.dtype(object), TypeError, "object"),
        (np.dtype("M8[s]"), TypeError, "datetime"),
        (np.dtype("m8[s]"), TypeError, "datetime"),
        (np.dtype("S4"), TypeError, "string"),
        (np.dtype("U4"), TypeError, "string"),
        (np.dtype("V8"), TypeError, "void"),
        (np.dtype((np.float32, (2,))), TypeError, "sub-array"),
        (np.dtype(">i4"), ValueError, "byte order"),
        (np.dtype(">f8"), ValueError, "byte order"),
        (np.longdouble, TypeError, "no DLPack type"),
        ("float33", ValueError, "unknown dtype name"),
        ("", ValueError, "unknown dtype name"),
        (">i4", ValueError, "byte order"),
        ("<M8", ValueError, "datetime"),
        ("|O8", ValueError, "object"),
        ("|V0", ValueError, "void elements of 0 bytes"),
        ("<f3", ValueError, "no DLPack type"),
        ((2, 32), TypeError, r"\(code, bits, lanes\)"),
        ((2, 32, "1"), TypeError, "three ints"),
        ((99, 8, 1), ValueError, "unknown DLPack type code 99"),
        ((2, 12, 1), ValueError, "12 bits"),
        ((2, 32, 0), ValueError, "out of range"),
        ((2, 300, 1), ValueError, "out of range"),
        (3.5, TypeError, "cannot interpret"),
        (object(), TypeError, "cannot interpret"),
        (None, TypeError, "cannot interpret"),
        (list, TypeError, "cannot use the type"),
    ],
)
def test_bad_dtypes_raise_clear_errors(bad, exc, message):
    with pytest.raises(exc, match=message):
        to_dlpack_dtype(bad)


@pytest.mark.parametrize("triple", [(99, 8, 1), (2, 12, 1)])
def test_unknown_triples_rejected_by_converters(triple):
    with pytest.raises(ValueError):
        to_numpy_dtype(triple)
    with pytest.raises(ValueError):
        dtype_name(triple)


def test_dtype_conversions_never_import_numpy():
    code = textwrap.dedent(
        """
        import sys
        from interop_core.dtypes import to_dlpack_dtype, dtype_name, itemsize
        assert to_dlpack_dtype("float32") == (2, 32, 1)
        assert to_dlpack_dtype("bfloat16") == (4, 16, 1)
        assert to_dlpack_dtype("<f8") == (2, 64, 1)
        assert to_dlpack_dtype(float) == (2, 64, 1)
        assert to_dlpack_dtype((6, 8, 1)) == (6, 8, 1)
        assert dtype_name((10, 8, 1)) == "float8_e4m3fn"
        assert itemsize((4, 16, 1)) == 2
        try:
            to_dlpack_dtype(object())
        except TypeError:
            pass
        assert "numpy" not in sys.modules, "numpy was imported"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_framework_scalar_types_with_a_dtype_attribute():
    class FrameworkScalar:  # like jax.numpy.float32: not a numpy type, but carries .dtype
        dtype = np.dtype("float16")

    assert to_dlpack_dtype(FrameworkScalar()) == (2, 16, 1)


# --- protocol spellings (compiled parsers) -----------------------------------------------------

LONG = ctypes.sizeof(ctypes.c_long)


@pytest.mark.parametrize(
    "fmt, size, triple",
    [
        ("b", 1, (0, 8, 1)), ("B", 1, (1, 8, 1)), (None, 1, (1, 8, 1)), ("c", 1, (1, 8, 1)),
        ("h", 2, (0, 16, 1)), ("=H", 2, (1, 16, 1)), ("<i", 4, (0, 32, 1)), ("@I", 4, (1, 32, 1)),
        ("l", LONG, (0, LONG * 8, 1)), ("<l", 4, (0, 32, 1)), ("<l", LONG, (0, LONG * 8, 1)),
        ("=L", 4, (1, 32, 1)), ("q", 8, (0, 64, 1)), ("<Q", 8, (1, 64, 1)),
        ("n", ctypes.sizeof(ctypes.c_ssize_t), (0, ctypes.sizeof(ctypes.c_ssize_t) * 8, 1)),
        ("N", ctypes.sizeof(ctypes.c_size_t), (1, ctypes.sizeof(ctypes.c_size_t) * 8, 1)),
        ("P", ctypes.sizeof(ctypes.c_void_p), (1, ctypes.sizeof(ctypes.c_void_p) * 8, 1)),
        ("e", 2, (2, 16, 1)), ("<f", 4, (2, 32, 1)), ("d", 8, (2, 64, 1)),
        ("?", 1, (6, 8, 1)), ("<?", 1, (6, 8, 1)), ("Zf", 8, (5, 64, 1)), ("=Zd", 16, (5, 128, 1)),
        (">b", 1, (0, 8, 1)), ("!B", 1, (1, 8, 1)),
    ],
)
def test_buffer_formats(fmt, size, triple):
    assert triple_from_buffer_format(fmt, size) == triple
    assert triple_from_buffer_format(fmt, size) == triple  # second call: the cached entry


@pytest.mark.parametrize(
    "fmt, size, exc, message",
    [
        (">i", 4, ValueError, "native byte order"), ("!d", 8, ValueError, "native byte order"),
        ("f", 8, ValueError, "does not fit its itemsize"), ("g", 16, ValueError, "unsupported"),
        ("Zg", 32, ValueError, "unsupported"), ("2f", 8, ValueError, "unsupported"),
        ("T{i:a:}", 4, ValueError, "unsupported"), ("x", 1, ValueError, "unsupported"),
        ("<n", 8, ValueError, "only valid in native mode"), ("", 1, ValueError, "unsupported"),
        (b"f", 4, TypeError, "must be a str"),
    ],
)
def test_bad_buffer_formats(fmt, size, exc, message):
    with pytest.raises(exc, match=message):
        triple_from_buffer_format(fmt, size)


@pytest.mark.parametrize("name", sorted(NUMPY_TYPES))
def test_typestr_of_every_numpy_type(name):
    code, bits = NUMPY_TYPES[name]
    assert triple_from_typestr(np.dtype(name).str) == (code, bits, 1)


@pytest.mark.parametrize("typestr", ["<f4", "=f4", "|u1", ">u1"])
def test_typestr_cache_is_consistent(typestr):
    assert triple_from_typestr(typestr) == triple_from_typestr(typestr)


def test_typestr_not_a_str():
    with pytest.raises(TypeError, match="typestr must be a str"):
        triple_from_typestr(b"<f4")
