# The compiled reader for exact cupy.ndarray objects (registered as core reader "cupy").

from .core._record cimport ViewRecord

# Fill `rec` from a cupy.ndarray, return the keep-alive (the array itself, or what the chosen
# protocol returned).  The first call validates the attribute path against cupy's own
# __cuda_array_interface__ on canary arrays and picks the fastest path that validates.
cdef object read_cupy(object obj, object stream, ViewRecord* rec)
