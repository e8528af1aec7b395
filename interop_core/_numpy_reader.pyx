# The numpy reader: exact numpy.ndarray -> ViewRecord by reading the array object's C struct.
#
# Why not the buffer protocol?  It costs a Py_buffer round trip, a format-string parse and a
# release per call (about 5x slower).  numpy's array struct (PyArrayObject_fields) has had the
# same leading fields since numpy 1.7 and is part of its public C ABI; we declare it ourselves
# from the documentation and never include numpy's headers.  The descriptor struct
# (PyArray_Descr) changed between numpy 1.x and 2.x from `elsize` on, so we read only the
# fields before it (typeobj, kind, type, byteorder, type_num), which both versions share, and
# take the itemsize from our own dtype table.
#
# Safety: the layout is checked once per process against numpy's Python API on canary arrays
# (dtypes, slices, transposes, negative strides, 0-d, zero-size, read-only).  The check compares
# raw fields (data pointer, ndim, descr identity) before ever dereferencing a pointer read from
# the struct, so a wrong layout is detected without a crash; on any difference the reader falls
# back to the buffer protocol, then numpy's Python API, for the rest of the process.

from cpython.object cimport PyObject, PyTypeObject
from libc.stdint cimport int64_t, intptr_t, uint8_t, uintptr_t

from .core._dlpack_abi cimport DLDataType
from .core._dtypes cimport dtype_from_object, record_set_dtype
from .protocols._interfaces cimport read_buffer_protocol
from .core._record cimport ViewRecord, extents_free, extents_resize, record_init
from .registry._registry cimport add_core_reader

__all__ = ["validation_status", "set_validation_result", "revalidate"]


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
    KDL_CPU = 1

cdef enum ValidationState:
    UNVALIDATED = 0
    VALID = 1
    INVALID = 2

cdef int _state = UNVALIDATED
cdef str _reason = "not validated yet"   # why validation failed (or its status)
cdef bint _forced = False                # set_validation_result() pinned the state (tests)

# dtype tables by type number: code 255 = not a type we read through the table.
cdef DLDataType _builtin[N_BUILTIN]
cdef int64_t _builtin_size[N_BUILTIN]
cdef DLDataType _user[N_USER]            # filled lazily from numpy's Python API (ml_dtypes types)
cdef int64_t _user_size[N_USER]          # 0 = not cached yet


cdef void _set(int num, uint8_t code, int64_t nbytes) noexcept:
    _builtin[num].code = code
    _builtin[num].bits = <uint8_t> (nbytes * 8)
    _builtin[num].lanes = 1
    _builtin_size[num] = nbytes


cdef void _init_tables() noexcept:
    cdef int i
    for i in range(N_BUILTIN):
        _builtin[i].code = 255
        _builtin_size[i] = 0
    for i in range(N_USER):
        _user_size[i] = 0
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


cdef int _dtype_slow(object descr, DLDataType* out, int64_t* itemsize) except -1:
    """Any dtype the table lacks: user types (cached by type number) and the errors."""
    cdef ic_np_descr* d = <ic_np_descr*> <PyObject*> descr
    cdef int num = d.type_num
    if NPY_USERDEF <= num < NPY_USERDEF + N_USER and _native(d.byteorder):
        if _user_size[num - NPY_USERDEF] != 0:
            out[0] = _user[num - NPY_USERDEF]
            itemsize[0] = _user_size[num - NPY_USERDEF]
            return 0
    return _dtype_from_python(descr, out, itemsize, True)


cdef int _dtype_from_python(object descr, DLDataType* out, int64_t* itemsize,
                            bint cache) except -1:
    """numpy's Python API: descr -> triple, with a BufferError naming the dtype."""
    cdef ViewRecord tmp
    cdef int num
    record_init(&tmp)
    try:
        dtype_from_object(descr, out)
        record_set_dtype(&tmp, out[0], True)
    except (TypeError, ValueError, BufferError) as exc:
        raise BufferError(f"cannot view a numpy array of dtype {descr!s}: {exc}") from None
    if tmp.itemsize != descr.itemsize:
        raise BufferError(
            f"cannot view a numpy array of dtype {descr!s}: its itemsize is {descr.itemsize} "
            f"bytes but the DLPack type {out.code, out.bits, out.lanes} needs {tmp.itemsize}")
    itemsize[0] = tmp.itemsize
    if cache and _state == VALID:
        num = (<ic_np_descr*> <PyObject*> descr).type_num
        if NPY_USERDEF <= num < NPY_USERDEF + N_USER:
            _user[num - NPY_USERDEF] = out[0]
            _user_size[num - NPY_USERDEF] = tmp.itemsize
    return 0


