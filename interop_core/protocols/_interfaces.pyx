# CUDA Array Interface (v2/v3), NumPy __array_interface__ (v3) and the buffer protocol, in both
# directions.
#
# Readers validate everything they take from the producer before it reaches the record: a
# malformed dict raises TypeError / ValueError / BufferError naming the key at fault, never
# anything else.  On error a reader may leave the record half-filled; the caller discards the
# view, whose __dealloc__ frees any extents storage.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_ANY_CONTIGUOUS,
    PyBUF_F_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_RECORDS_RO,
    PyBUF_SIMPLE,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.buffer cimport Py_buffer
from cpython.number cimport PyNumber_Index
from libc.stdint cimport INT64_MAX, int64_t, intptr_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, strcmp, strlen

from ..cuda._cuda cimport pointer_device
from ..cuda._streams cimport stream_handle_implausible
from ..core._dlpack_abi cimport DLDataType, kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLROCMHost
from ..core._dtypes cimport (
    dtype_from_buffer_format,
    dtype_from_typestr,
    dtype_to_buffer_format,
    dtype_to_typestr,
    record_set_dtype,
)
from ..core._layout cimport extents_validate, extents_volume
from ..core._record cimport Extents, ViewRecord, extents_resize

__all__ = []

cdef object _UINT64_LIMIT = 2 ** 64
cdef object _INT64_LIMIT = 2 ** 63


# --- small validators -------------------------------------------------------------------------

cdef str _tname(object obj):
    cdef type t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


cdef str _what(str proto, str key, Py_ssize_t idx):
    # Built only on error paths: formatting on every call would dominate the reader's cost.
    return f"{proto}[{key!r}]" if idx < 0 else f"{proto}[{key!r}][{idx}]"


cdef object _as_int(object v, str proto, str key, Py_ssize_t idx):
    """`v` as a Python int (ints and objects with __index__, but not bool); TypeError otherwise."""
    if type(v) is int:
        return v
    if isinstance(v, bool) or v is None:
        raise TypeError(f"{_what(proto, key, idx)} must be an int, got {_tname(v)} {v!r:.60}")
    try:
        return PyNumber_Index(v)
    except TypeError:
        raise TypeError(
            f"{_what(proto, key, idx)} must be an int, got {_tname(v)} {v!r:.60}") from None


cdef uintptr_t _as_ptr(object v, str proto) except? 0:
    v = _as_int(v, proto, "data", 0)
    if v < 0 or v >= _UINT64_LIMIT:
        raise ValueError(
            f"{_what(proto, 'data', 0)} {v} is not a valid address (must be in [0, 2**64))")
    return <uintptr_t> <unsigned long long> v


cdef dict _get_interface(object obj, str attr):
    """obj.<attr> as a dict; a failing property becomes a clear exception naming the type."""
    try:
        d = getattr(obj, attr)
    except AttributeError as exc:
        raise TypeError(f"object of type {_tname(obj)} has no usable {attr} ({exc})") from None
    except (TypeError, ValueError, BufferError):
        raise
    except Exception as exc:
        raise BufferError(
            f"reading {_tname(obj)}.{attr} raised {type(exc).__name__}: {exc}") from exc
    if type(d) is not dict:
        if isinstance(d, dict):
            return dict(d)
        raise TypeError(f"{_tname(obj)}.{attr} must be a dict, got {_tname(d)}")
    return <dict> d


cdef object _required(dict d, str key, str proto):
    v = d.get(key, _MISSING)
    if v is _MISSING:
        raise ValueError(f"{proto} is missing the required key {key!r}")
    return v


cdef object _MISSING = object()


