# ``@viewable``: turn chosen arguments of a function into StridedMemoryViews on every call, or
# hand the function one LaunchArgs record of them (launch="name").
#
# Launchers call the wrapped function once per kernel launch, so the per-call work is compiled:
# the signature is read once (on the first call, so decorating costs nothing), turned into a
# tuple of small C records, and each call only looks at the designated positions / keywords and
# calls the registry's view entry point (or build_launch_args) directly, without a Python call.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.dict cimport PyDict_Copy, PyDict_GetItem, PyDict_New, PyDict_SetItem
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_Compare
from libc.string cimport memcpy
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from ..core._view cimport StridedMemoryView
from ..registry._registry cimport view_object
from ._launch cimport build_launch_args, key_policy, type_name

__all__ = ["viewable"]

cdef extern from "Python.h":
    # Python 3's two-argument form (Cython's bundled declaration still has the 2.x one).
    object _bind_method "PyMethod_New"(object func, object instance)
    # kwargs may be NULL (no keywords): no empty dict is made for the forwarded call.
    object _call_with "PyObject_Call"(object callable, object args, PyObject* kwargs)
    ctypedef PyObject* (*ternaryfunc)(PyObject*, PyObject*, PyObject*)
    # The vectorcall protocol (PEP 590): arguments in a C array, keyword names in a tuple.
    ctypedef PyObject* (*vectorcallfunc)(PyObject* callable, PyObject** args, size_t nargsf,
                                         PyObject* kwnames)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object _vectorcall "PyObject_Vectorcall"(object callable, PyObject** args, size_t nargsf,
                                              PyObject* kwnames)
    size_t PY_VECTORCALL_ARGUMENTS_OFFSET
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    # Only the slots we set; the real struct is CPython's.
    ctypedef struct _CallSlot "PyTypeObject":
        ternaryfunc tp_call
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags

# Parameter kinds, as inspect.Parameter numbers them (mirrored so the hot path compares C ints).
cdef enum:
    POSITIONAL_ONLY = 0
    POSITIONAL_OR_KEYWORD = 1
    VAR_POSITIONAL = 2
    KEYWORD_ONLY = 3
    VAR_KEYWORD = 4


cdef class _Param:
    """One designated parameter, resolved against the signature (internal)."""

    # Index in the positional arguments, or -1 when it can only be given by keyword.
    cdef Py_ssize_t position
    # Keyword name (an interned str owned by this record), or None when positional-only.
    cdef object keyword
    # The name for error messages (owned str).
    cdef str name
    # The signature's default; _EMPTY when there is none (owned reference).
    cdef object default
    # The default is None, so None given (or left to the default) stays None.
    cdef bint none_ok


# Marks "no default" / "argument not given"; module-owned sentinel.
cdef object _EMPTY = object()


cdef str _func_name(object func):
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return f"{name}()" if name else repr(func)


cdef int _check_request(tuple requested, object stream, object launch) except -1:
    if not requested:
        raise TypeError("viewable() needs the names or positional indices of the arguments to "
                        "view, e.g. @viewable('x', 'y') or @viewable(0, 1)")
    seen = set()
    for item in requested:
        if isinstance(item, str):
            if not item.isidentifier():
                raise TypeError(f"viewable(): {item!r} is not a parameter name")
        elif isinstance(item, int) and not isinstance(item, bool):
            if item < 0:
                raise ValueError(f"viewable(): positional index {item} is negative; indices "
                                 "count from 0 in the function's parameter list")
        elif callable(item):
            raise TypeError("viewable() takes argument names or indices, not the function: "
                            "write @viewable('x') rather than @viewable")
        else:
            raise TypeError("viewable() takes parameter names (str) or positional indices "
                            f"(int), got {type(item).__name__}")
        if item in seen:
            raise ValueError(f"viewable(): argument {item!r} is named twice")
        seen.add(item)
    if stream is not None:
        if not isinstance(stream, str) or not stream.isidentifier():
            raise TypeError("viewable(stream=...) takes the name of the function's stream "
                            f"parameter, got {stream!r}")
        if stream in seen:
            raise ValueError(f"viewable(): {stream!r} cannot be both the stream and a viewed "
                             "argument")
    if launch is not None:
        if not isinstance(launch, str) or not launch.isidentifier():
            raise TypeError("viewable(launch=...) takes the name of the parameter that receives "
                            f"the LaunchArgs record, got {launch!r}")
        if launch in seen or launch == stream:
            raise ValueError(f"viewable(): {launch!r} receives the LaunchArgs record; it cannot "
                             "also be designated or be the stream")
    return 0


