# The per-object hot path of interop_core.view(): the exact type of the object is looked up in
# a small open-addressing hash table in C, and the reader found there runs.  Plugins, pluggy and
# entry points are never touched per object: interop_core.plugins computes which reader wins for
# each type (when plugins register or unregister) and installs the result with set_entries().
#
# Concurrency: the table is only read and written while holding the GIL, and a lookup never
# releases it, so a reader sees either the old table or the new one.  An entry in use is held by
# a strong reference for the duration of its call, so a concurrent unregister cannot free it.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.object cimport Py_TYPE, PyObject
from cpython.ref cimport Py_REFCNT
from cpython.pycapsule cimport (
    PyCapsule_CheckExact,
    PyCapsule_GetName,
    PyCapsule_GetPointer,
    PyCapsule_New,
)
from cpython.exc cimport PyErr_Occurred
from cpython.pystate cimport PyThreadState, PyThreadState_Get
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport (
    int32_t,
    int64_t,
    intptr_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
    uintptr_t,
)
from libc.stdlib cimport calloc, free
from libc.string cimport strcmp
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from ..protocols._dlpack cimport (
    has_exchange_api,
    legacy_capsule_for_immutable_consumer,
    read_dlpack,
    read_dlpack_exchange_api,
    unconsumed_tensor,
)
from ..core._dlpack_abi cimport DLDataType, DLTensor
from ..core._dtypes cimport dtype_of_cached, record_set_dtype
from ..core._layout cimport extents_validate
from ..protocols._interfaces cimport read_array_interface, read_buffer_protocol, read_cuda_array_interface
from ..cuda._cuda cimport pointer_device, same_stream
from ..core._record cimport (
    INLINE_NDIM,
    MAX_CACHED_TYPES,
    MAX_NDIM,
    ViewRecord,
    extents_resize,
    record_copy,
    record_difference,
)
from ..cuda._streams cimport canonical_stream
from ..core._view cimport (
    PROTOCOL_ARRAY_INTERFACE,
    PROTOCOL_BUFFER,
    PROTOCOL_CAI,
    PROTOCOL_DLPACK,
    PROTOCOL_NONE,
    PROTOCOL_SELF,
    StridedMemoryView,
    acquire_keepalive_t,
    choose_protocol,
    hold_memory,
    install_fast_from,
    new_deferred_keepalive,
    used_keepalive,
    protocol_for_any,
    knows_producer_stream,
    order_view,
    raise_pending,
    view_by_protocol,
    view_new,
)
from ..core._view import _set_producer_stream_lookup, _set_readonly_type_lookup

__all__ = ["view", "ReaderEntry", "new_entry", "CExporter", "new_exporter", "set_entries",
           "entry_for", "core_reader_names", "set_miss_handler", "read_with", "compare_readers",
           "time_dispatch", "C_API"]


from ..abi cimport (
    INTEROP_CORE_ABI_VERSION,
    INTEROP_CORE_API_CAPSULE,
    INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE,
    INTEROP_CORE_EXPORTER_CAPSULE,
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READ_OK,
    INTEROP_CORE_READER_CAPSULE,
    INTEROP_CORE_READER_V2_CAPSULE,
    INTEROP_CORE_USES_MEMORY_AT_ONCE,
    INTEROP_CORE_USES_MEMORY_IN_CALL,
    INTEROP_CORE_USES_MEMORY_LATER,
    interop_core_api,
    interop_core_equivalence_check_v1,
    interop_core_exporter_v1,
    interop_core_reader_v1,
    interop_core_tensor_info,
)


# --- the table of helpers compiled readers get (interop_core_api, through a capsule) --------------

cdef int _api_dtype_of(PyObject* dtype, uint8_t* code, uint8_t* bits, uint16_t* lanes) except -1:
    # C callers see 0, or -1 with the exception left set (the ABI's convention).
    cdef DLDataType dt
    dtype_of_cached(<object> dtype, &dt)
    code[0] = dt.code
    bits[0] = dt.bits
    lanes[0] = dt.lanes
    return 0


ctypedef int (*dtype_of_t)(PyObject*, uint8_t*, uint8_t*, uint16_t*) noexcept
ctypedef int (*describe_dlpack_t)(PyObject*, interop_core_tensor_info*) noexcept
ctypedef PyObject* (*legacy_capsule_t)(PyObject*) noexcept
ctypedef PyObject* (*view_from_info_t)(PyObject*, interop_core_tensor_info*) noexcept


cdef int _api_describe_dlpack(PyObject* capsule, interop_core_tensor_info* out) except -1:
    # The protocol layer knows DLPack's structs: plugins never declare them again.
    cdef bint readonly = False
    cdef DLTensor* t = unconsumed_tensor(<object> capsule, &readonly)
    out.data = <void*> (<char*> t.data + t.byte_offset)
    out.ndim = t.ndim
    out.shape = t.shape
    out.strides = t.strides
    out.strides_in_bytes = 0
    out.dtype_code = t.dtype.code
    out.dtype_bits = t.dtype.bits
    out.dtype_lanes = t.dtype.lanes
    out.device_type = t.device.device_type
    out.device_id = t.device.device_id
    out.readonly = readonly
    return 0


cdef PyObject* _api_legacy_capsule(PyObject* view) except NULL:
    cdef StridedMemoryView v = <StridedMemoryView?> <object> view
    hold_memory(v)
    capsule = legacy_capsule_for_immutable_consumer(v, &v.rec)
    Py_INCREF(capsule)
    return <PyObject*> capsule

cdef PyObject* _api_view_from_info(PyObject* obj, interop_core_tensor_info* info) except NULL:
    # What view() makes of a reader's fill, for a plugin that fills `info` itself (a sharded
    # array's pieces, read in one loop of the plugin's own).  The keep-alive is taken over
    # first, so that every error path releases it.
    keepalive = <object> obj
    if info.keepalive != NULL:
        keepalive = <object> info.keepalive
        Py_DECREF_steal(info.keepalive)
        info.keepalive = NULL
    cdef StridedMemoryView v = view_new()
    _fill_record(&v.rec, <object> obj, info, True, None)
    v._keepalive = keepalive
    v.owner = <object> obj
    Py_INCREF(v)
    return <PyObject*> v


ctypedef int (*describe_view_t)(PyObject*, interop_core_tensor_info*) noexcept
ctypedef PyObject* (*deferred_keepalive_t)(acquire_keepalive_t, PyObject*) noexcept


cdef int _api_describe_view(PyObject* view, interop_core_tensor_info* out) except -1:
    # A compiled exporter's read of a view: the record's fields, extents pointing into it (the
    # caller holds the view while it uses them).  Anything but a view is refused before a
    # field is read.
    if not isinstance(<object> view, StridedMemoryView):
        raise TypeError(f"describe_view needs a StridedMemoryView, got "
                        f"{type(<object> view).__name__}")
    hold_memory(<StridedMemoryView> <object> view)   # a compiled exporter uses the memory
    _describe_record(&(<StridedMemoryView> <object> view).rec, out)
    return 0


cdef inline void _describe_record(const ViewRecord* rec, interop_core_tensor_info* out) noexcept:
    out.data = <void*> rec.ptr
    out.ndim = rec.ext.ndim
    out.shape = rec.ext.shape
    out.strides = rec.ext.strides
    out.strides_in_bytes = 0
    out.dtype_code = rec.dtype.code
    out.dtype_bits = rec.dtype.bits
    out.dtype_lanes = rec.dtype.lanes
    out.device_type = rec.device_type
    out.device_id = rec.device_id
    out.readonly = rec.readonly
    out.has_producer_stream = rec.has_producer_stream
    out.producer_stream = rec.producer_stream
    out.keepalive = NULL


cdef interop_core_api _API
_API.abi_version = INTEROP_CORE_ABI_VERSION
_API.size = sizeof(interop_core_api)
_API.dtype_of = <dtype_of_t> _api_dtype_of
_API.pointer_device = pointer_device
_API.describe_dlpack = <describe_dlpack_t> _api_describe_dlpack
_API.legacy_capsule_for_immutable_consumer = <legacy_capsule_t> _api_legacy_capsule
_API.view_from_info = <view_from_info_t> _api_view_from_info
_API.describe_view = <describe_view_t> _api_describe_view
_API.deferred_keepalive = <deferred_keepalive_t> new_deferred_keepalive

