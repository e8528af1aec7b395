# Element types.  The DLPack triple (code, bits, lanes) is the source of truth; numpy dtypes,
# ml_dtypes types, array-interface typestrs, buffer-protocol formats and names all map to and from
# it through the single table `_TABLE` below.
#
# Every conversion that a hot path may repeat (typestr -> triple, buffer format -> triple, user
# dtype object -> triple, triple -> numpy dtype / typestr / format) is cached in a dict, so after
# the first call it is one dict lookup.  Only successes are cached, which bounds every cache by the
# number of valid spellings.

from . cimport _refcount  # 64-bit reference-count increments: see the file
import sys

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport uint8_t, uint16_t, uint64_t

from ._dlpack_abi cimport (
    DLDataType,
    kDLBfloat,
    kDLBool,
    kDLComplex,
    kDLFloat,
    kDLFloat4_e2m1fn,
    kDLFloat6_e2m3fn,
    kDLFloat6_e3m2fn,
    kDLFloat8_e3m4,
    kDLFloat8_e4m3,
    kDLFloat8_e4m3b11fnuz,
    kDLFloat8_e4m3fn,
    kDLFloat8_e4m3fnuz,
    kDLFloat8_e5m2,
    kDLFloat8_e5m2fnuz,
    kDLFloat8_e8m0fnu,
    kDLInt,
    kDLOpaqueHandle,
    kDLUInt,
)
from ._record cimport ViewRecord

__all__ = [
    "dtype_name",
    "itemsize",
    "known_dtypes",
    "to_dlpack_dtype",
    "to_numpy_dtype",
    "triple_from_buffer_format",
    "triple_from_typestr",
]

# The byte-order character of this machine in typestrs and buffer formats.
cdef str _NATIVE = "<" if sys.byteorder == "little" else ">"
cdef str _FOREIGN = ">" if sys.byteorder == "little" else "<"

# --- the table -------------------------------------------------------------------------------
# (code, bits, name, source, typestr kind, buffer format)
#   source: "numpy" (a numpy builtin dtype of that name), "ml_dtypes" (a type of that name in
#           ml_dtypes), or None (no numpy counterpart).
#   typestr kind / buffer format: None where the protocol cannot name the type.
_TABLE = (
    (kDLInt, 8, "int8", "numpy", "i", "b"),
    (kDLInt, 16, "int16", "numpy", "i", "h"),
    (kDLInt, 32, "int32", "numpy", "i", "i"),
    (kDLInt, 64, "int64", "numpy", "i", "q"),
    (kDLUInt, 8, "uint8", "numpy", "u", "B"),
    (kDLUInt, 16, "uint16", "numpy", "u", "H"),
    (kDLUInt, 32, "uint32", "numpy", "u", "I"),
    (kDLUInt, 64, "uint64", "numpy", "u", "Q"),
    (kDLFloat, 16, "float16", "numpy", "f", "e"),
    (kDLFloat, 32, "float32", "numpy", "f", "f"),
    (kDLFloat, 64, "float64", "numpy", "f", "d"),
    (kDLComplex, 64, "complex64", "numpy", "c", "Zf"),
    (kDLComplex, 128, "complex128", "numpy", "c", "Zd"),
    # Two float16: torch's complex32 (ComplexHalf) exports it; numpy has no such type.
    (kDLComplex, 32, "complex32", None, None, None),
    (kDLBool, 8, "bool", "numpy", "b", "?"),
    (kDLBfloat, 16, "bfloat16", "ml_dtypes", None, None),
    (kDLFloat8_e3m4, 8, "float8_e3m4", "ml_dtypes", None, None),
    (kDLFloat8_e4m3, 8, "float8_e4m3", "ml_dtypes", None, None),
    (kDLFloat8_e4m3b11fnuz, 8, "float8_e4m3b11fnuz", "ml_dtypes", None, None),
    (kDLFloat8_e4m3fn, 8, "float8_e4m3fn", "ml_dtypes", None, None),
    (kDLFloat8_e4m3fnuz, 8, "float8_e4m3fnuz", "ml_dtypes", None, None),
    (kDLFloat8_e5m2, 8, "float8_e5m2", "ml_dtypes", None, None),
    (kDLFloat8_e5m2fnuz, 8, "float8_e5m2fnuz", "ml_dtypes", None, None),
    (kDLFloat8_e8m0fnu, 8, "float8_e8m0fnu", "ml_dtypes", None, None),
    (kDLFloat6_e2m3fn, 6, "float6_e2m3fn", "ml_dtypes", None, None),
    (kDLFloat6_e3m2fn, 6, "float6_e3m2fn", "ml_dtypes", None, None),
    (kDLFloat4_e2m1fn, 4, "float4_e2m1fn", "ml_dtypes", None, None),
    # Sub-byte integers: DLPack spells them as int/uint with bits < 8; ml_dtypes stores them one
    # per byte (DLPack's IS_SUBBYTE_TYPE_PADDED).
    (kDLInt, 1, "int1", "ml_dtypes", None, None),
    (kDLInt, 2, "int2", "ml_dtypes", None, None),
    (kDLInt, 4, "int4", "ml_dtypes", None, None),
    (kDLUInt, 1, "uint1", "ml_dtypes", None, None),
    (kDLUInt, 2, "uint2", "ml_dtypes", None, None),
    (kDLUInt, 4, "uint4", "ml_dtypes", None, None),
    # Opaque handles ("reserved for testing" in DLPack): pointer-sized by convention; no numpy
    # type, no typestr, no format.
    (kDLOpaqueHandle, 64, "opaque64", None, None, None),
    # Opaque bytes: an element of n bytes whose meaning is not described (the array interfaces'
    # void typestr "|Vn", a structured element read whole) is (kDLOpaqueHandle, 8, n lanes):
    # numpy's "Vn", typestr "|Vn", no buffer format.  Named "void{8n}" as numpy names it.
    (kDLOpaqueHandle, 8, "void", None, None, None),
)

