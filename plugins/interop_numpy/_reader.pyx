# The numpy reader: exact numpy.ndarray -> interop_core_tensor_info by reading the array
# object's C struct, registered through the public C ABI (interop_core.h) like any third party.
#
# Why not the buffer protocol?  It costs a Py_buffer round trip, a format-string parse and a
# release per call (about 5x slower).  numpy's array struct (PyArrayObject_fields) has had the
# same leading fields since numpy 1.7 and is part of its public C ABI; we declare it ourselves
# from the documentation and never include numpy's headers.  The descriptor struct
# (PyArray_Descr) changed between numpy 1.x and 2.x from `elsize` on, so we read only the
# fields before it (typeobj, kind, type, byteorder, type_num), which both versions share.
#
# Safety: the core validates this reader once per process before its first use (registry
# `prepare=` / `canaries=`): `prepare` compares the raw struct fields of canary arrays with
# numpy's Python API before any pointer read from them is followed, then the core reads every
# canary with this reader and with the fallback (`read_with_python_api`) and compares.  On any
# difference the fallback serves the rest of the process.

from cpython.object cimport PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int64_t, uint8_t, uint16_t, uintptr_t
from libc.string cimport memset

from interop_core.abi cimport (
    INTEROP_CORE_PROTOCOL_ARRAY_INTERFACE,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_api,
    interop_core_import_api,
    interop_core_tensor_info,
)

__all__ = ["reader_capsule", "read_with_python_api", "prepare", "canaries"]


cdef extern from *:
    """
    /* numpy's PyArrayObject_fields, leading part (numpy >= 1.7, unchanged in 2.x). */
    typedef struct {
        PyObject_HEAD
        char *data;              /* address of element 0 */
        int nd;
        Py_ssize_t *dimensions;  /* npy_intp == Py_intptr_t == Py_ssize_t */
        Py_ssize_t *strides;     /* in bytes */
        PyObject *base;          /* borrowed here: the array owns it */
        PyObject *descr;         /* borrowed here: the array owns it (a PyArray_Descr) */
        int flags;
    } ic_np_array;

    /* numpy's PyArray_Descr, the part shared by 1.x and 2.x (elsize moved after type_num). */
    typedef struct {
        PyObject_HEAD
        PyTypeObject *typeobj;   /* borrowed: the scalar type */
        char kind;
        char type;
        char byteorder;
        char flags_1x_or_former_flags_2x;
        int type_num;
    } ic_np_descr;

    #if PY_BIG_ENDIAN
    #define IC_NP_NATIVE_ORDER '>'
    #else
    #define IC_NP_NATIVE_ORDER '<'
    #endif
    """
    ctypedef struct ic_np_array:
        char* data
        int nd
        Py_ssize_t* dimensions
        Py_ssize_t* strides
        PyObject* base
        PyObject* descr
        int flags
    ctypedef struct ic_np_descr:
        PyTypeObject* typeobj
        char kind
        char type
        char byteorder
        int type_num
    char IC_NP_NATIVE_ORDER


cdef enum:
    NPY_ARRAY_WRITEABLE = 0x0400
    N_BUILTIN = 24          # type numbers 0 .. NPY_HALF (23) are numpy's built-in types
    NPY_USERDEF = 256       # first user-defined type number (ml_dtypes registers here)
    N_USER = 256            # user type numbers cached: 256 .. 511
    NPY_VOID = 20           # structured and void ("V") elements
    KDL_CPU = 1
    KDL_OPAQUE_HANDLE = 3

# The core's helper table (dtype conversion for types outside our table), fetched on import:
# the reader must work whenever the core calls it, also when a test pins it as validated.
cdef const interop_core_api* _api = interop_core_import_api(sizeof(interop_core_api))

# DLPack (code, bits) by numpy type number; bits 0 = not a type we read through the table.
ctypedef struct Triple:
    uint8_t code
    uint8_t bits
    uint16_t lanes

cdef Triple _builtin[N_BUILTIN]
cdef Triple _user[N_USER]            # learned from the core's conversion (ml_dtypes types)


cdef void _set(int num, uint8_t code, size_t nbytes) noexcept:
    _builtin[num].code = code
    _builtin[num].bits = <uint8_t> (nbytes * 8)
    _builtin[num].lanes = 1


