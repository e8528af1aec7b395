# launch_args(): what a kernel launcher needs from its N arguments, in one compiled call.
#
# Each tensor argument is read through the registry's exact-type table straight into a C record
# held by the LaunchArgs (no StridedMemoryView is made unless .views is read); scalars are stored
# in 8-byte slots of the same block; the key is packed from the records; every distinct producer
# stream is ordered before the consumer stream once.
#
# The two pointer arrays, for argument i:
#   values[i]    a tensor's data pointer | a scalar's value (as its C type) | 0 for None
#   pointers[i]  values[i] for a tensor  | &values[i]                       | NULL
#   params[i]    &values[i], always (cuLaunchKernel's kernelParams: a pointer to each value)

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
cimport cython
from cpython.buffer cimport PyBUF_WRITABLE, Py_buffer
from cpython.float cimport PyFloat_Check
from cpython.list cimport PyList_AsTuple
from cpython.long cimport PyLong_AsDouble, PyLong_AsUnsignedLongLong, PyLong_Check
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject, Py_TYPE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport (
    int8_t,
    int16_t,
    int32_t,
    int64_t,
    intptr_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
    uintptr_t,
)
from libc.string cimport memset

from ..core._dlpack_abi cimport kDLCPU
from ..core._key cimport (
    KEY_DYNAMIC,
    KEY_NONE,
    KEY_STATIC,
    LaunchKey,
    key_finish,
    key_new,
    key_none_word,
    key_pack_tensor,
    key_scalar_word,
    key_tensor_words,
)
from ..core._record cimport ViewRecord, extents_free, record_copy, record_init
from ..core._view cimport DeferredKeepalive, StridedMemoryView, used_keepalive, view_new
from ..cuda._cuda cimport order_streams, same_stream
from ..cuda._streams cimport canonical_stream
from ..registry._registry cimport read_unordered

__all__ = ["LaunchArgs", "launch_args", "SCALAR_TYPES"]

cdef extern from "Python.h":
    # Cannot fail for an exact int: overflow is reported through `overflow`.
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1
    double PyFloat_AsDouble(object value) except? -1.0
    int PY_LITTLE_ENDIAN

cdef extern from *:
    # PyFloat_Pack2/4 are public from Python 3.11; 3.10 has the same functions as
    # _PyFloat_Pack2/4 (unsigned char* buffer), so name those there.
    """
    #if PY_VERSION_HEX < 0x030B0000
    #define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
    #define PyFloat_Pack4(x, p, le) _PyFloat_Pack4((x), (unsigned char *)(p), (le))
    #endif
    """
    int PyFloat_Pack2(double x, char* p, int le) except -1
    int PyFloat_Pack4(double x, char* p, int le) except -1

#: The C types a scalar can be stored as (``scalar_types=`` names).
SCALAR_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64")
cdef dict _CTYPE_BY_NAME = {name: code for code, name in enumerate(SCALAR_TYPES, 1)}
cdef tuple _CTYPE_NAMES = (None,) + SCALAR_TYPES

# Integer ranges of the narrow integer types, by CT_* code.
cdef dict _INT_RANGES = {
    CT_INT8: (-2 ** 7, 2 ** 7 - 1), CT_INT16: (-2 ** 15, 2 ** 15 - 1),
    CT_INT32: (-2 ** 31, 2 ** 31 - 1), CT_INT64: (-2 ** 63, 2 ** 63 - 1),
    CT_UINT8: (0, 2 ** 8 - 1), CT_UINT16: (0, 2 ** 16 - 1), CT_UINT32: (0, 2 ** 32 - 1),
    CT_UINT64: (0, 2 ** 64 - 1), CT_BOOL: (0, 1),
}

# The last scalar_types sequence parsed, and its parse (bytes of CT_* codes, 0 = default): a
# launcher passes the same constant tuple on every call, so it is parsed once.  Module-owned.
cdef object _last_scalar_types = None
cdef bytes _last_parsed = None

