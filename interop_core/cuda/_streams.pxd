# Consumer-stream arguments: one resolver used by every entry point.

from libc.stdint cimport intptr_t

# For the inline functions below; an exact int `stream` -> 0 for "no synchronisation" (-1), else
# 1 with `handle` set.  ValueError when out of range.
cdef int resolve_int(object stream, intptr_t* handle) except -1
# Whether `handle` cannot be a CUstream (see _streams.pyx): refused before any driver call.
cdef bint stream_handle_implausible(unsigned long long handle) noexcept
# canonical_stream for anything but None and exact ints.
cdef object canonical_object_stream(object stream, intptr_t* handle)


# Resolve a user's `stream` argument.  Returns 0 for "no synchronisation" (None or -1) and 1
# with `handle` set to a CUstream for anything else (ints, objects with __cuda_stream__, stream
# types plugins registered).  TypeError / ValueError for anything it cannot understand.
cdef inline int resolve_stream(object stream, intptr_t* handle) except -1:
    return canonical_stream(stream, handle) is not None


# The same, returning the argument's canonical form: None (no synchronisation) or the int handle
# as given.  Entry points pass the canonical form on to readers, which then resolve it cheaply.
cdef inline object canonical_stream(object stream, intptr_t* handle):
    if stream is None:
        return None
    if type(stream) is int:
        if stream == -1:        # "no synchronisation", the common int: no call for it
            return None
        return stream if resolve_int(stream, handle) else None
    return canonical_object_stream(stream, handle)