cdef int _early_check(object func, tuple requested, object stream, object launch) except -1:
    # A plain Python function's parameter names sit on its code object, so unknown names and
    # out-of-range indices can be refused at decoration time without importing inspect.
    # Anything else (builtins, wrappers with __wrapped__ or __signature__, callables) is
    # checked on the first call, from inspect.signature.
    code = getattr(func, "__code__", None)
    if code is None or hasattr(func, "__wrapped__") or hasattr(func, "__signature__"):
        return 0
    try:
        argcount = code.co_argcount
        kwonly = code.co_kwonlyargcount
        names = code.co_varnames
        flags = code.co_flags
    except AttributeError:
        return 0
    positional = names[:argcount]
    # Variadic names count as known here; the first call explains why they cannot be viewed.
    known = set(names[:argcount + kwonly + bool(flags & 0x04) + bool(flags & 0x08)])
    fname = _func_name(func)
    for item in requested:
        if isinstance(item, int):
            if item >= argcount:
                raise TypeError(f"viewable(): {fname} has {argcount} positional parameter(s); "
                                f"index {item} is out of range")
        elif item not in known:
            raise TypeError(f"viewable(): {fname} has no parameter named {item!r}")
    if stream is not None and stream not in known:
        raise TypeError(f"viewable(): {fname} has no parameter named {stream!r} (the stream)")
    if launch is not None and launch not in known:
        raise TypeError(f"viewable(): {fname} has no parameter named {launch!r} (for the "
                        "LaunchArgs record)")
    return 0


cdef _Param _make_param(object parameter, Py_ssize_t position):
    cdef _Param p = _Param.__new__(_Param)
    kind = int(parameter.kind)
    p.name = parameter.name
    p.position = position if kind in (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD) else -1
    p.keyword = None if kind == POSITIONAL_ONLY else parameter.name
    default = parameter.default
    p.default = _EMPTY if default is parameter.empty else default
    p.none_ok = default is None
    return p


cdef object _given(_Param p, tuple args, dict kwargs):
    # The argument as this call gives it, or _EMPTY. Borrowed lookups: no per-call allocation.
    cdef PyObject* found
    if 0 <= p.position < PyTuple_GET_SIZE(args):
        return <object> PyTuple_GET_ITEM(args, p.position)
    if p.keyword is not None and kwargs:
        found = PyDict_GetItem(kwargs, p.keyword)
        if found != NULL:
            return <object> found
    return _EMPTY


