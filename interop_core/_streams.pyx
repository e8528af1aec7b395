# Consumer-stream arguments: one resolver used by every entry point.
#
# Entry points (`view`, `to`, `from_*`, `sync`, exports) resolve the caller's `stream` once and
# hand the readers its canonical form (None, or the int handle), which resolves again for the
# price of one C integer conversion.  Stream objects of registered types are the other cost on
# the per-call path: the last one resolved is remembered by weak reference, so a launcher that
# passes the same stream object on every call pays one pointer comparison for it.

from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.object cimport PyObject
from cpython.weakref cimport PyWeakref_GetObject
from libc.stdint cimport intptr_t

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1

from weakref import ref as _weak_ref

__all__ = ["resolve_consumer_stream", "set_stream_types"]

# Exact stream type -> callable(stream) -> CUstream, as plugins registered them (installed by
# interop_core.plugins; holds the types and callables alive).
cdef dict _STREAM_TYPES = {}

# The last stream object resolved through a registered type.  `_last_stream` is a weak
# reference (owned here; it never keeps the stream alive, and reads None once the stream is
# gone, so a new object at the same address cannot match); `_last_canonical` is the handle its
# type returned (an int owned here).  Registered stream types promise a fixed handle per object.
cdef object _last_stream = None
cdef object _last_canonical = None


def set_stream_types(dict handles):
    """Install ``{stream type: handle(stream) -> int}`` (called by :mod:`interop_core.plugins`)."""
    global _last_stream
    _last_stream = None
    _STREAM_TYPES.clear()
    _STREAM_TYPES.update(handles)


cdef int _resolve_int(object stream, intptr_t* handle) except -1:
    cdef int overflow = 0
    cdef long long value = PyLong_AsLongLongAndOverflow(stream, &overflow)
    if overflow == 0:
        if value == -1:
            return 0
        if value < -1:
            raise ValueError(f"stream handle {stream} is out of range")
        handle[0] = <intptr_t> value
        return 1
    if overflow > 0 and stream < 2 ** 64:
        # Handles are unsigned pointers; the top half of the range wraps to negative intptr_t.
        handle[0] = <intptr_t> PyLong_AsUnsignedLongLong(stream)
        return 1
    raise ValueError(f"stream handle {stream} is out of range")


cdef object canonical_stream(object stream, intptr_t* handle):
    if stream is None:
        return None
    if type(stream) is int:
        return stream if _resolve_int(stream, handle) else None
    if (_last_stream is not None
            and PyWeakref_GetObject(_last_stream) == <PyObject*> stream):
        return _last_canonical if _resolve_int(_last_canonical, handle) else None
    return _canonical_slow(stream, handle)


cdef object _canonical_slow(object stream, intptr_t* handle):
    global _last_stream, _last_canonical
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int CUstream handle or a stream object, got bool")
    if isinstance(stream, int):
        return canonical_stream(int(stream), handle)
    getter = _STREAM_TYPES.get(type(stream))
    if getter is not None:
        value = getter(stream)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(
                f"the stream handle of {type(stream).__name__} must be an int, got "
                f"{type(value).__name__}")
        value = int(value)
        canonical = value if _resolve_int(value, handle) else None
        try:
            remembered = _weak_ref(stream)
        except TypeError:       # a stream type without weak references: resolve it every time
            return canonical
        # Drop the old reference first so the pair is never seen half-updated.
        _last_stream = None
        _last_canonical = value
        _last_stream = remembered
        return canonical
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        pair = protocol() if callable(protocol) else protocol
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not isinstance(pair[0], int) or not isinstance(pair[1], int)):
            raise TypeError(
                f"{type(stream).__name__}.__cuda_stream__ must return (version, handle) ints, "
                f"got {pair!r}")
        if pair[0] != 0:
            raise ValueError(f"unsupported __cuda_stream__ protocol version {pair[0]}")
        return canonical_stream(int(pair[1]), handle)
    raise TypeError(
        f"stream must be None, -1, an int CUstream handle, an object with __cuda_stream__ or a "
        f"stream type a plugin registered, got {type(stream).__name__}")


cdef int resolve_stream(object stream, intptr_t* handle) except -1:
    if stream is None:
        return 0
    if type(stream) is int:
        return _resolve_int(stream, handle)
    return canonical_stream(stream, handle) is not None


def resolve_consumer_stream(stream):
    """Resolve a ``stream`` argument to a CUstream handle, or ``None`` for no synchronisation.

    Parameters
    ----------
    stream : None, int or stream object
        ``None`` / ``-1``: no synchronisation.  ``0``: the legacy default stream, ``1``: legacy,
        ``2``: per-thread default, other ints: a ``CUstream`` handle.  Any object with
        ``__cuda_stream__`` (returning ``(0, handle)``), or of a stream type a plugin registered.

    Returns
    -------
    int or None
    """
    cdef intptr_t handle = 0
    if resolve_stream(stream, &handle) == 0:
        return None
    return <Py_ssize_t> handle
