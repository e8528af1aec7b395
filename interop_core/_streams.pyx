# Consumer-stream arguments: one resolver used by every entry point.  (Ordering itself, with
# pooled events on the producer's stream, arrives with the CUDA driver binding.)

from libc.stdint cimport intptr_t

__all__ = ["resolve_consumer_stream", "set_stream_types"]

# Exact stream type -> callable(stream) -> CUstream, as plugins registered them (installed by
# interop_core.plugins; holds the types and callables alive).
cdef dict _STREAM_TYPES = {}


def set_stream_types(dict handles):
    """Install ``{stream type: handle(stream) -> int}`` (called by :mod:`interop_core.plugins`)."""
    _STREAM_TYPES.clear()
    _STREAM_TYPES.update(handles)


cdef int resolve_stream(object stream, intptr_t* handle) except -1:
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int CUstream handle or a stream object, got bool")
    if isinstance(stream, int):
        if stream == -1:
            return 0
        if stream < -1 or stream >= 2 ** 64:
            raise ValueError(f"stream handle {stream} is out of range")
        handle[0] = <intptr_t> <Py_ssize_t> (stream if stream < 2 ** 63 else stream - 2 ** 64)
        return 1
    getter = _STREAM_TYPES.get(type(stream))
    if getter is not None:
        value = getter(stream)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(
                f"the stream handle of {type(stream).__name__} must be an int, got "
                f"{type(value).__name__}")
        return resolve_stream(value, handle)
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
        return resolve_stream(pair[1], handle)
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
        ``__cuda_stream__`` (returning ``(0, handle)``).

    Returns
    -------
    int or None
    """
    cdef intptr_t handle = 0
    if resolve_stream(stream, &handle) == 0:
        return None
    return handle
