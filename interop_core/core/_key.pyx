# Specialization keys (see _key.pxd).
#
# Layout of the words (all int64):
#   word 0            0x4B ('K') << 56 | policy << 48 | number of arguments
#   a tensor, static  0x54 ('T') << 56 | ndim << 48 | readonly << 40 | dtype code << 32
#                       | dtype bits << 16 | dtype lanes
#                     device type << 32 | device id
#                     shape[0 .. ndim), strides[0 .. ndim) (elements)
#   a tensor, dynamic 0x44 ('D') << 56 | ndim << 48 | dtype as above
#                     device type << 32 | device id
#                     flags: 1 C-contiguous, 2 F-contiguous, 4 data pointer 16-byte aligned,
#                       8 every byte offset fits int32, 16 some stride negative
#                     ceil(ndim / 32) words of 2-bit extent buckets (0, 1, >= 2), dim 0 lowest
#                     ceil(ndim / 8) words of 1-byte dim indices, largest |stride| first
#                       (dims of extent <= 1 last; ties by index)
#   a scalar          0x53 ('S') << 56 | its C type code
#   None              0x4E ('N') << 56
# Equal keys mean equal words, so the tags keep a tensor's words from ever reading as another
# argument's.

from . cimport _refcount  # 64-bit reference-count increments: see the file
cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport INT32_MAX, INT32_MIN, int64_t, uint64_t
from libc.string cimport memcmp

from ._layout cimport extents_is_c_contiguous, extents_is_f_contiguous, extents_offset_bounds
from ._record cimport MAX_NDIM, ViewRecord

__all__ = ["LaunchKey"]

cdef enum:
    TAG_KEY = 0x4B
    TAG_STATIC = 0x54
    TAG_DYNAMIC = 0x44
    FLAG_C_CONTIGUOUS = 1
    FLAG_F_CONTIGUOUS = 2
    FLAG_ALIGNED_16 = 4
    FLAG_FITS_INT32 = 8
    FLAG_NEGATIVE_STRIDE = 16

_POLICY_NAMES = {KEY_STATIC: "static", KEY_DYNAMIC: "dynamic", KEY_TRITON: "triton"}


cdef inline uint64_t _mix(uint64_t h, uint64_t word) noexcept nogil:
    # One rotate, xor and multiply per word (the FxHash step): keys are compared word by word,
    # so the hash only spreads them over a dict's slots, and _avalanche makes every word reach
    # every bit of it at the end.
    return (((h << 5) | (h >> 59)) ^ word) * <uint64_t> 0x517CC1B727220A95


cdef inline uint64_t _avalanche(uint64_t h) noexcept nogil:
    # The 64-bit finaliser of MurmurHash3: each input bit flips each output bit with
    # probability about one half.
    h ^= h >> 33
    h *= <uint64_t> 0xFF51AFD7ED558CCD
    h ^= h >> 33
    h *= <uint64_t> 0xC4CEB9FE1A85EC53
    return h ^ (h >> 33)


cdef inline uint64_t _dtype_bits(const ViewRecord* rec) noexcept nogil:
    return ((<uint64_t> rec.dtype.code << 32) | (<uint64_t> rec.dtype.bits << 16)
            | <uint64_t> rec.dtype.lanes)


cdef inline uint64_t _device_word(const ViewRecord* rec) noexcept nogil:
    return (<uint64_t> <unsigned int> rec.device_type << 32) | <unsigned int> rec.device_id


cdef inline int64_t _abs(int64_t x) noexcept nogil:
    return -x if x < 0 else x


