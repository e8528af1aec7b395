# Memory through the lazily loaded CUDA driver (see _memory.pxd).
#
# Symbols are resolved from _cuda's libcuda on first use (one dlopen per process).  Struct
# layouts below are written from the CUDA driver API reference (CUDA_MEMCPY2D, CUDA_MEMCPY3D).

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from libc.stdint cimport int64_t, intptr_t, uintptr_t
from libc.stdlib cimport free

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** out, size_t alignment, size_t size)

cdef enum:
    # Host allocations start on a 64-byte boundary: what jax's CPU backend needs to alias host
    # memory (and a cache line), so a copy made for an export is never copied again.
    HOST_ALIGNMENT = 64
from libc.string cimport memset

from ..core._dlpack_abi cimport kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged
from ._cuda cimport (
    check_status,
    driver_available,
    driver_symbol,
    enter_context,
    leave_context,
    primary_context,
    primary_context_device,
)

__all__ = ["Allocation"]

cdef extern from "Python.h":
    int Py_IsInitialized() nogil

cdef extern from *:
    """
    /* CUmemorytype values and the 2-D / 3-D copy descriptors of the CUDA driver API. */
    typedef struct {
        size_t srcXInBytes; size_t srcY;
        unsigned int srcMemoryType; const void* srcHost; unsigned long long srcDevice;
        void* srcArray; size_t srcPitch;
        size_t dstXInBytes; size_t dstY;
        unsigned int dstMemoryType; void* dstHost; unsigned long long dstDevice;
        void* dstArray; size_t dstPitch;
        size_t WidthInBytes; size_t Height;
    } ic_CUDA_MEMCPY2D;
    typedef struct {
        size_t srcXInBytes; size_t srcY; size_t srcZ; size_t srcLOD;
        unsigned int srcMemoryType; const void* srcHost; unsigned long long srcDevice;
        void* srcArray; void* reserved0; size_t srcPitch; size_t srcHeight;
        size_t dstXInBytes; size_t dstY; size_t dstZ; size_t dstLOD;
        unsigned int dstMemoryType; void* dstHost; unsigned long long dstDevice;
        void* dstArray; void* reserved1; size_t dstPitch; size_t dstHeight;
        size_t WidthInBytes; size_t Height; size_t Depth;
    } ic_CUDA_MEMCPY3D;
    """
    ctypedef struct CUDA_MEMCPY2D "ic_CUDA_MEMCPY2D":
        unsigned int srcMemoryType
        unsigned long long srcDevice
        size_t srcPitch
        unsigned int dstMemoryType
        unsigned long long dstDevice
        size_t dstPitch
        size_t WidthInBytes
        size_t Height
    ctypedef struct CUDA_MEMCPY3D "ic_CUDA_MEMCPY3D":
        unsigned int srcMemoryType
        unsigned long long srcDevice
        size_t srcPitch
        size_t srcHeight
        unsigned int dstMemoryType
        unsigned long long dstDevice
        size_t dstPitch
        size_t dstHeight
        size_t WidthInBytes
        size_t Height
        size_t Depth

cdef enum:
    CUDA_SUCCESS = 0
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
    CU_MEMORYTYPE_UNIFIED = 4
    CU_MEMHOSTALLOC_PORTABLE = 1
    CU_MEMHOSTALLOC_DEVICEMAP = 2
    CU_MEM_ATTACH_GLOBAL = 1
    CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115
    MAX_DEVICES = 64

ctypedef unsigned long long CUdeviceptr
ctypedef int (*cuMemcpyAsync_t)(CUdeviceptr, CUdeviceptr, size_t, void*) noexcept nogil
ctypedef int (*cuMemcpyPeerAsync_t)(CUdeviceptr, void*, CUdeviceptr, void*, size_t,
                                    void*) noexcept nogil
