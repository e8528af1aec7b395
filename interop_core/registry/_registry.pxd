# The per-object hot path: exact type -> reader, in a C hash table, never through pluggy.

from cpython.object cimport PyObject
from libc.stdint cimport uint64_t

from ..abi cimport interop_core_exporter_v1
from ..core._record cimport ViewRecord

# A core reader: fill `rec` from `obj`, return the object that keeps the memory alive.  `stream`
# arrives resolved (see _streams.canonical_stream): None, or the consumer's CUstream as an int.
ctypedef object (*core_reader_t)(object obj, object stream, ViewRecord* rec)

cdef enum ReaderKind:
    READER_CORE = 1       # a compiled reader of the core, chosen by name
    READER_PYTHON = 2     # a Python callable (obj, stream) -> StridedMemoryView
    READER_CAPSULE = 3    # a C function behind a PyCapsule (include/interop_core.h)
    READER_GENERIC = 4    # no plugin: the generic protocol chosen for this type
    READER_SELF = 5       # StridedMemoryView itself


cdef class ReaderEntry:
    cdef readonly int kind
    """int: 1 core reader, 2 Python callable, 3 C capsule, 4 generic protocol, 5 a view itself."""
    cdef core_reader_t core           # READER_CORE
    cdef void* c_reader               # READER_CAPSULE: interop_core_reader_v1 or _v2
    cdef int c_version                # READER_CAPSULE: 1 or 2 (the capsule's name says which)
    cdef readonly int protocol        # READER_GENERIC: a _view.Protocol value
    """int: The generic protocol (kind 4): 2 DLPack, 3 CUDA Array Interface, 4 array interface, 5 buffer."""
    cdef readonly object reader       # what was registered: a name, a callable or a capsule
                                      # (the capsule is kept alive here, and with it c_reader)
    """str, callable or PyCapsule: What the plugin registered as the reader."""
    cdef readonly object plugin       # name of the plugin that registered it (None: built in)
    """str or None: The plugin that registered it (None for the generic protocols)."""
    cdef readonly bint subclasses     # whether subclasses may use it (through the MRO walk)
    """bool: Whether subclasses of the type may use this reader."""
    cdef readonly object producer_stream  # callable(obj) -> CUstream or None, or None
    """callable or None: ``callable(obj) -> int or None``, the producer's current CUDA stream."""
    cdef readonly bint readonly       # the type's objects are immutable: every view read-only
    """bool: Whether the plugin declared the type's objects immutable (views are read-only)."""
    cdef readonly object type_path    # "module:QualName" as declared, for messages
    """str or None: The type as declared, ``"module:QualName"``."""
    cdef readonly ReaderEntry fallback  # owned: reads what this reader declines, and replaces
                                        # it when its validation fails (None: no fallback)
    """ReaderEntry or None: The reader for objects this one declines, and its replacement when
    validation fails."""
    cdef readonly object prepare      # callable() -> None / str / dict, run once (validation)
    """callable or None: The plugin's own check, run once before the reader's first use."""
    cdef readonly object canaries     # callable() -> iterable of objects (validation)
    """callable or None: Objects the reader must read exactly as its fallback does."""
    cdef int equivalent               # bit (1 << Protocol) set for each exchange protocol this
                                      # reader reads exactly as (StridedMemoryView.from_*)
    cdef readonly object equivalence_check  # owned: {protocol name: the plugin's check (a
                                            # capsule, which keeps check_fns valid, or a
                                            # callable)}, or None
    """dict or None: Per protocol, asked per object whether the reader's view is the
    protocol's (``equivalence_check=`` of ``add_type``)."""
    cdef PyObject* check_of[6]        # borrowed from equivalence_check: per Protocol, or NULL
    cdef void* check_fns[6]           # per Protocol: interop_core_equivalence_check_v1, or NULL
    cdef object any_type              # owned: the last type from_any read through this entry,
    cdef int any_protocol             # and the protocol from_any chooses for it


# Make a compiled reader of the core's protocols available to plugins by name
# (`registry.add_type(..., reader=name)` or `fallback=name`).
cdef int add_core_reader(str name, core_reader_t fn) except -1

# The body of view() (exact-type lookup, reader, stream ordering), for compiled callers.
cdef object view_object(object obj, object stream)

# The from_* classmethods' fast path: the view the type's registered reader makes when the plugin
# declared it equivalent to `protocol` (a _view.Protocol), or None (the protocol path decides).
cdef object view_if_equivalent(object obj, object stream, int protocol)

# The launch path's read: fill `rec` (initialised by the caller) from `obj` and return what
# keeps the memory alive.  `stream` is canonical (None, or an int handle from canonical_stream).
# Nothing is ordered here (the caller orders each distinct producer stream once), except by
# DLPack producers, which order themselves before the consumer stream they are handed, and on a
# type's first sight (the miss path orders that one object).  With a stream, the producer's
# stream is recorded in `rec` when known (the reader's, else the plugin's strategy).  `batch`:
# the same non-zero number for every object of one launch_args call (interop_core.h, `batch`).
# `in_call`: nothing made from the read outlives the caller's call (a Triton launch), so a
# reader's deferred keep-alive is returned as it is, for the caller to take (used_keepalive)
# only should Python code run before the memory is used; otherwise it is taken here.
cdef object read_unordered(object obj, object stream, ViewRecord* rec, uint64_t batch,
                           bint in_call=*)


# An exporter compiled against interop_core.h (new_exporter wraps its capsule): callable as
# `exporter(view, stream)` like any exporter, and, for to(), callable on a record directly.
cdef class CExporter:
    cdef interop_core_exporter_v1 fn   # the C function held by `capsule`
    cdef readonly object capsule       # what the plugin registered (owned: keeps `fn` valid)
    """PyCapsule: What the plugin registered, named ``"interop_core.exporter_v1"``."""


# Hand `rec` to a compiled exporter; `owner` keeps the memory alive (the reader's keep-alive,
# or a view) and is held by the result.  Returns the exporter's object.
cdef object export_record(CExporter exporter, const ViewRecord* rec, object owner,
                          object stream)
