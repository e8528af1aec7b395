# Element types.  The DLPack triple (code, bits, lanes) is the source of truth; everything else
# (numpy dtypes, array-interface typestrs, buffer-protocol formats, names) maps to and from it
# through the single table in _dtypes.pyx.

from ._dlpack_abi cimport DLDataType
from ._record cimport ViewRecord

# Validate `dtype` and store it with its itemsize into `rec`.  Sub-byte types are accepted only
# when `subbyte_padded` (one element per byte, DLPack's IS_SUBBYTE_TYPE_PADDED) or when
# bits * lanes is a whole number of bytes; otherwise BufferError.  Unknown codes: BufferError.
cdef int record_set_dtype(ViewRecord* rec, DLDataType dtype, bint subbyte_padded) except -1

# Bytes per element for a validated dtype (same rules as record_set_dtype).
cdef Py_ssize_t dtype_itemsize(DLDataType dtype, bint subbyte_padded) except -1

# Array-interface typestr ("<f4", "|b1", "<c8", ...) -> triple.  Cached; ValueError if unknown,
# TypeError if not a str.  Non-native byte order is a ValueError.
cdef int dtype_from_typestr(object typestr, DLDataType* out) except -1

# Buffer-protocol format string (struct module syntax) with its itemsize -> triple.
cdef int dtype_from_buffer_format(object fmt, Py_ssize_t itemsize, DLDataType* out) except -1

# Anything a user may call a dtype -> triple: numpy dtype or scalar type, ml_dtypes type, a name
# ("float32", "bfloat16", "float8_e4m3fn", ...), a (code, bits, lanes) tuple.  TypeError otherwise.
cdef int dtype_from_object(object dtype, DLDataType* out) except -1

# Triple -> numpy dtype (numpy imported here, lazily; ml_dtypes for bfloat16/float8/6/4).
# TypeError naming the type when numpy has no such dtype (lanes > 1, ml_dtypes missing, ...).
cdef object dtype_to_numpy(DLDataType dtype)

# Human name: "float32", "bfloat16", "float8_e4m3fn", "bool", "float32x4" for lanes.
cdef str describe_dtype(DLDataType dtype)

# Triple -> array-interface typestr (native byte order).  BufferError for types the protocol
# cannot name (bfloat16, float8, lanes > 1, ...).
cdef str dtype_to_typestr(DLDataType dtype)

# Triple -> buffer-protocol format string.  BufferError when the protocol has no format for it.
cdef str dtype_to_buffer_format(DLDataType dtype)

# dtype_from_object through a small identity cache (the dtype objects are kept alive by it):
# readers of array types call it per object with the same few dtypes.
cdef int dtype_of_cached(object dtype, DLDataType* out) except -1

# record_set_dtype for a framework's dtype object (numpy dtype, cupy/numba `.dtype`), through a
# small identity cache: readers of array types call it per object with the same few dtypes.
cdef int record_set_dtype_of(ViewRecord* rec, object dtype) except -1
