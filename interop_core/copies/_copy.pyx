# Copies between strided views (see _copy.pxd and the "Copies" page of the documentation).
#
# Every copy is first reduced to a CopyPlan (_coalesce: extents of 1 dropped, negative
# destination strides reversed, dimensions merged, the widest element chosen), then moved by
# one of three engines:
# - host memory on both sides: C loops here (memcpy per contiguous run), without the GIL for
#   large copies;
# - the CUDA driver's cuMemcpyAsync / cuMemcpyPeerAsync for one contiguous run, and
#   cuMemcpy2DAsync / cuMemcpy3DAsync for rows at a regular pitch;
# - our PTX kernels (_ptx.py) for every other layout between memory a kernel on the stream's
#   device can address (its device memory, a peer's with peer access, pinned or managed memory).
# Pageable host memory that no memcpy shape fits is staged through a dense buffer on the host
# and one on the device.  Temporary device memory comes from the stream-ordered pool
# (cuMemAllocAsync) and is released in stream order once the copy is enqueued.
#
# Dense copies between two device views of one device (the common case, and the one whose host
# cost has a budget: small copies on a stream) skip the plan: one cuMemcpyAsync, with the
# device's context entered once for the orderings and the memcpy (_copy_dense_on_device).

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from libc.stdint cimport int64_t, intptr_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from ..core._dlpack_abi cimport kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged
from ..core._dtypes cimport describe_dtype
from ..core._layout cimport (
    StridedLayout,
    extents_is_c_contiguous,
    extents_is_f_contiguous,
    extents_offset_bounds,
    extents_volume,
    layout_from_extents,
)
from ..core._record cimport MAX_NDIM, extents_copy
from ..core._view cimport (
    StridedMemoryView,
    check_describes_memory,
    hold_memory,
    install_copy_views,
    knows_producer_stream,
    order_view,
    view_new,
)
from ..core._view cimport parse_device as parse_any_device
from ..cuda._cuda cimport leave_context, order_streams_entered, same_stream
from ..cuda._memory cimport (
    Allocation,
    allocate_device,
    allocate_host,
    allocate_managed,
    cuda_device_count,
    enter_device,
    memcpy_2d_async,
    memcpy_3d_async,
    memcpy_async,
    memcpy_async_entered,
    memcpy_peer_async,
    peer_access,
    stream_device,
    stream_synchronize,
)
from ..cuda._module cimport Kernel, launch_kernel
from ..cuda._streams cimport resolve_stream
from ._coalesce cimport PLAN_MAX_NDIM, CopyPlan, coalesce, plan_dst_nested, plan_volume

from . import _ptx

__all__ = ["copy", "device_pair", "empty_like", "export_copy", "is_on", "place"]

cdef enum:
    KERNEL_MAX_OUTER = 15           # _ptx.MAX_OUTER_DIMS (checked at import)
    KERNEL_BLOCK = 256              # _ptx.BLOCK
    KERNEL_UNROLL = 4               # _ptx.UNROLL
    ROWS_KERNEL_MIN_ROW = 32        # shorter rows: the flat kernel
    WARP = 32
    DEVICE_MEMCPY_MIN_ROW = 4096    # device-to-device rows at least this long: cuMemcpy2D/3D
    GIL_FREE_BYTES = 1 << 16        # host copies this large run without the GIL
    MAX_PITCH = 0x7FFFFFFF          # the driver's 2-D / 3-D copies take pitches below 2**31

if (_ptx.MAX_OUTER_DIMS != KERNEL_MAX_OUTER or _ptx.BLOCK != KERNEL_BLOCK
        or _ptx.UNROLL != KERNEL_UNROLL):
    raise ImportError("interop_core.copies: _ptx.py and _copy.pyx disagree on the kernel layout")

# Where a side of a copy lives, seen from the device whose stream runs the copy.
cdef enum Reach:
    REACH_PAGEABLE = 0      # ordinary host memory: only the driver's memcpy can reach it
    REACH_PINNED = 1        # page-locked host memory, mapped for every device
    REACH_MANAGED = 2       # managed (unified) memory
    REACH_LOCAL = 3         # device memory of the copying device
    REACH_PEER = 4          # device memory of another device


# The by-value argument of every copy kernel; the byte layout _ptx.py documents.
ctypedef struct KernelArgs:
    uint64_t dst
    uint64_t src
    uint64_t inner_n
    int64_t dst_inner
    int64_t src_inner
    uint64_t rows
    uint64_t outer_ndim
    uint64_t outer_shape[KERNEL_MAX_OUTER]
    int64_t dst_outer[KERNEL_MAX_OUTER]
    int64_t src_outer[KERNEL_MAX_OUTER]


# --- host copies ------------------------------------------------------------------------------