cdef int _check_mask_descr(dict d, str proto) except -1:
    if d.get("mask") is not None:
        raise BufferError(
            f"{proto} has a mask; masked arrays are not supported (pass the data without a mask)")
    descr = d.get("descr")
    if descr is None:
        return 0
    if not isinstance(descr, list):
        raise TypeError(f"{proto}['descr'] must be a list, got {_tname(descr)}")
    # A plain array describes itself as [('', typestr)]; anything with named or several fields
    # is a structured type, which views represent only whole, as opaque bytes.
    if len(descr) > 1 or (len(descr) == 1 and (
            not isinstance(descr[0], tuple) or len(descr[0]) < 2 or descr[0][0] != "")):
        typestr = d.get("typestr")
        if isinstance(typestr, str) and typestr[1:2] == "V":
            # A structured element, whose typestr says "n opaque bytes": read whole, as
            # opaque elements (the fields are not kept, as in cuda.core's reading) -- unless a
            # field holds Python objects, whose bytes are references: writing them would
            # corrupt reference counts.
            if _holds_objects(descr):
                raise ValueError(f"{proto}['descr'] {descr!r} has a field of Python objects "
                                 "(typestr 'O'): their memory is references, not data, and is "
                                 "not viewed")
            return 0
        raise ValueError(f"{proto}['descr'] {descr!r} describes a structured type whose "
                         f"typestr {typestr!r} is not a void type; not supported")
    return 0


cdef bint _holds_objects(object descr) except -1:
    # Whether an interface's descr (a list of (name, typestr or nested descr[, shape]) tuples)
    # has a field of Python objects anywhere.
    for field in descr:
        if not isinstance(field, tuple) or len(field) < 2:
            continue
        kind = field[1]
        if isinstance(kind, list):
            if _holds_objects(kind):
                return True
        elif isinstance(kind, str) and kind[1:2] == "O":
            return True
    return False


cdef int _check_version(dict d, str proto, int lo, int hi) except -1:
    version = _as_int(_required(d, "version", proto), proto, "version", -1)
    if version < lo or version > hi:
        raise ValueError(
            f"{proto}['version'] is {version}; versions {lo} to {hi} are supported")
    return <int> version


# --- extents ------------------------------------------------------------------------------------

cdef int _fill_extents(ViewRecord* rec, object shape, object strides, str proto) except -1:
    """Shape and byte strides from the producer -> element strides in rec.ext (itemsize set)."""
    cdef Py_ssize_t i, ndim
    cdef int64_t extent, stride, volume = 1, itemsize = rec.itemsize
    cdef uint64_t c_stride
    cdef bint overflow = False, has_zero = False
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{proto}['shape'] must be a tuple of ints, got {_tname(shape)}")
    ndim = len(shape)
    if ndim > 64:
        raise ValueError(f"{proto}['shape'] has {ndim} dimensions; at most 64 are supported")
    extents_resize(&rec.ext, <int> ndim)
    for i in range(ndim):
        v = _as_int(shape[i], proto, "shape", i)
        if v < 0:
            raise ValueError(f"{proto}['shape'][{i}] is negative ({v})")
        if v >= _INT64_LIMIT:
            raise ValueError(f"{proto}['shape'][{i}] is too large ({v})")
        extent = <int64_t> v
        rec.ext.shape[i] = extent
        if extent == 0:
            has_zero = True
        elif not overflow:
            if volume > INT64_MAX // extent:
                overflow = True
            else:
                volume *= extent
    if not has_zero and (overflow or volume > INT64_MAX // itemsize):
        raise ValueError(f"{proto}['shape'] {tuple(shape)} describes more bytes than fit in int64")
    if strides is None:
        # Unsigned so that a zero-size array with huge other extents wraps instead of being UB;
        # its strides are never used to address memory.
        c_stride = 1
        for i in range(ndim - 1, -1, -1):
            rec.ext.strides[i] = <int64_t> c_stride
            if rec.ext.shape[i] > 0:
                c_stride *= <uint64_t> rec.ext.shape[i]
        return 0
    if not isinstance(strides, (tuple, list)):
        raise TypeError(f"{proto}['strides'] must be None or a tuple of ints, got {_tname(strides)}")
    if len(strides) != ndim:
        raise ValueError(
            f"{proto}['strides'] has {len(strides)} entries but shape has {ndim} dimensions")
    for i in range(ndim):
        v = _as_int(strides[i], proto, "strides", i)
        if v < -_INT64_LIMIT or v >= _INT64_LIMIT:
            raise ValueError(f"{proto}['strides'][{i}] is out of range ({v})")
        stride = <int64_t> v
        if stride % itemsize != 0:
            raise BufferError(
                f"{proto}['strides'][{i}] = {stride} bytes is not a multiple of the itemsize "
                f"{itemsize}; such layouts cannot be viewed in elements")
        rec.ext.strides[i] = stride // itemsize
    try:
        extents_validate(&rec.ext, itemsize, 0)
    except ValueError as exc:
        raise ValueError(f"{proto} describes a layout that cannot be addressed: {exc}") from None
    return 0


cdef tuple _byte_bounds(const Extents* e, int64_t itemsize):
    """(lowest, one past highest) byte reached relative to element 0, for volume > 0.

    In Python ints: producer strides may be huge and the check must not overflow.
    """
    low = 0
    high = 0
    for i in range(e.ndim):
        step = (<object> e.shape[i] - 1) * <object> e.strides[i]
        if step < 0:
            low += step
        else:
            high += step
    return low * itemsize, (high + 1) * itemsize


cdef bint _is_c_contiguous(const Extents* e) noexcept nogil:
    cdef int64_t expected = 1
    for i in range(e.ndim - 1, -1, -1):
        if e.shape[i] == 0:
            return True
        if e.shape[i] != 1 and e.strides[i] != expected:
            return False
        expected *= e.shape[i]
    return True


cdef bint _is_f_contiguous(const Extents* e) noexcept nogil:
    cdef int64_t expected = 1
    for i in range(e.ndim):
        if e.shape[i] == 0:
            return True
        if e.shape[i] != 1 and e.strides[i] != expected:
            return False
        expected *= e.shape[i]
    return True


cdef bint _host_accessible(int device_type) noexcept nogil:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLCUDAManaged or device_type == kDLROCMHost)