# interop_core re-exports this as `interop_core._C_API`, the name the header imports.
C_API = PyCapsule_New(&_API, INTEROP_CORE_API_CAPSULE, NULL)


# --- compiled exporters (interop_core.h: INTEROP_CORE_EXPORTER_CAPSULE) ------------------------

cdef class CExporter:
    """An exporter compiled against ``interop_core.h``, callable as every exporter is.

    Made by :func:`new_exporter` from a capsule named ``"interop_core.exporter_v1"``.
    ``exporter(view, stream)`` hands the C function the view (which then keeps the memory
    alive); ``interop_core.to()`` hands it a compiled reader's description of the source
    directly, without making a view object.
    """

    def __init__(self):
        raise TypeError("use interop_core.registry._registry.new_exporter(capsule)")

    def __call__(self, view, stream=None):
        cdef interop_core_tensor_info info
        _api_describe_view(<PyObject*> view, &info)
        return _call_exporter(self, &info, view, stream)

    def __repr__(self):
        return f"CExporter({self.capsule!r})"


def new_exporter(exporter):
    """What a plugin registered as an exporter, made callable: a callable as it is, a capsule
    wrapped in a :class:`CExporter`.

    Parameters
    ----------
    exporter : callable or PyCapsule
        ``exporter(view, stream) -> object``, or a capsule named ``"interop_core.exporter_v1"``
        holding a C ``interop_core_exporter_v1`` (``include/interop_core.h``).

    Returns
    -------
    callable

    Raises
    ------
    ValueError
        For a capsule of another name, or one holding NULL.
    TypeError
        For anything that is neither callable nor a capsule.
    """
    cdef CExporter e
    cdef const char* name
    if PyCapsule_CheckExact(exporter):
        name = PyCapsule_GetName(exporter)
        if name == NULL or strcmp(name, INTEROP_CORE_EXPORTER_CAPSULE) != 0:
            shown = None if name == NULL else (<bytes> name).decode("utf-8", "replace")
            raise ValueError(f"an exporter capsule must be named "
                             f"{INTEROP_CORE_EXPORTER_CAPSULE.decode()!r}, got {shown!r}")
        e = CExporter.__new__(CExporter)
        e.fn = <interop_core_exporter_v1> PyCapsule_GetPointer(exporter, name)
        if e.fn == NULL:
            raise ValueError("the exporter capsule holds a NULL function pointer")
        e.capsule = exporter
        return e
    if not callable(exporter):
        raise TypeError(f"exporter must be callable or a PyCapsule, got "
                        f"{type(exporter).__name__}")
    return exporter


cdef object _call_exporter(CExporter exporter, const interop_core_tensor_info* info,
                           object owner, object stream):
    cdef PyObject* made = exporter.fn(info, <PyObject*> owner, <PyObject*> stream)
    if made == NULL:
        _propagate_exporter_error(exporter)
    if made == <PyObject*> None:
        Py_DECREF_steal(made)
        raise TypeError(f"the C exporter {exporter.capsule!r} returned None instead of the "
                        "target's object (a plugin bug: it must return the object, or NULL "
                        "with an exception set)")
    result = <object> made
    Py_DECREF_steal(made)       # <object> took a reference of its own
    return result


cdef int _propagate_exporter_error(CExporter exporter) except -1:
    # Returning -1 from an `except -1` function hands on the exception the C exporter set.
    if PyErr_Occurred() == NULL:
        raise BufferError(f"the C exporter {exporter.capsule!r} returned NULL without setting "
                          "an exception")
    return -1


cdef object export_record(CExporter exporter, const ViewRecord* rec, object owner,
                          object stream):
    cdef interop_core_tensor_info info
    _describe_record(rec, &info)
    return _call_exporter(exporter, &info, owner, stream)


# --- the core's compiled readers, by name ------------------------------------------------------

cdef object _core_dlpack(object obj, object stream, ViewRecord* rec):
    if has_exchange_api(type(obj)):
        return read_dlpack_exchange_api(obj, stream, rec)
    return read_dlpack(obj, stream, rec)


cdef object _core_exchange_api(object obj, object stream, ViewRecord* rec):
    return read_dlpack_exchange_api(obj, stream, rec)


cdef object _core_dunder_dlpack(object obj, object stream, ViewRecord* rec):
    return read_dlpack(obj, stream, rec)


cdef object _core_cai(object obj, object stream, ViewRecord* rec):
    return read_cuda_array_interface(obj, stream, rec)


# Host memory: the (already resolved) stream needs no ordering.
cdef object _core_array_interface(object obj, object stream, ViewRecord* rec):
    return read_array_interface(obj, rec)


cdef object _core_buffer(object obj, object stream, ViewRecord* rec):
    return read_buffer_protocol(obj, rec)


cdef dict _CORE_READERS = {}    # name -> address of a core_reader_t


cdef int add_core_reader(str name, core_reader_t fn) except -1:
    if fn == NULL:
        raise ValueError(f"core reader {name!r} is NULL")
    _CORE_READERS[name] = <uintptr_t> fn
    return 0


add_core_reader("dlpack", _core_dlpack)
add_core_reader("dlpack_c_exchange_api", _core_exchange_api)
add_core_reader("dunder_dlpack", _core_dunder_dlpack)
add_core_reader("cuda_array_interface", _core_cai)
add_core_reader("array_interface", _core_array_interface)
add_core_reader("buffer_protocol", _core_buffer)


def core_reader_names():
    """The names of the core's compiled readers that a plugin may register by name.

    Returns
    -------
    tuple of str
        ``"dlpack"`` (the C exchange API when the type has one, else ``__dlpack__``),
        ``"dlpack_c_exchange_api"``, ``"dunder_dlpack"``, ``"cuda_array_interface"``,
        ``"array_interface"``, ``"buffer_protocol"``, and any a first-party plugin adds.
    """
    return tuple(_CORE_READERS)


# --- entries -----------------------------------------------------------------------------------

cdef class ReaderEntry:
    """How objects of one type are read: what a plugin registered, resolved for the hot path.

    Made by :func:`new_entry`; read-only.  ``kind`` is 1 (core reader), 2 (Python callable),
    3 (C capsule), 4 (generic protocol, no plugin) or 5 (a StridedMemoryView itself).
    """

    def __init__(self):
        raise TypeError("use interop_core.registry._registry.new_entry(...)")

    @property
    def equivalent_to(self):
        """tuple of str: The exchange protocols this reader reads exactly as (``"dlpack"``,
        ``"cuda_array_interface"``, ``"array_interface"``, ``"buffer_protocol"``): the
        ``StridedMemoryView.from_*`` classmethods of those protocols use it."""
        return tuple(name for protocol, name in _EQUIVALENCE_NAMES.items()
                     if self.equivalent & (1 << protocol))

    def __repr__(self):
        names = {READER_CORE: "core", READER_PYTHON: "python", READER_CAPSULE: "capsule",
                 READER_GENERIC: "generic", READER_SELF: "self"}
        return (f"ReaderEntry({names.get(self.kind)}, reader={self.reader!r}, "
                f"plugin={self.plugin!r}, subclasses={self.subclasses})")