cdef class _ViewableFunction:
    """A function whose designated arguments arrive as :class:`StridedMemoryView` objects.

    Made by :func:`viewable`; calls the wrapped function with each designated argument replaced
    by ``interop_core.view(arg, stream=...)``. Carries the wrapped function's metadata
    (``__name__``, ``__qualname__``, ``__doc__``, ``__module__``, ``__wrapped__``) and binds like
    a function when used as a method.
    """

    # The wrapped callable (strong reference owned by this wrapper; also __wrapped__).
    cdef readonly object func
    # The names / indices as given to viewable() (owned tuple).
    cdef tuple _requested
    # Name of the stream parameter, or None (owned str).
    cdef object _stream_name
    # Resolved on first call: tuple of _Param (owned), and the stream _Param or None (owned).
    cdef tuple _params
    cdef _Param _stream
    cdef bint _ready
    # Launch mode: the parameter receiving the LaunchArgs record (owned str; None: view mode),
    # and the options handed to build_launch_args (owned; resolved against the designated
    # parameters on the first call: `_writable` True/False or a tuple of positions,
    # `_scalar_types` None or a tuple aligned with the designated parameters, `_names` their
    # names for messages).
    cdef object _launch_name
    cdef int _policy
    cdef object _writable_spec
    cdef object _writable
    cdef bint _same_device
    cdef object _scalar_types_spec
    cdef object _scalar_types
    cdef tuple _names
    cdef str _fname
    # This wrapper's vectorcall entry point (read by CPython through tp_vectorcall_offset).
    cdef vectorcallfunc _vectorcall_entry
    # Holds the copied function metadata (__name__, __doc__, ...); owned by this wrapper.
    cdef dict __dict__

    def __init__(self, func, tuple requested, stream=None, launch=None, key="static",
                 writable=False, same_device=False, scalar_types=None):
        if not callable(func):
            raise TypeError(f"viewable() decorates a callable, got {type(func).__name__}")
        _check_request(requested, stream, launch)
        _early_check(func, requested, stream, launch)
        self.func = func
        self._requested = requested
        self._stream_name = stream
        self._launch_name = launch
        self._policy = key_policy(key)
        self._writable_spec = writable
        self._same_device = bool(same_device)
        self._scalar_types_spec = scalar_types
        self._ready = False
        self._vectorcall_entry = <vectorcallfunc> _viewable_vectorcall
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                value = getattr(func, attr)
            except AttributeError:
                continue
            setattr(self, attr, value)
        func_dict = getattr(func, "__dict__", None)
        if isinstance(func_dict, dict):
            for attr, value in func_dict.items():
                setattr(self, attr, value)
        setattr(self, "__wrapped__", func)

    cdef int _prepare(self) except -1:
        import inspect

        fname = _func_name(self.func)
        try:
            signature = inspect.signature(self.func)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"viewable(): cannot read the signature of {fname}: {exc}") from exc
        parameters = list(signature.parameters.values())
        by_name = {}
        by_position = {}
        for index, parameter in enumerate(parameters):
            by_name[parameter.name] = (parameter, index)
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                by_position[index] = (parameter, index)
        params = []
        chosen = set()
        for item in self._requested:
            if isinstance(item, str):
                entry = by_name.get(item)
                if entry is None:
                    raise TypeError(f"viewable(): {fname} has no parameter named {item!r}")
            else:
                entry = by_position.get(item)
                if entry is None:
                    raise TypeError(f"viewable(): {fname} has {len(by_position)} positional "
                                    f"parameter(s); index {item} is out of range")
            parameter, index = entry
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"viewable(): {fname}: cannot view the variadic parameter "
                                f"{parameter}")
            if parameter.name in chosen:
                raise ValueError(f"viewable(): {fname}: parameter {parameter.name!r} is "
                                 "designated twice (by name and by index)")
            chosen.add(parameter.name)
            params.append(_make_param(parameter, index))
        stream_param = None
        if self._stream_name is not None:
            entry = by_name.get(self._stream_name)
            if entry is None:
                raise TypeError(f"viewable(): {fname} has no parameter named "
                                f"{self._stream_name!r} (the stream)")
            parameter, index = entry
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"viewable(): {fname}: the stream cannot be the variadic "
                                f"parameter {parameter}")
            if parameter.name in chosen:
                raise ValueError(f"viewable(): {fname}: {parameter.name!r} cannot be both the "
                                 "stream and a viewed argument")
            stream_param = _make_param(parameter, index)
        if self._launch_name is not None:
            self._prepare_launch(fname, by_name, params)
        self._fname = fname
        # Published last: a concurrent first call either prepares again (same result) or sees
        # complete fields.
        self._params = tuple(params)
        self._stream = stream_param
        self._ready = True
        return 0

    cdef int _prepare_launch(self, str fname, dict by_name, list params) except -1:
        entry = by_name.get(self._launch_name)
        if entry is None:
            raise TypeError(f"viewable(): {fname} has no parameter named "
                            f"{self._launch_name!r} (for the LaunchArgs record)")
        parameter, index = entry
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"viewable(): {fname}: the LaunchArgs record is passed by keyword, "
                            f"so {parameter} must be a parameter that takes a keyword")
        requested = list(self._requested)
        writable = self._writable_spec
        if writable is True or writable is False or writable is None:
            self._writable = bool(writable)
        elif isinstance(writable, (str, int)):
            raise TypeError("viewable(writable=...) takes a bool or a collection of designated "
                            f"arguments, got {writable!r}")
        else:
            positions = []
            for item in writable:
                if item not in requested:
                    raise ValueError(f"viewable(): writable names {item!r}, which is not one "
                                     f"of the designated arguments {tuple(requested)}")
                positions.append(requested.index(item))
            self._writable = tuple(positions)
        spec = self._scalar_types_spec
        if spec is None:
            self._scalar_types = None
        elif isinstance(spec, dict):
            aligned = [None] * len(requested)
            for item, ctype in spec.items():
                if item not in requested:
                    raise ValueError(f"viewable(): scalar_types names {item!r}, which is not "
                                     f"one of the designated arguments {tuple(requested)}")
                aligned[requested.index(item)] = ctype
            self._scalar_types = tuple(aligned)
        else:
            raise TypeError("viewable(scalar_types=...) takes a dict {designated argument: C "
                            f"type name}}, got {type(spec).__name__}")
        names = []
        for designated in params:
            names.append((<_Param> designated).name)
        self._names = tuple(names)
        return 0

    cdef int _raise_unviewable(self, _Param p, object obj, object exc) except -1:
        cls = (TypeError if isinstance(exc, TypeError)
               else ValueError if isinstance(exc, ValueError) else BufferError)
        raise cls(f"{_func_name(self.func)}: argument {p.name!r} "
                  f"({type_name(obj)}) cannot be viewed: {exc}") from exc

    def __call__(self, *args, **kwargs):
        # Reached only through an explicit ``wrapper.__call__(...)``: calling the wrapper itself
        # goes straight to _viewable_call, installed as the type's tp_call below.
        return _viewable_call(self, args, <PyObject*> kwargs)

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return _bind_method(self, instance)

    def __repr__(self):
        return f"<viewable {self.func!r}>"

    def __reduce__(self):
        # Pickled by reference, like the function it wraps.
        return getattr(self, "__qualname__", None) or getattr(self, "__name__")


