# cuda.core's StridedMemoryView and StridedLayout over the core's compiled objects (see
# _cuda_core.pyx).

from ..core._layout cimport StridedLayout as CoreLayout
from ..core._view cimport StridedMemoryView as CoreView


# No C field of its own: a core view just made for a call is turned into one in place (its
# type changed), so the two must keep the same C layout (checked at import).  Views made with a
# given layout (from_buffer, view()) are of a subclass that keeps it (_cuda_core.pyx).
cdef class StridedMemoryView(CoreView):
    pass


cdef class StridedLayout:
    cdef CoreLayout _base       # owned: shape, strides (elements), itemsize, slice_offset
    cdef signed char _implicit  # made with strides=None and not transformed: strides is None
                                # (1 yes, 0 no, -1 not decided yet: see _layout_of_record)
