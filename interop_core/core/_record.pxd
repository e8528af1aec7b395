# The view record: the one C-level description of strided memory that every reader fills and
# every exporter reads.  StridedMemoryView embeds one; readers never see the Python object.
#
# Shape and strides live inline for up to INLINE_NDIM dimensions and on the heap beyond, so a
# view of an ordinary tensor costs no allocation.  Because `shape`/`strides` may point into the
# record itself, a record must never be copied by value: use `record_copy_extents`.

from libc.stdint cimport int32_t, int64_t, intptr_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from ._dlpack_abi cimport DLDataType

cdef enum:
    INLINE_NDIM = 6
    MAX_NDIM = 64
    # Types each per-type cache of the package (the dispatch table's decisions, protocol
    # choices, exchange-API probes) keeps at most: they keep their types alive, so past the
    # bound a cache forgets them all (classes made on the fly), to learn them again on need.
    MAX_CACHED_TYPES = 4096

ctypedef struct Extents:
    int64_t* shape          # -> inline_shape, or a malloc'd block owned by this struct
    int64_t* strides        # in elements; -> inline_strides, or inside the same malloc'd block
    int32_t ndim
    int64_t inline_shape[INLINE_NDIM]
    int64_t inline_strides[INLINE_NDIM]

ctypedef struct ViewRecord:
    uintptr_t ptr           # address of element 0 (byte_offset already applied)
    Extents ext
    DLDataType dtype        # the source of truth for the element type
    int64_t itemsize        # bytes per element (bits * lanes / 8, or 1 for padded sub-byte)
    int32_t device_type     # DLDeviceType
    int32_t device_id
    bint readonly
    bint has_producer_stream
    intptr_t producer_stream  # CUstream handle of the producer, valid if has_producer_stream


cdef inline void extents_init(Extents* e) noexcept nogil:
    """Make `e` an empty 0-d extents using inline storage (call before anything else)."""
    e.ndim = 0
    e.shape = e.inline_shape
    e.strides = e.inline_strides


cdef inline int extents_resize(Extents* e, int ndim) except -1:
    """Give `e` room for `ndim` dimensions (contents undefined afterwards)."""
    if ndim < 0 or ndim > MAX_NDIM:
        raise ValueError(f"ndim must be between 0 and {MAX_NDIM}, got {ndim}")
    if e.shape != e.inline_shape:
        free(e.shape)
        e.shape = e.inline_shape
        e.strides = e.inline_strides
    if ndim > INLINE_NDIM:
        block = <int64_t*> malloc(2 * ndim * sizeof(int64_t))
        if block == NULL:
            raise MemoryError()
        e.shape = block
        e.strides = block + ndim
    e.ndim = ndim
    return 0


cdef inline void extents_free(Extents* e) noexcept nogil:
    """Release heap storage (if any) and reset to 0-d inline storage."""
    if e.shape != e.inline_shape:
        free(e.shape)
    extents_init(e)


cdef inline int extents_copy(Extents* dst, const Extents* src) except -1:
    """Deep-copy `src` into `dst` (dst must have been initialised)."""
    extents_resize(dst, src.ndim)
    if src.ndim:
        memcpy(dst.shape, src.shape, src.ndim * sizeof(int64_t))
        memcpy(dst.strides, src.strides, src.ndim * sizeof(int64_t))
    return 0


cdef inline void record_init(ViewRecord* rec) noexcept nogil:
    """Reset a record to an empty host view (call once before a reader fills it)."""
    rec.ptr = 0
    extents_init(&rec.ext)
    rec.dtype.code = 0
    rec.dtype.bits = 0
    rec.dtype.lanes = 0
    rec.itemsize = 0
    rec.device_type = 1
    rec.device_id = 0
    rec.readonly = False
    rec.has_producer_stream = False
    rec.producer_stream = 0


cdef inline int record_copy(ViewRecord* dst, const ViewRecord* src) except -1:
    """Deep-copy `src` into `dst` (dst must have been initialised)."""
    extents_copy(&dst.ext, &src.ext)
    dst.ptr = src.ptr
    dst.dtype = src.dtype
    dst.itemsize = src.itemsize
    dst.device_type = src.device_type
    dst.device_id = src.device_id
    dst.readonly = src.readonly
    dst.has_producer_stream = src.has_producer_stream
    dst.producer_stream = src.producer_stream
    return 0


cdef inline str record_difference(const ViewRecord* got, const ViewRecord* want, str what,
                                  bint compare_streams):
    """How two records of the same memory differ (for reader validation), or None.

    Strides along extents of 1, and the pointer, strides and device of empty arrays, mean
    nothing and are not compared; the producer stream only when `compare_streams`.
    """
    cdef int i
    cdef int64_t volume = 1
    if got.ext.ndim != want.ext.ndim:
        return f"{what}: ndim {got.ext.ndim} != {want.ext.ndim}"
    for i in range(got.ext.ndim):
        if got.ext.shape[i] != want.ext.shape[i]:
            return f"{what}: shape[{i}] {got.ext.shape[i]} != {want.ext.shape[i]}"
        volume *= got.ext.shape[i]
    if volume:
        if got.ptr != want.ptr:
            return f"{what}: ptr {got.ptr:#x} != {want.ptr:#x}"
        for i in range(got.ext.ndim):
            if got.ext.shape[i] > 1 and got.ext.strides[i] != want.ext.strides[i]:
                return f"{what}: strides[{i}] {got.ext.strides[i]} != {want.ext.strides[i]}"
        if got.device_type != want.device_type or got.device_id != want.device_id:
            return (f"{what}: device ({got.device_type}, {got.device_id}) != "
                    f"({want.device_type}, {want.device_id})")
    if (got.dtype.code != want.dtype.code or got.dtype.bits != want.dtype.bits
            or got.dtype.lanes != want.dtype.lanes):
        return f"{what}: dtype differs"
    if got.readonly != want.readonly:
        return f"{what}: readonly differs"
    if compare_streams and (got.has_producer_stream != want.has_producer_stream or (
            got.has_producer_stream and got.producer_stream != want.producer_stream)):
        return f"{what}: producer stream differs"
    return None