def new_entry(reader, plugin=None, subclasses=False, producer_stream=None, type_path=None,
              fallback=None, prepare=None, canaries=None, readonly=False, equivalent_to=(),
              equivalence_check=None):
    """Validate what a plugin registered as a reader and make its table entry.

    Parameters
    ----------
    reader : str, callable or PyCapsule
        A core reader name (see :func:`core_reader_names`), a Python callable
        ``(obj, stream) -> StridedMemoryView`` (or ``NotImplemented`` to decline), or a capsule
        named ``"interop_core.reader_v2"`` (or ``"interop_core.reader_v1"``) holding a C reader
        (``include/interop_core.h``).
    plugin : str, optional
        The registering plugin's name, for messages and introspection.
    subclasses : bool
        Whether subclasses of the type may be read by this reader too.
    producer_stream : callable, optional
        ``callable(obj) -> int or None``: the producer's current CUDA stream.
    type_path : str, optional
        The type as declared (``"module:QualName"``).
    fallback : str, callable, PyCapsule, ReaderEntry, or a tuple of them, optional
        Reads what ``reader`` declines, and replaces it when its validation fails.  A tuple
        is a chain: its first reader is the fallback, and each next one reads what the one
        before it declines.
    prepare : callable, optional
        ``prepare() -> None, str or dict``: the plugin's own check, run once before first use
        (a str is the reason it failed; a dict, details of a success).
    canaries : callable, optional
        ``canaries() -> iterable``: objects ``reader`` must read exactly as ``fallback`` does.
    readonly : bool
        The type's objects are immutable: every view of one is read-only.
    equivalent_to : tuple of str
        The exchange protocols ``reader`` reads exactly as (``"dlpack"``,
        ``"cuda_array_interface"``, ``"array_interface"``, ``"buffer_protocol"``): same
        pointer, layout, dtype, device, read-only flag and stream ordering.  The
        ``StridedMemoryView.from_*`` classmethod of each then uses ``reader`` (a core reader
        named after a protocol is equivalent to it without saying so).  The fallbacks inherit
        it: they read the same type for the same plugin.
    equivalence_check : dict, optional
        ``{protocol name: check}`` for protocols of ``equivalent_to`` that ``reader``
        reproduces for most objects but not all: asked per object, after ``reader`` read it
        for that protocol's ``from_*`` classmethod, whether the protocol would give the same
        view.  A check is a capsule named ``"interop_core.equivalence_check_v1"``
        (``include/interop_core.h``) or a callable ``(obj, protocol_name, view) -> bool``.
        False: the protocol itself answers.  The fallbacks inherit it.

    Returns
    -------
    ReaderEntry

    Raises
    ------
    ValueError
        For an unknown core reader name or protocol name, or a capsule of the wrong name.
    TypeError
        For anything that is neither a name, a callable nor a capsule.
    """
    cdef ReaderEntry e = ReaderEntry.__new__(ReaderEntry)
    cdef const char* name
    if isinstance(reader, str):
        address = _CORE_READERS.get(reader)
        if address is None:
            raise ValueError(
                f"unknown core reader {reader!r}; the core has {sorted(_CORE_READERS)}")
        e.kind = READER_CORE
        e.core = <core_reader_t> <uintptr_t> address
    elif PyCapsule_CheckExact(reader):
        name = PyCapsule_GetName(reader)
        if name != NULL and strcmp(name, INTEROP_CORE_READER_V2_CAPSULE) == 0:
            e.c_version = 2
        elif name != NULL and strcmp(name, INTEROP_CORE_READER_CAPSULE) == 0:
            e.c_version = 1
        else:
            shown = None if name == NULL else (<bytes> name).decode("utf-8", "replace")
            raise ValueError(
                f"a reader capsule must be named {INTEROP_CORE_READER_V2_CAPSULE.decode()!r} "
                f"or {INTEROP_CORE_READER_CAPSULE.decode()!r}, got {shown!r}")
        e.c_reader = PyCapsule_GetPointer(reader, name)
        if e.c_reader == NULL:
            raise ValueError("the reader capsule holds a NULL function pointer")
        e.kind = READER_CAPSULE
    elif callable(reader):
        e.kind = READER_PYTHON
    else:
        raise TypeError(
            f"reader must be a core reader name, a callable or a PyCapsule, got "
            f"{type(reader).__name__}")
    if producer_stream is not None and not callable(producer_stream):
        raise TypeError(
            f"producer_stream must be a callable(obj) -> int or None, got "
            f"{type(producer_stream).__name__}")
    for what, value in (("prepare", prepare), ("canaries", canaries)):
        if value is not None and not callable(value):
            raise TypeError(f"{what} must be callable, got {type(value).__name__}")
    if (prepare is not None or canaries is not None) and fallback is None:
        raise ValueError("a reader that is validated (prepare= or canaries=) needs a fallback= "
                         "to use when validation fails")
    e.equivalent = _equivalence_mask(equivalent_to)
    if e.kind == READER_CORE:
        e.equivalent |= _CORE_READER_EQUIVALENCE.get(reader, 0)
    _set_equivalence_check(e, equivalence_check)     # after every declaration it may name
    e.reader = reader
    e.plugin = plugin
    e.subclasses = bool(subclasses)
    e.producer_stream = producer_stream
    e.type_path = type_path
    e.readonly = bool(readonly)
    e.prepare = prepare
    e.canaries = canaries
    if isinstance(fallback, tuple):
        if not fallback:
            raise ValueError("fallback= is an empty tuple; give at least one reader")
        # A chain: the first reads what `reader` declines, the rest what it declines in turn.
        fallback = new_entry(fallback[0], plugin, subclasses, producer_stream, type_path,
                             fallback=fallback[1:] or None, readonly=readonly,
                             equivalent_to=equivalent_to, equivalence_check=equivalence_check)
    if fallback is not None:
        if not isinstance(fallback, ReaderEntry):
            # The fallback reads the same type for the same plugin: it inherits its strategy
            # (and, installed when validation fails, must still mark its views read-only).
            fallback = new_entry(fallback, plugin, subclasses, producer_stream, type_path,
                                 readonly=readonly, equivalent_to=equivalent_to,
                                 equivalence_check=equivalence_check)
        e.fallback = fallback
    return e


cdef int _set_equivalence_check(ReaderEntry e, object checks) except -1:
    cdef const char* name
    cdef int protocol
    if checks is None:
        return 0
    if not isinstance(checks, dict):
        raise TypeError(f"equivalence_check must be a dict {{protocol name: check}}, got "
                        f"{type(checks).__name__}")
    checks = dict(checks)
    for protocol_name, check in checks.items():
        found = _EQUIVALENCE_BY_NAME.get(protocol_name)
        if found is None:
            raise ValueError(f"equivalence_check: unknown protocol {protocol_name!r}; expected "
                             f"some of {sorted(_EQUIVALENCE_BY_NAME)}")
        protocol = found
        if not (e.equivalent >> protocol) & 1:
            raise ValueError(f"equivalence_check names {protocol_name!r}, which equivalent_to= "
                             f"does not declare")
        if PyCapsule_CheckExact(check):
            name = PyCapsule_GetName(check)
            if name == NULL or strcmp(name, INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE) != 0:
                shown = None if name == NULL else (<bytes> name).decode("utf-8", "replace")
                raise ValueError(
                    f"equivalence_check[{protocol_name!r}]: a capsule must be named "
                    f"{INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE.decode()!r}, got {shown!r}")
            e.check_fns[protocol] = PyCapsule_GetPointer(check, name)
            if e.check_fns[protocol] == NULL:
                raise ValueError(f"equivalence_check[{protocol_name!r}]: the capsule holds a "
                                 "NULL function pointer")
        elif not callable(check):
            raise TypeError(f"equivalence_check[{protocol_name!r}] must be a PyCapsule or a "
                            f"callable(obj, protocol, view) -> bool, got {type(check).__name__}")
        e.check_of[protocol] = <PyObject*> check
    e.equivalence_check = checks     # owns every check the arrays above borrow
    return 0


cdef ReaderEntry _generic_entry(int protocol):
    cdef ReaderEntry e = ReaderEntry.__new__(ReaderEntry)
    e.kind = READER_SELF if protocol == PROTOCOL_SELF else READER_GENERIC
    e.protocol = protocol
    e.reader = _PROTOCOL_NAMES.get(protocol)
    # The generic entry *is* its protocol's path; a view itself is answered by from_any only
    # (from_dlpack of a view makes a new view through the view's own DLPack export).
    e.equivalent = 0 if protocol == PROTOCOL_SELF else 1 << protocol
    return e


# Protocol -> its name in equivalent_to= (the names of the core readers of the same protocols).
_EQUIVALENCE_NAMES = {PROTOCOL_DLPACK: "dlpack", PROTOCOL_CAI: "cuda_array_interface",
                      PROTOCOL_ARRAY_INTERFACE: "array_interface",
                      PROTOCOL_BUFFER: "buffer_protocol"}
_EQUIVALENCE_BY_NAME = {name: protocol for protocol, name in _EQUIVALENCE_NAMES.items()}
# Core readers are their protocol's own reader.
_CORE_READER_EQUIVALENCE = {
    "dlpack": 1 << PROTOCOL_DLPACK, "dlpack_c_exchange_api": 1 << PROTOCOL_DLPACK,
    "dunder_dlpack": 1 << PROTOCOL_DLPACK, "cuda_array_interface": 1 << PROTOCOL_CAI,
    "array_interface": 1 << PROTOCOL_ARRAY_INTERFACE, "buffer_protocol": 1 << PROTOCOL_BUFFER}


