# Consumer-stream arguments: one resolver used by every entry point.

from libc.stdint cimport intptr_t

# Resolve a user's `stream` argument.  Returns 0 for "no synchronisation" (None or -1) and 1
# with `handle` set to a CUstream for anything else (ints, objects with __cuda_stream__, stream
# types plugins registered).  TypeError / ValueError for anything it cannot understand.
cdef int resolve_stream(object stream, intptr_t* handle) except -1

# The same, returning the argument's canonical form: None (no synchronisation) or the int handle
# as given.  Entry points pass the canonical form on to readers, which then resolve it cheaply.
cdef object canonical_stream(object stream, intptr_t* handle)