# --- buffer holder ------------------------------------------------------------------------------

cdef class _HeldBuffer:
    """One Py_buffer acquired from an exporter, released when this object is collected.

    It is the keep-alive of views made through the buffer protocol (and of array-interface views
    whose data is a buffer object): as long as it lives the exporter keeps its memory in place.
    """
    cdef Py_buffer view     # view.obj: strong reference to the exporter, owned by this object
    cdef bint acquired      # whether `view` must be released

    def __dealloc__(self):
        if self.acquired:
            self.acquired = False
            PyBuffer_Release(&self.view)

    def __repr__(self):
        return f"<held buffer of {_tname(<object> self.view.obj) if self.acquired else 'nothing'}>"


cdef _HeldBuffer _acquire(object obj, int flags, str what):
    cdef _HeldBuffer h = _HeldBuffer.__new__(_HeldBuffer)
    try:
        PyObject_GetBuffer(obj, &h.view, flags)
    except (TypeError, BufferError, ValueError):
        raise
    except Exception as exc:
        raise BufferError(
            f"{what}: {_tname(obj)} failed to export a buffer: {type(exc).__name__}: {exc}"
        ) from exc
    h.acquired = True
    return h


# --- CUDA Array Interface -----------------------------------------------------------------------

cdef void _cai_device(uintptr_t ptr, ViewRecord* rec) noexcept:
    # The interface names no device: ask the CUDA driver (device, managed or mapped pinned host
    # memory, and the ordinal).  Without a driver, or for a pointer it does not know (a null
    # pointer of a zero-size array), CUDA device 0 is the only sensible reading.
    rec.device_type = kDLCUDA
    rec.device_id = 0
    pointer_device(ptr, &rec.device_type, &rec.device_id)


cdef object read_cuda_array_interface(object obj, object stream, ViewRecord* rec):
    # `stream` (the consumer's) is validated by the caller; ordering against the producer stream
    # recorded here is the stream module's job.
    cdef str proto = "__cuda_array_interface__"
    cdef DLDataType dt
    cdef dict d = _get_interface(obj, proto)
    cdef int version = _check_version(d, proto, 0, 3)
    dtype_from_typestr(_required(d, "typestr", proto), &dt)
    _check_mask_descr(d, proto)
    data = _required(d, "data", proto)
    if not isinstance(data, tuple) or len(data) != 2:
        raise TypeError(f"{proto}['data'] must be a (ptr, readonly) tuple, got {data!r:.80}")
    ptr = _as_ptr(data[0], proto)
    ro = data[1]
    if not isinstance(ro, (bool, int)):
        raise TypeError(f"{proto}['data'][1] (readonly) must be a bool, got {_tname(ro)}")
    record_set_dtype(rec, dt, False)
    _fill_extents(rec, _required(d, "shape", proto), d.get("strides"), proto)
    if ptr == 0 and extents_volume(&rec.ext) != 0:
        raise ValueError(f"{proto}['data'][0] is a null pointer for a non-empty array")
    rec.has_producer_stream = False
    rec.producer_stream = 0
    if version >= 3:
        s = d.get("stream")
        if s is not None:
            s = _as_int(s, proto, "stream", -1)
            if s == 0:
                raise ValueError(
                    f"{proto}['stream'] is 0, which the CUDA Array Interface forbids (ambiguous "
                    "between the legacy and per-thread default streams); use 1, 2 or a handle")
            if (s < 0 or s >= _UINT64_LIMIT
                    or stream_handle_implausible(<unsigned long long> s)):
                raise ValueError(f"{proto}['stream'] {s} is not a valid stream handle: a "
                                 "handle is 1, 2 or the address of a stream")
            rec.has_producer_stream = True
            rec.producer_stream = <intptr_t> <uintptr_t> <unsigned long long> s
    rec.ptr = ptr
    rec.readonly = bool(ro)
    _cai_device(ptr, rec)
    return obj