cdef void _init_tables() noexcept:
    memset(_builtin, 0, sizeof(_builtin))
    memset(_user, 0, sizeof(_user))
    # numpy's type numbers (NPY_TYPES, stable since numpy 1.0); the integer kinds are C types,
    # so their sizes are this platform's.
    _set(0, 6, 1)                                                   # NPY_BOOL -> kDLBool
    _set(1, 0, 1)                                                   # NPY_BYTE
    _set(2, 1, 1)                                                   # NPY_UBYTE
    _set(3, 0, sizeof(short))                                       # NPY_SHORT
    _set(4, 1, sizeof(short))                                       # NPY_USHORT
    _set(5, 0, sizeof(int))                                         # NPY_INT
    _set(6, 1, sizeof(int))                                         # NPY_UINT
    _set(7, 0, sizeof(long))                                        # NPY_LONG
    _set(8, 1, sizeof(long))                                        # NPY_ULONG
    _set(9, 0, sizeof(long long))                                   # NPY_LONGLONG
    _set(10, 1, sizeof(long long))                                  # NPY_ULONGLONG
    _set(11, 2, 4)                                                  # NPY_FLOAT
    _set(12, 2, 8)                                                  # NPY_DOUBLE
    _set(14, 5, 8)                                                  # NPY_CFLOAT
    _set(15, 5, 16)                                                 # NPY_CDOUBLE
    _set(23, 2, 2)                                                  # NPY_HALF
    # Not in the table, so they take the slow path and its error: LONGDOUBLE (13),
    # CLONGDOUBLE (16), OBJECT (17), STRING (18), UNICODE (19), VOID (20), DATETIME (21),
    # TIMEDELTA (22).


_init_tables()


cdef inline bint _native(char order) noexcept:
    return order == b'=' or order == b'|' or order == IC_NP_NATIVE_ORDER


cdef inline int _put(Triple t, interop_core_tensor_info* out) noexcept:
    out.dtype_code = t.code
    out.dtype_bits = t.bits
    out.dtype_lanes = t.lanes
    return 0


cdef int _pending_error() except -1:
    return -1       # hands on the exception the core's helper set


