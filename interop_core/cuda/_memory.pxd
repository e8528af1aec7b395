# Memory through the lazily loaded CUDA driver: copies (cuMemcpy*Async), stream-ordered and
# plain device allocations, pinned host memory, stream queries.  Every entry point resolves its
# driver symbols from the libcuda that _cuda loaded, on first use, and makes the primary context
# of the device it names current around its calls (the context torch, cupy, jax and numba use).

from libc.stdint cimport int64_t, intptr_t, uintptr_t

cdef enum AllocationKind:
    ALLOC_HOST = 0          # malloc'd pageable host memory
    ALLOC_PINNED = 1        # cuMemAllocHost: page-locked, mapped for every device (UVA)
    ALLOC_DEVICE = 2        # cuMemAlloc
    ALLOC_DEVICE_ASYNC = 3  # cuMemAllocAsync on a stream (stream-ordered pool)
    ALLOC_MANAGED = 4       # cuMemAllocManaged


cdef class Allocation:
    cdef readonly uintptr_t ptr       # first byte; owned: freed exactly once, in __dealloc__
    """int: Address of the first byte."""
    cdef readonly Py_ssize_t size     # bytes asked for
    """int: Bytes."""
    cdef readonly int device_type     # DLPack device type of the memory
    """int: DLPack device type (1 CPU, 2 CUDA, 3 CUDA pinned host, 13 CUDA managed)."""
    cdef readonly int device_id
    """int: Device ordinal (0 for host memory)."""
    cdef int alloc_kind               # AllocationKind
    cdef intptr_t free_stream         # ALLOC_DEVICE_ASYNC: cuMemFreeAsync is enqueued here
    cdef object stream_keepalive      # the user's stream object (if any) behind free_stream:
                                      # kept alive until the free is enqueued


# New allocations (MemoryError / RuntimeError naming the driver error on failure).  `nbytes` 0
# still returns a distinct valid address (one byte is taken).
cdef Allocation allocate_host(Py_ssize_t nbytes, bint pinned)
# Stream-ordered (cuMemAllocAsync on `stream`, freed with cuMemFreeAsync on it) where the
# device supports memory pools and `stream_ordered` is set; cuMemAlloc otherwise.
cdef Allocation allocate_device(Py_ssize_t nbytes, int device_id, bint stream_ordered,
                                intptr_t stream, object stream_keepalive)
cdef Allocation allocate_managed(Py_ssize_t nbytes, int device_id)

# Make `device_id`'s primary context current unless it already is (the driver's memory API
# resolved, the device checked: ValueError for one that does not exist).  Returns what to hand
# to _cuda.leave_context afterwards.
cdef int enter_device(int device_id) except -1

# Copies, enqueued on `stream` with `device_id`'s primary context current.  Pointers are
# unified virtual addresses (device, pinned or pageable host memory).
cdef int memcpy_async(uintptr_t dst, uintptr_t src, size_t nbytes, intptr_t stream,
                      int device_id) except -1
# memcpy_async for a caller that made the copying device's context current (enter_device).
cdef int memcpy_async_entered(uintptr_t dst, uintptr_t src, size_t nbytes,
                              intptr_t stream) except -1
cdef int memcpy_peer_async(uintptr_t dst, int dst_device, uintptr_t src, int src_device,
                           size_t nbytes, intptr_t stream, int device_id) except -1
cdef int memcpy_2d_async(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch,
                         size_t width, size_t height, intptr_t stream, int device_id) except -1
cdef int memcpy_3d_async(uintptr_t dst, size_t dst_pitch, size_t dst_height,
                         uintptr_t src, size_t src_pitch, size_t src_height,
                         size_t width, size_t height, size_t depth, intptr_t stream,
                         int device_id) except -1

# The host waits for everything enqueued so far on `stream` (in `device_id`'s context for the
# legacy and per-thread default streams 0, 1, 2).
cdef int stream_synchronize(intptr_t stream, int device_id) except -1
# The device a stream belongs to; `default_device` for 0, 1 and 2 (they mean the current
# context's, which callers make `default_device`'s).  One cuStreamGetDevice (CUDA 12.8+);
# older drivers: cuStreamGetCtx, and for a context that is not a primary one retained here,
# cuCtxGetDevice with it current.
cdef int stream_device(intptr_t stream, int default_device) except -1
# Whether kernels on `device_id` can address `peer`'s memory (peer access enabled on first ask).
cdef bint peer_access(int device_id, int peer) except -1
# How many CUDA devices there are (0 without a driver).
cdef int cuda_device_count() noexcept
