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
#
# Before any exporter runs, two things are checked, each in C on the common path:
# - the source type's export rule (registry.add_export_rule: torch refuses tensors that require
#   grad), found by comparing the source's type with the few types that declared one;
# - the target's import limits (registry.add_exporter(..., limits=ImportLimits)): for a target
#   that takes every layout (numpy, cupy) one int and one bit are read; otherwise the record's
#   strides are walked once.  A source the target cannot take as it is leaves the fast path for
#   _handoff, which copies (copy=None / True) or raises BufferError naming limit, value and fix.

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_TYPE
from cpython.type cimport PyType_IsSubtype

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from ..core._record cimport MAX_CACHED_TYPES, ViewRecord, extents_free, record_init
from ..core._view cimport StridedMemoryView, hold_memory
from ..registry._registry cimport CExporter, export_record, read_unordered, view_object
from ._limits cimport (
    LIMIT_C_CONTIGUOUS,
    LIMIT_SPAN,
    ExportRule,
    ImportLimits,
    apply_rule,
    check_applies,
    describe_problem,
    layout_problem,
    takes_as_is,
)

import warnings

from .. import plugins
from ..shards._shards import Shards

__all__ = ["to", "export_checked"]

# --- export rules of source types (registry.add_export_rule), installed by plugins -------------

cdef enum:
    MAX_RULES = 8          # rules compared in C; more go through a dict

# The source types with a rule and their ExportRule objects, borrowed from _rules (which owns
# the dict plugins installed: its keys are the types, its values the rules).
cdef PyObject* _rule_types[MAX_RULES]
cdef PyObject* _rule_objects[MAX_RULES]
cdef int _n_rules = 0                 # entries in the arrays above
cdef dict _rules = {}                 # type -> ExportRule (owned; replaced whole)
cdef bint _rules_in_dict = False      # more than MAX_RULES: look up _rules instead
# The rules that apply to subclasses too, as (type, ExportRule) pairs (owned), asked only for
# a type without an exact rule of its own: a subclass of torch.Tensor is refused as a tensor is.
cdef tuple _subclass_rules = ()


def _install_rules(dict rules):
    """Called by plugins with the winning rules (type -> ExportRule) whenever they change."""
    global _n_rules, _rules, _rules_in_dict, _subclass_rules
    cdef int i = 0
    _n_rules = 0          # nothing is read while the arrays change (the GIL is held)
    _rules = dict(rules)
    _subclass_rules = tuple((t, rule) for t, rule in _rules.items()
                            if (<ExportRule> rule).subclasses)
    _rules_in_dict = len(_rules) > MAX_RULES
    if _rules_in_dict:
        return
    for t, rule in _rules.items():
        _rule_types[i] = <PyObject*> t
        _rule_objects[i] = <PyObject*> rule
        i += 1
    _n_rules = i


cdef inline int _apply_rules(object obj) except -1:
    cdef PyObject* t = <PyObject*> Py_TYPE(obj)
    cdef int i
    for i in range(_n_rules):
        if _rule_types[i] == t:
            return apply_rule(<ExportRule> _rule_objects[i], obj)
    if _rules_in_dict:
        rule = _rules.get(type(obj))
        if rule is not None:
            return apply_rule(<ExportRule> rule, obj)
    for base, rule in _subclass_rules:
        if PyType_IsSubtype(type(obj), base):
            return apply_rule(<ExportRule> rule, obj)
    return 0