# The type of the last argument read as a tensor (a strong reference, module-owned): launchers
# pass tensors of one type over and over, and for them this skips the float-subclass check, an
# MRO walk that cost as much per argument as the key packing.
cdef object _last_tensor_type = None

# One spare block of LaunchArgs arrays (module-owned; the GIL guards it): the largest freed
# since a LaunchArgs last took it.  A launcher calls with the same arguments again and again,
# and a block above pymalloc's small-object limit (three arguments and up) cost a system malloc
# and free per call, more per argument than packing its key.
cdef void* _spare_block = NULL
cdef size_t _spare_size = 0

# Batch numbers handed to readers, one per launch_args call (interop_core.h, `batch`); never 0.
cdef uint64_t _batches = 0


cdef str type_name(object obj):
    cls = type(obj)
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


cdef int key_policy(object key) except -1:
    if key is None:
        return KEY_NONE
    if key == "static":
        return KEY_STATIC
    if key == "dynamic":
        return KEY_DYNAMIC
    raise ValueError(f"key must be 'static', 'dynamic' or None, got {key!r}")


cdef bytes _parse_scalar_types(object scalar_types, Py_ssize_t n):
    global _last_scalar_types, _last_parsed
    if scalar_types is _last_scalar_types and len(_last_parsed) == n:
        return _last_parsed
    if isinstance(scalar_types, (str, bytes)) or not hasattr(scalar_types, "__len__"):
        raise TypeError("scalar_types must be a sequence with one entry per argument (None or "
                        f"a C type name), got {type(scalar_types).__name__}")
    if len(scalar_types) != n:
        raise ValueError(f"scalar_types has {len(scalar_types)} entries for {n} arguments")
    codes = bytearray(n)
    for i, name in enumerate(scalar_types):
        if name is None:
            continue
        code = _CTYPE_BY_NAME.get(name) if isinstance(name, str) else None
        if code is None:
            raise ValueError(f"scalar_types[{i}] must be None or one of {SCALAR_TYPES}, "
                             f"got {name!r}")
        codes[i] = code
    parsed = bytes(codes)
    if type(scalar_types) is tuple:     # immutable: safe to recognise by identity next time
        _last_scalar_types = scalar_types
        _last_parsed = parsed
    return parsed


cdef int _store_scalar(LaunchArgs r, Py_ssize_t i, object obj, int want) except -1:
    """Store a Python bool / int / float in slot i, as its default C type or as `want`."""
    cdef uint64_t* slot = &r.values[i]
    cdef char* p = <char*> slot
    cdef int overflow = 0
    cdef long long as_int
    cdef double as_double
    cdef bint is_float = PyFloat_Check(obj)
    slot[0] = 0
    if want == 0:
        if obj is True or obj is False:
            (<uint8_t*> p)[0] = obj is True
            r.ctypes[i] = CT_BOOL
        elif is_float:
            (<double*> p)[0] = PyFloat_AsDouble(obj)
            r.ctypes[i] = CT_FLOAT64
        else:
            as_int = PyLong_AsLongLongAndOverflow(obj, &overflow)
            if overflow == 0:
                (<int64_t*> p)[0] = as_int
                r.ctypes[i] = CT_INT64
            elif overflow > 0 and obj < 2 ** 64:
                (<uint64_t*> p)[0] = PyLong_AsUnsignedLongLong(obj)
                r.ctypes[i] = CT_UINT64
            else:
                raise ValueError(f"{r._label(i)} (int) is {obj}, outside the range "
                                 "of int64 and uint64")
        return 0
    r.ctypes[i] = want
    if want == CT_FLOAT16 or want == CT_FLOAT32 or want == CT_FLOAT64:
        try:
            as_double = PyFloat_AsDouble(obj) if is_float else PyLong_AsDouble(obj)
            if want == CT_FLOAT64:
                (<double*> p)[0] = as_double
            elif want == CT_FLOAT32:
                PyFloat_Pack4(as_double, p, PY_LITTLE_ENDIAN)
            else:
                PyFloat_Pack2(as_double, p, PY_LITTLE_ENDIAN)
        except OverflowError:
            raise ValueError(f"{r._label(i)} ({type_name(obj)}) is {obj}, too "
                             f"large for {_CTYPE_NAMES[want]}") from None
        return 0
    if is_float:
        raise TypeError(f"{r._label(i)} is a float but scalar_types[{i}] asks for "
                        f"{_CTYPE_NAMES[want]} (convert it to an int first)")
    lo, hi = _INT_RANGES[want]
    if not lo <= obj <= hi:
        raise ValueError(f"{r._label(i)} ({type_name(obj)}) is {obj}, outside the "
                         f"range of {_CTYPE_NAMES[want]}")
    if want == CT_UINT64:
        (<uint64_t*> p)[0] = PyLong_AsUnsignedLongLong(obj)
        return 0
    as_int = PyLong_AsLongLongAndOverflow(obj, &overflow)
    if want == CT_BOOL or want == CT_UINT8:
        (<uint8_t*> p)[0] = <uint8_t> as_int
    elif want == CT_INT8:
        (<int8_t*> p)[0] = <int8_t> as_int
    elif want == CT_INT16:
        (<int16_t*> p)[0] = <int16_t> as_int
    elif want == CT_UINT16:
        (<uint16_t*> p)[0] = <uint16_t> as_int
    elif want == CT_INT32:
        (<int32_t*> p)[0] = <int32_t> as_int
    elif want == CT_UINT32:
        (<uint32_t*> p)[0] = <uint32_t> as_int
    else:
        (<int64_t*> p)[0] = <int64_t> as_int
    return 0


