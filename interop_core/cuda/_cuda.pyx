# The CUDA driver, loaded lazily from libcuda on first need (see _cuda.pxd).

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from libc.stdint cimport int32_t, intptr_t, uintptr_t
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlopen, dlsym

from ..core._dlpack_abi cimport kDLCUDA, kDLCUDAHost, kDLCUDAManaged

__all__ = ["device_count", "device_name", "driver_version", "events_created", "orderings_enqueued",
           "pointer_attributes"]

# Driver API values used here (from the CUDA driver API documentation).
cdef enum:
    CUDA_SUCCESS = 0
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    CU_MEMORYTYPE_UNIFIED = 4
    CU_EVENT_DISABLE_TIMING = 2
    MAX_DEVICES = 64

ctypedef int (*cuInit_t)(unsigned int) noexcept nogil
ctypedef int (*cuDriverGetVersion_t)(int*) noexcept nogil
ctypedef int (*cuPointerGetAttributes_t)(unsigned int, int*, void**, uintptr_t) noexcept nogil
ctypedef int (*cuDeviceGetCount_t)(int*) noexcept nogil
# CUdevice is an int ordinal handle in the driver API.
ctypedef int (*cuDeviceGet_t)(int*, int) noexcept nogil
ctypedef int (*cuDeviceGetName_t)(char*, int, int) noexcept nogil

# Stream ordering (CUcontext, CUevent and CUstream are opaque pointers).
ctypedef int (*cuDevicePrimaryCtxRetain_t)(void**, int) noexcept nogil
ctypedef int (*cuCtxGetCurrent_t)(void**) noexcept nogil
ctypedef int (*cuCtxPushCurrent_t)(void*) noexcept nogil
ctypedef int (*cuCtxPopCurrent_t)(void**) noexcept nogil
ctypedef int (*cuEventCreate_t)(void**, unsigned int) noexcept nogil
ctypedef int (*cuEventRecord_t)(void*, void*) noexcept nogil
ctypedef int (*cuStreamWaitEvent_t)(void*, void*, unsigned int) noexcept nogil
ctypedef int (*cuGetErrorName_t)(int, const char**) noexcept nogil

# Load state: 0 not tried, 1 loaded and initialised, -1 unavailable (tried once, never again).
cdef int _state = 0
# The dlopen handle of libcuda (never closed: symbols resolved from it live for the process).
cdef void* _lib = NULL
cdef cuDriverGetVersion_t _cuDriverGetVersion = NULL
cdef cuPointerGetAttributes_t _cuPointerGetAttributes = NULL
# Device enumeration (for diagnostics): optional, NULL when this libcuda lacks them.
cdef cuDeviceGetCount_t _cuDeviceGetCount = NULL
cdef cuDeviceGet_t _cuDeviceGet = NULL
cdef cuDeviceGetName_t _cuDeviceGetName = NULL
cdef cuDevicePrimaryCtxRetain_t _cuDevicePrimaryCtxRetain = NULL
cdef cuCtxGetCurrent_t _cuCtxGetCurrent = NULL
cdef cuCtxPushCurrent_t _cuCtxPushCurrent = NULL
cdef cuCtxPopCurrent_t _cuCtxPopCurrent = NULL
cdef cuEventCreate_t _cuEventCreate = NULL
cdef cuEventRecord_t _cuEventRecord = NULL
cdef cuStreamWaitEvent_t _cuStreamWaitEvent = NULL
cdef cuGetErrorName_t _cuGetErrorName = NULL