cdef int _equivalence_mask(object names) except -1:
    cdef int mask = 0
    if isinstance(names, str):
        names = (names,)
    for name in names:
        protocol = _EQUIVALENCE_BY_NAME.get(name)
        if protocol is None:
            raise ValueError(f"equivalent_to: unknown protocol {name!r}; expected some of "
                             f"{sorted(_EQUIVALENCE_BY_NAME)}")
        mask |= 1 << <int> protocol
    return mask


_PROTOCOL_NAMES = {2: "dlpack", 3: "cuda_array_interface", 4: "array_interface",
                   5: "buffer_protocol", 1: "self"}


# --- the table ---------------------------------------------------------------------------------

ctypedef struct Slot:
    PyObject* type      # borrowed: _ENTRIES holds the reference
    PyObject* entry     # borrowed: _ENTRIES holds the reference

cdef Slot* _slots = NULL
cdef size_t _mask = 0
cdef size_t _used = 0
# The table's owner: every type in the C table, by address -> (type, ReaderEntry).  It owns
# the references the C table borrows, and keeps every type in it alive (a type object freed and
# its address reused by another type must never find a stale entry).  Keyed by address so that
# no Python code (a metaclass's __hash__ or __eq__) runs while it changes.  It is replaced whole
# with the C table (_install) or grown by one type (_cache): the C table never names an entry
# this dict no longer owns, even while Python code runs (a garbage collection's finalizers, a
# re-entrant view()).
cdef dict _ENTRIES = {}
# Plugin-registered entries (set_entries), type -> ReaderEntry (owns the types), and the same
# by address; _ENTRIES is these plus built-ins plus cached decisions.
cdef dict _REGISTERED = {}
cdef dict _REGISTERED_AT = {}


cdef inline size_t _slot_of(PyObject* t) noexcept nogil:
    # Type objects are 16-byte aligned; mixing the higher bits spreads neighbouring heap types.
    cdef uintptr_t x = <uintptr_t> t >> 4
    return <size_t> (x ^ (x >> 9))


cdef inline PyObject* _lookup(PyObject* t) noexcept nogil:
    cdef size_t i
    if _slots == NULL:
        return NULL
    i = _slot_of(t) & _mask
    while True:
        if _slots[i].type == t:
            return _slots[i].entry
        if _slots[i].type == NULL:
            return NULL
        i = (i + 1) & _mask


cdef int _place(Slot* slots, size_t mask, PyObject* t, PyObject* entry) noexcept nogil:
    cdef size_t i = _slot_of(t) & mask
    while slots[i].type != NULL and slots[i].type != t:
        i = (i + 1) & mask
    slots[i].type = t
    slots[i].entry = entry
    return 0


cdef int _install(dict entries) except -1:
    """Make `entries` (address -> (type, entry)) the table: a new C table is built from it, then
    both are swapped in together, and only then is the old dict let go (its release may run
    Python code, which finds the new table)."""
    global _slots, _mask, _used, _ENTRIES
    cdef size_t capacity = 16
    cdef Slot* fresh
    cdef Slot* old
    cdef tuple pair
    while capacity < 2 * (len(entries) + 1):
        capacity *= 2
    fresh = <Slot*> calloc(capacity, sizeof(Slot))
    if fresh == NULL:
        raise MemoryError()
    for value in entries.values():
        pair = <tuple> value
        _place(fresh, capacity - 1, <PyObject*> pair[0], <PyObject*> pair[1])
    old = _slots
    released = _ENTRIES
    _slots = fresh
    _mask = capacity - 1
    _used = len(entries)
    _ENTRIES = entries
    free(old)
    return 0


cdef dict _base_entries():
    """The table without cached decisions: views themselves, and what plugins registered."""
    cdef dict entries = {<size_t> <PyObject*> StridedMemoryView:
                         (StridedMemoryView, _generic_entry(PROTOCOL_SELF))}
    for t, entry in _REGISTERED.items():
        entries[<size_t> <PyObject*> t] = (t, entry)
    return entries


# Decisions cached for types no plugin registered: the table keeps each type alive (a type
# freed and its address reused must never find a stale entry), so past MAX_CACHED_TYPES the
# cached decisions are all forgotten, to be made again per type on its next miss.
cdef PyObject* _cache(type t, ReaderEntry entry) except NULL:
    """Remember the decision for `t` (a dispatch miss); the entry the table holds for `t`
    afterwards (borrowed from it): a plugin's registered entry always wins over a decision
    made meanwhile (another thread's miss of the same type, or Python code run during this
    one, may have registered it)."""
    global _used
    cdef size_t at = <size_t> <PyObject*> t
    cdef dict fresh
    registered = _REGISTERED_AT.get(at)
    if registered is not None:
        if _lookup(<PyObject*> t) != <PyObject*> registered:
            _install(_base_entries())
        return <PyObject*> registered
    if len(_ENTRIES) - len(_REGISTERED_AT) > MAX_CACHED_TYPES:
        fresh = _base_entries()
        fresh[at] = (t, entry)
        _install(fresh)
        return <PyObject*> entry
    previous = _ENTRIES.get(at)     # kept alive until the C table names the new entry
    _ENTRIES[at] = (t, entry)
    if _slots != NULL and 2 * (_used + 1) <= _mask + 1:
        _place(_slots, _mask, <PyObject*> t, <PyObject*> entry)
        if previous is None:
            _used += 1
        return <PyObject*> entry
    _install(_ENTRIES)
    return <PyObject*> entry


def set_entries(dict entries):
    """Replace every plugin-registered entry (``{type: ReaderEntry}``) and forget cached decisions.

    Called by :mod:`interop_core.plugins` whenever what plugins registered changes; the types
    are kept alive by the table.
    """
    global _REGISTERED, _REGISTERED_AT
    for t, entry in entries.items():
        if not isinstance(t, type):
            raise TypeError(f"table keys must be types, got {t!r}")
        if not isinstance(entry, ReaderEntry):
            raise TypeError(f"table values must be ReaderEntry, got {type(entry).__name__}")
    registered = dict(entries)
    registered_at = {<size_t> <PyObject*> t: entry for t, entry in registered.items()}
    _REGISTERED = registered
    _REGISTERED_AT = registered_at
    _READONLY_TYPES.clear()
    _install(_base_entries())


def entry_for(t):
    """The entry the table holds for exactly ``t`` (registered or cached), or ``None``."""
    if not isinstance(t, type):
        raise TypeError(f"expected a type, got {type(t).__name__}")
    cdef PyObject* e = _lookup(<PyObject*> t)
    return None if e == NULL else <object> e


# Called on a dispatch miss with the type; returns True when it registered something new (the
# plugin machinery: entry-point discovery and lazy resolution of declared types).
cdef object _miss_handler = None


def set_miss_handler(handler):
    """Install ``handler(type) -> bool``, called when a type is not in the table."""
    global _miss_handler
    _miss_handler = handler


# --- dispatch ----------------------------------------------------------------------------------

cdef object _read(ReaderEntry entry, object obj, object stream, int protocol):
    # Callers pass the entry borrowed from the table, whose only owner is _ENTRIES; a reader
    # that runs Python code lets another thread (or the reader itself) (un)register a plugin,
    # which replaces _ENTRIES and frees the entry, read again below.  Own it for the call.
    cdef ReaderEntry owned = entry
    cdef StridedMemoryView v
    cdef intptr_t consumer = 0
    cdef int kind = entry.kind
    cdef object resolved = None     # a new name, not `stream` rebound: Cython would then own a
                                    # reference to the argument for the whole call
    if kind == READER_GENERIC or kind == READER_SELF:
        return view_by_protocol(entry.protocol, obj, stream)
    if stream is not None:
        # Resolved once, here: readers get None or the int handle, never a stream object.
        resolved = canonical_stream(stream, &consumer)
    if kind == READER_CAPSULE:
        # The common case taken here rather than through _fill: a call less per view.
        v = _capsule_view(entry, obj, resolved, protocol)
        if v is None:
            v = _declined(entry, obj, resolved, protocol)
    else:
        v = _fill(entry, obj, resolved, protocol)
    if entry.readonly:
        v.rec.readonly = True
    # The launcher's common case, the producer's own stream, is decided here without a call.
    if resolved is not None and not (v.rec.has_producer_stream
                                     and same_stream(v.rec.producer_stream, consumer)):
        _order(entry, v, consumer)
    return v