ctypedef int (*cuMemcpy2DAsync_t)(const CUDA_MEMCPY2D*, void*) noexcept nogil
ctypedef int (*cuMemcpy3DAsync_t)(const CUDA_MEMCPY3D*, void*) noexcept nogil
ctypedef int (*cuMemAllocAsync_t)(CUdeviceptr*, size_t, void*) noexcept nogil
ctypedef int (*cuMemFreeAsync_t)(CUdeviceptr, void*) noexcept nogil
ctypedef int (*cuMemAlloc_t)(CUdeviceptr*, size_t) noexcept nogil
ctypedef int (*cuMemFree_t)(CUdeviceptr) noexcept nogil
ctypedef int (*cuMemHostAlloc_t)(void**, size_t, unsigned int) noexcept nogil
ctypedef int (*cuMemFreeHost_t)(void*) noexcept nogil
ctypedef int (*cuMemAllocManaged_t)(CUdeviceptr*, size_t, unsigned int) noexcept nogil
ctypedef int (*cuStreamSynchronize_t)(void*) noexcept nogil
ctypedef int (*cuStreamGetCtx_t)(void*, void**) noexcept nogil
ctypedef int (*cuStreamGetDevice_t)(void*, int*) noexcept nogil
ctypedef int (*cuCtxGetDevice_t)(int*) noexcept nogil
ctypedef int (*cuDeviceGetAttribute_t)(int*, int, int) noexcept nogil
ctypedef int (*cuDeviceCanAccessPeer_t)(int*, int, int) noexcept nogil
ctypedef int (*cuCtxEnablePeerAccess_t)(void*, unsigned int) noexcept nogil
ctypedef int (*cuDeviceGetCount_t)(int*) noexcept nogil

cdef cuMemcpyAsync_t _cuMemcpyAsync = NULL
cdef cuMemcpyPeerAsync_t _cuMemcpyPeerAsync = NULL
cdef cuMemcpy2DAsync_t _cuMemcpy2DAsync = NULL
cdef cuMemcpy3DAsync_t _cuMemcpy3DAsync = NULL
cdef cuMemAllocAsync_t _cuMemAllocAsync = NULL       # optional (CUDA 11.2+)
cdef cuMemFreeAsync_t _cuMemFreeAsync = NULL         # optional, with _cuMemAllocAsync
cdef cuMemAlloc_t _cuMemAlloc = NULL
cdef cuMemFree_t _cuMemFree = NULL
cdef cuMemHostAlloc_t _cuMemHostAlloc = NULL
cdef cuMemFreeHost_t _cuMemFreeHost = NULL
cdef cuMemAllocManaged_t _cuMemAllocManaged = NULL
cdef cuStreamSynchronize_t _cuStreamSynchronize = NULL
cdef cuStreamGetCtx_t _cuStreamGetCtx = NULL
cdef cuStreamGetDevice_t _cuStreamGetDevice = NULL   # optional (CUDA 12.8+)
cdef cuCtxGetDevice_t _cuCtxGetDevice = NULL
cdef cuDeviceGetAttribute_t _cuDeviceGetAttribute = NULL
cdef cuDeviceCanAccessPeer_t _cuDeviceCanAccessPeer = NULL
cdef cuCtxEnablePeerAccess_t _cuCtxEnablePeerAccess = NULL
cdef cuDeviceGetCount_t _cuDeviceGetCount = NULL

# Per device: -1 not asked yet, 0 no, 1 yes.
cdef signed char _pools_supported[MAX_DEVICES]
memset(_pools_supported, 0xFF, sizeof(_pools_supported))
# Per (device, peer): -1 not asked yet, 0 no, 1 enabled.
cdef signed char _peer_enabled[MAX_DEVICES * MAX_DEVICES]
memset(_peer_enabled, 0xFF, sizeof(_peer_enabled))
cdef bint _resolved = False


