# Copies between strided views: host memory, device memory of one device, and peer devices.

from ..core._view cimport StridedMemoryView

# Copy `src` (broadcast to dst's shape) into `dst` on `stream` (see copy_to's docstring for the
# stream rules).  Validates everything before touching memory: nothing is written on failure.
cdef int copy_views(StridedMemoryView dst, StridedMemoryView src, object stream) except -1

# A new view with `like`'s shape and dtype in fresh memory on `device` (None: like's device),
# laid out by `layout` ("K", "C", "F" or a StridedLayout; None means "K").
cdef StridedMemoryView empty_view(StridedMemoryView like, object device, object layout,
                                  object stream)