cdef StridedMemoryView _fill(ReaderEntry entry, object obj, object stream, int protocol):
    """Run `entry`'s reader (stream already resolved); what it declines goes to its fallback.
    `protocol`: the one a from_<protocol> call stands the read in for, 0 for view()."""
    cdef StridedMemoryView v
    cdef int kind = entry.kind
    if kind == READER_CAPSULE:
        # Every compiled reader, first-party or not: the view's record filled in place.
        v = _capsule_view(entry, obj, stream, protocol)
        return v if v is not None else _declined(entry, obj, stream, protocol)
    if kind == READER_CORE:
        v = view_new()
        v._keepalive = entry.core(obj, stream, &v.rec)
        v.owner = obj
        return v
    if kind != READER_PYTHON:
        return view_by_protocol(entry.protocol, obj, stream)
    if protocol == 0:
        result = entry.reader(obj, stream)
    else:
        result = _run_python_reader_marked(entry, obj, stream)
    if type(result) is StridedMemoryView:
        return <StridedMemoryView> result
    if result is NotImplemented or result is None:
        return _declined(entry, obj, stream, protocol)
    raise TypeError(
        f"the reader {entry.reader!r} registered by plugin {entry.plugin!r} for "
        f"{type(obj).__qualname__} returned {type(result).__name__}, not a StridedMemoryView")


cdef inline StridedMemoryView _capsule_view(ReaderEntry entry, object obj, object stream,
                                            int protocol):
    # A view filled by `entry`'s C reader, or None when the reader declined `obj`.
    cdef StridedMemoryView v = view_new()
    cdef PyObject* keepalive = NULL
    if (_read_capsule_into(entry, obj, stream, &v.rec, &keepalive, 0,
                           INTEROP_CORE_USES_MEMORY_LATER, protocol)
            == INTEROP_CORE_READ_DECLINED):
        return None
    # The object's reference count is written as few times as view() did before readers went
    # through the ABI: each write waits for the one before it (the same memory word), so a
    # chain of them costs more than the reader's loads.
    if keepalive == NULL:
        v._keepalive = obj
    else:
        v._keepalive = <object> keepalive
        Py_DECREF_steal(keepalive)
    v.owner = obj
    return v


class _NoReaderTook(BufferError):
    """Every reader of a registration declined the object (none refused it): a from_* constructor
    then asks the protocol itself (view_if_equivalent)."""


cdef StridedMemoryView _declined(ReaderEntry entry, object obj, object stream, int protocol):
    # The fast reader said "not this one" (an unusual layout, a lazy tensor): its fallback reads.
    if entry.fallback is None:
        raise _NoReaderTook(
            f"the reader registered by plugin {entry.plugin!r} for "
            f"{type(obj).__module__}.{type(obj).__qualname__} declined this object and the "
            "plugin registered no fallback= reader")
    return _fill(entry.fallback, obj, stream, protocol)


cdef int _order(ReaderEntry entry, StridedMemoryView v, intptr_t consumer) except -1:
    """Order `consumer` after the producer: the stream the reader found, else the plugin's."""
    if v.rec.device_type == 1:      # host memory: no streams
        return 0
    if not _learn_producer(entry, &v.rec, v.owner):
        return 0
    return order_view(v, consumer)


cdef bint _learn_producer(ReaderEntry entry, ViewRecord* rec, object owner) except -1:
    # Whether the producer's stream is known, asking the plugin's strategy (and recording its
    # answer) when the reader found none.
    if rec.has_producer_stream:
        return True
    if entry is None or entry.producer_stream is None:
        return False
    producer = entry.producer_stream(owner)
    if producer is None:
        return False
    rec.producer_stream = <intptr_t> <Py_ssize_t> producer
    rec.has_producer_stream = True
    return True


def _producer_stream_of(owner):
    # For views ordered after they were made (sync, __dlpack__(stream=...)): ask the plugin
    # that reads the owner's type, if it has a producer strategy.
    cdef PyObject* found = _lookup(<PyObject*> Py_TYPE(owner))
    if found == NULL or (<ReaderEntry> found).producer_stream is None:
        return None
    return (<ReaderEntry> found).producer_stream(owner)


_set_producer_stream_lookup(_producer_stream_of)


# type -> whether its plugin declared its objects immutable, for the generic entry points
# (StridedMemoryView.from_any, from_dlpack, ...), which do not go through the table.  Cleared
# whenever plugins change (set_entries).
cdef dict _READONLY_TYPES = {}


def _declared_readonly(t):
    cached = _READONLY_TYPES.get(t)
    if cached is not None:
        return cached
    cdef PyObject* found = _lookup(<PyObject*> t)
    if found == NULL:
        # Not viewed through the table yet: resolve plugin declarations for t as view() would.
        if _miss_handler is None:
            from interop_core import plugins  # noqa: F401  (installs the handler on import)
        if _miss_handler is not None:
            _miss_handler(t)
            # Asked again whatever the handler answered (another thread's miss may have
            # registered t while this one waited for the plugins' lock).
            found = _lookup(<PyObject*> t)
    result = found != NULL and (<ReaderEntry> found).readonly
    if len(_READONLY_TYPES) >= MAX_CACHED_TYPES:
        _READONLY_TYPES.clear()         # it keeps the types alive: bounded as _cache is
    _READONLY_TYPES[t] = result
    return result


_set_readonly_type_lookup(_declared_readonly)


# The last dtype a C reader reported, its itemsize and log2 of it (-1: not a power of two), read
# and written with the GIL held, all together: readers report the same few dtypes over and over,
# and a repeat skips record_set_dtype's table checks.  _last_itemsize 0: nothing cached yet.
cdef DLDataType _last_dtype
cdef int64_t _last_itemsize = 0
cdef int _last_shift = -1


cdef inline int64_t _set_dtype_cached(ViewRecord* rec, uint8_t code, uint8_t bits,
                                      uint16_t lanes, int* shift) except -1:
    # Returns the itemsize and its log2 (in `shift`), cached with the dtype, so that the caller's
    # stride loop needs no division and no log2 of its own.
    # Taken field by field, each at the width a reader stores it: one 4-byte load of the three
    # fields right after a reader's three narrow stores cannot be forwarded from them and stalls
    # (a few ns per view on x86).
    global _last_dtype, _last_itemsize, _last_shift
    cdef DLDataType dt
    cdef int64_t itemsize
    if (_last_itemsize != 0 and code == _last_dtype.code and bits == _last_dtype.bits
            and lanes == _last_dtype.lanes):
        rec.dtype = _last_dtype
        rec.itemsize = _last_itemsize
        shift[0] = _last_shift
        return _last_itemsize
    dt.code = code
    dt.bits = bits
    dt.lanes = lanes
    record_set_dtype(rec, dt, True)
    itemsize = rec.itemsize
    _last_dtype = dt
    _last_itemsize = itemsize
    # Itemsizes are powers of two but for vector types: strides in bytes become elements by a
    # shift, not a division (a 64-bit division costs as much as the rest of a reader's work).
    _last_shift = _log2(itemsize) if itemsize & (itemsize - 1) == 0 else -1
    shift[0] = _last_shift
    return itemsize


