# ``to()``: hand any tensor-like object to another framework without a copy.
#
# Compiled, as view() is: a handoff is view() plus one exporter call, and the Python of a
# plain function around them (argument parsing, a module attribute, a dict lookup, the read-only
# check) cost ~0.25 us per call, a quarter of what numpy's own np.asarray of a jax array costs.
# Here the common case (no device=, copy= or shards) is one dict lookup, the core's compiled
# view, and the exporter call.
#
# A compiled exporter (a CExporter: a C function on interop_core.h) gets even less in between:
# without a stream, device= or copy=, the source's reader fills a record on the stack
# (read_unordered: no view object for compiled readers) and the exporter builds its object from
# that, held alive by the reader's keep-alive (the source itself, or what holds its memory).
# A view object would only be made, filled, read back and freed again (~0.1 us).

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from ..core._record cimport ViewRecord, extents_free, record_init
from ..core._view cimport StridedMemoryView
from ..registry._registry cimport CExporter, export_record, read_unordered, view_object

import warnings

from .. import plugins
from ..shards._shards import Shards

__all__ = ["to"]

# (source type, target name) -> the ReadOnlyHandoffWarning message: built once, since a handoff
# of a read-only source (every jax array) warns on every call.  Owned here.
cdef dict _READ_ONLY_MESSAGES = {}
# warnings.warn, looked up once (a C function of the interpreter's _warnings module).
cdef object _warn = warnings.warn
# interop_core.plugins.ReadOnlyHandoffWarning (the module owns the class too).
cdef object _ReadOnlyHandoffWarning = plugins.ReadOnlyHandoffWarning

# A read-only handoff warns on every call, and warnings.warn costs ~0.5 us even when the
# warning is filtered out (it finds the caller's frame and warning registry first).  A warning
# the filters certainly ignore, whoever calls, is not issued at all: message -> True when the
# first filter that matches it is "ignore" without a module or line condition (one with such a
# condition depends on the caller: then warnings.warn decides, every call).  Decided against
# the filter list seen last, compared by identity, length and first entry: what
# warnings.simplefilter, filterwarnings, resetwarnings and catch_warnings change (each inserts
# a new first entry, changes the length or swaps the list), as the interpreter's own registry
# cache assumes.  The references keep the compared objects alive, so an address is never reused.
cdef dict _IGNORED = {}
cdef object _filters_seen = None      # the warnings.filters list _IGNORED was decided against
cdef object _filters_first = None     # its first entry then (None: it was empty)
cdef Py_ssize_t _filters_len = -1     # its length then
# The warnings module's namespace: `filters` is rebound there (catch_warnings), so it is read
# on every call, as a dict lookup (the module owns the dict; this is one more reference).
cdef dict _warnings_namespace = warnings.__dict__
# The last read-only handoff (source type, target name; references owned here, so neither can
# be freed and its address reused) with its message and whether the filters ignore it (-1: not
# decided against the current filters): a loop handing one kind of source over skips the
# message lookup and the decision.
cdef object _last_type = None
cdef object _last_name = None
cdef str _last_message = None
cdef int _last_ignored = -1