cdef int _dtype_slow(object descr, interop_core_tensor_info* out) except -1:
    """Any dtype the table lacks: the core's conversion, checked against numpy's itemsize."""
    cdef ic_np_descr* d = <ic_np_descr*> <PyObject*> descr
    cdef int num = d.type_num
    cdef Triple t
    cdef bint user = NPY_USERDEF <= num < NPY_USERDEF + N_USER and _native(d.byteorder)
    if user and _user[num - NPY_USERDEF].bits:
        return _put(_user[num - NPY_USERDEF], out)
    try:
        if _api.dtype_of(<PyObject*> descr, &t.code, &t.bits, &t.lanes) != 0:
            _pending_error()
    except (TypeError, ValueError, BufferError) as exc:
        raise BufferError(f"cannot view a numpy array of dtype {descr!s}: {exc}") from None
    # Sub-byte types (ml_dtypes' float4, int4) are stored one per byte.
    if max(1, t.bits * t.lanes // 8) != descr.itemsize:
        raise BufferError(
            f"cannot view a numpy array of dtype {descr!s}: its itemsize is {descr.itemsize} "
            f"bytes but the DLPack type {t.code, t.bits, t.lanes} needs "
            f"{max(1, t.bits * t.lanes // 8)}")
    if user:
        _user[num - NPY_USERDEF] = t
    return _put(t, out)


cdef int read_ndarray(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1:
    # Host memory: nothing to order, whatever the (already resolved) stream.
    cdef ic_np_array* a = <ic_np_array*> obj
    cdef ic_np_descr* d = <ic_np_descr*> a.descr
    cdef int num = d.type_num
    if 0 <= num < N_BUILTIN and _builtin[num].bits and _native(d.byteorder):
        _put(_builtin[num], out)
    elif num == NPY_VOID and out.protocol == INTEROP_CORE_PROTOCOL_ARRAY_INTERFACE:
        # What numpy's array interface says of structured and void elements ("|Vn": n opaque
        # bytes, the fields dropped), for StridedMemoryView.from_array_interface; view() and
        # the other protocols refuse them (one field at a time).  Not where a field holds
        # Python objects: those bytes are references, and writing them corrupts their counts.
        if (<object> a.descr).hasobject:
            raise ValueError(f"cannot view a numpy array of dtype {(<object> a.descr)!s}: a "
                             "field holds Python objects, whose memory is references, not data")
        out.dtype_code = KDL_OPAQUE_HANDLE
        out.dtype_bits = 8
        out.dtype_lanes = <uint16_t> (<object> a.descr).itemsize
    else:
        _dtype_slow(<object> a.descr, out)
    out.data = a.data
    out.ndim = a.nd
    out.shape = <const int64_t*> a.dimensions
    out.strides = <const int64_t*> a.strides
    out.strides_in_bytes = 1
    out.device_type = KDL_CPU
    out.device_id = 0
    out.readonly = (a.flags & NPY_ARRAY_WRITEABLE) == 0
    return 0


def reader_capsule():
    """The struct reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""
    return PyCapsule_New(<void*> read_ndarray, INTEROP_CORE_READER_V2_CAPSULE, NULL)


def read_with_python_api(obj, stream):
    """The fallback: numpy's documented Python API only (slow, independent of any C layout).

    Parameters
    ----------
    obj : numpy.ndarray
    stream : None or int
        Ignored: host memory needs no ordering.

    Returns
    -------
    interop_core.StridedMemoryView
    """
    from interop_core import StridedMemoryView

    itemsize = obj.itemsize
    strides = []
    for i, s in enumerate(obj.strides):
        if s % itemsize:
            raise BufferError(
                f"numpy array has a stride of {s} bytes in dimension {i}, not a multiple of its "
                f"itemsize {itemsize} (an as_strided view?); copy it first")
        strides.append(s // itemsize)
    try:
        return StridedMemoryView.from_pointer(
            obj.__array_interface__["data"][0], obj.shape, tuple(strides), dtype=obj.dtype,
            readonly=not obj.flags.writeable, owner=obj)
    except (TypeError, ValueError) as exc:
        raise BufferError(f"cannot view a numpy array of dtype {obj.dtype!s}: {exc}") from None


# --- validation (run once by the core, see interop_core/registry/_validation.py) --------------

def canaries():
    """numpy arrays covering every built-in dtype, slices, transposes, read-only, 0-d, empty."""
    import numpy as np

    out = []
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float16", "float32", "float64", "complex64", "complex128",
                 "intc", "uintc", "int_", "uint", "longlong", "ulonglong", "short", "ushort"):
        base = np.arange(24).astype(name).reshape(4, 6)
        ro = base.copy()
        ro.flags.writeable = False
        out += [base, base[1:, ::2], base.T, base[::-1, ::-2], base[2:3, 3:4].reshape(()),
                base[:0], np.asfortranarray(base), ro, ro[1:].T,
                np.zeros((2, 0, 3), name), np.zeros(7, name)[1:]]
    big = np.zeros((3, 4, 5, 6, 2, 3, 2, 2), "float32")         # more dims than inline storage
    out += [big, big.transpose(7, 6, 5, 4, 3, 2, 1, 0)]
    return out


cdef str _raw_fields_differ(object a):
    """Why canary `a`'s raw struct fields differ from numpy's Python API, or None.

    Compares only fields, never follows a pointer read from the struct, so a wrong layout is
    found without a crash.
    """
    cdef ic_np_array* raw = <ic_np_array*> <PyObject*> a
    if <uintptr_t> raw.data != <uintptr_t> a.__array_interface__["data"][0]:
        return "data pointer field differs from __array_interface__"
    if raw.nd != a.ndim:
        return f"nd field {raw.nd} != ndim {a.ndim}"
    if raw.descr != <PyObject*> a.dtype:
        return "descr field is not the array's dtype object"
    if (<ic_np_descr*> raw.descr).type_num != a.dtype.num:
        return f"type_num {(<ic_np_descr*> raw.descr).type_num} != dtype.num {a.dtype.num}"
    if bytes([(<ic_np_descr*> raw.descr).byteorder]) != a.dtype.byteorder.encode():
        return f"byteorder field differs from dtype.byteorder {a.dtype.byteorder!r}"
    if ((raw.flags & NPY_ARRAY_WRITEABLE) != 0) != bool(a.flags.writeable):
        return "WRITEABLE flag differs from flags.writeable"
    return None


def prepare():
    """Check numpy's struct layout on canaries; refusals of unviewable dtypes (run once).

    Returns
    -------
    None or str
        ``None`` when the struct reader may be used; otherwise why not.
    """
    cdef interop_core_tensor_info info
    import numpy as np

    if sizeof(Py_ssize_t) != sizeof(int64_t):
        return "npy_intp is not 64-bit on this platform"
    for a in canaries():
        why = _raw_fields_differ(a)
        if why is not None:
            return why
    # Dtypes the reader must refuse must be refused, with numpy's dtype named.
    for name in (">f4" if IC_NP_NATIVE_ORDER == b'<' else "<f4", "O", "M8[s]", "V8"):
        a = np.zeros(2, name)
        memset(&info, 0, sizeof(info))
        try:
            read_ndarray(<PyObject*> a, NULL, &info)
        except BufferError as exc:
            if str(a.dtype) not in str(exc):
                return f"the refusal of dtype {name} does not name it: {exc}"
            continue
        return f"dtype {name} was not refused"
    return None