cdef object _viewable_call(object wrapper, object args_obj, PyObject* kwds):
    # The type's tp_call. A ``def __call__(self, *args, **kwargs)`` would allocate an empty
    # kwargs dict on every call and then copy it (and rebuild the argument tuple through a
    # list) to forward the call; here the caller's tuple and dict are used as they are, and a
    # new tuple / dict is made only when a designated argument actually changes.
    cdef _ViewableFunction self = <_ViewableFunction> wrapper
    cdef tuple args = <tuple> args_obj
    cdef object kwargs = None if kwds == NULL else <object> kwds
    cdef _Param p
    cdef _Param current = None
    cdef tuple new_args = None
    cdef object new_kwargs = None
    cdef object stream = None
    cdef Py_ssize_t i, nargs
    cdef PyObject* old
    if not self._ready:
        self._prepare()
    if self._stream is not None:
        stream = _given(self._stream, args, kwargs)
        if stream is _EMPTY:
            stream = self._stream.default
            if stream is _EMPTY:
                stream = None
    if self._launch_name is not None:
        return _launch_call(self, args, kwargs, stream)
    obj = None
    # One try for the whole loop (entering a try block costs a little on every pass).
    try:
        for p in self._params:
            obj = _given(p, args, kwargs)
            if obj is _EMPTY:
                # Left to the function's own default (not converted; see viewable()).
                continue
            if obj is None and p.none_ok:
                continue
            if stream is None and type(obj) is StridedMemoryView:
                continue
            current = p
            converted = view_object(obj, stream)
            current = None
            if converted is obj:
                continue
            nargs = PyTuple_GET_SIZE(args)
            if 0 <= p.position < nargs:
                if new_args is None:
                    new_args = PyTuple_New(nargs)
                    for i in range(nargs):
                        item = <object> PyTuple_GET_ITEM(args, i)
                        Py_INCREF(item)  # PyTuple_SET_ITEM steals it
                        PyTuple_SET_ITEM(new_args, i, item)
                old = PyTuple_GET_ITEM(new_args, p.position)
                Py_INCREF(converted)
                PyTuple_SET_ITEM(new_args, p.position, converted)
                Py_XDECREF(old)
            else:
                # The caller's dict is not ours to change (a C caller may reuse it): copy once.
                if new_kwargs is None:
                    new_kwargs = PyDict_Copy(kwargs)
                PyDict_SetItem(new_kwargs, p.keyword, converted)
    except (TypeError, ValueError, BufferError) as exc:
        if current is None:
            raise
        self._raise_unviewable(current, obj, exc)
    if new_kwargs is not None:
        kwds = <PyObject*> new_kwargs
    return _call_with(self.func, args if new_args is None else new_args, kwds)