# Largest code the table knows (DLPack 1.3 stops at kDLFloat4_e2m1fn).
cdef enum:
    _MAX_CODE = 17


cdef inline long _pack(long code, long bits, long lanes) noexcept:
    return code | (bits << 8) | (lanes << 16)


cdef inline void _unpack(long key, DLDataType* out) noexcept:
    out.code = <uint8_t> (key & 0xFF)
    out.bits = <uint8_t> ((key >> 8) & 0xFF)
    out.lanes = <uint16_t> (key >> 16)


cdef dict _ENTRY = {}        # packed (code, bits, 1) -> table row
cdef dict _BY_NAME = {}      # name -> packed triple (lanes 1)
cdef dict _BY_TYPESTR = {}   # cache: typestr -> packed triple
cdef dict _BY_FORMAT = {}    # cache: (format, itemsize) -> packed triple
cdef dict _BY_STR = {}       # cache: user string -> packed triple
cdef dict _BY_TYPE = {}      # cache: user type object (np.float32, ml_dtypes.bfloat16, ...)
cdef dict _BY_NPDTYPE = {}   # cache: numpy dtype instance -> packed triple (keys are all dtypes)
cdef dict _TO_NUMPY = {}     # cache: packed triple -> numpy dtype
cdef dict _TO_TYPESTR = {}   # cache: packed triple -> typestr
cdef dict _TO_FORMAT = {}    # cache: packed triple -> buffer format
cdef set _CODES_WITH_ROWS = set()

for _row in _TABLE:
    _ENTRY[_pack(_row[0], _row[1], 1)] = _row
    _BY_NAME[_row[2]] = _pack(_row[0], _row[1], 1)
    _CODES_WITH_ROWS.add(_row[0])
    if _row[4] is not None:
        _nbytes = _row[1] // 8
        _order = "|" if _nbytes == 1 else _NATIVE
        _BY_TYPESTR[f"{_order}{_row[4]}{_nbytes}"] = _pack(_row[0], _row[1], 1)
_BY_NAME["bool_"] = _BY_NAME["bool"]
_BY_NAME["half"] = _BY_NAME["float16"]
_BY_NAME["single"] = _BY_NAME["float32"]
_BY_NAME["double"] = _BY_NAME["float64"]


# --- validation --------------------------------------------------------------------------------

cdef str _triple_repr(DLDataType dtype):
    return f"(code={dtype.code}, bits={dtype.bits}, lanes={dtype.lanes})"


