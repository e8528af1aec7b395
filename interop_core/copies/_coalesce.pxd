# Copy plans: one pure function turns a (destination, source) pair of strided layouts into the
# fewest dimensions that describe the same copy.  Every copy path (the host's C loops, the
# driver's 1-D / 2-D / 3-D memcpy, the PTX kernels) runs on its result.

from libc.stdint cimport int64_t, uintptr_t

cdef enum:
    PLAN_MAX_NDIM = 65          # 64 dimensions of a view + the bytes of one element

ctypedef struct CopyPlan:
    int ndim                    # dimensions left; 0 means one element of `width` bytes
    bint empty                  # nothing to copy (some extent is 0)
    int64_t width               # bytes moved per element of the plan: 1, 2, 4, 8 or 16 where
                                # the alignment of pointers and strides allows, else 1
    int64_t dst_offset          # bytes to add to the destination pointer (reversed dims)
    int64_t src_offset          # bytes to add to the source pointer
    int64_t shape[PLAN_MAX_NDIM]        # outermost first
    int64_t dst_strides[PLAN_MAX_NDIM]  # bytes, >= 0, decreasing (the order dst is written)
    int64_t src_strides[PLAN_MAX_NDIM]  # bytes, any sign (0 where the source is broadcast)


# Coalesce the copy of `ndim` dimensions (extents `shape`, byte strides `dst_strides` and
# `src_strides`, elements of `itemsize` bytes; broadcasting already applied to the source) into
# `plan`:
#   1. extents of 1 are dropped (an extent of 0 makes the plan empty);
#   2. a dimension whose destination stride is negative is walked backwards on both sides (the
#      same pairs of elements are copied; the pointers move to the dimension's other end);
#   3. dimensions are ordered by decreasing destination stride, so the last one is the one the
#      destination is written along most densely;
#   4. the bytes of one element become a last dimension of stride 1 on both sides, and each
#      dimension that continues the one inside it on both sides is merged into it;
#   5. the widest element `width` (16, 8, 4, 2, 1 bytes) that divides the innermost run, every
#      stride and both pointers is chosen, and the innermost run becomes elements of that width.
# The plan copies exactly the same bytes to exactly the same places as the input.  Pure: no
# allocation, no Python, no failure for valid input (ndim <= 64).
cdef void coalesce(int ndim, const int64_t* shape, const int64_t* dst_strides,
                   const int64_t* src_strides, int64_t itemsize, uintptr_t dst_ptr,
                   uintptr_t src_ptr, CopyPlan* plan) noexcept nogil

# Whether the plan's destination visits each byte at most once, proven by nesting (each stride
# at least the span of the dimensions inside it).  False does not prove an overlap: callers
# then ask the exact (slower) test of StridedLayout.is_unique.
cdef bint plan_dst_nested(const CopyPlan* plan) noexcept nogil

# Number of elements (of `width` bytes) the plan moves.
cdef int64_t plan_volume(const CopyPlan* plan) noexcept nogil