cdef int _require_memory_api() except -1:
    global _resolved, _cuMemcpyAsync, _cuMemcpyPeerAsync, _cuMemcpy2DAsync, _cuMemcpy3DAsync
    global _cuMemAllocAsync, _cuMemFreeAsync, _cuMemAlloc, _cuMemFree, _cuMemHostAlloc
    global _cuMemFreeHost, _cuMemAllocManaged, _cuStreamSynchronize, _cuStreamGetCtx
    global _cuCtxGetDevice, _cuDeviceGetAttribute, _cuDeviceCanAccessPeer
    global _cuCtxEnablePeerAccess, _cuDeviceGetCount, _cuStreamGetDevice
    if _resolved:
        return 0
    if not driver_available():
        raise BufferError("copying or allocating CUDA memory needs the CUDA driver (libcuda), "
                          "which is not available here")
    _cuMemcpyAsync = <cuMemcpyAsync_t> driver_symbol(b"cuMemcpyAsync")
    _cuMemcpyPeerAsync = <cuMemcpyPeerAsync_t> driver_symbol(b"cuMemcpyPeerAsync")
    _cuMemcpy2DAsync = <cuMemcpy2DAsync_t> driver_symbol(b"cuMemcpy2DAsync_v2")
    _cuMemcpy3DAsync = <cuMemcpy3DAsync_t> driver_symbol(b"cuMemcpy3DAsync_v2")
    _cuMemAllocAsync = <cuMemAllocAsync_t> driver_symbol(b"cuMemAllocAsync")
    _cuMemFreeAsync = <cuMemFreeAsync_t> driver_symbol(b"cuMemFreeAsync")
    _cuMemAlloc = <cuMemAlloc_t> driver_symbol(b"cuMemAlloc_v2")
    _cuMemFree = <cuMemFree_t> driver_symbol(b"cuMemFree_v2")
    _cuMemHostAlloc = <cuMemHostAlloc_t> driver_symbol(b"cuMemHostAlloc")
    _cuMemFreeHost = <cuMemFreeHost_t> driver_symbol(b"cuMemFreeHost")
    _cuMemAllocManaged = <cuMemAllocManaged_t> driver_symbol(b"cuMemAllocManaged")
    _cuStreamSynchronize = <cuStreamSynchronize_t> driver_symbol(b"cuStreamSynchronize")
    _cuStreamGetCtx = <cuStreamGetCtx_t> driver_symbol(b"cuStreamGetCtx")
    _cuStreamGetDevice = <cuStreamGetDevice_t> driver_symbol(b"cuStreamGetDevice")
    _cuCtxGetDevice = <cuCtxGetDevice_t> driver_symbol(b"cuCtxGetDevice")
    _cuDeviceGetAttribute = <cuDeviceGetAttribute_t> driver_symbol(b"cuDeviceGetAttribute")
    _cuDeviceCanAccessPeer = <cuDeviceCanAccessPeer_t> driver_symbol(b"cuDeviceCanAccessPeer")
    _cuCtxEnablePeerAccess = <cuCtxEnablePeerAccess_t> driver_symbol(b"cuCtxEnablePeerAccess")
    _cuDeviceGetCount = <cuDeviceGetCount_t> driver_symbol(b"cuDeviceGetCount")
    if (_cuMemcpyAsync == NULL or _cuMemcpyPeerAsync == NULL or _cuMemcpy2DAsync == NULL
            or _cuMemcpy3DAsync == NULL or _cuMemAlloc == NULL or _cuMemFree == NULL
            or _cuMemHostAlloc == NULL or _cuMemFreeHost == NULL or _cuMemAllocManaged == NULL
            or _cuStreamSynchronize == NULL or _cuStreamGetCtx == NULL
            or _cuCtxGetDevice == NULL or _cuDeviceGetAttribute == NULL
            or _cuDeviceCanAccessPeer == NULL or _cuCtxEnablePeerAccess == NULL
            or _cuDeviceGetCount == NULL):
        raise RuntimeError("this CUDA driver lacks the memory API interop-core needs "
                           "(cuMemcpy*Async, cuMemAlloc, cuMemHostAlloc, cuStreamSynchronize)")
    if _cuMemFreeAsync == NULL:
        _cuMemAllocAsync = NULL     # both or neither
    _resolved = True
    return 0


cdef int _device_count = -1      # asked once: a process's devices do not change


cdef int cuda_device_count() noexcept:
    global _device_count
    cdef int count = 0
    if _device_count >= 0:
        return _device_count
    if not driver_available():
        _device_count = 0
        return 0
    try:
        _require_memory_api()
    except Exception:
        _device_count = 0
        return 0
    if _cuDeviceGetCount(&count) != CUDA_SUCCESS:
        count = 0
    _device_count = count
    return count