# The same table as a C bitset, (code, bits) -> known, so that validating the dtype of every
# imported tensor costs a few instructions instead of Python set and dict lookups.
cdef uint64_t _KNOWN_BITS[256][4]
for _key in _ENTRY:
    _KNOWN_BITS[_key & 0xFF][(_key >> 14) & 3] |= (<uint64_t> 1) << ((_key >> 8) & 63)


cdef inline bint _is_known(DLDataType dtype) noexcept nogil:
    return dtype.lanes >= 1 and (_KNOWN_BITS[dtype.code][dtype.bits >> 6] >> (dtype.bits & 63)) & 1


cdef int _check_known(DLDataType dtype) except -1:
    """ValueError/BufferError unless (code, bits) is in the table and lanes >= 1."""
    if _is_known(dtype):
        return 0
    if dtype.code not in _CODES_WITH_ROWS:
        raise BufferError(
            f"unknown DLPack type code {dtype.code} in {_triple_repr(dtype)}; this library "
            f"knows codes 0-{_MAX_CODE} (DLPack 1.3)")
    if _pack(dtype.code, dtype.bits, 1) not in _ENTRY:
        raise BufferError(
            f"DLPack type code {dtype.code} does not come with {dtype.bits} bits "
            f"in {_triple_repr(dtype)}")
    if dtype.lanes < 1:
        raise BufferError(f"DLPack dtype {_triple_repr(dtype)} has lanes 0; lanes must be >= 1")
    return 0


cdef Py_ssize_t dtype_itemsize(DLDataType dtype, bint subbyte_padded) except -1:
    cdef long total
    _check_known(dtype)
    total = <long> dtype.bits * <long> dtype.lanes
    if total % 8 == 0:
        # Whole bytes, including packed sub-byte vectors such as float4_e2m1fn x2 in one byte.
        return total // 8
    if subbyte_padded and dtype.lanes == 1:
        # One element per byte, the way ml_dtypes stores float4/float6/int4.
        return 1
    raise BufferError(
        f"{describe_dtype(dtype)} packs {total} bits per element, not a whole number of bytes; "
        "packed sub-byte tensors are not supported (store one element per byte, as "
        "ml_dtypes does, and mark it DLPack IS_SUBBYTE_TYPE_PADDED)")


cdef int record_set_dtype(ViewRecord* rec, DLDataType dtype, bint subbyte_padded) except -1:
    rec.itemsize = dtype_itemsize(dtype, subbyte_padded)
    rec.dtype = dtype
    return 0


# --- typestr (array interface) ----------------------------------------------------------------

cdef int dtype_from_typestr(object typestr, DLDataType* out) except -1:
    cdef object key = _BY_TYPESTR.get(typestr) if type(typestr) is str else None
    if key is not None:
        _unpack(key, out)
        return 0
    if not isinstance(typestr, str):
        raise TypeError(f"typestr must be a str, got {type(typestr).__name__}")
    key = _parse_typestr(<str> typestr)
    _BY_TYPESTR[typestr] = key
    _unpack(key, out)
    return 0


cdef long _parse_typestr(str ts) except -1:
    # Kinds with no DLPack type are named first: their typestrs may carry more than a size
    # ('<M8[s]').
    if len(ts) >= 2 and ts[0] in "<>|=" and ts[1] in "mM":
        raise ValueError(f"typestr {ts!r}: datetime/timedelta elements are not supported")
    if len(ts) >= 2 and ts[0] in "<>|=" and ts[1] == "O":
        raise ValueError(f"typestr {ts!r}: Python object elements are not supported")
    if len(ts) < 3 or ts[0] not in "<>|=" or not ts[2:].isdigit():
        raise ValueError(
            f"malformed typestr {ts!r}: expected a byte-order character (<, >, |), a kind "
            "character and a size in bytes, e.g. '<f4'")
    cdef str order = ts[0]
    cdef str kind = ts[1]
    cdef long nbytes = int(ts[2:])
    if kind == "V":
        # Opaque elements of nbytes each (a structured element read whole, as cuda.core reads
        # it; torch's bfloat16 "<V2" too: its meaning is not in the typestr).
        if nbytes < 1 or nbytes > 0xFFFF:
            raise ValueError(f"typestr {ts!r}: void elements of {nbytes} bytes are not supported "
                             "(1 to 65535)")
        return _pack(kDLOpaqueHandle, 8, nbytes)
    if kind in "SUa":
        raise ValueError(f"typestr {ts!r}: string elements are not supported")
    if kind not in "iufcb":
        raise ValueError(f"typestr {ts!r}: unknown kind character {kind!r}")
    if nbytes > 1 and order == _FOREIGN:
        raise ValueError(
            f"typestr {ts!r} is not in native byte order; byte-swap the data first "
            "(DLPack and this library assume native byte order)")
    cdef str native = f"{'|' if nbytes == 1 else _NATIVE}{kind}{nbytes}"
    key = _BY_TYPESTR.get(native)
    if key is None:
        raise ValueError(f"typestr {ts!r}: no DLPack type for kind {kind!r} of {nbytes} bytes")
    return key


