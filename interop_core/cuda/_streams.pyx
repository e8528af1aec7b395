# Consumer-stream arguments: one resolver used by every entry point.
#
# Entry points (`view`, `to`, `from_*`, `sync`, exports) resolve the caller's `stream` once and
# hand the readers its canonical form (None, or the int handle), which resolves again for the
# price of one C integer conversion.  A stream object costs its type's handle getter, except for
# types registered with keep_last: the last such object is remembered, and passing it again
# costs one pointer comparison.  keep_last=True holds it by a strong reference (types whose
# objects own no CUDA stream: torch's pooled streams; a weak reference would not do for them,
# since torch 2.11's CUDA streams free themselves without clearing theirs); keep_last="weak" by
# a weak reference (types that own their stream and clear weak references when freed: cupy's).
# A cleared weak reference names no object, so a new object at a freed one's address never
# matches.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.number cimport PyNumber_Index
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from cpython.weakref cimport PyWeakref_GetRef, PyWeakref_NewRef
from libc.stdint cimport intptr_t

from numbers import Integral

cdef extern from "Python.h":
    # Cannot fail for an exact int: overflow is reported through `overflow`.
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) noexcept

__all__ = ["resolve_consumer_stream", "set_stream_types"]

# Exact stream type -> (callable(stream) -> CUstream, keep_last: False, True or "weak"), as
# plugins registered them (installed by interop_core.plugins; holds the types and callables).
cdef dict _STREAM_TYPES = {}

# The last stream object resolved through a keep_last type: `_kept_stream` (a strong reference
# owned here, for types promising their objects hold no CUDA resource) or `_kept_ref` (a weak
# reference owned here); at most one is set.  What it resolved to: `_kept_canonical` (None or
# the int handle, owned here) and `_kept_handle`.
cdef object _kept_stream = None
cdef object _kept_ref = None
cdef object _kept_canonical = None
cdef intptr_t _kept_handle = 0


def set_stream_types(dict handles):
    """Install ``{stream type: (handle(stream) -> int, keep_last)}`` (by ``plugins``)."""
    global _kept_stream, _kept_ref
    _kept_stream = None
    _kept_ref = None
    _STREAM_TYPES.clear()
    _STREAM_TYPES.update(handles)


cdef int _keep(object stream, object keep_last, object canonical, intptr_t handle) except -1:
    global _kept_stream, _kept_ref, _kept_canonical, _kept_handle
    strong, weak = None, None
    if keep_last is True:
        strong = stream
    else:
        try:
            weak = PyWeakref_NewRef(stream, None)
        except TypeError:
            return 0        # not weakly referenceable: nothing new is remembered
    # The old entry is held here until the new one is complete: nothing is allocated or released
    # between the assignments, so no finalizer can see (or resolve into) a half-updated entry.
    old = (_kept_stream, _kept_ref, _kept_canonical)  # noqa: F841 (released on return)
    _kept_stream = strong
    _kept_ref = weak
    _kept_canonical = canonical
    _kept_handle = handle if canonical is not None else 0
    return 0


# A CUstream is 1 (the legacy default stream), 2 (the per-thread one), 0 (the legacy default
# where the API takes it) or the address of the driver's stream object, which the driver
# dereferences: a handle that is not one crashes the process inside libcuda, where no check is
# possible.  What can be told without touching memory is refused instead: an address in the
# page at 0, which is never mapped, or beyond the 56 bits of user addresses on 64-bit Linux
# and Windows (2**63, a negative number read as unsigned).  On aarch64 the top byte of a
# pointer may carry a tag, so the address is the 56 bits below it, and user addresses there
# have at most 52 bits.
cdef unsigned long long _USER_ADDRESS_BITS = (1ULL << 56) - 1
cdef bint _TOP_BYTE_TAGS = __import__("platform").machine().lower() in ("aarch64", "arm64")


cdef bint stream_handle_implausible(unsigned long long handle) noexcept:
    cdef unsigned long long address
    if handle <= 2:
        return False
    if _TOP_BYTE_TAGS:
        address = handle & _USER_ADDRESS_BITS
        return address < 4096 or address >> 52 != 0
    return handle > _USER_ADDRESS_BITS or handle < 4096


cdef int _refuse_handle(object stream) except -1:
    raise ValueError(
        f"stream handle {stream} ({stream:#x}) cannot be a CUDA stream: a handle is 0, 1 (the "
        "legacy default stream), 2 (the per-thread default stream) or the address of a stream")


cdef int resolve_int(object stream, intptr_t* handle) except -1:
    cdef int overflow = 0
    cdef long long value = PyLong_AsLongLongAndOverflow(stream, &overflow)
    cdef unsigned long long unsigned_value
    if overflow == 0:
        if value == -1:
            return 0
        if value < -1:
            raise ValueError(f"stream handle {stream} is out of range")
        if stream_handle_implausible(<unsigned long long> value):
            _refuse_handle(stream)
        handle[0] = <intptr_t> value
        return 1
    if overflow > 0 and stream < 2 ** 64:
        # Handles are unsigned pointers; the top half of the range wraps to negative intptr_t.
        unsigned_value = PyLong_AsUnsignedLongLong(stream)
        if stream_handle_implausible(unsigned_value):
            _refuse_handle(stream)
        handle[0] = <intptr_t> unsigned_value
        return 1
    raise ValueError(f"stream handle {stream} is out of range")


cdef inline bint _is_kept(object stream) noexcept:
    cdef PyObject* target = NULL
    if stream is _kept_stream:
        return True
    if _kept_ref is None:
        return False
    PyWeakref_GetRef(_kept_ref, &target)
    Py_XDECREF(target)      # only its address is compared; `stream` itself is alive
    return target == <PyObject*> stream


cdef object canonical_object_stream(object stream, intptr_t* handle):
    if _is_kept(stream):    # a launcher passing its stream on every call
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
        if keep_last is not False:
            _keep(stream, keep_last, canonical, handle[0])
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
    if isinstance(stream, Integral):
        # An integer of another type (numpy's int64, as cuda.core accepts for stream_ptr); not
        # anything with __index__ (a torch tensor of one element is no stream handle), and
        # never a bool-like (numpy's bool_ is not Integral).
        value = PyNumber_Index(stream)
        if isinstance(value, bool):
            raise TypeError(f"stream must not be a bool, got {type(stream).__name__}")
        return canonical_stream(int(value), handle)
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