cdef void _copy_run(char* d, const char* s, int64_t n, int64_t ds, int64_t ss,
                    int64_t w) noexcept nogil:
    cdef int64_t k
    if ds == w and ss == w:
        memcpy(d, s, <size_t> (n * w))
    elif w == 4:
        for k in range(n):
            memcpy(d + k * ds, s + k * ss, 4)
    elif w == 8:
        for k in range(n):
            memcpy(d + k * ds, s + k * ss, 8)
    elif w == 2:
        for k in range(n):
            memcpy(d + k * ds, s + k * ss, 2)
    elif w == 16:
        for k in range(n):
            memcpy(d + k * ds, s + k * ss, 16)
    else:
        for k in range(n):
            d[k * ds] = s[k * ss]


cdef void host_copy(const CopyPlan* p, uintptr_t dst, uintptr_t src) noexcept nogil:
    """Run `p` with C loops: the innermost dimension per call of _copy_run, the rest counted."""
    cdef int64_t idx[PLAN_MAX_NDIM]
    cdef int i, inner
    cdef char* d = <char*> dst
    cdef const char* s = <const char*> src
    if p.empty:
        return
    if p.ndim == 0:
        memcpy(d, s, <size_t> p.width)
        return
    inner = p.ndim - 1
    for i in range(inner):
        idx[i] = 0
    while True:
        _copy_run(d, s, p.shape[inner], p.dst_strides[inner], p.src_strides[inner], p.width)
        i = inner - 1
        while i >= 0:
            idx[i] += 1
            d += p.dst_strides[i]
            s += p.src_strides[i]
            if idx[i] < p.shape[i]:
                break
            d -= p.shape[i] * p.dst_strides[i]
            s -= p.shape[i] * p.src_strides[i]
            idx[i] = 0
            i -= 1
        if i < 0:
            return


cdef void _dense(const CopyPlan* p, int64_t* strides) noexcept nogil:
    cdef int i
    cdef int64_t stride = p.width
    for i in range(p.ndim - 1, -1, -1):
        strides[i] = stride
        stride *= p.shape[i]


cdef void _staged(const CopyPlan* p, CopyPlan* out, bint dense_dst) noexcept nogil:
    """`p` with one side replaced by a dense buffer laid out in the plan's order."""
    memcpy(out, p, sizeof(CopyPlan))
    if dense_dst:
        _dense(p, out.dst_strides)
    else:
        _dense(p, out.src_strides)


cdef void _span(const CopyPlan* p, const int64_t* strides, uintptr_t base, uintptr_t* lo,
                uintptr_t* hi) noexcept nogil:
    cdef int i
    cdef int64_t low = 0, high = 0, reach
    for i in range(p.ndim):
        reach = (p.shape[i] - 1) * strides[i]
        if reach < 0:
            low += reach
        else:
            high += reach
    lo[0] = base + <uintptr_t> low
    hi[0] = base + <uintptr_t> high + <uintptr_t> p.width


cdef bint _overlap(const CopyPlan* p, uintptr_t dst, uintptr_t src) noexcept nogil:
    cdef uintptr_t dlo, dhi, slo, shi
    _span(p, p.dst_strides, dst, &dlo, &dhi)
    _span(p, p.src_strides, src, &slo, &shi)
    return dlo < shi and slo < dhi


cdef bint _same_elements(const CopyPlan* p, uintptr_t dst, uintptr_t src) noexcept nogil:
    cdef int i
    if dst != src:
        return False
    for i in range(p.ndim):
        if p.dst_strides[i] != p.src_strides[i]:
            return False
    return True


cdef int _host_copy_checked(const CopyPlan* p, uintptr_t dst, uintptr_t src) except -1:
    cdef CopyPlan into_tmp, from_tmp
    cdef int64_t nbytes = plan_volume(p) * p.width
    cdef Allocation tmp
    if _overlap(p, dst, src):
        if _same_elements(p, dst, src):
            return 0        # a copy onto itself
        # Through a dense temporary: read everything before writing anything.
        tmp = allocate_host(nbytes, False)
        _staged(p, &into_tmp, True)
        _staged(p, &from_tmp, False)
        with nogil:
            host_copy(&into_tmp, tmp.ptr, src)
            host_copy(&from_tmp, dst, tmp.ptr)
        return 0
    if nbytes >= GIL_FREE_BYTES:
        with nogil:
            host_copy(p, dst, src)
    else:
        host_copy(p, dst, src)
    return 0


# --- device copies ----------------------------------------------------------------------------

cdef dict _modules = {}       # device ordinal -> Module of _ptx.ptx_source() (kept for the process)
cdef dict _kernels = {}       # (device, kind, width) -> Kernel (keeps its module alive)


