# Specialization keys: what a launcher compiles a kernel for, packed from view records into
# int64 words in C, hashed once as they are packed.  Built from the C record only, so a torch
# tensor and a cupy array of the same dtype, shape, strides and device give equal keys.

from libc.stdint cimport int64_t, uint64_t

from ._record cimport ViewRecord

cdef enum KeyPolicy:
    KEY_NONE = 0
    KEY_STATIC = 1      # per tensor: dtype, shape, strides, device, read-only
    KEY_DYNAMIC = 2     # per tensor: dtype, ndim, device, dims bucketed 0/1/>=2, stride order,
                        # contiguity, 16-byte alignment, byte offsets fit int32
    KEY_TRITON = 3      # what Triton specialises a kernel on (packed by launch/_triton_launch)

cdef enum:
    KEY_INLINE_WORDS = 24

cdef class LaunchKey:
    cdef Py_hash_t _hash        # computed as the words are packed (never -1)
    cdef Py_ssize_t _nwords
    cdef int64_t* _words        # -> _inline, or a PyMem block owned by this key
    cdef int64_t _inline[KEY_INLINE_WORDS]


# Words one tensor takes under `policy` (KEY_STATIC or KEY_DYNAMIC).
cdef inline Py_ssize_t key_tensor_words(const ViewRecord* rec, int policy) noexcept nogil:
    cdef Py_ssize_t ndim = rec.ext.ndim
    if policy == KEY_DYNAMIC:
        return 3 + (ndim + 31) // 32 + (ndim + 7) // 8
    return 2 + 2 * ndim

# A key with room for `nwords` words; its first word says the policy and the argument count.
# Fill words 1 .. nwords-1 (key_pack_tensor, key_scalar_word, key_none_word), then key_finish.
cdef LaunchKey key_new(Py_ssize_t nwords, int policy, Py_ssize_t nargs)

# Pack one tensor at `out`; returns the words written (key_tensor_words of it).  The static
# form is inline (the launch path packs it for every tensor of every call).
cdef inline Py_ssize_t key_pack_tensor(int64_t* out, const ViewRecord* rec,
                                       int policy) noexcept nogil:
    cdef int ndim = rec.ext.ndim
    cdef int i
    if policy == KEY_DYNAMIC:
        return key_pack_dynamic(out, rec)
    out[0] = <int64_t> ((<uint64_t> 0x54 << 56) | (<uint64_t> ndim << 48)
                        | (<uint64_t> (rec.readonly != 0) << 40)
                        | (<uint64_t> rec.dtype.code << 32) | (<uint64_t> rec.dtype.bits << 16)
                        | <uint64_t> rec.dtype.lanes)
    out[1] = <int64_t> ((<uint64_t> <unsigned int> rec.device_type << 32)
                        | <unsigned int> rec.device_id)
    for i in range(ndim):
        out[2 + i] = rec.ext.shape[i]
        out[2 + ndim + i] = rec.ext.strides[i]
    return 2 + 2 * ndim

# The dynamic form of key_pack_tensor.
cdef Py_ssize_t key_pack_dynamic(int64_t* out, const ViewRecord* rec) noexcept nogil

# One word for a scalar of C type `ctype` (a code of the caller's choosing), and for None.
cdef inline int64_t key_scalar_word(int ctype) noexcept nogil:
    return <int64_t> ((<unsigned long long> 0x53 << 56) | <unsigned int> ctype)

cdef inline int64_t key_none_word() noexcept nogil:
    return <int64_t> (<unsigned long long> 0x4E << 56)

# Compute the hash of the packed words.
cdef void key_finish(LaunchKey key) noexcept

# The static key of one tensor (what launch_args([x], key="static").key is for a tensor x).
cdef LaunchKey key_of_record(const ViewRecord* rec)