# --- NumPy array interface ---------------------------------------------------------------------

cdef object read_array_interface(object obj, ViewRecord* rec):
    cdef str proto = "__array_interface__"
    cdef DLDataType dt
    cdef _HeldBuffer held = None
    cdef int64_t off = 0
    cdef dict d = _get_interface(obj, proto)
    _check_version(d, proto, 3, 3)
    dtype_from_typestr(_required(d, "typestr", proto), &dt)
    _check_mask_descr(d, proto)
    record_set_dtype(rec, dt, False)
    shape = _required(d, "shape", proto)
    data = d.get("data")
    if isinstance(data, tuple):
        if len(data) != 2:
            raise TypeError(f"{proto}['data'] must be a (ptr, readonly) tuple, got {data!r:.80}")
        ptr = _as_ptr(data[0], proto)
        ro = data[1]
        if not isinstance(ro, (bool, int)):
            raise TypeError(f"{proto}['data'][1] (readonly) must be a bool, got {_tname(ro)}")
        _fill_extents(rec, shape, d.get("strides"), proto)
        if ptr == 0 and extents_volume(&rec.ext) != 0:
            raise ValueError(f"{proto}['data'][0] is a null pointer for a non-empty array")
        # NumPy reads 'offset' only when data is a buffer, so it is ignored here, as there.
        rec.ptr = ptr
        rec.readonly = bool(ro)
    else:
        # A buffer object, or None: the object's own buffer.  'offset' counts from its start.
        source = obj if data is None else data
        if isinstance(source, (int, float, str)):
            raise TypeError(
                f"{proto}['data'] must be a (ptr, readonly) tuple or a buffer object, "
                f"got {_tname(source)}")
        try:
            held = _acquire(source, PyBUF_SIMPLE, proto)
        except TypeError as exc:
            # Python's "a bytes-like object is required" names neither the field nor the value.
            if data is None:
                raise TypeError(
                    f"{proto}['data'] is {'None' if 'data' in d else 'missing'}, so the "
                    f"{_tname(obj)} itself must export a buffer, and it does not") from exc
            raise TypeError(
                f"{proto}['data'] must be a (ptr, readonly) tuple or a buffer object, "
                f"got {_tname(data)} {data!r:.80}") from exc
        off_obj = d.get("offset")
        if off_obj is not None:
            off_obj = _as_int(off_obj, proto, "offset", -1)
            if off_obj < 0 or off_obj > held.view.len:
                raise ValueError(
                    f"{proto}['offset'] {off_obj} is outside the {held.view.len}-byte buffer")
            off = <int64_t> off_obj
        _fill_extents(rec, shape, d.get("strides"), proto)
        if extents_volume(&rec.ext) != 0:
            py_lo, py_hi = _byte_bounds(&rec.ext, rec.itemsize)
            if off + py_lo < 0 or off + py_hi > held.view.len:
                raise ValueError(
                    f"{proto} describes bytes [{off + py_lo}, {off + py_hi}) but its data "
                    f"buffer has {held.view.len} bytes")
        rec.ptr = <uintptr_t> held.view.buf + <uintptr_t> off
        rec.readonly = held.view.readonly
    rec.device_type = kDLCPU
    rec.device_id = 0
    rec.has_producer_stream = False
    return obj if held is None else held


# --- buffer protocol ----------------------------------------------------------------------------