cdef int _check_device(int device_id) except -1:
    cdef int count = cuda_device_count()
    if device_id < 0 or device_id >= count or device_id >= MAX_DEVICES:
        raise ValueError(f"CUDA device {device_id} does not exist here (the driver sees "
                         f"{count} device{'s' if count != 1 else ''})")
    return 0


cdef int enter_device(int device_id) except -1:
    _require_memory_api()
    _check_device(device_id)
    return enter_context(primary_context(device_id))


# --- allocations --------------------------------------------------------------------------------

cdef class Allocation:
    """Memory that interop-core allocated for a copy; freed exactly once, when this object dies.

    A view of such memory has this object as its owner.  Device memory from a stream-ordered
    pool (``kind == "device_async"``) is released with ``cuMemFreeAsync`` on the stream it was
    allocated on, so the release waits for the work enqueued there before it; the stream
    object the allocation was made for (if one was passed) is kept alive until then.
    """

    def __init__(self):
        raise TypeError("Allocation objects are made by interop-core "
                        "(StridedMemoryView.empty_like)")

    def __dealloc__(self):
        cdef uintptr_t ptr = self.ptr
        cdef int pushed = 0
        self.ptr = 0                    # whatever happens below, never freed twice
        if ptr == 0:
            return
        if self.alloc_kind == ALLOC_HOST:
            free(<void*> ptr)
            return
        # At interpreter exit the driver may already be torn down: nothing left to release.
        if not Py_IsInitialized() or not _resolved:
            return
        try:
            pushed = enter_context(primary_context(self.device_id))
        except Exception:
            return
        if self.alloc_kind == ALLOC_PINNED:
            _cuMemFreeHost(<void*> ptr)
        elif self.alloc_kind == ALLOC_DEVICE_ASYNC:
            _cuMemFreeAsync(<CUdeviceptr> ptr, <void*> self.free_stream)
        else:
            _cuMemFree(<CUdeviceptr> ptr)
        leave_context(pushed)
        self.stream_keepalive = None

    @property
    def kind(self):
        """str: ``"host"``, ``"pinned"``, ``"device"``, ``"device_async"`` or ``"managed"``."""
        return ("host", "pinned", "device", "device_async", "managed")[self.alloc_kind]

    @property
    def stream(self):
        """int or None: The stream a stream-ordered allocation is released on."""
        return self.free_stream if self.alloc_kind == ALLOC_DEVICE_ASYNC else None

    def __repr__(self):
        return (f"<Allocation {self.kind} {self.size} bytes at {self.ptr:#x} "
                f"(device {self.device_type}:{self.device_id})>")


cdef Allocation _new(uintptr_t ptr, Py_ssize_t nbytes, int device_type, int device_id,
                     int kind):
    cdef Allocation a = Allocation.__new__(Allocation)
    a.ptr = ptr
    a.size = nbytes
    a.device_type = device_type
    a.device_id = device_id
    a.alloc_kind = kind
    return a


cdef Allocation allocate_host(Py_ssize_t nbytes, bint pinned):
    cdef void* p = NULL
    cdef int pushed, status
    if nbytes < 0:
        raise ValueError(f"cannot allocate {nbytes} bytes")
    if not pinned:
        if posix_memalign(&p, HOST_ALIGNMENT, nbytes if nbytes > 0 else 1) != 0:
            p = NULL
        if p == NULL:
            raise MemoryError(f"could not allocate {nbytes} bytes of host memory")
        return _new(<uintptr_t> p, nbytes, kDLCPU, 0, ALLOC_HOST)
    # Portable and mapped: page-locked for every context, addressable by every device (UVA).
    pushed = enter_device(0)
    try:
        status = _cuMemHostAlloc(&p, nbytes if nbytes > 0 else 1,
                                 CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)
    finally:
        leave_context(pushed)
    if status != CUDA_SUCCESS:
        _raise_alloc(status, b"cuMemHostAlloc", nbytes, "pinned host")
    return _new(<uintptr_t> p, nbytes, kDLCUDAHost, 0, ALLOC_PINNED)