cdef inline int _read_capsule_into(ReaderEntry entry, object obj, object stream,
                                   ViewRecord* rec, PyObject** keepalive,
                                   uint64_t batch, uint32_t uses_memory, int protocol) except -1:
    """Run `entry`'s C reader on `obj` and fill `rec` (an initialised record) from its answer.

    Returns INTEROP_CORE_READ_OK, with `keepalive` set to the reader's keep-alive (a new
    reference) or left NULL when `obj` itself keeps the memory alive; or
    INTEROP_CORE_READ_DECLINED, with nothing to release.  Filling the caller's record in place,
    a view's or a launch slot's, spares a view allocation and a record copy per tensor on the
    launch path; handing back a raw reference spares the reference-count writes of an object
    return value.
    """
    cdef interop_core_tensor_info info
    cdef int status
    # The optional outputs at their documented defaults (interop_core.h), one store each at the
    # width the core reads them back: a wide clear of the whole struct followed by narrow
    # loads of fields the reader did not rewrite defeats store-to-load forwarding (measured:
    # ~7 ns per view, as much as the rest of the hand-off).
    info.data = NULL
    info.ndim = 0
    info.strides = NULL
    info.device_id = 0
    info.readonly = 0
    info.has_producer_stream = 0
    info.producer_stream = 0
    info.keepalive = NULL
    info.strides_in_bytes = 0
    info.batch = batch
    info.uses_memory = uses_memory
    info.protocol = protocol
    # The caller allocated `rec` before this call: from the reader's return until its extents
    # are copied, nothing here may run Python code (an allocation can run the garbage collector,
    # and so finalizers and other threads), since the reader may hand out a buffer of its own
    # (interop_core.h).
    status = (<interop_core_reader_v1> entry.c_reader)(<PyObject*> obj, <PyObject*> stream, &info)
    if status != 0:
        Py_XDECREF(info.keepalive)
        if status == INTEROP_CORE_READ_DECLINED and entry.c_version >= 2:
            return INTEROP_CORE_READ_DECLINED
        _propagate_reader_error(entry)
    if info.keepalive != NULL:
        return _fill_record_held(rec, obj, &info, entry, keepalive)
    _fill_record(rec, obj, &info, entry.c_version >= 2, entry)
    return INTEROP_CORE_READ_OK


cdef int _fill_record_held(ViewRecord* rec, object obj, interop_core_tensor_info* info,
                           ReaderEntry entry, PyObject** keepalive) except -1:
    # The reader named its own keep-alive: owned here as an object while the record is filled,
    # so that a malformed fill releases it, then handed to the caller as a new reference.
    held = <object> info.keepalive
    Py_DECREF_steal(info.keepalive)
    _fill_record(rec, obj, info, entry.c_version >= 2, entry)
    Py_INCREF(held)
    keepalive[0] = <PyObject*> held
    return INTEROP_CORE_READ_OK


cdef inline int _fill_record(ViewRecord* rec, object obj, interop_core_tensor_info* info,
                             bint version_2, ReaderEntry entry) except -1:
    """`rec` (initialised) from a reader's fill; `entry` None for view_from_info's callers."""
    cdef int i, ndim, shift = -1
    cdef int64_t step = 1, itemsize, extent, any_extent = 0, any_stride = 0
    cdef const int64_t* shape
    cdef const int64_t* strides
    cdef int64_t* out_shape
    cdef int64_t* out_strides
    ndim = info.ndim
    shape = info.shape
    strides = info.strides
    if <unsigned int> ndim > MAX_NDIM or (ndim > 0 and shape == NULL):
        raise BufferError(f"{_filled_by(entry)} returned ndim={ndim}"
                          + (" and a NULL shape" if shape == NULL else ""))
    itemsize = _set_dtype_cached(rec, _load_u8(&info.dtype_code), _load_u8(&info.dtype_bits),
                                 info.dtype_lanes, &shift)
    if ndim <= INLINE_NDIM and rec.ext.shape == rec.ext.inline_shape:
        rec.ext.ndim = ndim
    else:
        extents_resize(&rec.ext, ndim)
    # Locals, so the compiler need not reload them after every store, and the checks folded
    # into one test after each loop (any negative extent leaves the OR of all of them negative;
    # any stride the itemsize does not divide leaves a low bit in the OR of all of them): the
    # loops are a load and a store or two per dimension.  On an error the record is discarded.
    out_shape = rec.ext.shape
    out_strides = rec.ext.strides
    # `any_extent` and `any_stride` OR every extent and every stride (in bytes or in elements):
    # both below 2**24, with an itemsize below 2**8, no byte offset of the view can leave int64
    # (64 terms below 2**48 elements, times 2**8 bytes), and the full check is skipped; a huge
    # array, a negative stride (its high bits are set) or a reader that wrote garbage strides
    # gets the core's extents_validate.
    if strides == NULL:
        for i in range(ndim - 1, -1, -1):
            extent = shape[i]
            any_extent |= extent
            out_shape[i] = extent
            out_strides[i] = step
            any_stride |= step
            step *= extent if extent > 0 else 1
    elif info.strides_in_bytes and version_2:
        if shift >= 0:
            for i in range(ndim):
                any_extent |= shape[i]
                out_shape[i] = shape[i]
                any_stride |= strides[i]
                out_strides[i] = strides[i] >> shift
            if any_stride & (itemsize - 1):
                _stride_not_multiple(obj, strides, ndim, itemsize)
        else:
            for i in range(ndim):
                any_extent |= shape[i]
                out_shape[i] = shape[i]
                any_stride |= strides[i]
                out_strides[i] = strides[i] // itemsize
                if out_strides[i] * itemsize != strides[i]:
                    _stride_not_multiple(obj, strides, ndim, itemsize)
    else:
        for i in range(ndim):
            any_extent |= shape[i]
            out_shape[i] = shape[i]
            any_stride |= strides[i]
            out_strides[i] = strides[i]
    if any_extent < 0:
        _negative_extent(entry, shape, ndim)
    if (<uint64_t> (any_extent | any_stride)) >> 24 or itemsize >= 256:
        _check_offsets(rec, entry, itemsize)
    rec.ptr = <uintptr_t> info.data
    rec.device_type = info.device_type
    rec.device_id = info.device_id
    rec.readonly = info.readonly != 0 or (entry is not None and entry.readonly)
    rec.has_producer_stream = info.has_producer_stream != 0
    rec.producer_stream = info.producer_stream
    return 0


cdef int _negative_extent(ReaderEntry entry, const int64_t* shape, int ndim) except -1:
    cdef int i
    for i in range(ndim):
        if shape[i] < 0:
            raise BufferError(f"{_filled_by(entry)} returned a negative extent {shape[i]}")
    return 0


cdef int _stride_not_multiple(object obj, const int64_t* strides, int ndim,
                              int64_t itemsize) except -1:
    cdef int i
    for i in range(ndim):
        if strides[i] % itemsize:
            raise BufferError(
                f"{type(obj).__qualname__} has a stride of {strides[i]} bytes in dimension {i}, "
                f"not a multiple of its itemsize {itemsize}; copy it first")
    return 0


cdef int _check_offsets(ViewRecord* rec, ReaderEntry entry, int64_t itemsize) except -1:
    # A layout the core's other constructors refuse (from_pointer, StridedLayout, the
    # protocols' readers): a stride or byte offset beyond int64 would wrap in every export.
    try:
        extents_validate(&rec.ext, itemsize, 0)
    except ValueError as exc:
        raise BufferError(f"{_filled_by(entry)} returned a layout that cannot be addressed: "
                          f"{exc}") from None
    return 0


cdef str _filled_by(ReaderEntry entry):
    if entry is None:
        return "a compiled plugin's view_from_info"
    return f"C reader of plugin {entry.plugin!r}"


cdef inline int _log2(int64_t power_of_two) noexcept nogil:
    return __builtin_ctzll(<unsigned long long> power_of_two)


cdef extern from *:
    int __builtin_ctzll(unsigned long long x) nogil


cdef int _propagate_reader_error(ReaderEntry entry) except -1:
    # Returning -1 from an `except -1` function hands on the exception the C reader set.
    if PyErr_Occurred() == NULL:
        raise BufferError(
            f"the C reader of plugin {entry.plugin!r} failed without setting an exception")
    return -1


cdef extern from *:
    """
    /* A reader stores the dtype's code and bits as two bytes; one 2-byte load of both (what
       the compiler makes of two adjacent byte reads) cannot be forwarded from those two stores
       and waits for them to reach the cache: ~10 ns per view.  volatile keeps the loads apart. */
    static inline uint8_t ic_load_u8(const uint8_t *p) { return *(const volatile uint8_t *)p; }
    """
    uint8_t _load_u8 "ic_load_u8"(const uint8_t* p) noexcept nogil


cdef extern from *:
    """
    static inline void Py_DECREF_steal(PyObject *o) { Py_DECREF(o); }
    """
    void Py_DECREF_steal(PyObject* o)