cdef object _launch_call(_ViewableFunction self, tuple args, object kwargs, object stream):
    # Launch mode: the designated arguments, in designation order, become one LaunchArgs record
    # passed as the keyword `self._launch_name`; the arguments themselves arrive unchanged.
    cdef _Param p
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self._params)
    cdef tuple values = PyTuple_New(n)
    for i in range(n):
        p = <_Param> PyTuple_GET_ITEM(self._params, i)
        obj = _given(p, args, kwargs)
        if obj is _EMPTY:
            obj = p.default
            if obj is _EMPTY:
                # A required argument is missing: the call itself reports it, as Python does.
                return _call_with(self.func, args,
                                  NULL if kwargs is None else <PyObject*> kwargs)
        Py_INCREF(obj)
        PyTuple_SET_ITEM(values, i, obj)
    if kwargs and PyDict_GetItem(kwargs, self._launch_name) != NULL:
        raise TypeError(f"{self._fname}: {self._launch_name!r} receives the LaunchArgs record "
                        "made by @viewable; do not pass it")
    record = build_launch_args(values, stream, self._policy, self._writable, self._same_device,
                               self._scalar_types, self._fname, self._names)
    new_kwargs = PyDict_Copy(kwargs) if kwargs else {}
    PyDict_SetItem(new_kwargs, self._launch_name, record)
    return _call_with(self.func, args, <PyObject*> new_kwargs)


cdef enum:
    STACK_ARGS = 24     # arguments copied on the C stack; more go to a PyMem block


cdef Py_ssize_t _keyword_slot(object keyword, PyObject* kwnames) except -2:
    # Where `keyword` sits among the call's keyword names, or -1.  Names are usually the same
    # interned str objects as the signature's; equal strs that are not are found by value.
    cdef Py_ssize_t j, n = PyTuple_GET_SIZE(<object> kwnames)
    for j in range(n):
        if PyTuple_GET_ITEM(<object> kwnames, j) == <PyObject*> keyword:
            return j
    for j in range(n):
        if PyUnicode_Compare(<object> PyTuple_GET_ITEM(<object> kwnames, j), keyword) == 0:
            return j
    return -1


cdef PyObject** _slot_of(_Param p, PyObject** args, Py_ssize_t nargs,
                         PyObject* kwnames) except? NULL:
    # The argument array slot holding `p` in this call, or NULL when the call leaves it out.
    cdef Py_ssize_t j
    if 0 <= p.position < nargs:
        return &args[p.position]
    if p.keyword is not None and kwnames != NULL:
        j = _keyword_slot(p.keyword, kwnames)
        if j >= 0:
            return &args[nargs + j]
    return NULL