cdef int _load() noexcept:
    global _state, _cuDriverGetVersion, _cuPointerGetAttributes
    global _cuDeviceGetCount, _cuDeviceGet, _cuDeviceGetName, _lib
    cdef void* lib = dlopen(b"libcuda.so.1", RTLD_NOW | RTLD_LOCAL)
    if lib == NULL:
        lib = dlopen(b"libcuda.so", RTLD_NOW | RTLD_LOCAL)
    if lib == NULL:
        return -1
    _lib = lib
    cdef cuInit_t init = <cuInit_t> dlsym(lib, b"cuInit")
    _cuDriverGetVersion = <cuDriverGetVersion_t> dlsym(lib, b"cuDriverGetVersion")
    _cuPointerGetAttributes = <cuPointerGetAttributes_t> dlsym(lib, b"cuPointerGetAttributes")
    _cuDeviceGetCount = <cuDeviceGetCount_t> dlsym(lib, b"cuDeviceGetCount")
    _cuDeviceGet = <cuDeviceGet_t> dlsym(lib, b"cuDeviceGet")
    _cuDeviceGetName = <cuDeviceGetName_t> dlsym(lib, b"cuDeviceGetName")
    global _cuDevicePrimaryCtxRetain, _cuCtxGetCurrent, _cuCtxPushCurrent, _cuCtxPopCurrent
    global _cuEventCreate, _cuEventRecord, _cuStreamWaitEvent, _cuGetErrorName
    _cuDevicePrimaryCtxRetain = <cuDevicePrimaryCtxRetain_t> dlsym(lib, b"cuDevicePrimaryCtxRetain")
    _cuCtxGetCurrent = <cuCtxGetCurrent_t> dlsym(lib, b"cuCtxGetCurrent")
    _cuCtxPushCurrent = <cuCtxPushCurrent_t> dlsym(lib, b"cuCtxPushCurrent_v2")
    _cuCtxPopCurrent = <cuCtxPopCurrent_t> dlsym(lib, b"cuCtxPopCurrent_v2")
    _cuEventCreate = <cuEventCreate_t> dlsym(lib, b"cuEventCreate")
    _cuEventRecord = <cuEventRecord_t> dlsym(lib, b"cuEventRecord")
    _cuStreamWaitEvent = <cuStreamWaitEvent_t> dlsym(lib, b"cuStreamWaitEvent")
    _cuGetErrorName = <cuGetErrorName_t> dlsym(lib, b"cuGetErrorName")
    if init == NULL or _cuDriverGetVersion == NULL or _cuPointerGetAttributes == NULL:
        return -1
    # cuInit fails on machines with a driver but no device; that is "no driver" for us.
    if init(0) != CUDA_SUCCESS:
        return -1
    return 1


cdef int driver_available() noexcept:
    global _state
    if _state == 0:
        _state = _load()
    return _state == 1


cdef int pointer_device(uintptr_t ptr, int32_t* device_type, int32_t* device_id) noexcept:
    if ptr == 0 or not driver_available():
        return 0
    cdef int attributes[3]
    cdef unsigned int memory_type = 0
    cdef int ordinal = -2
    cdef int is_managed = 0
    cdef void* values[3]
    attributes[0] = CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    attributes[1] = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    attributes[2] = CU_POINTER_ATTRIBUTE_IS_MANAGED
    values[0] = &memory_type
    values[1] = &ordinal
    values[2] = &is_managed
    # cuPointerGetAttributes (unlike the singular form) succeeds on pointers the driver does not
    # know, leaving memory_type 0: that is ordinary host memory.
    if _cuPointerGetAttributes(3, attributes, values, ptr) != CUDA_SUCCESS:
        return 0
    if is_managed:
        device_type[0] = kDLCUDAManaged
    elif memory_type == CU_MEMORYTYPE_DEVICE:
        device_type[0] = kDLCUDA
    elif memory_type == CU_MEMORYTYPE_HOST:
        device_type[0] = kDLCUDAHost
    else:
        return 0
    device_id[0] = ordinal if ordinal >= 0 else 0
    return 1


def driver_version():
    """The CUDA driver's version as an int (e.g. 13000), or ``None`` where there is no driver.

    Returns
    -------
    int or None
    """
    cdef int version = 0
    if not driver_available() or _cuDriverGetVersion(&version) != CUDA_SUCCESS:
        return None
    return version