cdef object _view_miss(object obj, object stream):
    # Plugins (entry points loaded once, declarations of t's package resolved), a registered
    # base class whose plugin accepts subclasses, or the generic protocol decided once per type.
    cdef PyObject* found = _entry_after_miss(obj)
    cdef type t
    if found == NULL:
        t = type(obj)
        raise TypeError(
            f"cannot view an object of type {t.__module__}.{t.__qualname__}: no plugin "
            f"registers it or a base class of it, and it has none of "
            "__dlpack_c_exchange_api__, __dlpack__, __cuda_array_interface__, "
            "__array_interface__ or the buffer protocol")
    return _read(<ReaderEntry> found, obj, stream, 0)


def time_dispatch(obj, Py_ssize_t blocks=200, Py_ssize_t calls_per_block=500):
    """Measure, in C, what the table lookup adds to a reader call (for the benchmarks).

    Alternates blocks of ``calls_per_block`` reader calls on ``obj`` with the entry already in
    hand and blocks of the same calls preceded by the lookup of ``type(obj)`` (what ``view()``
    does), so both see the same machine noise.  ``obj``'s type must already be in the table
    (view it once first).

    Returns
    -------
    tuple of list of float
        ``(direct, looked_up)``: ns per call of each block, paired block by block.
    """
    cdef PyObject* found = _lookup(<PyObject*> Py_TYPE(obj))
    if found == NULL:
        raise ValueError(f"{type(obj).__qualname__} is not in the table yet: view() it once first")
    cdef ReaderEntry entry = <ReaderEntry> found
    cdef timespec start, end
    cdef Py_ssize_t i, block
    direct, looked_up = [], []
    for block in range(blocks):
        clock_gettime(CLOCK_MONOTONIC, &start)
        for i in range(calls_per_block):
            _read(entry, obj, None, 0)
        clock_gettime(CLOCK_MONOTONIC, &end)
        direct.append(((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec))
                      / calls_per_block)
        clock_gettime(CLOCK_MONOTONIC, &start)
        for i in range(calls_per_block):
            found = _lookup(<PyObject*> Py_TYPE(obj))
            _read(<ReaderEntry> found, obj, None, 0)
        clock_gettime(CLOCK_MONOTONIC, &end)
        looked_up.append(((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec))
                         / calls_per_block)
    return direct, looked_up


cdef object view_object(object obj, object stream):
    cdef PyObject* found = _lookup(<PyObject*> Py_TYPE(obj))
    if found != NULL:
        return _read(<ReaderEntry> found, obj, stream, 0)
    return _view_miss(obj, stream)


# The objects whose Python reader (a plugin's reader or fallback) a from_* call is running now,
# each with its thread.  A reader that reads through a protocol itself (a fallback calling
# StridedMemoryView.from_dlpack on the object it was handed) must get the protocol, not its own
# type's fast path again: such a re-entrant from_* of the same object on the same thread takes
# the protocol path.  Any other call -- another object, or another thread -- takes its own
# plugin's reader as usual (a protocol path taken for them would bypass that plugin's refusals:
# torch's DLPack C exchange API drops a negative tensor's bit).  C readers are not marked: they
# run no Python code of the plugin's, and marking them would cost every from_* call.  Borrowed
# pointers, valid while their call runs (each call removes its own); read and written with the
# GIL held.
cdef enum:
    MAX_NESTED_READS = 64       # in C; beyond, the (rare) marks go to _more_reading

cdef PyObject* _reading_objects[MAX_NESTED_READS]
cdef PyThreadState* _reading_threads[MAX_NESTED_READS]
cdef int _n_reading = 0         # marks in the C arrays
cdef int _n_marked = 0          # every mark: the C arrays' and _more_reading's
cdef list _more_reading = []    # (object address, thread address) pairs beyond the arrays


cdef inline bint _being_read(object obj, PyThreadState* thread) except -1:
    cdef int i
    for i in range(_n_reading):
        if _reading_objects[i] == <PyObject*> obj and _reading_threads[i] == thread:
            return True
    if _n_marked > _n_reading:
        return (<uintptr_t> <PyObject*> obj, <uintptr_t> thread) in _more_reading
    return False


cdef object _run_python_reader_marked(ReaderEntry entry, object obj, object stream):
    # entry's Python reader of obj for a from_* call, with (obj, this thread) marked while it
    # runs.
    global _n_reading, _n_marked
    cdef PyThreadState* thread = PyThreadState_Get()
    cdef int i
    cdef bint in_arrays = _n_reading < MAX_NESTED_READS
    if in_arrays:
        _reading_objects[_n_reading] = <PyObject*> obj
        _reading_threads[_n_reading] = thread
        _n_reading += 1
    else:
        _more_reading.append((<uintptr_t> <PyObject*> obj, <uintptr_t> thread))
    _n_marked += 1
    try:
        return entry.reader(obj, stream)
    finally:
        # Calls end in the order they began on one thread, but another thread's call may end
        # first: remove this call's own mark, wherever it now is.
        _n_marked -= 1
        if in_arrays:
            for i in range(_n_reading - 1, -1, -1):
                if _reading_objects[i] == <PyObject*> obj and _reading_threads[i] == thread:
                    _n_reading -= 1
                    _reading_objects[i] = _reading_objects[_n_reading]
                    _reading_threads[i] = _reading_threads[_n_reading]
                    break
        else:
            _more_reading.remove((<uintptr_t> <PyObject*> obj, <uintptr_t> thread))


# _read as a C function whose NULL result the caller inspects itself (a cdef function that
# returns an object returns NULL with the exception set when it raises).
ctypedef PyObject* (*_unchecked_read_t)(ReaderEntry, object, object, int) noexcept


cdef object _after_failed_read(object obj, object stream, int protocol):
    # The plugin's reader raised (the exception is set) while view_if_equivalent read obj.
    try:
        raise_pending()
    except _NoReaderTook:
        # Every reader of the registration declined the object: the protocol itself decides,
        # as without the fast path.
        return None
    except BufferError as refusal:
        # A reader refused the object.  Where the protocol refuses it too, it does so in its
        # own words, as without the fast path (the reader's refusal is its cause, shown with
        # it); where the protocol would describe the memory, the refusal stands: a view the
        # plugin refuses is never made (torch's DLPack export, its C exchange API above all,
        # hands on a conjugate or negative tensor's memory without the bit that says what the
        # memory holds).
        try:
            view_by_protocol(protocol, obj, stream)
        except BaseException as protocol_error:
            raise protocol_error from refusal
        raise refusal


cdef object view_if_equivalent(object obj, object stream, int protocol):
    cdef PyObject* found = _lookup(<PyObject*> Py_TYPE(obj))
    cdef ReaderEntry entry
    if _n_marked and _being_read(obj, PyThreadState_Get()):
        return None
    if found == NULL:
        try:
            found = _entry_after_miss(obj)
        except Exception:
            # An object whose interfaces raise when looked at: the protocol path reports it.
            return None
        if found == NULL:
            return None
    entry = <ReaderEntry> found
    if protocol == PROTOCOL_NONE:
        # from_any: the protocol it would choose, remembered for the last type read through
        # this entry (a cached per-type decision either way).
        if <PyObject*> entry.any_type != <PyObject*> Py_TYPE(obj):
            entry.any_protocol = protocol_for_any(obj)
            entry.any_type = type(obj)
        protocol = entry.any_protocol
    if not (entry.equivalent >> protocol) & 1:
        return None
    if entry.kind == READER_GENERIC or entry.kind == READER_CORE:
        return _read(entry, obj, stream, 0)     # the protocol's own reader: its answer stands
    # The read itself, outside any try block: a try saves and restores the thread's exception
    # state on every call (about a sixth of this path's instructions); a failed read is
    # handled by _after_failed_read instead.
    cdef PyObject* read = (<_unchecked_read_t> _read)(entry, obj, stream, protocol)
    if read == NULL:
        return _after_failed_read(obj, stream, protocol)
    cdef StridedMemoryView v = <StridedMemoryView> read
    Py_DECREF_steal(read)       # v holds the reference _read returned
    if not _same_as_protocol(entry, obj, v, protocol):
        return None
    if v.owner is not obj and Py_REFCNT(v) == 1:
        # A reader that read an alias of obj (torch's fallback reads a tensor that requires
        # grad through its detached alias): the protocol's view names obj, and so does this
        # one, made for this call alone; the alias stays held as the keep-alive.
        v.owner = obj
    return v


cdef enum:
    KDL_CPU = 1
    KDL_CUDA = 2