cdef object _viewable_vectorcall(object wrapper, PyObject** args, size_t nargsf,
                                 PyObject* kwnames):
    # The vectorcall entry point: the caller's argument array is copied once (pointers only),
    # converted slots are replaced in the copy, and the function is called with it; no tuple
    # or dict is built.  Launch mode goes through the tuple / dict path (it builds a dict to
    # pass the record anyway).
    cdef _ViewableFunction self = <_ViewableFunction> wrapper
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf)
    cdef Py_ssize_t nkw = 0 if kwnames == NULL else PyTuple_GET_SIZE(<object> kwnames)
    cdef Py_ssize_t total = nargs + nkw, i, owned_count = 0
    cdef PyObject* stack_copy[STACK_ARGS + 1]
    cdef PyObject* stack_owned[STACK_ARGS]
    cdef PyObject** copy = stack_copy
    cdef PyObject** owned = stack_owned
    cdef PyObject** slot
    cdef _Param p
    cdef _Param current = None
    cdef object stream = None
    if not self._ready:
        self._prepare()
    if self._launch_name is not None:
        return _tuple_call(self, args, nargs, kwnames)
    if total > STACK_ARGS:
        copy = <PyObject**> PyMem_Malloc((2 * total + 1) * sizeof(PyObject*))
        if copy == NULL:
            raise MemoryError()
        owned = copy + total + 1
    try:
        # One slot in front, so the callee may use it (PY_VECTORCALL_ARGUMENTS_OFFSET).
        memcpy(copy + 1, args, total * sizeof(PyObject*))
        if self._stream is not None:
            slot = _slot_of(self._stream, copy + 1, nargs, kwnames)
            if slot != NULL:
                stream = <object> slot[0]
            elif self._stream.default is not _EMPTY:
                stream = self._stream.default
        obj = None
        try:
            for p in self._params:
                slot = _slot_of(p, copy + 1, nargs, kwnames)
                if slot == NULL:
                    continue        # left to the function's own default (not converted)
                obj = <object> slot[0]
                if obj is None and p.none_ok:
                    continue
                if stream is None and type(obj) is StridedMemoryView:
                    continue
                current = p
                converted = view_object(obj, stream)
                current = None
                if converted is obj:
                    continue
                Py_INCREF(converted)            # owned by `owned` until the call returns
                owned[owned_count] = <PyObject*> converted
                owned_count += 1
                slot[0] = <PyObject*> converted
        except (TypeError, ValueError, BufferError) as exc:
            if current is None:
                raise
            self._raise_unviewable(current, obj, exc)
        return _vectorcall(self.func, copy + 1, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames)
    finally:
        for i in range(owned_count):
            Py_DECREF(<object> owned[i])
        if copy != stack_copy:
            PyMem_Free(copy)


cdef object _tuple_call(_ViewableFunction self, PyObject** args, Py_ssize_t nargs,
                        PyObject* kwnames):
    # A vectorcall turned into the tuple / dict form of _viewable_call.
    cdef Py_ssize_t i, nkw = 0 if kwnames == NULL else PyTuple_GET_SIZE(<object> kwnames)
    cdef tuple positional = PyTuple_New(nargs)
    for i in range(nargs):
        Py_INCREF(<object> args[i])
        PyTuple_SET_ITEM(positional, i, <object> args[i])
    if nkw == 0:
        return _viewable_call(self, positional, NULL)
    kwargs = PyDict_New()
    for i in range(nkw):
        PyDict_SetItem(kwargs, <object> PyTuple_GET_ITEM(<object> kwnames, i),
                       <object> args[nargs + i])
    return _viewable_call(self, positional, <PyObject*> kwargs)


cdef int _install_call_slots() except -1:
    # tp_call for callers using the tuple protocol; vectorcall (at the offset of each wrapper's
    # _vectorcall_entry field, the same in every instance) for everyone else.
    cdef _ViewableFunction probe = _ViewableFunction.__new__(_ViewableFunction)
    cdef _CallSlot* slots = <_CallSlot*> _ViewableFunction
    slots.tp_call = <ternaryfunc> _viewable_call
    slots.tp_vectorcall_offset = <Py_ssize_t> (
        <char*> &probe._vectorcall_entry - <char*> <PyObject*> probe)
    slots.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL
    return 0