plugins._on_export_rules_change(_install_rules)

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
        device object whose ``str()`` is such a name (``torch.device``); for jax also its
        device objects and ``"cpu:N"`` (jax's host devices).  None: ``obj``'s device (a jax
        array on jax's CPU device N handed to jax stays on device N, as is or copied; other
        host memory goes to jax's first CPU device).  Another device means a copy (made on
        ``stream``; see the "Copies" page).  A device the target does not have raises
        ``ValueError``.  Not for shards, which stay on their devices.
    copy : bool, optional
        As ``from_dlpack(x, copy=)``: True always hands over new memory, False never copies
        (``BufferError`` when ``device`` or the target's import limits need a copy), None
        copies only when needed (a device move, or a layout or address the target cannot
        import: a dense copy on the source's device, made on ``stream``).  Not for shards.
    **options
        Only for shards: passed to the target's assembler (``sharding=`` for jax,
        ``device_mesh=`` and ``placements=`` for torch).

    Returns
    -------
    object
        Shares memory with ``obj`` (same pointer) and keeps its owner alive, unless a copy
        was asked for or needed.  Its dtype is always ``obj``'s.

    Raises
    ------
    TypeError
        If options are given for something other than shards, or the assembler rejects them.
    ValueError
        If no plugin exports to ``target``, ``device`` names a device the target does not have
        (a host device other than 0, except for a target with several: jax), or (shards) the
        options do not match the shards.
    ModuleNotFoundError
        If ``target`` is a framework a plugin exports to that is not installed here (raised as
        the plugin imports it, naming the module).
    BufferError
        When the target cannot take ``obj`` as it is (a layout, address or device its
        framework cannot import: see :class:`interop_core.ImportLimits`) and ``copy=False``
        forbids the copy that would fix it; whatever ``copy`` says, for what no copy fixes
        (memory on a device type the target does not import without ``device=``, a dtype it
        cannot hold as configured: jax's 64-bit types without ``jax_enable_x64``), and when
        ``obj``'s framework refuses to export it (a torch tensor that requires grad: use
        ``.detach()``).

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
        from ..shards._shards import check_stream_argument

        check_stream_argument(stream)
        return assemble(obj, target, stream, options)
    if options:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(options)}: options such "
                        "as sharding= apply only to shards (interop_core.shards())")
    # Replaced whole (never mutated) when plugins change: read it afresh on every call.
    table = plugins.export_table
    found = table.get(target)
    if found is None:
        found = plugins.exporter_for(target)   # first use: discovery, lazy type resolution
    exporter, preserves_readonly, name, limits = found
    if type(exporter) is CExporter and stream is None and device is None and copy is None:
        return _export_record(<CExporter> exporter, obj, preserves_readonly, name, limits)
    v = view_object(obj, stream)
    hold_memory(v)          # the export hands the memory over
    if _n_rules or _rules_in_dict:
        _apply_rules(obj)
    if device is None and copy is None and (limits is None
                                            or takes_as_is(<ImportLimits> limits, &v.rec)):
        if v.rec.readonly and not preserves_readonly:
            _warn_read_only(obj, name)
        return _exported(exporter(v, stream), name)
    return _handoff(exporter, v, obj, name, preserves_readonly, limits, device, copy, stream,
                    True)


cdef object _export_record(CExporter exporter, object obj, bint preserves_readonly,
                           object name, object limits):
    """to(obj, target) for a compiled exporter, no stream: the record straight to it."""
    cdef ViewRecord rec
    record_init(&rec)
    try:
        # Without a stream nothing is ordered, as view(obj) orders nothing.
        keepalive = read_unordered(obj, None, &rec, 0)     # no launch batch
        if _n_rules or _rules_in_dict:
            _apply_rules(obj)
        if limits is None or takes_as_is(<ImportLimits> limits, &rec):
            if rec.readonly and not preserves_readonly:
                _warn_read_only(obj, name)
            return export_record(exporter, &rec, keepalive, None)
    finally:
        extents_free(&rec.ext)     # heap extents of more than INLINE_NDIM dimensions
    # Something to copy or refuse: the general path, on a view.
    return _handoff(exporter, view_object(obj, None), obj, name, preserves_readonly, limits,
                    None, None, None, True)


# interop_core.copies._copy, imported on the first copy or device= (it loads the CUDA memory
# layer and the PTX sources: not for `import interop_core`).
cdef object _copy_module = None


cdef object _copies():
    global _copy_module
    if _copy_module is None:
        from ..copies import _copy

        _copy_module = _copy
    return _copy_module


cdef str _call_text(object obj, object name, object device, object copy):
    """How the user's call reads, for messages: to(Tensor, 'numpy', copy=False)."""
    text = f"to({type(obj).__name__}, {name!r}"
    if device is not None:
        text += f", device={device!r}"
    if copy is not None:
        text += f", copy={copy!r}"
    return text + ")"


cdef str _device_hint(ImportLimits limits):
    types = limits.device_types or ()
    if 1 in types:
        return "pass device='cpu' to copy it to host memory"
    if 2 in types:
        return "pass device='cuda:N' to copy it to a CUDA device"
    return f"copy it to memory of one of those types first"


cdef tuple _resolve_device(ImportLimits limits, object device, object obj, object name,
                           object copy):
    """(the DLPack (type, id) the memory must be on, the exporter's device handle or None)."""
    if limits is not None and limits.resolve_device is not None:
        resolved = limits.resolve_device(device)
        if type(resolved) is not tuple or len(<tuple> resolved) != 3:
            raise TypeError(f"the {name!r} exporter's resolve_device returned {resolved!r}, "
                            "not a (device_type, device_id, handle) tuple")
        return ((int(resolved[0]), int(resolved[1])), resolved[2])
    try:
        return (_copies().device_pair(device), None)
    except (ValueError, TypeError, BufferError) as exc:
        raise type(exc)(f"{_call_text(obj, name, device, copy)}: {exc}") from None