# One-entry memo of the last (format, itemsize) seen: callers usually view the same type again,
# and this skips building a str and a tuple key for the dtype cache.  Guarded by the GIL.
cdef char _last_format[16]
cdef Py_ssize_t _last_itemsize = -1
cdef DLDataType _last_dtype


cdef int _buffer_dtype(Py_buffer* b, DLDataType* out) except -1:
    global _last_itemsize, _last_dtype
    cdef const char* fmt = b.format
    if fmt == NULL:
        fmt = "B"
    cdef size_t n = strlen(fmt)
    if b.itemsize == _last_itemsize and n < sizeof(_last_format) and strcmp(fmt, _last_format) == 0:
        out[0] = _last_dtype
        return 0
    dtype_from_buffer_format((<bytes> fmt).decode("ascii", "replace"), b.itemsize, out)
    if n < sizeof(_last_format):
        memcpy(_last_format, fmt, n + 1)
        _last_itemsize = b.itemsize
        _last_dtype = out[0]
    return 0


cdef object read_buffer_protocol(object obj, ViewRecord* rec):
    cdef DLDataType dt
    cdef Py_ssize_t i, ndim
    cdef int64_t stride, expected
    # One request: the exporter reports readonly truthfully even when writability is not asked.
    cdef _HeldBuffer held = _acquire(obj, PyBUF_RECORDS_RO, "buffer protocol")
    cdef Py_buffer* b = &held.view
    if b.suboffsets != NULL:
        for i in range(b.ndim):
            if b.suboffsets[i] >= 0:
                raise BufferError(
                    f"{_tname(obj)} exports an indirect buffer (suboffsets); not supported")
    if b.itemsize <= 0:
        raise BufferError(f"{_tname(obj)} exports a buffer with itemsize {b.itemsize}")
    _buffer_dtype(b, &dt)
    record_set_dtype(rec, dt, False)
    ndim = b.ndim
    if not 0 <= ndim <= 64:
        raise ValueError(f"{_tname(obj)} exports a buffer with ndim {ndim}; 0 to 64 are "
                         "supported")
    if b.shape == NULL and ndim > 1:
        raise ValueError(f"{_tname(obj)} exports a {ndim}-d buffer without a shape")
    if b.shape == NULL and ndim != 0:
        # Only a non-conforming exporter omits shape after a PyBUF_ND request: treat as 1-d.
        extents_resize(&rec.ext, 1)
        rec.ext.shape[0] = b.len // b.itemsize
        rec.ext.strides[0] = 1
    else:
        extents_resize(&rec.ext, <int> ndim)
        for i in range(ndim):
            if b.shape[i] < 0:
                raise BufferError(f"{_tname(obj)} exports a negative extent {b.shape[i]}")
            rec.ext.shape[i] = b.shape[i]
        if b.strides == NULL:
            expected = 1
            for i in range(ndim - 1, -1, -1):
                rec.ext.strides[i] = expected
                expected *= rec.ext.shape[i] if rec.ext.shape[i] > 0 else 1
        else:
            for i in range(ndim):
                stride = b.strides[i]
                if stride % b.itemsize != 0:
                    raise BufferError(
                        f"{_tname(obj)} exports stride {stride} bytes in dimension {i}, not a "
                        f"multiple of its itemsize {b.itemsize}")
                rec.ext.strides[i] = stride // b.itemsize
    try:
        extents_validate(&rec.ext, rec.itemsize, 0)
    except ValueError as exc:
        raise ValueError(
            f"{_tname(obj)} exports a buffer that cannot be described: {exc}") from None
    if b.buf == NULL and extents_volume(&rec.ext) != 0:
        raise ValueError(f"{_tname(obj)} exports a null pointer for a non-empty buffer")
    rec.ptr = <uintptr_t> b.buf
    rec.readonly = b.readonly
    rec.device_type = kDLCPU
    rec.device_id = 0
    rec.has_producer_stream = False
    return held


# --- exporters ----------------------------------------------------------------------------------

cdef tuple _shape_tuple(const Extents* e):
    return tuple([e.shape[i] for i in range(e.ndim)])


cdef object _byte_strides(ViewRecord* rec):
    if _is_c_contiguous(&rec.ext):
        return None
    return tuple([rec.ext.strides[i] * rec.itemsize for i in range(rec.ext.ndim)])