cdef tuple _row_naming(DLDataType dtype, int column, str spelling):
    """The table row of `dtype`, refusing types that protocol has no spelling for (column)."""
    _check_known(dtype)
    row = _ENTRY[_pack(dtype.code, dtype.bits, 1)]
    if row[column] is None or dtype.lanes != 1:
        raise BufferError(
            f"{describe_dtype(dtype)} has no {spelling}; exchange it through DLPack (__dlpack__) "
            "instead")
    return row


cdef str dtype_to_typestr(DLDataType dtype):
    cdef long key = _pack(dtype.code, dtype.bits, dtype.lanes)
    cdef object ts = _TO_TYPESTR.get(key)
    if ts is not None:
        return ts
    if _is_opaque_bytes(dtype):
        ts = f"|V{dtype.lanes}"
        _TO_TYPESTR[key] = ts
        return ts
    row = _row_naming(dtype, 4, "array-interface typestr")
    nbytes = dtype.bits // 8
    ts = f"{'|' if nbytes == 1 else _NATIVE}{row[4]}{nbytes}"
    _TO_TYPESTR[key] = ts
    return ts


# --- buffer-protocol format -------------------------------------------------------------------

# Format character -> (table kind, sizes it may have).  Sizes: the native C size ('@' prefix or
# none) and the standard size ('<', '>', '=', '!').  ctypes writes '<l' with the native size,
# so both are accepted; the itemsize the exporter reports decides.
cdef dict _FORMAT_CHARS = {
    "b": ("i", (1,)), "B": ("u", (1,)), "c": ("u", (1,)),
    "h": ("i", (sizeof(short), 2)), "H": ("u", (sizeof(short), 2)),
    "i": ("i", (sizeof(int), 4)), "I": ("u", (sizeof(int), 4)),
    "l": ("i", (sizeof(long), 4)), "L": ("u", (sizeof(long), 4)),
    "q": ("i", (sizeof(long long), 8)), "Q": ("u", (sizeof(long long), 8)),
    "n": ("i", (sizeof(Py_ssize_t),)), "N": ("u", (sizeof(size_t),)),
    "P": ("u", (sizeof(void*),)),
    "e": ("f", (2,)), "f": ("f", (4,)), "d": ("f", (8,)),
    "?": ("b", (1,)),
    "Zf": ("c", (8,)), "Zd": ("c", (16,)),
}


cdef int dtype_from_buffer_format(object fmt, Py_ssize_t itemsize, DLDataType* out) except -1:
    cdef object key
    if fmt is None:
        fmt = "B"
    cdef tuple cache_key = (fmt, itemsize)
    key = _BY_FORMAT.get(cache_key)
    if key is not None:
        _unpack(key, out)
        return 0
    if not isinstance(fmt, str):
        raise TypeError(f"buffer format must be a str, got {type(fmt).__name__}")
    key = _parse_format(<str> fmt, itemsize)
    _BY_FORMAT[cache_key] = key
    _unpack(key, out)
    return 0


