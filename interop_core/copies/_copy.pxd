# Copies between strided views: host memory, device memory of one device, and peer devices.

from ..core._view cimport StridedMemoryView

# Copy `src` (broadcast to dst's shape) into `dst` on `stream` (see copy_to's docstring for the
# stream rules).  Validates everything before touching memory: nothing is written on failure.
cdef int copy_views(StridedMemoryView dst, StridedMemoryView src, object stream) except -1

# A new view with `like`'s shape and dtype in fresh memory on `device` (None: like's device),
# laid out by `layout` ("K", "C", "F" or a StridedLayout; None means "K").
cdef StridedMemoryView empty_view(StridedMemoryView like, object device, object layout,
                                  object stream)

# (DLPack device type, ordinal) for a device= argument: "cpu", "cuda:N", "cuda_host",
# "cuda_managed", a (type, id) pair, or an object whose str() is such a name (torch.device).
# ValueError / TypeError / BufferError naming the argument; host memory is one device, so a
# host ordinal other than 0 is a ValueError.
cdef tuple parse_device(object device)

# Whether `v`'s memory is on `target` already (a parse_device pair; "cpu" is met by any
# host-accessible memory).
cdef bint on_device(StridedMemoryView v, tuple target) noexcept

# A dense copy of `view` in new memory on `device` (a parse_device pair), laid out in `order`
# ("K": the view's stride order; "C"), made on `stream`.
cdef StridedMemoryView dense_copy(StridedMemoryView view, tuple device, object order,
                                  object stream)