cdef inline int _descr_dtype(PyObject* descr, DLDataType* out, int64_t* itemsize) except -1:
    cdef ic_np_descr* d = <ic_np_descr*> descr
    cdef int num = d.type_num
    if 0 <= num < N_BUILTIN and _builtin[num].code != 255 and _native(d.byteorder):
        out[0] = _builtin[num]
        itemsize[0] = _builtin_size[num]
        return 0
    return _dtype_slow(<object> descr, out, itemsize)


cdef int numpy_dtype_to_dlpack(object descr, DLDataType* out, int64_t* itemsize) except -1:
    if _state == UNVALIDATED:
        _validate()
    if _state == VALID and _is_descr(descr):
        return _descr_dtype(<PyObject*> descr, out, itemsize)
    return _dtype_from_python(descr, out, itemsize, False)


cdef object _np_dtype_type = None   # numpy.dtype, once numpy is imported (it is by then)


cdef bint _is_descr(object descr) except -1:
    # Every dtype instance (also ml_dtypes' and numpy 2's per-type classes) subclasses np.dtype.
    global _np_dtype_type
    if _np_dtype_type is None:
        import numpy
        _np_dtype_type = numpy.dtype
    return isinstance(descr, _np_dtype_type)


cdef int _read_struct(object obj, ViewRecord* rec) except -1:
    cdef ic_np_array* a = <ic_np_array*> <PyObject*> obj
    cdef DLDataType dt
    cdef int64_t isz, s, q
    cdef int i, nd = a.nd
    _descr_dtype(a.descr, &dt, &isz)
    extents_resize(&rec.ext, nd)
    for i in range(nd):
        rec.ext.shape[i] = a.dimensions[i]
        s = a.strides[i]
        q = s // isz
        if q * isz != s:
            raise BufferError(
                f"numpy array has a stride of {s} bytes in dimension {i}, not a multiple of its "
                f"itemsize {isz} (an as_strided view?); copy it first")
        rec.ext.strides[i] = q
    rec.dtype = dt
    rec.itemsize = isz
    rec.ptr = <uintptr_t> a.data
    rec.device_type = KDL_CPU
    rec.device_id = 0
    rec.readonly = (a.flags & NPY_ARRAY_WRITEABLE) == 0
    rec.has_producer_stream = False
    return 0


cdef object read_numpy(object obj, object stream, ViewRecord* rec):
    # Host memory: nothing to order, whatever the (already validated) stream.
    if _state != VALID:
        if _state == UNVALIDATED:
            _validate()
        if _state != VALID:
            return _read_fallback(obj, stream, rec)
    _read_struct(obj, rec)
    return obj


cdef object _read_fallback(object obj, object stream, ViewRecord* rec):
    try:
        return read_buffer_protocol(obj, rec)
    except (BufferError, ValueError, TypeError):
        # e.g. ml_dtypes types, which the buffer protocol cannot name (nor can numpy's __dlpack__).
        pass
    return _read_python_api(obj, rec)


cdef object _read_python_api(object obj, ViewRecord* rec):
    """numpy's documented Python API only: slow, but independent of any C layout."""
    cdef DLDataType dt
    cdef int64_t isz
    cdef int i
    _dtype_from_python(obj.dtype, &dt, &isz, False)
    shape, strides = obj.shape, obj.strides
    extents_resize(&rec.ext, len(shape))
    for i in range(len(shape)):
        if strides[i] % isz:
            raise BufferError(
                f"numpy array has a stride of {strides[i]} bytes in dimension {i}, not a "
                f"multiple of its itemsize {isz} (an as_strided view?); copy it first")
        rec.ext.shape[i] = shape[i]
        rec.ext.strides[i] = strides[i] // isz
    rec.dtype = dt
    rec.itemsize = isz
    rec.ptr = <uintptr_t> obj.__array_interface__["data"][0]
    rec.device_type = KDL_CPU
    rec.device_id = 0
    rec.readonly = not obj.flags.writeable
    rec.has_producer_stream = False
    return obj


# --- validation, once per process ---------------------------------------------------------------