cdef long _parse_format(str fmt, Py_ssize_t itemsize) except -1:
    cdef str body = fmt
    cdef str order = "@"
    if body and body[0] in "@=<>!":
        order = body[0]
        body = body[1:]
    entry = _FORMAT_CHARS.get(body)
    if entry is None:
        raise ValueError(
            f"unsupported buffer format {fmt!r}: only single scalar types are viewable "
            "(struct codes b B c h H i I l L q Q n N P e f d ? Zf Zd, optional byte-order prefix)")
    kind, sizes = entry
    if itemsize not in sizes:
        raise ValueError(
            f"buffer format {fmt!r} does not fit its itemsize {itemsize} (expected one of {sizes})")
    foreign = order == "!" or order == _FOREIGN
    if foreign and itemsize > 1:
        raise ValueError(
            f"buffer format {fmt!r} is not in native byte order; byte-swap the data first")
    if order != "@" and body in ("n", "N", "P"):
        raise ValueError(f"buffer format {fmt!r}: {body!r} is only valid in native mode")
    key = _BY_TYPESTR.get(f"{'|' if itemsize == 1 else _NATIVE}{kind}{itemsize}")
    if key is None:
        raise ValueError(f"buffer format {fmt!r} with itemsize {itemsize} has no DLPack type")
    return key


cdef str dtype_to_buffer_format(DLDataType dtype):
    cdef long key = _pack(dtype.code, dtype.bits, dtype.lanes)
    cdef object fmt = _TO_FORMAT.get(key)
    if fmt is not None:
        return fmt
    row = _row_naming(dtype, 5, "buffer-protocol format")
    _TO_FORMAT[key] = row[5]
    return row[5]


# --- user dtype objects -----------------------------------------------------------------------

# Python's own scalar types, as numpy reads them.
_BY_TYPE.update({bool: _BY_NAME["bool"], int: _BY_NAME["int64"], float: _BY_NAME["float64"],
                 complex: _BY_NAME["complex128"]})


cdef int dtype_from_object(object dtype, DLDataType* out) except -1:
    cdef object key
    cdef type t = type(dtype)
    # Fast paths: one dict hit for every form seen before.
    if t is str:
        key = _BY_STR.get(dtype)
    elif t is tuple:
        return _from_triple_tuple(<tuple> dtype, out)
    elif isinstance(dtype, type):
        key = _BY_TYPE.get(dtype)
    else:
        key = _BY_NPDTYPE.get(dtype) if _is_numpy_dtype(dtype) else None
    if key is not None:
        _unpack(key, out)
        return 0
    key = _resolve_object(dtype)
    _unpack(key, out)
    return 0


cdef bint _is_numpy_dtype(object obj) except -1:
    # numpy cannot have made `obj` unless numpy is already imported, so never import it here.
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.dtype)


cdef int _from_triple_tuple(tuple t, DLDataType* out) except -1:
    if len(t) != 3:
        raise TypeError(f"a dtype tuple must be (code, bits, lanes), got {t!r}")
    for v in t:
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"a dtype tuple must hold three ints (code, bits, lanes), got {t!r}")
    code, bits, lanes = t
    if not (0 <= code <= 255 and 0 <= bits <= 255 and 1 <= lanes <= 65535):
        raise ValueError(
            f"dtype tuple {t!r} is out of range (code and bits 0-255, lanes 1-65535)")
    out.code = <uint8_t> code
    out.bits = <uint8_t> bits
    out.lanes = <uint16_t> lanes
    try:
        _check_known(out[0])
    except BufferError as exc:
        raise ValueError(str(exc)) from None
    return 0


cdef long _resolve_object(object dtype) except -1:
    cdef long key
    if isinstance(dtype, str):
        key = _from_string(<str> dtype)
        _BY_STR[dtype] = key
        return key
    np = sys.modules.get("numpy")
    if isinstance(dtype, type):
        if np is not None and issubclass(dtype, np.generic):
            key = _from_numpy_dtype(np.dtype(dtype))
            _BY_TYPE[dtype] = key
            return key
        raise TypeError(
            f"cannot use the type {dtype.__module__}.{dtype.__qualname__} as a dtype; pass a "
            "numpy/ml_dtypes type, a name such as 'float32', or a (code, bits, lanes) tuple")
    if np is not None and isinstance(dtype, np.dtype):
        key = _from_numpy_dtype(dtype)
        _BY_NPDTYPE[dtype] = key
        return key
    # Framework scalar types that carry a numpy dtype (e.g. jax.numpy.float32).
    inner = getattr(dtype, "dtype", None) if np is not None else None
    if inner is not None and isinstance(inner, np.dtype):
        return _from_numpy_dtype(inner)
    raise TypeError(
        f"cannot interpret {dtype!r} (of type {type(dtype).__name__}) as a dtype; pass a "
        "numpy/ml_dtypes dtype or type, a name such as 'float32' or 'bfloat16', a Python type "
        "(bool, int, float, complex) or a DLPack (code, bits, lanes) tuple")