cdef int64_t _dynamic_flags(const ViewRecord* rec) noexcept nogil:
    cdef int64_t flags = 0, lo = 0, hi = 0
    cdef int i
    if extents_is_c_contiguous(&rec.ext):
        flags |= FLAG_C_CONTIGUOUS
    if extents_is_f_contiguous(&rec.ext):
        flags |= FLAG_F_CONTIGUOUS
    if rec.ptr % 16 == 0:
        flags |= FLAG_ALIGNED_16
    for i in range(rec.ext.ndim):
        if rec.ext.strides[i] < 0 and rec.ext.shape[i] > 1:
            flags |= FLAG_NEGATIVE_STRIDE
            break
    extents_offset_bounds(&rec.ext, &lo, &hi)
    # Byte offsets [lo * itemsize, (hi + 1) * itemsize) relative to element 0; the products are
    # checked by division, so no overflow can make a huge tensor look small.
    if rec.itemsize <= 0 or (hi < INT32_MAX // rec.itemsize and lo >= INT32_MIN // rec.itemsize):
        flags |= FLAG_FITS_INT32
    return flags


cdef Py_ssize_t key_pack_dynamic(int64_t* out, const ViewRecord* rec) noexcept nogil:
    cdef int ndim = rec.ext.ndim
    cdef int i, j, d, tmp
    cdef int order[MAX_NDIM]
    cdef int64_t si, sd
    cdef uint64_t word
    cdef Py_ssize_t n
    out[0] = <int64_t> ((<uint64_t> TAG_DYNAMIC << 56) | (<uint64_t> ndim << 48)
                        | _dtype_bits(rec))
    out[1] = <int64_t> _device_word(rec)
    out[2] = _dynamic_flags(rec)
    n = 3
    word = 0
    for i in range(ndim):
        d = 0 if rec.ext.shape[i] == 0 else (1 if rec.ext.shape[i] == 1 else 2)
        word |= <uint64_t> d << (2 * (i % 32))
        if i % 32 == 31 or i == ndim - 1:
            out[n] = <int64_t> word
            n += 1
            word = 0
    # Insertion sort of the dims by |stride|, largest first (ndim is small).
    for i in range(ndim):
        order[i] = i
    for i in range(1, ndim):
        tmp = order[i]
        si = _abs(rec.ext.strides[tmp]) if rec.ext.shape[tmp] > 1 else -1
        j = i - 1
        while j >= 0:
            sd = _abs(rec.ext.strides[order[j]]) if rec.ext.shape[order[j]] > 1 else -1
            if sd >= si:
                break
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = tmp
    word = 0
    for i in range(ndim):
        word |= <uint64_t> order[i] << (8 * (i % 8))
        if i % 8 == 7 or i == ndim - 1:
            out[n] = <int64_t> word
            n += 1
            word = 0
    return n


cdef LaunchKey key_new(Py_ssize_t nwords, int policy, Py_ssize_t nargs):
    cdef LaunchKey key = LaunchKey.__new__(LaunchKey)
    if nwords > KEY_INLINE_WORDS:
        key._words = <int64_t*> PyMem_Malloc(nwords * sizeof(int64_t))
        if key._words == NULL:
            raise MemoryError()
    else:
        key._words = key._inline
    key._nwords = nwords
    key._words[0] = <int64_t> ((<uint64_t> TAG_KEY << 56) | (<uint64_t> policy << 48)
                               | <uint64_t> nargs)
    return key


cdef void key_finish(LaunchKey key) noexcept:
    # Four independent lanes, so the multiplies of consecutive words overlap in the pipeline.
    cdef uint64_t h0 = <uint64_t> key._nwords, h1 = 1, h2 = 2, h3 = 3, h
    cdef Py_ssize_t i = 0, n = key._nwords
    cdef const int64_t* w = key._words
    while i + 4 <= n:
        h0 = _mix(h0, <uint64_t> w[i])
        h1 = _mix(h1, <uint64_t> w[i + 1])
        h2 = _mix(h2, <uint64_t> w[i + 2])
        h3 = _mix(h3, <uint64_t> w[i + 3])
        i += 4
    while i < n:
        h0 = _mix(h0, <uint64_t> w[i])
        i += 1
    h = _avalanche(_mix(_mix(_mix(h0, h1), h2), h3))
    if <Py_hash_t> h == -1:
        h = <uint64_t> -2
    key._hash = <Py_hash_t> h


cdef LaunchKey key_of_record(const ViewRecord* rec):
    cdef LaunchKey key = key_new(1 + key_tensor_words(rec, KEY_STATIC), KEY_STATIC, 1)
    key_pack_tensor(key._words + 1, rec, KEY_STATIC)
    key_finish(key)
    return key


# Kept on a free list: a launcher makes one per call and drops it at once.
@cython.freelist(8)
cdef class LaunchKey:
    """A specialization key: hashable, compared word by word, built in C.

    Made by :func:`interop_core.launch_args` (``.key``) and ``StridedMemoryView.key``.  Two
    keys are equal when every specialised property of every argument is: the framework an
    argument came from plays no part.
    """

    def __cinit__(self):
        self._words = self._inline
        self._nwords = 0

    def __dealloc__(self):
        if self._words != self._inline:
            PyMem_Free(self._words)

    def __init__(self):
        raise TypeError("keys are made by interop_core.launch_args(...).key and view.key")

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        cdef LaunchKey o
        if type(other) is not LaunchKey:
            return NotImplemented
        o = <LaunchKey> other
        return (self._hash == o._hash and self._nwords == o._nwords
                and memcmp(self._words, o._words, self._nwords * sizeof(int64_t)) == 0)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    @property
    def policy(self):
        """str: ``"static"``, ``"dynamic"`` or ``"triton"`` (the Triton wrapper's keys)."""
        return _POLICY_NAMES.get((<uint64_t> self._words[0] >> 48) & 0xFF)

    @property
    def words(self):
        """tuple of int: The packed words (for inspection; compare keys with ``==``)."""
        return tuple([self._words[i] for i in range(self._nwords)])

    def __reduce__(self):
        return (_key_from_words, (self.words,))

    def __repr__(self):
        return (f"LaunchKey({self.policy}, {self._words[0] & 0xFFFFFFFFFFFF} args, "
                f"{self._nwords} words, hash={self._hash & 0xFFFFFFFFFFFFFFFF:#x})")


def _key_from_words(words):
    # Unpickling (a key cached on disk by a launcher): the words as packed, hashed again.
    cdef Py_ssize_t i, n = len(words)
    if n < 1:
        raise ValueError("a key has at least one word")
    cdef LaunchKey key = key_new(n, 0, 0)
    for i in range(n):
        key._words[i] = words[i]
    key_finish(key)
    return key