cdef object _handoff(object exporter, StridedMemoryView v, object obj, object name,
                     bint preserves_readonly, ImportLimits limits, object device, object copy,
                     object stream, bint warn):
    """The general path of to(): device=, copy=, and sources the target cannot take as they
    are.  Decides everything before copying anything; the exporter gets a view it takes."""
    cdef int problem = 0
    cdef int lands_on
    cdef tuple target = None
    cdef bint moves = False
    handle = None
    hold_memory(v)
    if copy is not None and copy is not True and copy is not False:
        raise TypeError(f"to(): copy must be None, True or False, got {copy!r}")
    if device is not None:
        target, handle = _resolve_device(limits, device, obj, name, copy)
        moves = not _copies().is_on(v, target)
    if limits is not None:
        # What no copy fixes comes first: the target's own check (a dtype it cannot hold as
        # configured), memory it does not import, a span that describes no memory.
        if check_applies(limits, &v.rec):
            said = limits.check(v)
            if said is not None:
                raise BufferError(f"{_call_text(obj, name, device, copy)}: {said}")
        lands_on = target[0] if target is not None and (moves or copy is True) else \
            v.rec.device_type
        if not (limits.device_any or (0 <= lands_on < 64
                                      and (limits.device_mask >> lands_on) & 1)):
            if lands_on == v.rec.device_type:
                where = f"the source is on DLPack device ({v.rec.device_type}, {v.rec.device_id})"
            else:
                where = f"device={device!r} is DLPack device type {lands_on}"
            raise BufferError(
                f"{_call_text(obj, name, device, copy)}: {name} imports memory of DLPack device "
                f"types {limits.device_types} only, and {where}; {_device_hint(limits)}")
        if limits.layout_bits:
            problem = layout_problem(limits, &v.rec)
            if problem == LIMIT_SPAN:
                limit, value = describe_problem(limits, problem, &v.rec)
                raise BufferError(f"{_call_text(obj, name, device, copy)}: {name} {limit}; "
                                  f"{value}")
    if copy is True or moves or problem:
        if copy is False:
            raise BufferError(_refusal(obj, name, device, v, limits, problem, moves))
        order = "C" if limits is not None and limits.layout_bits & LIMIT_C_CONTIGUOUS else "K"
        if device is None and limits is not None and limits.source_device is not None:
            # The copy lands beside its source (jax: on the source array's own host device).
            handle = limits.source_device(v)
        v = _copies().export_copy(v, target, stream, order)
    if warn and v.rec.readonly and not preserves_readonly:
        _warn_read_only(obj, name)
    if handle is not None:
        return _exported(exporter(v, stream, device=handle), name)
    return _exported(exporter(v, stream), name)


cdef inline object _exported(object result, object name):
    # What a Python exporter returned, refused where it is None: to() promises the target's
    # object, and a None handed on would fail far from the plugin that made it.
    if result is None:
        raise TypeError(f"the {name!r} exporter returned None instead of the target's object "
                        "(a plugin bug: the exporter must return the object or raise)")
    return result


cdef str _refusal(object obj, object name, object device, StridedMemoryView v,
                  ImportLimits limits, int problem, bint moves):
    """The BufferError message of copy=False when the handoff needs a copy."""
    call = _call_text(obj, name, device, False)
    if problem:
        limit, value = describe_problem(limits, problem, &v.rec)
        return (f"{call}: {name} {limit}, and {value}; a copy would be needed and copy=False "
                "forbids one: pass copy=None (or True) to hand over a dense copy, or make the "
                "source contiguous first (.copy(), .contiguous())")
    return (f"{call}: the source is on DLPack device ({v.rec.device_type}, {v.rec.device_id}); "
            f"device={device!r} needs a copy, and copy=False forbids one (pass copy=None)")


def export_checked(view, target, stream=None):
    """``view`` handed to ``target``'s exporter after the target's limits are checked, as
    ``to(view, target, stream)`` without its read-only warning (``to(shards, ...)`` warns once
    for all shards): a copy where a limit needs one.

    Parameters
    ----------
    view : StridedMemoryView
    target : str or type
    stream : optional

    Returns
    -------
    object
        The target framework's object.
    """
    cdef tuple found = plugins.export_table.get(target)
    if found is None:
        found = plugins.exporter_for(target)
    exporter, preserves_readonly, name, limits = found
    if type(view) is not StridedMemoryView:
        raise TypeError(f"export_checked() takes a StridedMemoryView, got {type(view).__name__}")
    return _handoff(exporter, <StridedMemoryView> view, view, name, preserves_readonly, limits,
                    None, None, stream, False)


cdef int _warn_read_only(object obj, object name) except -1:
    global _last_type, _last_name, _last_message, _last_ignored
    t = type(obj)
    if t is not _last_type or name is not _last_name:
        key = (t, name)
        message = _READ_ONLY_MESSAGES.get(key)
        if message is None:
            if len(_READ_ONLY_MESSAGES) >= MAX_CACHED_TYPES:
                _READ_ONLY_MESSAGES.clear()     # it keeps the types alive: bounded as all are
            message = _READ_ONLY_MESSAGES[key] = (
                f"to({t.__name__}, {name!r}): the source is read-only but {name} objects "
                "cannot be; the result shares its memory, so do not write through it")
        _last_type, _last_name, _last_message, _last_ignored = t, name, message, -1
    if _filters_changed() or _last_ignored < 0:
        ignored = _IGNORED.get(_last_message)
        if ignored is None:
            if len(_IGNORED) >= MAX_CACHED_TYPES:
                _IGNORED.clear()        # one entry per message: bounded as the messages are
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