cdef long _from_string(str s) except -1:
    key = _BY_NAME.get(s)
    if key is not None:
        return key
    # Typestr spellings, with or without the byte-order character: '<f4', '|b1', 'f4'.
    if len(s) >= 2 and s[0] in "iufcbmMOVSUa" and s[1:].isdigit():
        s = f"{'|' if s[1:] == '1' else _NATIVE}{s}"
    if len(s) >= 3 and s[0] in "<>|=":
        return _parse_typestr(s)
    raise ValueError(
        f"unknown dtype name {s!r}; known names: {', '.join(sorted(_BY_NAME))}, or a typestr "
        "such as '<f4'")


cdef long _from_numpy_dtype(object dt) except -1:
    if dt.fields is not None:
        raise TypeError(f"structured dtype {dt} is not supported; view one field at a time")
    if dt.subdtype is not None:
        raise TypeError(f"sub-array dtype {dt} is not supported")
    # ml_dtypes dtypes are named after their ml_dtypes type (their kind varies: 'V', 'f', ...).
    key = _BY_NAME.get(dt.name)
    if key is not None and _ENTRY[key][3] == "ml_dtypes":
        return key
    kind = dt.kind
    if kind == "V":
        raise TypeError(f"void dtype {dt} has no DLPack type")
    if kind == "O":
        raise TypeError("object dtype has no DLPack type (the elements are Python objects)")
    if kind in "mM":
        raise TypeError(f"datetime/timedelta dtype {dt} has no DLPack type")
    if kind in "SUa":
        raise TypeError(f"string dtype {dt} has no DLPack type")
    if kind not in "iufcb":
        raise TypeError(f"dtype {dt} has no DLPack type")
    if dt.byteorder == _FOREIGN and dt.itemsize > 1:
        raise ValueError(
            f"dtype {dt.str!r} is not in native byte order; use .newbyteorder('=') on the data "
            "first")
    ts = f"{'|' if dt.itemsize == 1 else _NATIVE}{kind}{dt.itemsize}"
    key = _BY_TYPESTR.get(ts)
    if key is None:
        raise TypeError(f"dtype {dt} ({dt.itemsize} bytes) has no DLPack type")
    return key


# --- numpy and names ----------------------------------------------------------------------------

cdef object dtype_to_numpy(DLDataType dtype):
    cdef long key = _pack(dtype.code, dtype.bits, dtype.lanes)
    cached = _TO_NUMPY.get(key)
    if cached is not None:
        return cached
    try:
        _check_known(dtype)
    except BufferError as exc:
        raise TypeError(str(exc)) from None
    if _is_opaque_bytes(dtype):
        import numpy
        result = numpy.dtype(f"V{dtype.lanes}")
        _TO_NUMPY[key] = result
        return result
    if dtype.lanes != 1:
        raise TypeError(
            f"{describe_dtype(dtype)} is a vector type ({dtype.lanes} lanes); numpy has no dtype "
            "for it (dlpack_dtype describes it; view(dtype=...) with the scalar type "
            "reinterprets the lanes as elements)")
    row = _ENTRY[_pack(dtype.code, dtype.bits, 1)]
    source = row[3]
    if source == "numpy":
        import numpy
        result = numpy.dtype(row[2])
    elif source == "ml_dtypes":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                f"{row[2]} needs the ml_dtypes package for a numpy dtype "
                "(pip install ml_dtypes); dlpack_dtype is always available") from None
        scalar = getattr(ml_dtypes, row[2], None)
        if scalar is None:
            raise TypeError(
                f"the installed ml_dtypes {getattr(ml_dtypes, '__version__', '?')} has no "
                f"{row[2]}; upgrade ml_dtypes")
        import numpy
        result = numpy.dtype(scalar)
    else:
        raise TypeError(f"{row[2]} has no numpy dtype")
    _TO_NUMPY[key] = result
    return result