def to(obj, target, stream=None, *, device=None, copy=None, **options):
    """The ``target`` framework's object over the same memory as ``obj``.

    Parameters
    ----------
    obj : object
        A view or anything :func:`interop_core.view` accepts, or a :class:`Shards` collection
        (:func:`interop_core.shards`), which the target's plugin assembles: a jax global array
        (``to(shards, "jax", sharding=...)``), per-device torch tensors or a ``DTensor``
        (``to(shards, "torch", device_mesh=..., placements=...)``), else one object per shard.
    target : str or type
        An exporter name a plugin registered (``"numpy"``, ``"torch"``, ...), or a type one of
        them produces (``numpy.ndarray``, ``torch.Tensor``, ...).
    stream : None, int or stream object, optional
        The consumer stream; ``None`` or ``-1`` for no synchronisation.  For shards also a
        dict ``{CUDA device id: stream}``.
    device : str, tuple or device object, optional
        Where the result must live, as the array API's ``from_dlpack(x, device=)``:
        ``"cpu"``, ``"cuda:1"``, a DLPack ``(device_type, device_id)`` pair, or a framework's
        device object whose ``str()`` is such a name (``torch.device``).  None: ``obj``'s
        device.  Another device means a copy (made on ``stream``; see the "Copies" page).
        Not for shards, which stay on their devices.
    copy : bool, optional
        As ``from_dlpack(x, copy=)``: True always copies, False never does (``BufferError``
        when ``device`` needs a copy), None copies only when needed.  Not for shards.
    **options
        Only for shards: passed to the target's assembler (``sharding=`` for jax,
        ``device_mesh=`` and ``placements=`` for torch).

    Returns
    -------
    object
        Shares memory with ``obj`` (same pointer) and keeps its owner alive, unless a copy
        was asked for or needed.

    Raises
    ------
    TypeError
        If options are given for something other than shards, or the assembler rejects them.
    ValueError
        If no plugin exports to ``target``, or (shards) the options do not match the shards.
    BufferError
        With ``copy=False`` when ``device`` is not ``obj``'s.

    Warns
    -----
    ReadOnlyHandoffWarning
        When ``obj`` is read-only and the target cannot mark its objects read-only (torch,
        cupy, numba): the result is still zero-copy, but nothing stops writes through it.
    """
    cdef StridedMemoryView v
    cdef dict table
    cdef tuple found
    if type(obj) is Shards:
        if device is not None or copy is not None:
            raise TypeError("to(shards, ...) takes no device= or copy=: every shard stays on "
                            "its own device, zero-copy (copy a shard's view to move it)")
        from ..shards._assemble import assemble

        return assemble(obj, target, stream, options)
    if options:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(options)}: options such "
                        "as sharding= apply only to shards (interop_core.shards())")
    # Replaced whole (never mutated) when plugins change: read it afresh on every call.
    table = plugins.export_table
    found = table.get(target)
    if found is None:
        found = plugins.exporter_for(target)   # first use: discovery, lazy type resolution
    exporter, preserves_readonly, name = found
    if type(exporter) is CExporter and stream is None and device is None and copy is None:
        return _export_record(<CExporter> exporter, obj, preserves_readonly, name)
    v = view_object(obj, stream)
    if device is not None or copy is not None:
        from ..copies._copy import place

        v = place(v, device, copy, stream)
    if v.rec.readonly and not preserves_readonly:
        _warn_read_only(obj, name)
    return exporter(v, stream)


cdef object _export_record(CExporter exporter, object obj, bint preserves_readonly,
                           object name):
    """to(obj, target) for a compiled exporter, no stream: the record straight to it."""
    cdef ViewRecord rec
    record_init(&rec)
    try:
        # Without a stream nothing is ordered, as view(obj) orders nothing.
        keepalive = read_unordered(obj, None, &rec, 0)     # no launch batch
        if rec.readonly and not preserves_readonly:
            _warn_read_only(obj, name)
        return export_record(exporter, &rec, keepalive, None)
    finally:
        extents_free(&rec.ext)     # heap extents of more than INLINE_NDIM dimensions


cdef int _warn_read_only(object obj, object name) except -1:
    global _last_type, _last_name, _last_message, _last_ignored
    t = type(obj)
    if t is not _last_type or name is not _last_name:
        key = (t, name)
        message = _READ_ONLY_MESSAGES.get(key)
        if message is None:
            message = _READ_ONLY_MESSAGES[key] = (
                f"to({t.__name__}, {name!r}): the source is read-only but {name} objects "
                "cannot be; the result shares its memory, so do not write through it")
        _last_type, _last_name, _last_message, _last_ignored = t, name, message, -1
    if _filters_changed() or _last_ignored < 0:
        ignored = _IGNORED.get(_last_message)
        if ignored is None:
            ignored = _IGNORED[_last_message] = _first_filter_ignores(_last_message)
        _last_ignored = 1 if ignored else 0
    if _last_ignored:
        return 0
    # to() runs no Python frame of its own: stacklevel 1 names its caller.
    _warn(_last_message, _ReadOnlyHandoffWarning, 1)
    return 0


cdef bint _filters_changed() except -1:
    """Whether warnings.filters changed since the decisions in _IGNORED (then forgets them)."""
    global _filters_seen, _filters_first, _filters_len
    filters = _warnings_namespace.get("filters")
    cdef Py_ssize_t n = len(filters) if type(filters) is list else -2
    first = (<list> filters)[0] if n > 0 else None
    if filters is _filters_seen and n == _filters_len and first is _filters_first:
        return False
    _IGNORED.clear()
    _filters_seen = filters
    _filters_first = first
    _filters_len = n
    return True


cdef bint _first_filter_ignores(str message) except -1:
    """Whether the first filter matching a ReadOnlyHandoffWarning with `message` from any caller
    is "ignore" (False when it depends on the caller, or when none matches: the default)."""
    if type(_filters_seen) is not list:
        return False
    try:
        for action, pattern, category, module, lineno in <list> _filters_seen:
            if not issubclass(_ReadOnlyHandoffWarning, category):
                continue
            if pattern is not None and not pattern.match(message):
                continue
            if module is not None or lineno:
                return False
            return action == "ignore"
    except Exception:    # a filter list edited by hand into another shape: let warnings decide
        return False
    return False