cdef Kernel _kernel(int device_id, str kind, int64_t width):
    key = (device_id, kind, width)
    k = _kernels.get(key)
    if k is None:
        module = _modules.get(device_id)
        if module is None:
            from ..cuda._module import load_ptx

            module = load_ptx(_ptx.ptx_source(), device_id)
            _modules[device_id] = module
        k = module.kernel(_ptx.kernel_name(kind, width))
        _kernels[key] = k
    return <Kernel> k


cdef int _launch(const CopyPlan* p, uintptr_t dst, uintptr_t src, intptr_t stream,
                 int device_id) except -1:
    cdef KernelArgs args
    cdef CopyPlan inner_plan
    cdef void* params[1]
    cdef unsigned int grid[3]
    cdef unsigned int block[3]
    cdef int i, d, n_outer = p.ndim - 1 if p.ndim > 0 else 0
    cdef int64_t k
    cdef uint64_t total, blocks
    if n_outer > KERNEL_MAX_OUTER:
        # More dimensions than a kernel takes: one launch per index of the outermost.
        memcpy(&inner_plan, p, sizeof(CopyPlan))
        inner_plan.ndim = p.ndim - 1
        for i in range(p.ndim - 1):
            inner_plan.shape[i] = p.shape[i + 1]
            inner_plan.dst_strides[i] = p.dst_strides[i + 1]
            inner_plan.src_strides[i] = p.src_strides[i + 1]
        for k in range(p.shape[0]):
            _launch(&inner_plan, dst + <uintptr_t> (k * p.dst_strides[0]),
                    src + <uintptr_t> (k * p.src_strides[0]), stream, device_id)
        return 0
    args.dst = dst
    args.src = src
    args.rows = 1
    args.outer_ndim = n_outer
    if p.ndim == 0:
        args.inner_n = 1
        args.dst_inner = p.width
        args.src_inner = p.width
    else:
        args.inner_n = p.shape[p.ndim - 1]
        args.dst_inner = p.dst_strides[p.ndim - 1]
        args.src_inner = p.src_strides[p.ndim - 1]
    for i in range(n_outer):
        d = p.ndim - 2 - i           # fastest-varying outer dimension first
        args.outer_shape[i] = p.shape[d]
        args.dst_outer[i] = p.dst_strides[d]
        args.src_outer[i] = p.src_strides[d]
        args.rows *= <uint64_t> p.shape[d]
    block[0] = KERNEL_BLOCK
    block[1] = block[2] = 1
    grid[2] = 1
    if args.inner_n >= ROWS_KERNEL_MIN_ROW or args.rows == 1:
        kernel = _kernel(device_id, "rows", p.width)
        # Threads along a row: enough for the row (a warp at least), the rest of the block
        # takes further rows, so short rows do not leave threads idle.
        while block[0] > WARP and block[0] * KERNEL_UNROLL // 2 >= args.inner_n:
            block[0] >>= 1
        block[1] = KERNEL_BLOCK // block[0]
        blocks = (args.inner_n + block[0] * KERNEL_UNROLL - 1) // (block[0] * KERNEL_UNROLL)
        grid[0] = <unsigned int> min(blocks, <uint64_t> 65535)
        grid[1] = <unsigned int> min((args.rows + block[1] - 1) // block[1], <uint64_t> 65535)
    else:
        kernel = _kernel(device_id, "flat", p.width)
        total = args.rows * args.inner_n
        blocks = (total + KERNEL_BLOCK - 1) // KERNEL_BLOCK
        grid[0] = <unsigned int> min(blocks, <uint64_t> 65535)
        grid[1] = 1
    params[0] = &args
    launch_kernel(kernel, grid, block, params, stream, 0)
    return 0


cdef int _memcpy_shape(const CopyPlan* p) noexcept nogil:
    """1, 2 or 3 when the driver's 1-D / 2-D / 3-D memcpy can run `p`, else 0."""
    cdef int64_t w = p.width, row, dst_height, src_height
    cdef int last = p.ndim - 1
    if p.ndim == 0:
        return 1
    if p.dst_strides[last] != w or p.src_strides[last] != w:
        return 0
    if p.ndim == 1:
        return 1
    row = p.shape[last] * w
    if p.ndim == 2:
        if (p.dst_strides[0] < row or p.src_strides[0] < row
                or p.dst_strides[0] > MAX_PITCH or p.src_strides[0] > MAX_PITCH):
            return 0
        return 2
    if p.ndim == 3:
        if (p.dst_strides[1] < row or p.src_strides[1] < row
                or p.dst_strides[1] > MAX_PITCH or p.src_strides[1] > MAX_PITCH):
            return 0
        if p.dst_strides[0] % p.dst_strides[1] or p.src_strides[0] % p.src_strides[1]:
            return 0
        dst_height = p.dst_strides[0] // p.dst_strides[1]
        src_height = p.src_strides[0] // p.src_strides[1]
        if dst_height < p.shape[1] or src_height < p.shape[1]:
            return 0
        return 3
    return 0


cdef int _memcpy(const CopyPlan* p, int shape, uintptr_t dst, uintptr_t src, intptr_t stream,
                 int device_id) except -1:
    cdef int64_t w = p.width
    cdef int last = p.ndim - 1
    if shape == 1:
        return memcpy_async(dst, src, <size_t> (plan_volume(p) * w), stream, device_id)
    if shape == 2:
        return memcpy_2d_async(dst, <size_t> p.dst_strides[0], src, <size_t> p.src_strides[0],
                               <size_t> (p.shape[last] * w), <size_t> p.shape[0], stream,
                               device_id)
    return memcpy_3d_async(dst, <size_t> p.dst_strides[1],
                           <size_t> (p.dst_strides[0] // p.dst_strides[1]),
                           src, <size_t> p.src_strides[1],
                           <size_t> (p.src_strides[0] // p.src_strides[1]),
                           <size_t> (p.shape[last] * w), <size_t> p.shape[1],
                           <size_t> p.shape[0], stream, device_id)


cdef bint _kernel_reaches(int reach, int memory_device, int device_id) except -1:
    if reach == REACH_PAGEABLE:
        return False
    if reach == REACH_PEER:
        return peer_access(device_id, memory_device)
    return True


cdef int _enqueue(const CopyPlan* p, uintptr_t dst, int dst_reach, int dst_device,
                  uintptr_t src, int src_reach, int src_device, intptr_t stream,
                  int device_id) except -1:
    """Enqueue the copy `p` on `stream` of `device_id`, staging where no engine reaches."""
    cdef CopyPlan into_tmp, from_tmp
    cdef int64_t nbytes = plan_volume(p) * p.width
    cdef int shape
    cdef bint dst_host, src_host, between_devices
    cdef Allocation device_tmp, host_tmp
    if _overlap(p, dst, src):
        if _same_elements(p, dst, src):
            return 0
        device_tmp = allocate_device(nbytes, device_id, True, stream, None)
        _staged(p, &into_tmp, True)
        _staged(p, &from_tmp, False)
        _enqueue(&into_tmp, device_tmp.ptr, REACH_LOCAL, device_id, src, src_reach, src_device,
                 stream, device_id)
        _enqueue(&from_tmp, dst, dst_reach, dst_device, device_tmp.ptr, REACH_LOCAL, device_id,
                 stream, device_id)
        return 0
    between_devices = (dst_reach >= REACH_LOCAL and src_reach >= REACH_LOCAL
                       and dst_device != src_device)
    shape = _memcpy_shape(p)
    if shape == 1:
        if between_devices:
            return memcpy_peer_async(dst, dst_device, src, src_device, <size_t> nbytes,
                                     stream, device_id)
        return memcpy_async(dst, src, <size_t> nbytes, stream, device_id)
    dst_host = dst_reach <= REACH_PINNED
    src_host = src_reach <= REACH_PINNED
    if shape > 1 and not between_devices and (
            dst_host or src_host or p.shape[p.ndim - 1] * p.width >= DEVICE_MEMCPY_MIN_ROW):
        return _memcpy(p, shape, dst, src, stream, device_id)
    if (_kernel_reaches(dst_reach, dst_device, device_id)
            and _kernel_reaches(src_reach, src_device, device_id)):
        return _launch(p, dst, src, stream, device_id)
    if src_reach == REACH_PAGEABLE and dst_reach != REACH_PEER:
        # Pack on the host, one contiguous upload, unpack on the device.  The host waits for
        # the upload: the driver may read a pageable buffer after cuMemcpyAsync returns.
        host_tmp = allocate_host(nbytes, False)
        device_tmp = allocate_device(nbytes, device_id, True, stream, None)
        _staged(p, &into_tmp, True)
        _staged(p, &from_tmp, False)
        with nogil:
            host_copy(&into_tmp, host_tmp.ptr, src)
        memcpy_async(device_tmp.ptr, host_tmp.ptr, <size_t> nbytes, stream, device_id)
        _enqueue(&from_tmp, dst, dst_reach, dst_device, device_tmp.ptr, REACH_LOCAL, device_id,
                 stream, device_id)
        stream_synchronize(stream, device_id)
        return 0
    if dst_reach == REACH_PAGEABLE and src_reach != REACH_PEER:
        # Pack on the device, one contiguous download (the host waits for it), unpack here.
        host_tmp = allocate_host(nbytes, False)
        device_tmp = allocate_device(nbytes, device_id, True, stream, None)
        _staged(p, &into_tmp, True)
        _staged(p, &from_tmp, False)
        _enqueue(&into_tmp, device_tmp.ptr, REACH_LOCAL, device_id, src, src_reach, src_device,
                 stream, device_id)
        memcpy_async(host_tmp.ptr, device_tmp.ptr, <size_t> nbytes, stream, device_id)
        stream_synchronize(stream, device_id)
        with nogil:
            host_copy(&from_tmp, dst, host_tmp.ptr)
        return 0
    raise BufferError(
        f"copy: a strided copy between CUDA devices {src_device} and {dst_device} needs peer "
        "access, which the driver does not offer for this pair; copy into contiguous memory "
        "on the source's device first")


# --- entry points -----------------------------------------------------------------------------

cdef int _check_reachable(StridedMemoryView v, str what) except -1:
    cdef int t = v.rec.device_type
    cdef int count
    if t == kDLCPU:
        return 0
    if t != kDLCUDA and t != kDLCUDAHost and t != kDLCUDAManaged:
        raise BufferError(f"copy: the {what} is on DLPack device type {t}; interop-core copies "
                          "host memory and CUDA (device, pinned, managed) memory")
    count = cuda_device_count()
    if count == 0:
        raise BufferError(f"copy: the {what} is CUDA memory, but there is no CUDA driver or "
                          "device here")
    if t == kDLCUDA and not 0 <= v.rec.device_id < count:
        raise ValueError(f"copy: the {what} is on CUDA device {v.rec.device_id}, which does "
                         f"not exist here ({count} device{'s' if count != 1 else ''})")
    return 0


cdef int _broadcast(StridedMemoryView dst, StridedMemoryView src, int64_t* dst_bytes,
                    int64_t* src_bytes) except -1:
    cdef int nd = dst.rec.ext.ndim, ns = src.rec.ext.ndim, i, j
    cdef int64_t isz = dst.rec.itemsize, e
    if ns > nd:
        raise ValueError(f"copy: the source's shape {src.shape} has more dimensions than the "
                         f"destination's {dst.shape}")
    for i in range(nd):
        dst_bytes[i] = dst.rec.ext.strides[i] * isz
        j = i - (nd - ns)
        if j < 0:
            src_bytes[i] = 0
            continue
        e = src.rec.ext.shape[j]
        if e == dst.rec.ext.shape[i]:
            src_bytes[i] = src.rec.ext.strides[j] * isz
        elif e == 1:
            src_bytes[i] = 0
        else:
            raise ValueError(f"copy: the source's shape {src.shape} does not broadcast to the "
                             f"destination's shape {dst.shape}")
    return 0


cdef int _reach(StridedMemoryView v, int device_id) noexcept:
    cdef int t = v.rec.device_type
    if t == kDLCPU:
        return REACH_PAGEABLE
    if t == kDLCUDAHost:
        return REACH_PINNED
    if t == kDLCUDAManaged:
        return REACH_MANAGED
    return REACH_LOCAL if v.rec.device_id == device_id else REACH_PEER


cdef int _wait_for_producer(StridedMemoryView v) except -1:
    """The host waits for the view's producer stream (host-side access to pinned memory)."""
    if v.rec.device_type == kDLCPU:
        return 0
    producer = v.producer_stream
    if producer is not None:
        stream_synchronize(<intptr_t> producer, v.rec.device_id)
    return 0


cdef int _order_side(StridedMemoryView v, intptr_t stream, int device_id) except -1:
    if v.rec.device_type == kDLCPU:
        return 0
    if 0 <= stream <= 2 and v.rec.device_id != device_id:
        # The default streams mean "of the current context", which is the copying device's,
        # not this memory's: the host waits for the producer instead.
        return _wait_for_producer(v)
    return order_view(v, stream)


cdef int64_t _dense_bytes(StridedMemoryView dst, StridedMemoryView src) noexcept:
    """The bytes of a copy that is one memcpy of dense memory between two device views of one
    device (same shape, both C- or both F-contiguous, not overlapping), else 0."""
    cdef int i
    cdef int64_t nbytes
    if (dst.rec.device_type != kDLCUDA or src.rec.device_type != kDLCUDA
            or dst.rec.device_id != src.rec.device_id or dst.rec.ext.ndim != src.rec.ext.ndim):
        return 0
    for i in range(dst.rec.ext.ndim):
        if dst.rec.ext.shape[i] != src.rec.ext.shape[i]:
            return 0
    if not ((extents_is_c_contiguous(&dst.rec.ext) and extents_is_c_contiguous(&src.rec.ext))
            or (extents_is_f_contiguous(&dst.rec.ext)
                and extents_is_f_contiguous(&src.rec.ext))):
        return 0
    # Dense with positive strides: element 0 is the lowest address, the rest follow it.
    nbytes = extents_volume(&dst.rec.ext) * dst.rec.itemsize
    if nbytes <= 0:
        return 0
    if (dst.rec.ptr < src.rec.ptr + <uintptr_t> nbytes
            and src.rec.ptr < dst.rec.ptr + <uintptr_t> nbytes):
        return 0        # shared memory: the general path (a temporary, or nothing to do)
    return nbytes


cdef int _stream_elsewhere(int stream_device_id) except -1:
    raise ValueError(f"copy: the stream belongs to CUDA device {stream_device_id}, but the "
                     "copy's device memory is elsewhere; pass a stream of the source's or the "
                     "destination's device")


cdef int _copy_dense_on_device(StridedMemoryView dst, StridedMemoryView src, int64_t nbytes,
                               bint sync, intptr_t handle) except -1:
    """One cuMemcpyAsync between dense memory of one device: the general path's outcome
    (ordering, the memcpy, the destination's producer stream) with the fewest driver calls."""
    cdef int device_id = dst.rec.device_id
    cdef int pushed, stream_of
    cdef bint order_src, order_dst
    _check_reachable(dst, "destination")   # the source is on the same device
    if sync:
        stream_of = stream_device(handle, device_id)
        if stream_of != device_id:
            _stream_elsewhere(stream_of)
    else:
        handle = 0      # the legacy default stream of the copying device, waited for below
    # Both producers are looked up first: a plugin's strategy may run Python code, which must
    # not find our context pushed.  A producer stream shared by both sides is ordered once.
    order_src = knows_producer_stream(src) and not same_stream(src.rec.producer_stream, handle)
    order_dst = (knows_producer_stream(dst) and not same_stream(dst.rec.producer_stream, handle)
                 and not (order_src and same_stream(dst.rec.producer_stream,
                                                    src.rec.producer_stream)))
    # One context entry for the orderings and the memcpy (each used to check it again).
    pushed = enter_device(device_id)
    try:
        if order_src:
            order_streams_entered(src.rec.producer_stream, handle, device_id)
        if order_dst:
            order_streams_entered(dst.rec.producer_stream, handle, device_id)
        memcpy_async_entered(dst.rec.ptr, src.rec.ptr, <size_t> nbytes, handle)
    finally:
        leave_context(pushed)
    if not sync:
        stream_synchronize(0, device_id)
    else:
        # Later consumers of this view order themselves after the copy.
        dst.rec.producer_stream = handle
        dst.rec.has_producer_stream = True
    return 0


cdef int copy_views(StridedMemoryView dst, StridedMemoryView src, object stream) except -1:
    cdef CopyPlan plan
    cdef int64_t dst_bytes[MAX_NDIM]
    cdef int64_t src_bytes[MAX_NDIM]
    cdef intptr_t handle = 0
    cdef bint sync
    cdef int device_id, cuda_device
    cdef int64_t dense
    cdef uintptr_t dst_addr, src_addr
    # Both memories are used from here on (a view whose hold was deferred takes it now, or
    # raises BufferError for memory freed since: before anything is written).
    hold_memory(src)
    hold_memory(dst)
    check_describes_memory(src, "copy: the source")
    check_describes_memory(dst, "copy: the destination")
    if dst.rec.readonly:
        raise BufferError("copy: the destination is read-only")
    if (dst.rec.dtype.code != src.rec.dtype.code or dst.rec.dtype.bits != src.rec.dtype.bits
            or dst.rec.dtype.lanes != src.rec.dtype.lanes or dst.rec.itemsize != src.rec.itemsize):
        raise ValueError(f"copy: the source's dtype {describe_dtype(src.rec.dtype)} differs from "
                         f"the destination's {describe_dtype(dst.rec.dtype)} (copies do not "
                         "convert)")
    dense = _dense_bytes(dst, src)
    if dense:
        # The fast path: no broadcasting, no plan, one memcpy (the common device copy, and the
        # one whose host cost matters most: small copies on a stream).
        sync = resolve_stream(stream, &handle)
        return _copy_dense_on_device(dst, src, dense, sync, handle)
    _broadcast(dst, src, dst_bytes, src_bytes)
    sync = resolve_stream(stream, &handle)
    _check_reachable(dst, "destination")
    _check_reachable(src, "source")
    coalesce(dst.rec.ext.ndim, dst.rec.ext.shape, dst_bytes, src_bytes, dst.rec.itemsize,
             dst.rec.ptr, src.rec.ptr, &plan)
    if plan.empty:
        return 0
    if not plan_dst_nested(&plan) and not dst.layout.is_unique:
        raise ValueError("copy: the destination has overlapping elements (a zero or repeated "
                         "stride), so which value each would get is ambiguous")
    dst_addr = dst.rec.ptr + <uintptr_t> plan.dst_offset
    src_addr = src.rec.ptr + <uintptr_t> plan.src_offset
    if dst.rec.device_type != kDLCUDA and src.rec.device_type != kDLCUDA:
        # Host memory on both sides (pageable, pinned or managed): the host copies now, after
        # every GPU producer of either side and the given stream have finished.
        _wait_for_producer(src)
        _wait_for_producer(dst)
        if sync and (dst.rec.device_type != kDLCPU or src.rec.device_type != kDLCPU):
            stream_synchronize(handle, dst.rec.device_id if dst.rec.device_type != kDLCPU
                               else src.rec.device_id)
        return _host_copy_checked(&plan, dst_addr, src_addr)
    cuda_device = dst.rec.device_id if dst.rec.device_type == kDLCUDA else src.rec.device_id
    device_id = stream_device(handle, cuda_device) if sync else cuda_device
    if not sync:
        handle = 0      # the legacy default stream of the copying device, waited for below
    if not ((dst.rec.device_type == kDLCUDA and dst.rec.device_id == device_id)
            or (src.rec.device_type == kDLCUDA and src.rec.device_id == device_id)):
        _stream_elsewhere(device_id)
    _order_side(src, handle, device_id)
    if not (src.rec.has_producer_stream and dst.rec.has_producer_stream
            and src.rec.producer_stream == dst.rec.producer_stream
            and src.rec.device_id == dst.rec.device_id and src.rec.device_type != kDLCPU):
        _order_side(dst, handle, device_id)     # (one producer stream is ordered once)
    _enqueue(&plan, dst_addr, _reach(dst, device_id), dst.rec.device_id,
             src_addr, _reach(src, device_id), src.rec.device_id, handle, device_id)
    if not sync:
        stream_synchronize(0, device_id)
    elif dst.rec.device_type == kDLCUDA and dst.rec.device_id == device_id:
        # Later consumers of this view order themselves after the copy.
        dst.rec.producer_stream = handle
        dst.rec.has_producer_stream = True
    return 0


install_copy_views(copy_views)


cdef tuple _target_device(object device, StridedMemoryView like):
    if device is None:
        return (like.rec.device_type, like.rec.device_id)
    return parse_device(device)


cdef tuple parse_device(object device):
    cdef tuple pair = parse_any_device(device)
    if pair[0] not in (kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged):
        raise BufferError(f"device {device!r}: copies allocate host, CUDA, pinned or managed "
                          f"memory; DLPack device type {pair[0]} is none of these")
    return pair


cdef bint on_device(StridedMemoryView v, tuple target) noexcept:
    """Whether `v`'s memory already is on `target` (a parse_device pair).  "cpu" is met by any
    host-accessible memory (pageable, pinned, managed), as the array API's device="cpu"."""
    cdef int kind = target[0]
    if kind == v.rec.device_type and target[1] == v.rec.device_id:
        return True
    return kind == kDLCPU and (v.rec.device_type == kDLCPU or v.rec.device_type == kDLCUDAHost
                               or v.rec.device_type == kDLCUDAManaged)




cdef StridedMemoryView dense_copy(StridedMemoryView view, tuple device, object order,
                                  object stream):
    cdef StridedMemoryView new
    check_describes_memory(view, "copy: the source")
    new = empty_view(view, device, order, stream)
    copy_views(new, view, stream)
    return new


cdef StridedLayout _layout_for(StridedMemoryView like, object layout):
    cdef StridedLayout new_layout
    if layout is None or isinstance(layout, str):
        # From the record: `like.layout` of a subclass's view (the compat module's) is its own
        # layout type.
        return StridedLayout.dense_like(
            layout_from_extents(&like.rec.ext, like.rec.itemsize, 0), layout or "K")
    if not isinstance(layout, StridedLayout):
        raise TypeError(f"layout must be 'K', 'C', 'F' or a StridedLayout, got "
                        f"{type(layout).__name__}")
    new_layout = <StridedLayout> layout
    if new_layout.shape != like.shape or new_layout.itemsize != like.rec.itemsize:
        raise ValueError(f"layout has shape {new_layout.shape} and itemsize "
                         f"{new_layout.itemsize}; the view has shape {like.shape} and "
                         f"itemsize {like.rec.itemsize}")
    if not new_layout.is_unique:
        raise ValueError("layout has overlapping elements; new memory needs a layout that "
                         "gives every element its own place")
    return new_layout


cdef StridedMemoryView empty_view(StridedMemoryView like, object device, object layout,
                                  object stream):
    cdef intptr_t handle = 0
    cdef int64_t lo = 0, hi = -1, volume
    cdef int64_t itemsize = like.rec.itemsize
    cdef Allocation allocation
    cdef StridedMemoryView v
    kind, ordinal = _target_device(device, like)
    cdef StridedLayout new_layout = _layout_for(like, layout)
    cdef bint sync = resolve_stream(stream, &handle)
    volume = extents_volume(&new_layout.ext)
    if volume > 0:
        extents_offset_bounds(&new_layout.ext, &lo, &hi)
    nbytes = (hi - lo + 1) * itemsize
    if kind != kDLCPU:
        if cuda_device_count() == 0:
            raise BufferError("allocating CUDA memory needs a CUDA driver and device, and there "
                              "is none here")
    if kind == kDLCPU:
        allocation = allocate_host(nbytes, False)
    elif kind == kDLCUDAHost:
        allocation = allocate_host(nbytes, True)
    elif kind == kDLCUDAManaged:
        allocation = allocate_managed(nbytes, ordinal)
    else:
        allocation = allocate_device(nbytes, ordinal, sync, handle,
                                     None if isinstance(stream, int) else stream)
    v = view_new()
    v.rec.ptr = allocation.ptr + <uintptr_t> (-lo * itemsize)
    extents_copy(&v.rec.ext, &new_layout.ext)
    v.rec.dtype = like.rec.dtype
    v.rec.itemsize = itemsize
    v.rec.device_type = allocation.device_type
    v.rec.device_id = allocation.device_id
    v.rec.readonly = False
    if kind == kDLCUDA and sync:
        # Stream-ordered memory is ready for work enqueued on that stream.
        v.rec.has_producer_stream = True
        v.rec.producer_stream = handle
    v.owner = allocation
    v._keepalive = allocation
    return v


cdef StridedMemoryView _as_view(object obj, str what):
    if type(obj) is StridedMemoryView:
        return <StridedMemoryView> obj
    from ..registry._registry import view

    # The error keeps its class: TypeError (nothing can view it), ValueError (a malformed
    # description), BufferError (memory its producer will not hand out: deleted, refused).
    try:
        return view(obj)
    except (TypeError, ValueError, BufferError) as exc:
        raise type(exc)(f"{what} must be a StridedMemoryView or an object view() accepts: "
                        f"{exc}") from None


def copy(dst, src, stream=None):
    """Copy ``src`` into ``dst`` (see :meth:`StridedMemoryView.copy_from`).

    Returns
    -------
    StridedMemoryView
        The destination's view.
    """
    cdef StridedMemoryView d = _as_view(dst, "the destination")
    copy_views(d, _as_view(src, "the source"), stream)
    return d


def empty_like(like, device=None, layout=None, stream=None):
    """New memory shaped like ``like`` (see :meth:`StridedMemoryView.empty_like`)."""
    return empty_view(_as_view(like, "like"), device, layout, stream)


def device_pair(device):
    """The DLPack ``(device_type, device_id)`` a ``device=`` argument names (see ``to()``).

    Raises
    ------
    ValueError, TypeError, BufferError
        Naming the argument: an unknown spelling, a negative ordinal, a host ordinal other
        than 0 (host memory is one device), a device type copies cannot allocate.
    """
    return parse_device(device)


def is_on(StridedMemoryView view not None, tuple target):
    """Whether ``view``'s memory is on ``target`` (a :func:`device_pair`) without a copy."""
    return on_device(view, target)


def export_copy(StridedMemoryView view not None, device, stream, order="K"):
    """A copy of ``view`` in new memory on ``device`` (None: its own), dense in ``order``
    (``"K"``: the view's stride order, or ``"C"``), for exports."""
    return dense_copy(view, _target_device(device, view), order, stream)


def place(StridedMemoryView view not None, device, copy, stream):
    """``view``, or a copy of it, per the array API's ``from_dlpack(x, device=, copy=)``.

    Parameters
    ----------
    view : StridedMemoryView
    device : None, str, tuple or device object
        Where the result must live; None: where ``view`` lives.  ``"cpu"`` is satisfied
        without a copy by any host-accessible memory (pageable, pinned, managed).
    copy : None, True or False
        True: always copy.  False: never copy (``BufferError`` if ``device`` needs one).
        None: copy only if ``device`` needs it.
    stream : None, int or stream object
        The stream a device copy runs on (see ``copy_to``).

    Returns
    -------
    StridedMemoryView
    """
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be None, True or False, got {copy!r}")
    own = (view.rec.device_type, view.rec.device_id)
    target = own if device is None else parse_device(device)
    same = on_device(view, target)
    if not copy and same:
        return view
    if copy is False:
        raise BufferError(f"the source is on DLPack device {own}; device={device!r} needs a "
                          "copy, and copy=False forbids one")
    return dense_copy(view, target, "K", stream)