cdef int _raise_alloc(int status, const char* call, Py_ssize_t nbytes, str what) except -1:
    try:
        check_status(status, call)
    except RuntimeError as exc:
        if status == 2:     # CUDA_ERROR_OUT_OF_MEMORY
            raise MemoryError(f"could not allocate {nbytes} bytes of {what} memory: {exc}")
        raise
    return 0


cdef bint _stream_ordered_supported(int device_id) except -1:
    cdef int value = 0
    if _cuMemAllocAsync == NULL:
        return False
    if _pools_supported[device_id] < 0:
        if _cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                 device_id) != CUDA_SUCCESS:
            value = 0
        _pools_supported[device_id] = 1 if value else 0
    return _pools_supported[device_id] == 1


cdef Allocation allocate_device(Py_ssize_t nbytes, int device_id, bint stream_ordered,
                                intptr_t stream, object stream_keepalive):
    cdef CUdeviceptr p = 0
    cdef int status
    cdef bint use_pool
    cdef Allocation a
    if nbytes < 0:
        raise ValueError(f"cannot allocate {nbytes} bytes")
    cdef int pushed = enter_device(device_id)
    try:
        use_pool = stream_ordered and _stream_ordered_supported(device_id)
        if use_pool:
            status = _cuMemAllocAsync(&p, nbytes if nbytes > 0 else 1, <void*> stream)
        else:
            status = _cuMemAlloc(&p, nbytes if nbytes > 0 else 1)
    finally:
        leave_context(pushed)
    if status != CUDA_SUCCESS:
        _raise_alloc(status, b"cuMemAllocAsync" if use_pool else b"cuMemAlloc", nbytes,
                     f"device {device_id}")
    a = _new(<uintptr_t> p, nbytes, kDLCUDA, device_id,
             ALLOC_DEVICE_ASYNC if use_pool else ALLOC_DEVICE)
    if use_pool:
        a.free_stream = stream
        a.stream_keepalive = stream_keepalive
    return a


cdef Allocation allocate_managed(Py_ssize_t nbytes, int device_id):
    cdef CUdeviceptr p = 0
    cdef int status
    cdef int pushed = enter_device(device_id)
    try:
        status = _cuMemAllocManaged(&p, nbytes if nbytes > 0 else 1, CU_MEM_ATTACH_GLOBAL)
    finally:
        leave_context(pushed)
    if status != CUDA_SUCCESS:
        _raise_alloc(status, b"cuMemAllocManaged", nbytes, "managed")
    return _new(<uintptr_t> p, nbytes, kDLCUDAManaged, device_id, ALLOC_MANAGED)


# --- copies -----------------------------------------------------------------------------------

cdef int memcpy_async(uintptr_t dst, uintptr_t src, size_t nbytes, intptr_t stream,
                      int device_id) except -1:
    cdef int status
    cdef int pushed = enter_device(device_id)
    status = _cuMemcpyAsync(<CUdeviceptr> dst, <CUdeviceptr> src, nbytes, <void*> stream)
    leave_context(pushed)
    return check_status(status, b"cuMemcpyAsync")


cdef int memcpy_async_entered(uintptr_t dst, uintptr_t src, size_t nbytes,
                              intptr_t stream) except -1:
    return check_status(_cuMemcpyAsync(<CUdeviceptr> dst, <CUdeviceptr> src, nbytes,
                                       <void*> stream), b"cuMemcpyAsync")


cdef int memcpy_peer_async(uintptr_t dst, int dst_device, uintptr_t src, int src_device,
                           size_t nbytes, intptr_t stream, int device_id) except -1:
    cdef int status
    cdef void* dst_ctx
    cdef void* src_ctx
    _require_memory_api()
    _check_device(dst_device)
    _check_device(src_device)
    dst_ctx = primary_context(dst_device)
    src_ctx = primary_context(src_device)
    cdef int pushed = enter_device(device_id)
    status = _cuMemcpyPeerAsync(<CUdeviceptr> dst, dst_ctx, <CUdeviceptr> src, src_ctx, nbytes,
                                <void*> stream)
    leave_context(pushed)
    return check_status(status, b"cuMemcpyPeerAsync")


