# The CUDA driver, loaded lazily from libcuda on first need.  No CUDA Python package and no
# build-time CUDA toolkit: symbols are resolved with dlsym, and every entry point works (by
# answering "no driver") on machines without one.

from libc.stdint cimport int32_t, intptr_t, uintptr_t

# 1 when libcuda is loaded and cuInit succeeded, 0 otherwise (never raises).
cdef int driver_available() noexcept

# Where the memory at `ptr` lives, from the driver's pointer attributes.  Returns 1 and sets
# DLPack (device_type, device_id) for memory the driver knows (device, managed, pinned host);
# returns 0 and leaves the outputs alone for ordinary host memory or when there is no driver.
cdef int pointer_device(uintptr_t ptr, int32_t* device_type, int32_t* device_id) noexcept

# Whether two CUstream handles name the same stream (0 and 1 are both the legacy default).
cdef inline bint same_stream(intptr_t a, intptr_t b) noexcept nogil:
    return a == b or (a <= 1 and b <= 1 and a >= 0 and b >= 0)

# Order `consumer` after the work enqueued so far on `producer` (memory on device `device_id`):
# record a pooled event on the producer, make the consumer wait on it.  Never blocks the host;
# a no-op for the same stream.  RuntimeError without a driver or when a driver call fails.
cdef int order_streams(intptr_t producer, intptr_t consumer, int device_id) except -1
# The same, for a caller that has already made `device_id`'s primary context current (with
# enter_context(primary_context(device_id))): the event record and the wait, nothing else.
cdef int order_streams_entered(intptr_t producer, intptr_t consumer, int device_id) except -1

# For other modules of the core that declare further driver entry points (cuda/_module): the
# symbol `name` of the libcuda this module loaded (NULL without a driver or without that symbol),
# so libcuda is opened once.
cdef void* driver_symbol(const char* name) noexcept
# RuntimeError naming `call` and the driver's error name unless `status` is CUDA_SUCCESS.
cdef int check_status(int status, const char* call) except -1
# The primary context of device `device_id` (retained on first need, kept for the process).
cdef void* primary_context(int device_id) except NULL
# The device whose primary context (retained by primary_context) `ctx` is; -1 for any other
# context (one a user created) or NULL.  No driver call.
cdef int primary_context_device(void* ctx) noexcept
# Make `ctx` current unless it already is: returns 1 when it was pushed (hand that to
# leave_context), 0 when nothing changed.
cdef int enter_context(void* ctx) except -1
cdef void leave_context(int pushed) noexcept
