# Specialization keys: what a launcher compiles a kernel for, packed from view records into
# int64 words in C, hashed once as they are packed.  Built from the C record only, so a torch
# tensor and a cupy array of the same dtype, shape, strides and device give equal keys.

from libc.stdint cimport int64_t

from ._record cimport ViewRecord

cdef enum KeyPolicy:
    KEY_NONE = 0
    KEY_STATIC = 1      # per tensor: dtype, shape, strides, device, read-only
    KEY_DYNAMIC = 2     # per tensor: dtype, ndim, device, dims bucketed 0/1/>=2, stride order,
                        # contiguity, 16-byte alignment, byte offsets fit int32

cdef enum:
    KEY_INLINE_WORDS = 24

cdef class LaunchKey:
    cdef Py_hash_t _hash        # computed as the words are packed (never -1)
    cdef Py_ssize_t _nwords
    cdef int64_t* _words        # -> _inline, or a PyMem block owned by this key
    cdef int64_t _inline[KEY_INLINE_WORDS]


# Words one tensor takes under `policy` (KEY_STATIC or KEY_DYNAMIC).
cdef Py_ssize_t key_tensor_words(const ViewRecord* rec, int policy) noexcept nogil

# A key with room for `nwords` words; its first word says the policy and the argument count.
# Fill words 1 .. nwords-1 (key_pack_tensor, key_scalar_word, key_none_word), then key_finish.
cdef LaunchKey key_new(Py_ssize_t nwords, int policy, Py_ssize_t nargs)

# Pack one tensor at `out`; returns the words written (key_tensor_words of it).
cdef Py_ssize_t key_pack_tensor(int64_t* out, const ViewRecord* rec, int policy) noexcept nogil

# One word for a scalar of C type `ctype` (a code of the caller's choosing), and for None.
cdef inline int64_t key_scalar_word(int ctype) noexcept nogil:
    return <int64_t> ((<unsigned long long> 0x53 << 56) | <unsigned int> ctype)

cdef inline int64_t key_none_word() noexcept nogil:
    return <int64_t> (<unsigned long long> 0x4E << 56)

# Compute the hash of the packed words.
cdef void key_finish(LaunchKey key) noexcept

# The static key of one tensor (what launch_args([x], key="static").key is for a tensor x).
cdef LaunchKey key_of_record(const ViewRecord* rec)
