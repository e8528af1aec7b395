# Consumer-stream arguments: one resolver used by every entry point.
#
# Entry points (`view`, `to`, `from_*`, `sync`, exports) resolve the caller's `stream` once and
# hand the readers its canonical form (None, or the int handle), which resolves again for the
# price of one C integer conversion.  A stream object costs its type's handle getter, except for
# types registered with keep_last=True (their objects own no CUDA stream, e.g. torch's pooled
# streams): the last such object is kept, and passing it again costs one pointer comparison.
# Weak references cannot do this job safely: torch 2.11's CUDA streams free themselves without
# clearing theirs.

from cpython.long cimport PyLong_AsUnsignedLongLong
from libc.stdint cimport intptr_t

cdef extern from "Python.h":
    # Cannot fail for an exact int: overflow is reported through `overflow`.
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) noexcept

__all__ = ["resolve_consumer_stream", "set_stream_types"]

# Exact stream type -> (callable(stream) -> CUstream, keep_last), as plugins registered them
# (installed by interop_core.plugins; holds the types and callables alive).
cdef dict _STREAM_TYPES = {}

# The last stream object resolved through a keep_last type (a strong reference owned here, which
# such types promise holds no CUDA resource), and what it resolved to: `_kept_canonical` (None
# or the int handle, owned here) and `_kept_handle`.
cdef object _kept_stream = None
cdef object _kept_canonical = None
cdef intptr_t _kept_handle = 0


def set_stream_types(dict handles):
    """Install ``{stream type: (handle(stream) -> int, keep_last)}`` (by ``plugins``)."""
    global _kept_stream
    _kept_stream = None
    _STREAM_TYPES.clear()
    _STREAM_TYPES.update(handles)


cdef int resolve_int(object stream, intptr_t* handle) except -1:
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


cdef object canonical_object_stream(object stream, intptr_t* handle):
    global _kept_stream, _kept_canonical, _kept_handle
    if stream is _kept_stream:      # a launcher passing its stream on every call
        handle[0] = _kept_handle
        return _kept_canonical
    registered = _STREAM_TYPES.get(type(stream))
    if registered is not None:
        getter, keep_last = <tuple> registered
        value = getter(stream)
        if type(value) is not int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(
                    f"the stream handle of {type(stream).__name__} must be an int, got "
                    f"{type(value).__name__}")
            value = int(value)
        canonical = value if resolve_int(value, handle) else None
        if keep_last:
            _kept_stream = None     # a reentrant call meanwhile sees no half-updated entry
            _kept_canonical = canonical
            _kept_handle = handle[0] if canonical is not None else 0
            _kept_stream = stream
        return canonical
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int CUstream handle or a stream object, got bool")
    if isinstance(stream, int):
        return canonical_stream(int(stream), handle)
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