cdef int memcpy_2d_async(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch,
                         size_t width, size_t height, intptr_t stream, int device_id) except -1:
    cdef CUDA_MEMCPY2D p
    cdef int status
    memset(&p, 0, sizeof(p))
    p.srcMemoryType = CU_MEMORYTYPE_UNIFIED
    p.srcDevice = src
    p.srcPitch = src_pitch
    p.dstMemoryType = CU_MEMORYTYPE_UNIFIED
    p.dstDevice = dst
    p.dstPitch = dst_pitch
    p.WidthInBytes = width
    p.Height = height
    cdef int pushed = enter_device(device_id)
    status = _cuMemcpy2DAsync(&p, <void*> stream)
    leave_context(pushed)
    return check_status(status, b"cuMemcpy2DAsync")


cdef int memcpy_3d_async(uintptr_t dst, size_t dst_pitch, size_t dst_height,
                         uintptr_t src, size_t src_pitch, size_t src_height,
                         size_t width, size_t height, size_t depth, intptr_t stream,
                         int device_id) except -1:
    cdef CUDA_MEMCPY3D p
    cdef int status
    memset(&p, 0, sizeof(p))
    p.srcMemoryType = CU_MEMORYTYPE_UNIFIED
    p.srcDevice = src
    p.srcPitch = src_pitch
    p.srcHeight = src_height
    p.dstMemoryType = CU_MEMORYTYPE_UNIFIED
    p.dstDevice = dst
    p.dstPitch = dst_pitch
    p.dstHeight = dst_height
    p.WidthInBytes = width
    p.Height = height
    p.Depth = depth
    cdef int pushed = enter_device(device_id)
    status = _cuMemcpy3DAsync(&p, <void*> stream)
    leave_context(pushed)
    return check_status(status, b"cuMemcpy3DAsync")


# --- streams and devices --------------------------------------------------------------------

cdef int stream_synchronize(intptr_t stream, int device_id) except -1:
    cdef int status
    cdef int pushed = enter_device(device_id)
    with nogil:
        status = _cuStreamSynchronize(<void*> stream)
    leave_context(pushed)
    return check_status(status, b"cuStreamSynchronize")


cdef int stream_device(intptr_t stream, int default_device) except -1:
    cdef void* ctx = NULL
    cdef int device = -1
    cdef int pushed
    if 0 <= stream <= 2:
        return default_device
    _require_memory_api()
    if _cuStreamGetDevice != NULL:
        # One call where the driver has it (CUDA 12.8 and later).
        check_status(_cuStreamGetDevice(<void*> stream, &device), b"cuStreamGetDevice")
        return device
    check_status(_cuStreamGetCtx(<void*> stream, &ctx), b"cuStreamGetCtx")
    # Older drivers: a primary context we retained names its device without another call (the
    # streams of torch, cupy, jax and numba live in primary contexts); any other context is
    # made current and asked.
    device = primary_context_device(ctx)
    if device >= 0:
        return device
    pushed = enter_context(ctx)
    try:
        check_status(_cuCtxGetDevice(&device), b"cuCtxGetDevice")
    finally:
        leave_context(pushed)
    return device


cdef bint peer_access(int device_id, int peer) except -1:
    cdef int can = 0
    cdef int status
    cdef int pushed
    if device_id == peer:
        return True
    _require_memory_api()
    _check_device(device_id)
    _check_device(peer)
    cdef int slot = device_id * MAX_DEVICES + peer
    if _peer_enabled[slot] < 0:
        if _cuDeviceCanAccessPeer(&can, device_id, peer) != CUDA_SUCCESS or not can:
            _peer_enabled[slot] = 0
        else:
            pushed = enter_context(primary_context(device_id))
            try:
                status = _cuCtxEnablePeerAccess(primary_context(peer), 0)
            finally:
                leave_context(pushed)
            _peer_enabled[slot] = 1 if status in (
                CUDA_SUCCESS, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) else 0
    return _peer_enabled[slot] == 1
