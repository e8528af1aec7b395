# What the jax plugin takes from jax and from the core, looked up once: jaxlib's functions and
# the accessors of jax's array type (_handles.pyx), the core's helper table, and the constants
# every module of the plugin shares.  Cimported by the reader's other modules.

from libc.stdint cimport int32_t

from interop_core.abi cimport interop_core_api

cdef enum:
    MAX_NDIM = 64           # the ABI's limit on ndim
    KDL_CPU = 1             # DLPack device types
    KDL_CUDA = 2
    KDL_CUDA_HOST = 3
    KDL_ROCM = 10
    KDL_ROCM_HOST = 11

# The core's helper table (dtype conversion, DLPack capsules in and out, views from a filled
# record), fetched when this module is imported.
cdef const interop_core_api* _api

# jax's handles, set by _setup (owned by _handles; None until then).
cdef bint _ready                    # _setup has run
cdef object _single_sharding        # jax.sharding.SingleDeviceSharding
cdef object _to_capsule             # jaxlib's buffer_to_dlpack_managed_tensor (None: absent)
cdef object _from_capsule           # jaxlib's dlpack_managed_tensor_to_buffer (None: absent)
# jax's array type and, for its exact instances, the functions behind its `aval` property and
# its `unsafe_buffer_pointer`, `is_ready`, `block_until_ready` and `_fully_replicated_shard`
# methods (None: attribute lookups on every call).
cdef object _accessor_type
cdef object _aval_getter
cdef object _pointer_method
cdef object _ready_method
cdef object _wait_method
cdef object _shard_method

# Look jax's handles up (jax is imported: one of its arrays exists, or a test asks); `array_type`
# is the type of an array met, or None.
cdef int _setup(object array_type) except -1
# A function of the jaxlib extension module that defines jax's array type, or None.
cdef object _jaxlib_function(object array_type, str name)
# Returns -1: hands on the exception a helper of the core's table set.
cdef int _pending_error() except -1
