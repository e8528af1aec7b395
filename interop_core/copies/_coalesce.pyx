# Copy plans (see _coalesce.pxd).

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from libc.stdint cimport int64_t, uintptr_t

from ..core._record cimport MAX_NDIM

__all__ = ["coalesce_copy"]


cdef inline void _swap(CopyPlan* p, int i, int j) noexcept nogil:
    cdef int64_t t
    t = p.shape[i]; p.shape[i] = p.shape[j]; p.shape[j] = t
    t = p.dst_strides[i]; p.dst_strides[i] = p.dst_strides[j]; p.dst_strides[j] = t
    t = p.src_strides[i]; p.src_strides[i] = p.src_strides[j]; p.src_strides[j] = t


cdef inline bint _outer_first(const CopyPlan* p, int i, int j) noexcept nogil:
    # Whether dimension i belongs outside dimension j: larger destination stride first; on a
    # tie (only possible for an overlapping destination) the larger |source stride|.
    if p.dst_strides[i] != p.dst_strides[j]:
        return p.dst_strides[i] > p.dst_strides[j]
    cdef int64_t a = p.src_strides[i], b = p.src_strides[j]
    return (a if a >= 0 else -a) > (b if b >= 0 else -b)


cdef void coalesce(int ndim, const int64_t* shape, const int64_t* dst_strides,
                   const int64_t* src_strides, int64_t itemsize, uintptr_t dst_ptr,
                   uintptr_t src_ptr, CopyPlan* plan) noexcept nogil:
    cdef int i, j, n = 0
    cdef int64_t extent, w, run
    cdef uintptr_t dst, src
    plan.ndim = 0
    plan.empty = False
    plan.width = 1
    plan.dst_offset = 0
    plan.src_offset = 0
    # 1-2: drop extents of 1, walk negative destination strides backwards.
    for i in range(ndim):
        extent = shape[i]
        if extent == 0:
            plan.empty = True
            return
        if extent == 1:
            continue
        plan.shape[n] = extent
        plan.dst_strides[n] = dst_strides[i]
        plan.src_strides[n] = src_strides[i]
        if dst_strides[i] < 0:
            plan.dst_offset += (extent - 1) * dst_strides[i]
            plan.src_offset += (extent - 1) * src_strides[i]
            plan.dst_strides[n] = -dst_strides[i]
            plan.src_strides[n] = -src_strides[i]
        n += 1
    # 3: outermost first (insertion sort: n is small, and already ordered input is common).
    for i in range(1, n):
        j = i
        while j > 0 and _outer_first(plan, j, j - 1):
            _swap(plan, j, j - 1)
            j -= 1
    # 4: the bytes of an element, then merge each dimension into the one inside it.
    if itemsize > 1:
        plan.shape[n] = itemsize
        plan.dst_strides[n] = 1
        plan.src_strides[n] = 1
        n += 1
    j = n - 1       # the innermost kept dimension, compacted towards the end
    i = n - 2
    while i >= 0:
        if (plan.dst_strides[i] == plan.dst_strides[j] * plan.shape[j]
                and plan.src_strides[i] == plan.src_strides[j] * plan.shape[j]):
            plan.shape[j] *= plan.shape[i]
        else:
            j -= 1
            plan.shape[j] = plan.shape[i]
            plan.dst_strides[j] = plan.dst_strides[i]
            plan.src_strides[j] = plan.src_strides[i]
        i -= 1
    # Shift the kept dimensions [j, n) to the front.
    if n > 0:
        for i in range(j, n):
            plan.shape[i - j] = plan.shape[i]
            plan.dst_strides[i - j] = plan.dst_strides[i]
            plan.src_strides[i - j] = plan.src_strides[i]
        n -= j
    plan.ndim = n
    if n == 0:
        # itemsize 1 and a single element.
        return
    # 5: the widest element the innermost byte run, the strides and the pointers allow.
    if plan.dst_strides[n - 1] != 1 or plan.src_strides[n - 1] != 1:
        return      # itemsize 1 copied with a stride: byte by byte
    run = plan.shape[n - 1]
    dst = dst_ptr + <uintptr_t> plan.dst_offset
    src = src_ptr + <uintptr_t> plan.src_offset
    w = 16
    while w > 1:
        if run % w == 0 and dst % <uintptr_t> w == 0 and src % <uintptr_t> w == 0:
            for i in range(n - 1):
                if plan.dst_strides[i] % w or plan.src_strides[i] % w:
                    break
            else:
                break
        w >>= 1
    plan.width = w
    if run == w:
        plan.ndim = n - 1       # the run is one element: the dimension goes
    else:
        plan.shape[n - 1] = run // w
        plan.dst_strides[n - 1] = w
        plan.src_strides[n - 1] = w


cdef bint plan_dst_nested(const CopyPlan* plan) noexcept nogil:
    cdef int i
    cdef int64_t span = plan.width     # bytes reached by the dimensions inside dimension i
    for i in range(plan.ndim - 1, -1, -1):
        if plan.dst_strides[i] < span:
            return False
        span += (plan.shape[i] - 1) * plan.dst_strides[i]
    return True


cdef int64_t plan_volume(const CopyPlan* plan) noexcept nogil:
    cdef int i
    cdef int64_t v = 1
    if plan.empty:
        return 0
    for i in range(plan.ndim):
        v *= plan.shape[i]
    return v


def coalesce_copy(shape, dst_strides, src_strides, itemsize, dst_ptr=0, src_ptr=0):
    """The copy plan of :func:`coalesce` as Python values (for tests and diagnostics).

    Parameters
    ----------
    shape : sequence of int
        The extents of the copy (the destination's; the source already broadcast).
    dst_strides, src_strides : sequence of int
        Strides in bytes (the source's may be 0 or negative; the destination's negative).
    itemsize : int
        Bytes per element.
    dst_ptr, src_ptr : int
        Addresses of element 0 (only their alignment matters).

    Returns
    -------
    dict
        ``shape``, ``dst_strides``, ``src_strides`` (bytes, outermost first), ``width``,
        ``dst_offset``, ``src_offset`` (bytes) and ``empty``.
    """
    cdef CopyPlan plan
    cdef int64_t s[MAX_NDIM]
    cdef int64_t d[MAX_NDIM]
    cdef int64_t r[MAX_NDIM]
    cdef int i, n = len(shape)
    if n > MAX_NDIM or len(dst_strides) != n or len(src_strides) != n:
        raise ValueError("shape and both strides must have the same length, at most "
                         f"{MAX_NDIM}")
    if itemsize < 1:
        raise ValueError(f"itemsize must be >= 1, got {itemsize}")
    for i in range(n):
        s[i] = shape[i]
        d[i] = dst_strides[i]
        r[i] = src_strides[i]
        if s[i] < 0:
            raise ValueError(f"shape[{i}] is negative")
    coalesce(n, s, d, r, itemsize, <uintptr_t> dst_ptr, <uintptr_t> src_ptr, &plan)
    return {
        "shape": tuple(plan.shape[i] for i in range(plan.ndim)),
        "dst_strides": tuple(plan.dst_strides[i] for i in range(plan.ndim)),
        "src_strides": tuple(plan.src_strides[i] for i in range(plan.ndim)),
        "width": plan.width, "dst_offset": plan.dst_offset, "src_offset": plan.src_offset,
        "empty": bool(plan.empty), "dst_nested": bool(plan_dst_nested(&plan)),
    }
