# The compiled readers for numba's CUDA device arrays (core reader "numba") and for the CUDA
# simulator's arrays (core reader "numba_simulator", host memory).

from .core._record cimport ViewRecord

# Fill `rec` from a DeviceNDArray / MappedNDArray / ManagedNDArray; return the keep-alive (the
# array).  The first call validates the attribute path against __cuda_array_interface__.
cdef object read_numba(object obj, object stream, ViewRecord* rec)

# Fill `rec` from the simulator's FakeCUDAArray (which wraps a numpy array in host memory).
cdef object read_numba_simulator(object obj, object stream, ViewRecord* rec)