cdef str device_label(const ViewRecord* rec):
    names = {1: "cpu", 2: "cuda", 3: "cuda_host", 13: "cuda_managed", 10: "rocm"}
    return f"{names.get(rec.device_type, rec.device_type)}:{rec.device_id}"


cdef int _order_producers(LaunchArgs r, intptr_t consumer) except -1:
    # One event record + stream wait per distinct (producer stream, device), not per argument.
    cdef Py_ssize_t i, j
    cdef ViewRecord* a
    cdef ViewRecord* b
    cdef bint seen
    for i in range(r.n):
        a = &r.recs[i]
        if (r.kinds[i] != ARG_TENSOR or a.device_type == kDLCPU or not a.has_producer_stream
                or same_stream(a.producer_stream, consumer)):
            continue
        seen = False
        for j in range(i):
            b = &r.recs[j]
            if (r.kinds[j] == ARG_TENSOR and b.device_type != kDLCPU and b.has_producer_stream
                    and b.producer_stream == a.producer_stream and b.device_id == a.device_id):
                seen = True
                break
        if not seen:
            order_streams(a.producer_stream, consumer, a.device_id)
    return 0


cdef int _check_writable(LaunchArgs r, object writable) except -1:
    cdef Py_ssize_t i
    if writable is True:
        for i in range(r.n):
            if r.kinds[i] == ARG_TENSOR and r.recs[i].readonly:
                _raise_readonly(r, i)
        return 0
    if isinstance(writable, (list, tuple, set, frozenset, range)):
        for position in writable:
            if not isinstance(position, int) or isinstance(position, bool):
                raise TypeError(f"writable must be a bool or a collection of argument "
                                f"positions, got an entry {position!r}")
            if not 0 <= position < r.n:
                raise ValueError(f"writable names argument {position}, but there are "
                                 f"{r.n} arguments")
            i = position
            if r.kinds[i] != ARG_TENSOR:
                raise TypeError(f"{r._label(i)} ({type_name(r.args[i])}) must be "
                                "a writable tensor, but it is not a tensor")
            if r.recs[i].readonly:
                _raise_readonly(r, i)
        return 0
    raise TypeError(f"writable must be a bool or a collection of argument positions, got "
                    f"{type(writable).__name__}")


cdef int _raise_readonly(LaunchArgs r, Py_ssize_t i) except -1:
    raise BufferError(f"{r._label(i)} ({type_name(r.args[i])}) is read-only, but "
                      "writable arguments were asked for")


