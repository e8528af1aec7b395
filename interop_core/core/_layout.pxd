# StridedLayout and the layout arithmetic shared with StridedMemoryView (which keeps its own
# Extents inside its ViewRecord and calls the extents_* functions directly, so slicing a view
# never builds an intermediate StridedLayout).

cimport cython
from libc.stdint cimport int64_t, uint64_t

from ._record cimport Extents


# final: a Python subclass could add mutable state and break the immutability (and hashing)
# every user of a layout relies on; it also lets Cython call methods without a vtable lookup.
@cython.final
cdef class StridedLayout:
    cdef Extents ext             # shape and strides in elements; storage owned by this object
    cdef readonly int64_t itemsize      # bytes per element
    """int: Bytes per element."""
    cdef readonly int64_t slice_offset  # elements from the base pointer to element 0
    """int: Elements from the base pointer to element 0 (accumulated by slicing)."""
    cdef Py_hash_t _hash         # 0 until computed (a layout is immutable)


# Build a layout by copying `ext`.
cdef StridedLayout layout_from_extents(const Extents* ext, int64_t itemsize, int64_t slice_offset)

# Apply an indexing key (ints, slices with any step, Ellipsis, None, or a tuple of them) to
# `src`, writing the result into `dst` (initialised Extents) and the element offset of the new
# element 0 relative to the old one into `offset`.  Raises IndexError (too many indices, counted
# first; an int out of range) and TypeError (any other kind of index: floats, strs, lists,
# arrays, bools), as StridedLayout.sliced documents.
# `dst` may be `src`.
cdef int extents_getitem(const Extents* src, object key, Extents* dst, int64_t* offset) except -1

# Lowest and highest element offsets reachable (relative to element 0); (0, -1) if volume is 0.
cdef void extents_offset_bounds(const Extents* e, int64_t* lo, int64_t* hi) noexcept nogil

# Number of elements, or -1 on overflow of int64.
cdef int64_t extents_volume(const Extents* e) noexcept nogil

# Dims of extent 1 may have any stride; volume 0 counts as contiguous.
cdef bint extents_is_c_contiguous(const Extents* e) noexcept nogil
cdef bint extents_is_f_contiguous(const Extents* e) noexcept nogil

# Tuple builders used by StridedMemoryView's properties.
cdef tuple extents_shape_tuple(const Extents* e)
cdef tuple extents_strides_tuple(const Extents* e, int64_t scale)

# For readers filling extents from untrusted metadata: raise ValueError if an extent is
# negative, or if the volume, or any byte offset reached ((slice_offset + element offset) *
# itemsize, one past the end included), overflows int64.  itemsize must be > 0.
cdef int extents_validate(const Extents* e, int64_t itemsize, int64_t slice_offset) except -1

# Bit i (1 <= i < ndim) set when dim i can merge into the dims before it (see
# StridedLayout.merge_mask); every bit 1..ndim-1 when the extents hold no elements.
cdef uint64_t extents_merge_mask(const Extents* e) noexcept nogil

# The C-level forms of StridedLayout.merged / repacked / max_compatible_itemsize, for compiled
# callers that already hold C values (no argument parsing).  `allowed` is a merge mask (bit i
# lets dim i merge into the dim before it); `data_ptr` 0 means no alignment requirement; `axis`
# may be negative.  Each returns `self` when nothing changes.
cdef StridedLayout layout_merged(StridedLayout self, uint64_t allowed)
cdef StridedLayout layout_repacked(StridedLayout self, int64_t new_itemsize, uint64_t data_ptr,
                                   int64_t axis, bint keep_dim)
cdef int64_t layout_max_compatible_itemsize(StridedLayout self, int64_t max_itemsize,
                                            uint64_t data_ptr, int64_t axis) except -1

# The largest divisor of `max_itemsize` (> 0) that also divides `data_ptr`, the bytes of dim
# `ax` (0 <= ax < ndim), `slice_offset` in bytes and the strides in bytes of the other dims of
# extent other than 1: what layout_max_compatible_itemsize answers once it knows dim `ax` is
# contiguous and the extents hold an element.  Computed whether or not they do (the compat
# layer answers as cuda.core does for a layout of no element).
cdef int64_t extents_compatible_itemsize(const Extents* e, int64_t itemsize,
                                         int64_t slice_offset, int64_t max_itemsize,
                                         uint64_t data_ptr, int ax) noexcept nogil