cdef dict export_cuda_array_interface(ViewRecord* rec):
    typestr = dtype_to_typestr(rec.dtype)
    stream = None
    if rec.has_producer_stream:
        # Handle 0 is the legacy default stream, which the interface spells 1 (it forbids 0).
        stream = rec.producer_stream if rec.producer_stream != 0 else 1
    return {
        "shape": _shape_tuple(&rec.ext),
        "strides": _byte_strides(rec),
        "typestr": typestr,
        "descr": [("", typestr)],
        "data": (rec.ptr, bool(rec.readonly)),
        "version": 3,
        "stream": stream,
    }


cdef dict export_array_interface(ViewRecord* rec):
    typestr = dtype_to_typestr(rec.dtype)
    return {
        "shape": _shape_tuple(&rec.ext),
        "strides": _byte_strides(rec),
        "typestr": typestr,
        "descr": [("", typestr)],
        "data": (rec.ptr, bool(rec.readonly)),
        "version": 3,
    }


# Format strings handed to consumers must outlive every Py_buffer that points at them, so each
# is kept here as bytes for the life of the process (a handful of entries).
cdef dict _FORMAT_BYTES = {}


cdef inline bint _requested(int flags, int which) noexcept nogil:
    return (flags & which) == which


cdef int export_buffer(ViewRecord* rec, Py_buffer* buf, int flags) except -1:
    cdef bytes fmt
    cdef Py_ssize_t* block = NULL
    cdef int ndim = rec.ext.ndim
    cdef bint c_contig = _is_c_contiguous(&rec.ext)
    if not _host_accessible(rec.device_type):
        raise BufferError(
            "the buffer protocol serves host memory only and this view is of device memory; "
            "use __dlpack__ or __cuda_array_interface__")
    if _requested(flags, PyBUF_WRITABLE) and rec.readonly:
        raise BufferError("this view is read-only; a writable buffer was requested")
    if _requested(flags, PyBUF_FORMAT):
        key = dtype_to_buffer_format(rec.dtype)
        fmt = _FORMAT_BYTES.get(key)
        if fmt is None:
            fmt = key.encode("ascii")
            _FORMAT_BYTES[key] = fmt
        buf.format = fmt
    else:
        buf.format = NULL
    if _requested(flags, PyBUF_C_CONTIGUOUS) and not c_contig:
        raise BufferError("a C-contiguous buffer was requested but this view is not C-contiguous")
    if _requested(flags, PyBUF_F_CONTIGUOUS) and not _is_f_contiguous(&rec.ext):
        raise BufferError(
            "a Fortran-contiguous buffer was requested but this view is not Fortran-contiguous")
    if (_requested(flags, PyBUF_ANY_CONTIGUOUS) and not c_contig
            and not _is_f_contiguous(&rec.ext)):
        raise BufferError("a contiguous buffer was requested but this view is not contiguous")
    if not _requested(flags, PyBUF_STRIDES) and not c_contig:
        raise BufferError(
            "the consumer cannot take strides but this view is not C-contiguous; "
            "request PyBUF_STRIDES (memoryview does) or copy first")
    buf.buf = <void*> rec.ptr
    buf.itemsize = rec.itemsize
    buf.len = extents_volume(&rec.ext) * rec.itemsize
    buf.readonly = rec.readonly
    buf.suboffsets = NULL
    buf.shape = NULL
    buf.strides = NULL
    buf.internal = NULL
    if not _requested(flags, PyBUF_ND):
        # A plain run of bytes (checked C-contiguous above).
        buf.ndim = 1
        return 0
    buf.ndim = ndim
    if ndim == 0:
        return 0
    # Allocated last, so no exception can leave it unfreed; release_buffer frees it.
    block = <Py_ssize_t*> malloc(2 * ndim * sizeof(Py_ssize_t))
    if block == NULL:
        raise MemoryError()
    for i in range(ndim):
        block[i] = rec.ext.shape[i]
        block[ndim + i] = rec.ext.strides[i] * rec.itemsize
    buf.shape = block
    if _requested(flags, PyBUF_STRIDES):
        buf.strides = block + ndim
    buf.internal = block
    return 0


cdef void release_buffer(Py_buffer* buf) noexcept:
    if buf.internal != NULL:
        free(buf.internal)
        buf.internal = NULL