def pointer_attributes(ptr):
    """Where the memory at ``ptr`` lives, as the CUDA driver sees it.

    Parameters
    ----------
    ptr : int
        An address.

    Returns
    -------
    tuple or None
        ``(device_type, device_id)`` in DLPack terms for device, managed or pinned host memory;
        ``None`` for ordinary host memory or where there is no CUDA driver.
    """
    cdef int32_t device_type = 0, device_id = 0
    if not isinstance(ptr, int) or isinstance(ptr, bool):
        raise TypeError(f"ptr must be an int address, got {type(ptr).__name__}")
    if ptr < 0 or ptr >= 2 ** 64:
        raise ValueError(f"ptr must be an address (an int in [0, 2**64)), got {ptr!r}")
    if pointer_device(<uintptr_t> ptr, &device_type, &device_id):
        return (device_type, device_id)
    return None


def device_count():
    """How many CUDA devices the driver sees; ``0`` where there is no driver.

    Returns
    -------
    int
    """
    cdef int count = 0
    if not driver_available() or _cuDeviceGetCount == NULL:
        return 0
    if _cuDeviceGetCount(&count) != CUDA_SUCCESS:
        return 0
    return count


def device_name(ordinal):
    """The name of CUDA device ``ordinal`` (e.g. ``"NVIDIA H100 80GB HBM3"``).

    Parameters
    ----------
    ordinal : int
        Device index, from 0 to ``device_count() - 1``.

    Returns
    -------
    str or None
        ``None`` where there is no driver or no such device.
    """
    cdef int device = 0
    cdef char name[256]
    if not isinstance(ordinal, int) or isinstance(ordinal, bool):
        raise TypeError(f"ordinal must be an int device index, got {type(ordinal).__name__}")
    if ordinal < 0 or ordinal >= device_count():
        return None
    if _cuDeviceGet == NULL or _cuDeviceGetName == NULL:
        return None
    if _cuDeviceGet(&device, <int> ordinal) != CUDA_SUCCESS:
        return None
    name[0] = 0
    if _cuDeviceGetName(name, sizeof(name), device) != CUDA_SUCCESS:
        return None
    # The driver NUL-terminates within the buffer; force it in case of a truncated name.
    name[sizeof(name) - 1] = 0
    return name.decode("utf-8", "replace")


# --- stream ordering ---------------------------------------------------------------------------
#
# Ordering a consumer stream after a producer stream is one cuEventRecord on the producer and one
# cuStreamWaitEvent on the consumer: nothing blocks the host, and both calls are legal while
# either stream is being captured into a CUDA graph.  A wait binds to the event's most recent
# record at the moment it is enqueued, so one event per device can serve every ordering: the
# record and the wait happen back to back while this thread holds the GIL, so no other ordering
# can re-record the event in between.  The "pool" is therefore one event per device, made on
# first need in the device's primary context (the context torch, cupy, jax and numba use) and
# kept for the life of the process.

cdef void* _primary_ctx[MAX_DEVICES]      # retained once, never released
cdef void* _events[MAX_DEVICES]
cdef long _events_created = 0
cdef long _orderings_enqueued = 0     # record + wait pairs, for tests of the same-stream skip


cdef int _check(int status, const char* call) except -1:
    cdef const char* name = NULL
    if status == CUDA_SUCCESS:
        return 0
    if _cuGetErrorName != NULL:
        _cuGetErrorName(status, &name)
    label = (<bytes> name).decode() if name != NULL else f"error {status}"
    raise RuntimeError(f"CUDA driver call {(<bytes> call).decode()} failed: {label}")


cdef int _require_ordering_api() except -1:
    if not driver_available():
        raise RuntimeError(
            "stream ordering needs the CUDA driver (libcuda), which is not available here")
    if (_cuEventRecord == NULL or _cuStreamWaitEvent == NULL or _cuEventCreate == NULL
            or _cuDevicePrimaryCtxRetain == NULL or _cuCtxPushCurrent == NULL
            or _cuCtxPopCurrent == NULL or _cuCtxGetCurrent == NULL):
        raise RuntimeError("this CUDA driver lacks the event API interop-core needs")
    return 0