_install_call_slots()


def viewable(*names_or_indices, stream=None, launch=None, key="static", writable=False,
             same_device=False, scalar_types=None):
    """Decorator: the designated arguments reach the function as views, or as one launch record.

    View mode (the default): on every call each designated argument ``arg`` is replaced by
    ``interop_core.view(arg, stream=...)``, so the function body sees pointer, shape, strides
    and dtype whatever framework the caller used (torch, cupy, numpy, jax, a plugin's type, ...).

    Launch mode (``launch="record"``): the designated arguments arrive unchanged, and the
    parameter named by ``launch`` receives ``interop_core.launch_args(designated, stream=...,
    key=...)``, a :class:`~interop_core.LaunchArgs` of the designated arguments in the order
    they are designated (specialization key, pointer arrays, ordered consumer stream).

    Parameters
    ----------
    *names_or_indices : str or int
        The parameters to view: names (any kind, keyword-only included) or indices into the
        function's parameter list as written (``self`` is index 0 of a method).
    stream : str, optional
        Name of the function's parameter that holds the consumer stream. Its value on each call
        (the parameter's default when the caller leaves it out) is passed as ``stream=`` to
        ``view()`` / ``launch_args()``; ``None`` means no stream ordering.
    launch : str, optional
        Launch mode: the name of the parameter (taking a keyword) that receives the
        :class:`~interop_core.LaunchArgs` record.
    key, writable, same_device, scalar_types
        Launch mode only, as for :func:`~interop_core.launch_args`; ``writable`` is ``True`` or
        a collection of designated arguments (spelt as designated), ``scalar_types`` a dict
        ``{designated argument: C type name}``.

    Returns
    -------
    callable
        A decorator; applied to ``func`` it returns a wrapper with ``func``'s ``__name__``,
        ``__qualname__``, ``__doc__``, ``__module__`` and ``__wrapped__``, which binds like a
        function when it is a class attribute.

    Raises
    ------
    TypeError
        At decoration time for malformed arguments and, for plain Python functions (whose
        parameter names are cheap to read), for unknown names and out-of-range indices; for other
        callables those are reported on the first call. On a call, when an argument cannot be
        viewed: the message names the function, the parameter and the argument's type.

    Notes
    -----
    The signature is read with :func:`inspect.signature` on the first call and cached; later
    calls only look at the designated arguments. Arguments that are already views pass through
    unchanged. ``None`` stays ``None`` for a parameter whose default is ``None``. A designated
    argument the caller leaves out gets the function's default unconverted. Put ``@viewable``
    below ``@staticmethod`` / ``@classmethod``.

    Examples
    --------
    >>> import numpy as np
    >>> import interop_core
    >>> @interop_core.viewable("x", "out")
    ... def scale(x, out, factor=2.0):
    ...     return x.shape, out.ptr == out.owner.ctypes.data
    >>> scale(np.ones((2, 3)), out=np.empty((2, 3)))
    ((2, 3), True)
    >>> @interop_core.viewable("out", "x", "factor", launch="record")
    ... def scale2(out, x, factor, *, record=None):
    ...     return record.key == interop_core.launch_args([out, x, factor]).key
    >>> scale2(np.empty(3), np.ones(3), 2.0)
    True
    """
    requested = tuple(names_or_indices)
    _check_request(requested, stream, launch)
    key_policy(key)
    if launch is None and (key != "static" or writable is not False or same_device
                           or scalar_types is not None):
        raise TypeError("viewable(): key, writable, same_device and scalar_types apply to launch "
                        "mode only; name the parameter receiving the record with launch='...'")

    def decorate(func):
        return _ViewableFunction(func, requested, stream, launch, key, writable, same_device,
                                 scalar_types)

    return decorate