cdef str _check_one(object a, object np):
    """Why the struct read of canary `a` differs from numpy's Python API, or None."""
    cdef ic_np_array* raw = <ic_np_array*> <PyObject*> a
    cdef ViewRecord rec
    cdef DLDataType want
    if type(a) is not np.ndarray:
        return f"canary is a {type(a).__name__}"
    # Raw fields first, so a wrong layout is caught before any pointer from it is followed.
    if <uintptr_t> raw.data != <uintptr_t> a.__array_interface__["data"][0]:
        return "data pointer field differs from __array_interface__"
    if raw.nd != a.ndim:
        return f"nd field {raw.nd} != ndim {a.ndim}"
    if raw.descr != <PyObject*> a.dtype:
        return "descr field is not the array's dtype object"
    d = a.dtype
    if (<ic_np_descr*> raw.descr).type_num != d.num:
        return f"type_num {(<ic_np_descr*> raw.descr).type_num} != dtype.num {d.num}"
    if bytes([(<ic_np_descr*> raw.descr).byteorder]) != d.byteorder.encode():
        return f"byteorder field differs from dtype.byteorder {d.byteorder!r}"
    if ((raw.flags & NPY_ARRAY_WRITEABLE) != 0) != bool(a.flags.writeable):
        return "WRITEABLE flag differs from flags.writeable"
    record_init(&rec)
    try:
        _read_struct(a, &rec)
        shape = tuple(rec.ext.shape[i] for i in range(rec.ext.ndim))
        strides = tuple(rec.ext.strides[i] for i in range(rec.ext.ndim))
        if shape != a.shape:
            return f"shape {shape} != {a.shape}"
        if strides != tuple(s // a.itemsize for s in a.strides):
            return f"strides {strides} != {a.strides} bytes"
        dtype_from_object(d, &want)
        if (rec.dtype.code, rec.dtype.bits, rec.dtype.lanes) != (want.code, want.bits, want.lanes):
            return f"dtype {d} read as {rec.dtype.code, rec.dtype.bits, rec.dtype.lanes}"
        if rec.itemsize != a.itemsize:
            return f"itemsize {rec.itemsize} != {a.itemsize} for {d}"
        if rec.readonly != (not a.flags.writeable):
            return "readonly differs"
    finally:
        extents_free(&rec.ext)
    return None


def _canaries(np):
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


cdef int _validate() except -1:
    """Check the struct layout against numpy's Python API; sets _state (never raises)."""
    global _state, _reason
    if _forced:
        return 0
    _state = VALID        # _check_one reads through the struct path
    try:
        import numpy as np
        for a in _canaries(np):
            why = _check_one(a, np)
            if why is not None:
                _state, _reason = INVALID, why
                return 0
        # Dtypes the reader must refuse must be refused, with numpy's dtype named.
        for name in (">f4" if IC_NP_NATIVE_ORDER == b'<' else "<f4", "O", "M8[s]", "V8"):
            try:
                _check_one(np.zeros(2, name), np)
            except BufferError:
                continue
            _state, _reason = INVALID, f"dtype {name} was not refused"
            return 0
    except Exception as exc:
        _state, _reason = INVALID, f"validation raised {type(exc).__name__}: {exc}"
        return 0
    _state, _reason = VALID, "struct layout matches numpy's Python API"
    return 0


def validation_status():
    """Whether the direct struct reader is in use, and why (validating first if needed).

    Returns
    -------
    tuple of (bool, str)
        ``(True, ...)`` when ``view()`` reads numpy arrays' C structs directly; ``(False,
        reason)`` when it falls back to the buffer protocol / numpy's Python API.
    """
    if _state == UNVALIDATED:
        _validate()
    return _state == VALID, _reason


def set_validation_result(ok, reason="set by set_validation_result()"):
    """Pin the validation result (for tests of the fallback); ``ok=None`` re-validates.

    Parameters
    ----------
    ok : bool or None
        ``False`` forces the buffer-protocol / ``__dlpack__`` fallback, ``True`` the struct
        reader; ``None`` forgets the pinned result and validates again on the next read.
    reason : str
        Reported by :func:`validation_status`.
    """
    global _state, _reason, _forced
    if ok is None:
        _forced, _state, _reason = False, UNVALIDATED, "not validated yet"
        return
    _forced = True
    _state = VALID if ok else INVALID
    _reason = str(reason)


def revalidate():
    """Forget any pinned or cached result and validate again now.

    Returns
    -------
    bool
        Whether the struct reader is in use.
    """
    set_validation_result(None)
    _validate()
    return _state == VALID


add_core_reader("numpy", read_numpy)