cdef void* _context_of(int device_id) except NULL:
    cdef void* ctx
    if device_id < 0 or device_id >= MAX_DEVICES:
        raise ValueError(f"CUDA device ordinal {device_id} is out of range")
    ctx = _primary_ctx[device_id]
    if ctx == NULL:
        _check(_cuDevicePrimaryCtxRetain(&ctx, device_id), b"cuDevicePrimaryCtxRetain")
        _primary_ctx[device_id] = ctx
    return ctx


cdef void* _event_of(int device_id) except NULL:
    global _events_created
    cdef void* ev = _events[device_id]
    cdef void* popped
    if ev == NULL:
        _check(_cuCtxPushCurrent(_context_of(device_id)), b"cuCtxPushCurrent")
        try:
            _check(_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), b"cuEventCreate")
        finally:
            _cuCtxPopCurrent(&popped)
        _events[device_id] = ev
        _events_created += 1
    return ev


cdef int order_streams(intptr_t producer, intptr_t consumer, int device_id) except -1:
    cdef void* ctx
    cdef void* current = NULL
    cdef void* popped
    cdef bint pushed = False
    if same_stream(producer, consumer):
        return 0
    _require_ordering_api()
    ctx = _context_of(device_id)
    # The legacy and per-thread default streams (0, 1, 2) mean "of the current context": make
    # the memory's device current around the two calls unless it already is.
    _cuCtxGetCurrent(&current)
    if current != ctx:
        _check(_cuCtxPushCurrent(ctx), b"cuCtxPushCurrent")
        pushed = True
    try:
        order_streams_entered(producer, consumer, device_id)
    finally:
        if pushed:
            _cuCtxPopCurrent(&popped)
    return 0


cdef int order_streams_entered(intptr_t producer, intptr_t consumer, int device_id) except -1:
    global _orderings_enqueued
    cdef void* ev
    if same_stream(producer, consumer):
        return 0
    # The caller made the device's primary context current (primary_context succeeded, so the
    # event API is resolved): the record and the wait are the only driver calls here.
    ev = _event_of(device_id)
    _check(_cuEventRecord(ev, <void*> producer), b"cuEventRecord")
    _check(_cuStreamWaitEvent(<void*> consumer, ev, 0), b"cuStreamWaitEvent")
    _orderings_enqueued += 1
    return 0


cdef void* driver_symbol(const char* name) noexcept:
    if not driver_available():
        return NULL
    return dlsym(_lib, name)


cdef int check_status(int status, const char* call) except -1:
    return _check(status, call)


cdef void* primary_context(int device_id) except NULL:
    _require_ordering_api()
    return _context_of(device_id)


cdef int primary_context_device(void* ctx) noexcept:
    cdef int i
    if ctx == NULL:
        return -1
    # Only contexts retained here: each stays alive (and so keeps its address) for the process,
    # so the address names its device for good.
    for i in range(MAX_DEVICES):
        if _primary_ctx[i] == ctx:
            return i
    return -1


cdef int enter_context(void* ctx) except -1:
    cdef void* current = NULL
    _require_ordering_api()
    _cuCtxGetCurrent(&current)
    if current == ctx:
        return 0
    _check(_cuCtxPushCurrent(ctx), b"cuCtxPushCurrent")
    return 1


cdef void leave_context(int pushed) noexcept:
    cdef void* popped
    if pushed:
        _cuCtxPopCurrent(&popped)


def _order_streams(producer, consumer, device_id=0):
    """Make ``consumer`` wait for the work enqueued so far on ``producer``, without blocking.

    Parameters
    ----------
    producer, consumer : int
        ``CUstream`` handles (0 or 1: the legacy default stream, 2: per-thread default).
    device_id : int
        The device whose memory is handed over (its primary context hosts the event).

    Raises
    ------
    RuntimeError
        Where there is no CUDA driver, or a driver call fails (the message names it).
    """
    return order_streams(producer, consumer, device_id)


def events_created():
    """How many CUDA events stream ordering has created so far (one per device, reused)."""
    return _events_created


def orderings_enqueued():
    """How many event record + stream wait pairs stream ordering has enqueued so far."""
    return _orderings_enqueued