cdef inline bint _is_opaque_bytes(DLDataType dtype) noexcept:
    return dtype.code == kDLOpaqueHandle and dtype.bits == 8 and dtype.lanes >= 1


cdef str describe_dtype(DLDataType dtype):
    if _is_opaque_bytes(dtype):
        return f"void{8 * dtype.lanes}"
    row = _ENTRY.get(_pack(dtype.code, dtype.bits, 1))
    if row is None or dtype.lanes < 1:
        return f"dlpack{_triple_repr(dtype)}"
    if dtype.lanes == 1:
        return row[2]
    return f"{row[2]}x{dtype.lanes}"


# --- the public functions (documented here, re-exported by interop_core.dtypes) ----------------

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
    cdef DLDataType dt
    dtype_from_object(obj, &dt)
    return (dt.code, dt.bits, dt.lanes)


cdef int _triple_arg(object triple, DLDataType* out) except -1:
    try:
        triple = tuple(triple)
    except TypeError:
        raise TypeError(
            f"expected a (code, bits, lanes) triple, got {type(triple).__name__}") from None
    return _from_triple_tuple(<tuple> triple, out)


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
    cdef DLDataType dt
    _triple_arg(triple, &dt)
    return dtype_to_numpy(dt)


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
    cdef DLDataType dt
    _triple_arg(triple, &dt)
    return describe_dtype(dt)


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
    cdef DLDataType dt
    _triple_arg(triple, &dt)
    return dtype_itemsize(dt, subbyte_padded)


def triple_from_typestr(typestr):
    """The DLPack triple of an array-interface typestr (``"<f4"``, ``"|b1"``, ...).

    Parameters
    ----------
    typestr : str

    Returns
    -------
    tuple of int
    """
    cdef DLDataType dt
    dtype_from_typestr(typestr, &dt)
    return (dt.code, dt.bits, dt.lanes)


def triple_from_buffer_format(fmt, Py_ssize_t itemsize):
    """The DLPack triple of a buffer-protocol format string with its itemsize.

    Parameters
    ----------
    fmt : str or None
        struct-module syntax, e.g. ``"<i"``, ``"Zd"``, ``"?"``; None means ``"B"``.
    itemsize : int
        The itemsize the exporter reports (it decides between native and standard sizes).

    Returns
    -------
    tuple of int
    """
    cdef DLDataType dt
    dtype_from_buffer_format(fmt, itemsize, &dt)
    return (dt.code, dt.bits, dt.lanes)


def known_dtypes():
    """Every scalar element type this library knows.

    Returns
    -------
    dict of str to tuple
        Name to ``(code, bits, 1)``, in table order.
    """
    return {row[2]: (row[0], row[1], 1) for row in _TABLE}


# --- dtype objects seen per call (record_set_dtype_of) ---------------------------------------

cdef enum:
    _DTYPE_SLOTS = 16

cdef PyObject* _seen_dtypes[_DTYPE_SLOTS]   # strong references (owned here, released when a
                                             # slot is reused)
cdef DLDataType _seen_triples[_DTYPE_SLOTS]
cdef int _next_slot = 0


cdef int dtype_of_cached(object dtype, DLDataType* out) except -1:
    global _next_slot
    cdef int i
    for i in range(_DTYPE_SLOTS):
        if _seen_dtypes[i] == <PyObject*> dtype:
            out[0] = _seen_triples[i]
            return 0
    dtype_from_object(dtype, out)
    i = _next_slot
    Py_XDECREF(_seen_dtypes[i])
    Py_INCREF(dtype)
    _seen_dtypes[i] = <PyObject*> dtype
    _seen_triples[i] = out[0]
    _next_slot = (i + 1) % _DTYPE_SLOTS
    return 0


cdef int record_set_dtype_of(ViewRecord* rec, object dtype) except -1:
    cdef DLDataType dt
    dtype_of_cached(dtype, &dt)
    return record_set_dtype(rec, dt, False)