cdef LaunchArgs build_launch_args(object args, object stream, int policy, object writable,
                                  bint same_device, object scalar_types, str caller=None,
                                  tuple names=None, bint in_call=False):
    cdef tuple seq
    cdef Py_ssize_t n, i, nwords = 1, first_tensor = -1, at
    cdef LaunchArgs r
    cdef intptr_t consumer = 0
    cdef PyObject* item
    cdef ViewRecord* rec
    cdef const unsigned char* narrow = NULL
    cdef bint reading = False
    cdef LaunchKey k
    cdef bint scalar
    cdef PyObject* t
    global _last_tensor_type, _batches
    # A new batch number per call: readers may reuse per-moment lookups (a device's current
    # stream) across this call's arguments, never across calls.
    _batches += 1
    cdef uint64_t batch = _batches
    if type(args) is tuple:
        seq = <tuple> args
    elif type(args) is list:
        seq = PyList_AsTuple(args)
    else:
        try:
            seq = tuple(args)
        except TypeError:
            raise TypeError(f"launch_args: args must be a sequence of arguments, got "
                            f"{type(args).__name__}") from None
    n = PyTuple_GET_SIZE(seq)
    r = LaunchArgs.__new__(LaunchArgs)
    r._allocate(n)
    r.args = seq
    r._caller = caller
    r._names = names
    canonical = None
    if stream is not None:
        canonical = canonical_stream(stream, &consumer)
    r.stream = canonical
    if scalar_types is not None:
        parsed = _parse_scalar_types(scalar_types, n)
        narrow = <const unsigned char*> (<bytes> parsed)
    i = 0
    try:
        while i < n:
            item = PyTuple_GET_ITEM(seq, i)
            obj = <object> item
            t = <PyObject*> Py_TYPE(obj)
            if t == <PyObject*> _last_tensor_type:
                scalar = False
            else:
                scalar = (t == <PyObject*> float or t == <PyObject*> int or t == <PyObject*> bool
                          or PyLong_Check(obj) or PyFloat_Check(obj))
            if scalar:
                r.kinds[i] = ARG_SCALAR
                _store_scalar(r, i, obj, narrow[i] if narrow != NULL else 0)
                r.pointers[i] = &r.values[i]
                nwords += 1
            elif item == <PyObject*> None:
                if narrow != NULL and narrow[i] != 0:
                    raise ValueError(f"{r._label(i)} is None, but scalar_types[{i}] is "
                                     f"{_CTYPE_NAMES[narrow[i]]!r}: pass a value of that type")
                r.kinds[i] = ARG_NONE
                r.values[i] = 0
                r.pointers[i] = NULL
                nwords += 1
            else:
                if narrow != NULL and narrow[i] != 0:
                    raise ValueError(f"{r._label(i)} ({type_name(obj)}) is not a scalar, "
                                     f"but scalar_types[{i}] is {_CTYPE_NAMES[narrow[i]]!r}")
                rec = &r.recs[i]
                reading = True
                keepalive = read_unordered(obj, canonical, rec, batch, in_call)
                reading = False
                r.kinds[i] = ARG_TENSOR
                if t != <PyObject*> _last_tensor_type:
                    _last_tensor_type = <object> t
                if keepalive is not obj:
                    r._keep(i, keepalive)
                r.values[i] = rec.ptr
                r.pointers[i] = <void*> rec.ptr
                if same_device:
                    if first_tensor < 0:
                        first_tensor = i
                    elif (rec.device_type != r.recs[first_tensor].device_type
                          or rec.device_id != r.recs[first_tensor].device_id):
                        raise ValueError(
                            f"{r._label(i)} ({type_name(obj)}) is on "
                            f"{device_label(rec)} but {r._label(first_tensor, False)} "
                            f"({type_name(r.args[first_tensor])}) is on "
                            f"{device_label(&r.recs[first_tensor])}; one device was asked for")
                if policy != KEY_NONE:
                    nwords += key_tensor_words(rec, policy)
            i += 1
    except (TypeError, ValueError, BufferError) as exc:
        if not reading:
            raise
        if isinstance(exc, TypeError):
            # Nothing reads this type: say what else an argument may be.
            raise TypeError(f"{r._label(i)} ({type_name(obj)}) is not a scalar (int, float, "
                            f"bool, None) and cannot be viewed: {exc}") from exc
        cls = ValueError if isinstance(exc, ValueError) else BufferError
        raise cls(f"{r._label(i)} ({type_name(obj)}) cannot be viewed: {exc}") from exc
    if writable is not False and writable is not None:
        _check_writable(r, writable)
    if canonical is not None:
        _order_producers(r, consumer)
    if policy != KEY_NONE:
        k = key_new(nwords, policy, n)
        at = 1
        for i in range(n):
            if r.kinds[i] == ARG_TENSOR:
                at += key_pack_tensor(k._words + at, &r.recs[i], policy)
            elif r.kinds[i] == ARG_SCALAR:
                k._words[at] = key_scalar_word(r.ctypes[i])
                at += 1
            else:
                k._words[at] = key_none_word()
                at += 1
        key_finish(k)
        r.key = k
    return r


