# Cython declarations of the public C ABI for compiled readers and exporters
# (include/interop_core.h, version 6).
#
# A plugin written in Cython cimports these names; its extension is built with
# `include_dirs=[interop_core.get_include()]`.  The first-party plugins (plugins/interop_*) use
# nothing else of the core at the C level: they are templates a third party can copy.

from cpython.object cimport PyObject
from libc.stdint cimport (
    int32_t,
    int64_t,
    intptr_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
    uintptr_t,
)

cdef extern from "interop_core.h":
    int INTEROP_CORE_ABI_VERSION
    const char* INTEROP_CORE_READER_CAPSULE
    const char* INTEROP_CORE_READER_V2_CAPSULE
    const char* INTEROP_CORE_EXPORTER_CAPSULE
    const char* INTEROP_CORE_API_CAPSULE
    int INTEROP_CORE_READ_OK
    int INTEROP_CORE_USES_MEMORY_LATER
    int INTEROP_CORE_USES_MEMORY_AT_ONCE
    int INTEROP_CORE_USES_MEMORY_IN_CALL
    int INTEROP_CORE_READ_DECLINED
    int INTEROP_CORE_READ_ERROR

    ctypedef struct interop_core_tensor_info:
        void* data
        int32_t ndim
        const int64_t* shape
        const int64_t* strides
        uint8_t dtype_code
        uint8_t dtype_bits
        uint16_t dtype_lanes
        int32_t device_type
        int32_t device_id
        int32_t readonly
        int32_t has_producer_stream
        intptr_t producer_stream
        PyObject* keepalive          # a new reference the core takes over, or NULL
        int32_t strides_in_bytes
        uint64_t batch               # version 3, an input: see interop_core.h
        uint32_t uses_memory         # version 4 (IN_CALL: 6), an input: see interop_core.h
        int32_t protocol             # version 5, an input: see interop_core.h

    ctypedef int (*interop_core_reader_v1)(PyObject* obj, PyObject* stream,
                                          interop_core_tensor_info* out) noexcept
    ctypedef int (*interop_core_reader_v2)(PyObject* obj, PyObject* stream,
                                          interop_core_tensor_info* out) noexcept

    # 1: the protocol's own reading gives the same view; 0: it may not; -1: an exception set.
    ctypedef int (*interop_core_equivalence_check_v1)(PyObject* obj, int32_t protocol,
                                                      const interop_core_tensor_info* read) noexcept
    const char* INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE
    int INTEROP_CORE_PROTOCOL_DLPACK
    int INTEROP_CORE_PROTOCOL_CUDA_ARRAY_INTERFACE
    int INTEROP_CORE_PROTOCOL_ARRAY_INTERFACE
    int INTEROP_CORE_PROTOCOL_BUFFER

    # Returns a new reference, or NULL with an exception set (the Cython signature of a
    # `cdef object f(const interop_core_tensor_info*, object, object)`).
    ctypedef PyObject* (*interop_core_exporter_v1)(const interop_core_tensor_info* view,
                                                  PyObject* owner, PyObject* stream) noexcept

    ctypedef struct interop_core_api:
        uint32_t abi_version
        uint32_t size
        int (*dtype_of)(PyObject* dtype, uint8_t* code, uint8_t* bits, uint16_t* lanes) noexcept
        int (*pointer_device)(uintptr_t ptr, int32_t* device_type, int32_t* device_id) noexcept
        int (*describe_dlpack)(PyObject* capsule, interop_core_tensor_info* out) noexcept
        PyObject* (*legacy_capsule_for_immutable_consumer)(PyObject* view) noexcept
        PyObject* (*view_from_info)(PyObject* obj, interop_core_tensor_info* info) noexcept
        int (*describe_view)(PyObject* view, interop_core_tensor_info* out) noexcept
        # version 4: check `size` before calling it
        PyObject* (*deferred_keepalive)(int (*acquire)(PyObject* state, PyObject** held) noexcept,
                                        PyObject* state) noexcept

    const interop_core_api* interop_core_import_api(uint32_t min_size) except NULL
