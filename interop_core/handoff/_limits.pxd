# What a target framework can import: ImportLimits, declared by an exporter's plugin and checked
# by to() on the view record before the exporter runs (see _limits.pyx).

from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint32_t, uint64_t

from ..core._record cimport ViewRecord

# What a record can break.  The layout bits and the alignment bit are fixed by a dense copy;
# a span beyond int64 describes no memory (no copy helps); the device bit needs device=.
cdef enum LimitBit:
    LIMIT_NEGATIVE_STRIDES = 1
    LIMIT_ZERO_STRIDES = 2
    LIMIT_OVERLAPPING = 4
    LIMIT_COMPACT = 8            # must be a permutation of a dense layout
    LIMIT_C_CONTIGUOUS = 16      # must be dense row-major
    LIMIT_ALIGNMENT = 32         # host memory's address must be a multiple of host_alignment
    LIMIT_SPAN = 64              # byte offsets reached must fit int64 (with any layout limit)
    LIMIT_DEVICE = 128           # the memory's DLPack device type must be one it imports
    LIMIT_CHECK = 256            # a dynamic check (the plugin's callable) applies

cdef enum:
    MAX_CHECK_DTYPES = 16        # dtypes held in C for the dynamic check's filter


cdef class ImportLimits:
    cdef readonly bint negative_strides
    """bool: The target imports negative strides."""
    cdef readonly bint zero_strides
    """bool: The target imports zero (broadcast) strides."""
    cdef readonly bint overlapping
    """bool: The target imports layouts whose elements overlap."""
    cdef readonly str layout
    """str: ``"strided"`` (any strides the flags allow), ``"compact"`` or ``"c_contiguous"``."""
    cdef readonly Py_ssize_t host_alignment
    """int: Bytes the address of host memory must be a multiple of (1: any)."""
    cdef readonly tuple device_types
    """tuple of int or None: The DLPack device types the target imports (None: any)."""
    cdef readonly object check        # callable(view) -> None or str; owned, may be None
    """callable or None: ``check(view) -> None or str``, for limits no copy fixes."""
    cdef readonly tuple check_dtypes
    """tuple or None: The DLPack dtypes ``check`` is asked about (None: every view)."""
    cdef readonly object resolve_device   # callable(device) -> (type, id, handle); may be None
    """callable or None: ``resolve_device(device) -> (device_type, device_id, handle)``."""
    cdef readonly object source_device    # callable(view) -> handle or None; may be None
    """callable or None: ``source_device(view) -> handle or None``, where a copy lands."""
    cdef readonly object name         # the exporter target, for messages (set at registration)
    """str or None: The target these limits belong to (set when registered)."""

    cdef bint has_check               # check is not None
    cdef int layout_bits              # LIMIT_* bits checked on the layout and address
    cdef bint device_any              # every device type is imported (device_types None)
    cdef uint64_t device_mask         # bit t set: DLPack device type t (< 64) imported
    cdef int n_check_dtypes           # -1: ask check for every dtype
    cdef uint32_t check_dtype_keys[MAX_CHECK_DTYPES]


# Which LIMIT_* bit (one) the record breaks among layout_bits, or 0; LIMIT_SPAN first.
cdef int layout_problem(ImportLimits limits, const ViewRecord* rec) noexcept

# Whether the record's memory kind is one the target imports.
cdef inline bint device_imported(ImportLimits limits, const ViewRecord* rec) noexcept:
    return limits.device_any or (0 <= rec.device_type < 64
                                 and (limits.device_mask >> rec.device_type) & 1)

# Whether the dynamic check applies to the record's dtype.
cdef bint check_applies(ImportLimits limits, const ViewRecord* rec) noexcept

# Whether the target takes the record as it is: its memory kind, no layout limit broken, no
# dynamic check to ask.  What to() asks on every call (inline: a few loads for most targets).
cdef inline bint takes_as_is(ImportLimits limits, const ViewRecord* rec) noexcept:
    if not device_imported(limits, rec):
        return False
    if limits.layout_bits and layout_problem(limits, rec):
        return False
    return not (limits.has_check and check_applies(limits, rec))

# What the record breaks, in words: (limit, value), for messages.
cdef tuple describe_problem(ImportLimits limits, int problem, const ViewRecord* rec)


# A source type's export rule (registry.add_export_rule): a C function from a capsule named
# "interop_core.export_rule_v1" (0: exportable; -1 with an exception set), or a Python callable.
ctypedef int (*export_rule_fn)(PyObject* obj) noexcept

cdef class ExportRule:
    cdef export_rule_fn fn            # NULL for a Python callable
    cdef readonly object rule         # what the plugin registered (owned: keeps `fn` valid)
    """callable or PyCapsule: What the plugin registered."""
    cdef readonly bint subclasses
    """bool: Whether the rule also applies to subclasses of its type."""

# A Python rule applied; a C rule's failure reported (-1 with its exception set).
cdef int call_python_rule(ExportRule rule, object obj) except -1
cdef int rule_failed() except -1

# Apply `rule` to `obj`: 0, or -1 with the rule's exception set (inline: a C rule is one
# indirect call).
cdef inline int apply_rule(ExportRule rule, object obj) except -1:
    if rule.fn != NULL:
        if rule.fn(<PyObject*> obj) == 0:
            return 0
        return rule_failed()
    return call_python_rule(rule, obj)
