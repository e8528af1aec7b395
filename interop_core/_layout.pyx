# PLACEHOLDER (being replaced): minimal bodies so the package compiles.
from libc.stdint cimport int64_t
from ._record cimport Extents, extents_copy, extents_free, extents_init

cdef class StridedLayout:
    def __cinit__(self):
        extents_init(&self.ext)
    def __dealloc__(self):
        extents_free(&self.ext)
    def repacked(self, itemsize):
        raise NotImplementedError

cdef StridedLayout layout_from_extents(const Extents* ext, int64_t itemsize, int64_t slice_offset):
    cdef StridedLayout l = StridedLayout.__new__(StridedLayout)
    extents_copy(&l.ext, ext)
    l.itemsize = itemsize
    l.slice_offset = slice_offset
    return l
cdef int extents_getitem(const Extents* src, object key, Extents* dst, int64_t* offset) except -1:
    raise NotImplementedError
cdef void extents_offset_bounds(const Extents* e, int64_t* lo, int64_t* hi) noexcept nogil:
    lo[0] = 0
    hi[0] = -1
cdef int64_t extents_volume(const Extents* e) noexcept nogil:
    cdef int64_t v = 1
    for i in range(e.ndim):
        v *= e.shape[i]
    return v
cdef bint extents_is_c_contiguous(const Extents* e) noexcept nogil:
    return False
cdef bint extents_is_f_contiguous(const Extents* e) noexcept nogil:
    return False
cdef tuple extents_shape_tuple(const Extents* e):
    return tuple([e.shape[i] for i in range(e.ndim)])
cdef tuple extents_strides_tuple(const Extents* e, int64_t scale):
    return tuple([e.strides[i] * scale for i in range(e.ndim)])