cdef class _SlotArray:
    """A read-only buffer over one of a LaunchArgs's pointer arrays (internal)."""

    cdef LaunchArgs owner          # keeps the arrays alive while the buffer is exported
    cdef void** slots
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __getbuffer__(self, Py_buffer* buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("the pointer arrays of a LaunchArgs are read-only")
        self.shape[0] = self.owner.n
        self.strides[0] = sizeof(void*)
        buf.buf = <void*> self.slots
        buf.obj = self
        buf.len = self.owner.n * sizeof(void*)
        buf.readonly = 1
        buf.itemsize = sizeof(void*)
        buf.format = b"P"
        buf.ndim = 1
        buf.shape = self.shape
        buf.strides = self.strides
        buf.suboffsets = NULL
        buf.internal = NULL

    def __releasebuffer__(self, Py_buffer* buf):
        pass


cdef void* _EMPTY_SLOTS[1]


# Kept on a free list: a launcher makes one per call and drops it at once.
@cython.freelist(8)
cdef class LaunchArgs:
    """What a kernel launcher needs from its arguments: key, pointer arrays, stream, views.

    Made by :func:`launch_args`.  Keeps every argument (and whatever keeps its memory alive)
    alive as long as it lives, so the pointers it holds stay valid.
    """

    def __cinit__(self):
        self.n = 0
        self.block = NULL
        self.block_size = 0

    def __dealloc__(self):
        global _spare_block, _spare_size
        cdef Py_ssize_t i
        if self.block == NULL:
            return
        for i in range(self.n):
            extents_free(&self.recs[i].ext)
        if self.block_size > _spare_size:
            PyMem_Free(_spare_block)
            _spare_block = self.block
            _spare_size = self.block_size
        else:
            PyMem_Free(self.block)
        self.block = NULL

    def __init__(self):
        raise TypeError("use interop_core.launch_args(args, stream=None, key=...)")

    cdef int _allocate(self, Py_ssize_t n) except -1:
        global _spare_block, _spare_size
        cdef Py_ssize_t i
        cdef char* p
        # Records first (8-byte aligned), then the three 8-byte arrays, then the byte arrays.
        cdef size_t size = n * (sizeof(ViewRecord) + sizeof(uint64_t) + 2 * sizeof(void*) + 2)
        # Not for an empty record: with no spare block it would take the NULL "spare", and the
        # offsets and memset below on NULL are undefined behaviour (UBSan), even for 0 bytes.
        if size != 0 and size <= _spare_size:
            self.block = _spare_block
            self.block_size = _spare_size
            _spare_block = NULL
            _spare_size = 0
        else:
            self.block = PyMem_Malloc(size if size else 1)
            if self.block == NULL:
                raise MemoryError()
            self.block_size = size
        p = <char*> self.block
        self.recs = <ViewRecord*> p
        p += n * sizeof(ViewRecord)
        self.values = <uint64_t*> p
        p += n * sizeof(uint64_t)
        self.pointers = <void**> p
        p += n * sizeof(void*)
        self.params = <void**> p
        p += n * sizeof(void*)
        self.kinds = <uint8_t*> p
        p += n
        self.ctypes = <uint8_t*> p
        memset(self.kinds, 0, 2 * n)
        # values[i] and pointers[i] are written for every argument as it is read.
        for i in range(n):
            record_init(&self.recs[i])
            self.params[i] = &self.values[i]
        self.n = n
        return 0

    cdef int _keep(self, Py_ssize_t i, object keepalive) except -1:
        cdef Py_ssize_t j
        if self._keepalives is None:
            self._keepalives = PyTuple_New(self.n)
            for j in range(self.n):
                Py_INCREF(None)
                PyTuple_SET_ITEM(self._keepalives, j, None)
        # The slot holds None (a tuple fresh from above, not yet shared): replace it.
        old = <object> PyTuple_GET_ITEM(self._keepalives, i)
        Py_INCREF(keepalive)
        PyTuple_SET_ITEM(self._keepalives, i, keepalive)
        Py_DECREF_ref(old)
        return 0

    cdef int _take_deferred(self) except -1:
        # Every deferred keep-alive of the record taken (validated: BufferError when the memory
        # went since the read), each replaced by what it took.
        cdef Py_ssize_t i
        if self._keepalives is None:
            return 0
        for i in range(self.n):
            keepalive = <object> PyTuple_GET_ITEM(self._keepalives, i)
            if type(keepalive) is DeferredKeepalive:
                held = used_keepalive(keepalive)
                Py_INCREF(held)
                PyTuple_SET_ITEM(self._keepalives, i, held)
                Py_DECREF_ref(keepalive)
        return 0

    cdef str _label(self, Py_ssize_t i, bint prefix=True):
        what = (f"argument {i}" if self._names is None
                else f"argument {self._names[i]!r}")
        if not prefix:
            return what
        return f"{self._caller or 'launch_args'}: {what}"

    def __len__(self):
        return self.n

    @property
    def address(self):
        """int: Address of :attr:`pointers` (``void**``): hand it to a C function via ctypes."""
        return <uintptr_t> (self.pointers if self.n else _EMPTY_SLOTS)

    @property
    def kernel_params_address(self):
        """int: Address of :attr:`kernel_params`: ``cuLaunchKernel``'s ``kernelParams``."""
        return <uintptr_t> (self.params if self.n else _EMPTY_SLOTS)

    @property
    def pointers(self):
        """memoryview: One ``void*`` per argument (format ``"P"``, read-only, no copy).

        A tensor's data pointer; for a scalar, the address of its value (stored in this
        record as the C type :meth:`scalar_type` names); ``NULL`` for ``None``.  The form a
        C function taking ``void** args`` wants.
        """
        return self._slot_view(self.pointers)

    @property
    def kernel_params(self):
        """memoryview: ``cuLaunchKernel``'s ``kernelParams`` (format ``"P"``, read-only).

        One pointer per argument to that argument's value: for a tensor, to a slot holding its
        data pointer; for a scalar, to its value; for ``None``, to a slot holding ``NULL``.
        """
        return self._slot_view(self.params)

    cdef object _slot_view(self, void** slots):
        cdef _SlotArray array = _SlotArray.__new__(_SlotArray)
        array.owner = self
        array.slots = slots if self.n else _EMPTY_SLOTS
        return memoryview(array)

    def scalar_type(self, Py_ssize_t position):
        """The C type argument ``position`` is stored as, or ``None`` for a tensor or ``None``.

        Python ``bool`` is stored as a one-byte ``bool``, ``int`` as ``int64`` (``uint64`` above
        ``2**63 - 1``), ``float`` as ``float64`` (C ``double``), unless ``scalar_types``
        asked for another type.  Each value sits at the start of an 8-byte slot whose other
        bytes are zero.

        Returns
        -------
        str or None
            A name from :data:`interop_core.launch.SCALAR_TYPES`.
        """
        if not 0 <= position < self.n:
            raise IndexError(f"argument {position} out of range for {self.n} arguments")
        return _CTYPE_NAMES[self.ctypes[position]] if self.kinds[position] == ARG_SCALAR else None

    @property
    def views(self):
        """tuple: One :class:`StridedMemoryView` per tensor argument, the scalars and ``None``
        as given; built on first read (a launcher that only needs the key and pointers never
        pays for them)."""
        cdef Py_ssize_t i
        cdef StridedMemoryView v
        if self._views is not None:
            return self._views
        views = PyTuple_New(self.n)
        for i in range(self.n):
            arg = <object> PyTuple_GET_ITEM(self.args, i)
            if self.kinds[i] == ARG_TENSOR:
                keepalive = (arg if self._keepalives is None
                             else <object> PyTuple_GET_ITEM(self._keepalives, i))
                if type(keepalive) is StridedMemoryView:
                    item = keepalive        # the reader made this view: hand it on as it is
                elif type(arg) is StridedMemoryView:
                    item = arg
                else:
                    v = view_new()
                    record_copy(&v.rec, &self.recs[i])
                    v._keepalive = arg if keepalive is None else keepalive
                    v.owner = arg
                    item = v
            else:
                item = arg
            Py_INCREF(item)
            PyTuple_SET_ITEM(views, i, item)
        self._views = views
        return views

    def __repr__(self):
        stream = "None" if self.stream is None else f"{self.stream:#x}"
        return (f"<LaunchArgs {self.n} args, key={self.key!r}, stream={stream}, "
                f"pointers at {self.address:#x}>")


cdef extern from *:
    """
    static inline void Py_DECREF_ref(PyObject *o) { Py_DECREF(o); }
    """
    void Py_DECREF_ref(object o)


def launch_args(args, stream=None, *, key="static", writable=False, same_device=False,
                scalar_types=None):
    """Everything a kernel launch needs from its arguments, in one compiled call.

    Reads every tensor argument (any type a plugin registers, anything with DLPack / the CUDA
    Array Interface / the array interface / the buffer protocol, views) through the same
    exact-type table as :func:`view`, without making a view of it; stores Python scalars in C
    slots; packs the specialization key; orders every producer stream before ``stream``.

    Parameters
    ----------
    args : sequence
        The kernel's arguments in order: tensors, :class:`StridedMemoryView` objects, Python
        ``int`` / ``float`` / ``bool`` scalars, and ``None`` (a NULL pointer).
    stream : None, int or stream object, optional
        The consumer stream (see the stream contract).  Every producer stream of a tensor
        argument is ordered before it, one event per distinct producer stream.  ``None``:
        no synchronisation.
    key : {"static", "dynamic", None}
        What the key specialises on.  ``"static"``: per tensor its DLPack dtype, shape,
        strides, device and read-only flag; per scalar its C type.  ``"dynamic"``: per tensor
        its dtype, ndim and device, each extent bucketed as 0, 1 or more, the order of its
        strides, C/F contiguity, whether the data pointer is 16-byte aligned and whether every
        byte offset fits in int32; per scalar its C type.  ``None``: no key.
    writable : bool or collection of int
        ``True``: every tensor argument must be writable; a collection: the tensor arguments at
        those positions must be.
    same_device : bool
        Every tensor argument must be on the same device.
    scalar_types : sequence, optional
        One entry per argument: ``None`` (the default storage) or the C type a scalar argument
        is stored as, a name from :data:`SCALAR_TYPES` (e.g. ``"float32"`` for a kernel taking
        ``float``).  Pass the same tuple on every call: it is parsed once.

    Returns
    -------
    LaunchArgs
        ``.key``, ``.pointers`` / ``.address`` (data pointers), ``.kernel_params`` /
        ``.kernel_params_address`` (``cuLaunchKernel``'s form), ``.stream`` and ``.views``.

    Raises
    ------
    TypeError, ValueError, BufferError
        For an argument nothing can view, a scalar its C type cannot hold, a read-only tensor
        where writable ones were asked for, tensors on different devices where one was asked
        for, or malformed options; the message names the argument's position and type.
    """
    return build_launch_args(args, stream, key_policy(key), writable, same_device, scalar_types)