cdef int _same_as_protocol(ReaderEntry entry, object obj, StridedMemoryView v,
                           int protocol) except -1:
    # Whether the protocol's own reading of obj gives the view the reader made.  Memory a
    # protocol cannot describe at all is the protocol's to refuse (torch's CUDA Array Interface
    # of a CPU tensor raises AttributeError): host memory for the CUDA Array Interface, device
    # memory for the host protocols.  The rest is the plugin's to say, per object.
    cdef interop_core_tensor_info info
    cdef int answer
    if protocol == PROTOCOL_CAI:
        if v.rec.device_type == KDL_CPU:
            return 0
    elif protocol == PROTOCOL_ARRAY_INTERFACE or protocol == PROTOCOL_BUFFER:
        if v.rec.device_type == KDL_CUDA:
            return 0
    if entry.check_of[protocol] == NULL:
        return 1
    if entry.check_fns[protocol] != NULL:
        _describe_record(&v.rec, &info)
        answer = (<interop_core_equivalence_check_v1> entry.check_fns[protocol])(
            <PyObject*> obj, protocol, &info)
        if answer < 0:
            if PyErr_Occurred() == NULL:
                raise SystemError(f"the equivalence check of plugin {entry.plugin!r} returned "
                                  f"{answer} without setting an exception")
            return -1
        return answer != 0
    return bool((<object> entry.check_of[protocol])(obj, _EQUIVALENCE_NAMES[protocol], v))


cdef PyObject* _entry_after_miss(object obj) except? NULL:
    # What view() would have put in the table for type(obj), without reading obj: plugins
    # first, then a registered base class, then the generic protocol (NULL: none applies).
    # The table holds the entry afterwards, so this runs once per type.
    cdef type t = type(obj)
    cdef PyObject* found
    cdef ReaderEntry entry
    if _miss_handler is None:
        from interop_core import plugins  # noqa: F401  (installs the handler on import)
    if _miss_handler is not None:
        _miss_handler(t)
    # Asked again whatever the handler answered: another thread's miss of the same type may
    # have registered it while this one waited for the plugins' lock.
    found = _lookup(<PyObject*> t)
    if found != NULL:
        return found
    for base in t.__mro__[1:]:
        found = _lookup(<PyObject*> base)
        if found != NULL:
            entry = <ReaderEntry> found
            if entry.subclasses and entry.kind != READER_GENERIC and entry.kind != READER_SELF:
                return _cache(t, entry)
    cdef int protocol = choose_protocol(obj)
    if protocol == PROTOCOL_NONE:
        return NULL
    return _cache(t, _generic_entry(protocol))


install_fast_from(view_if_equivalent)


cdef object read_unordered(object obj, object stream, ViewRecord* rec, uint64_t batch,
                           bint in_call=False):
    cdef PyObject* found = _lookup(<PyObject*> Py_TYPE(obj))
    cdef PyObject* held = NULL
    cdef ReaderEntry entry
    cdef StridedMemoryView v
    if found == NULL:
        # First sight of this type: the miss path decides (and orders this one object itself).
        v = _view_miss(obj, stream)
        hold_memory(v)
        record_copy(rec, &v.rec)
        return v
    entry = <ReaderEntry> found
    if entry.kind == READER_SELF:
        v = <StridedMemoryView> obj
        hold_memory(v)      # every caller of this function uses the memory
        if stream is not None and v.rec.device_type != 1:
            knows_producer_stream(v)
        record_copy(rec, &v.rec)
        return v
    if entry.kind == READER_GENERIC:
        # A DLPack producer orders itself before the consumer stream it is handed; the CUDA
        # Array Interface's stream is recorded as the producer's, for the caller to order.
        v = view_by_protocol(entry.protocol, obj,
                             stream if entry.protocol == PROTOCOL_DLPACK else None)
        record_copy(rec, &v.rec)
        return v
    if entry.kind == READER_CORE:
        keepalive = entry.core(obj, stream, rec)
    elif entry.kind == READER_CAPSULE:
        if (_read_capsule_into(entry, obj, stream, rec, &held, batch,
                               INTEROP_CORE_USES_MEMORY_IN_CALL if in_call
                               else INTEROP_CORE_USES_MEMORY_AT_ONCE, 0)
                == INTEROP_CORE_READ_DECLINED):
            keepalive = _copied(_declined(entry, obj, stream, 0), rec)
        elif held == NULL:
            keepalive = obj
        else:
            keepalive = <object> held
            Py_DECREF_steal(held)
            # Every caller of this function uses the memory: a deferred hold is taken now,
            # unless the caller takes it itself where needed (in_call).
            if not in_call:
                keepalive = used_keepalive(keepalive)
    else:
        keepalive = _copied(_fill(entry, obj, stream, 0), rec)
    # A type declared immutable reads read-only, as view() makes it (to() relies on it).
    if entry.readonly:
        rec.readonly = True
    if stream is not None and rec.device_type != 1:
        _learn_producer(entry, rec, obj)
    return keepalive


cdef inline StridedMemoryView _copied(StridedMemoryView v, ViewRecord* rec):
    # `v`'s record into the caller's; `v` is then what keeps the memory alive (held now: the
    # callers use the memory).
    hold_memory(v)
    record_copy(rec, &v.rec)
    return v


def compare_readers(ReaderEntry entry not None, ReaderEntry reference not None, obj,
                    bint compare_streams=False):
    """How ``entry``'s reader and ``reference`` read ``obj`` differently (validation), or None.

    Returns
    -------
    str or None
        The first difference (pointer, shape, strides, dtype, device, read-only flag unless
        ``entry`` declares its type read-only, and the producer stream when
        ``compare_streams``), ``None`` when they agree, and ``"declined"``
        when ``entry``'s reader declined ``obj``.
    """
    cdef StridedMemoryView got, want
    if entry.kind == READER_CAPSULE:
        result = _capsule_view(entry, obj, None, 0)
    elif entry.kind == READER_PYTHON:
        result = entry.reader(obj, None)
    else:
        result = _fill(entry, obj, None, 0)
    if result is None or result is NotImplemented:
        return "declined"
    got = <StridedMemoryView?> result
    want = _fill(reference, obj, None, 0)
    if entry.readonly:
        # A type declared immutable: the core makes every view of it read-only, whatever the
        # reader reports (a legacy DLPack capsule cannot say so), so the flag is no difference.
        got.rec.readonly = want.rec.readonly = True
    return record_difference(&got.rec, &want.rec,
                             f"{type(obj).__qualname__} of shape {want.shape}", compare_streams)


def read_with(ReaderEntry entry not None, obj, stream=None):
    """Run one entry's reader on ``obj`` directly, bypassing the type lookup.

    For benchmarks and tests of the dispatch itself: ``view(obj)`` is exactly this plus the
    lookup of ``type(obj)`` in the table.
    """
    return _read(entry, obj, stream, 0)


def view(obj, stream=None):
    """View any tensor-like object as a :class:`StridedMemoryView`, zero-copy.

    The object's exact type selects the reader a plugin registered for it (a table lookup in
    C); types no plugin knows are read through the generic protocols (DLPack C exchange API,
    ``__dlpack__``, CUDA Array Interface, array interface, buffer protocol), a choice made once
    per type.  Subclasses use a base class's reader only when its plugin allows it.

    Parameters
    ----------
    obj : object
        A tensor, array, view, or anything exporting one of the protocols above.
    stream : None, int or stream object, optional
        The consumer stream.  ``None`` or ``-1``: no synchronisation (metadata only).

    Returns
    -------
    StridedMemoryView
        ``obj`` itself when it already is one.

    Raises
    ------
    TypeError
        If nothing can read ``obj``; the message names its type and what was tried.
    ValueError
        If ``obj`` describes its memory in a way no view can hold (a malformed interface
        dict, an element format with no DLPack type, offsets beyond int64), naming the field
        and the value.
    BufferError
        If ``obj``'s plugin or protocol refuses to hand its memory out (a deleted jax array,
        a torch tensor with its negative bit set, memory on another process's device).
    """
    # view_object's body, spelled out: a call less on the hottest path.
    cdef PyObject* found = _lookup(<PyObject*> Py_TYPE(obj))
    if found != NULL:
        return _read(<ReaderEntry> found, obj, stream, 0)
    return _view_miss(obj, stream)


_install(_base_entries())
