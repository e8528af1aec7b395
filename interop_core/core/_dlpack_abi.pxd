# DLPack ABI, declared by this project from the DLPack specification (dlpack.h, v1.x).
#
# Only layouts and constants live here; the two `cpdef enum`s are also Python IntEnums, made by
# _dlpack_abi.pyx from these same lines (interop_core.dtypes re-exports them): one table of codes.  Declaring them in a `cdef extern` block
# with an inline C verbatim string keeps us free of any third-party header while giving the
# C compiler exact struct definitions.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from *:
    """
    /* DLPack 1.x data structures, written from the DLPack specification. */
    typedef struct { uint32_t major; uint32_t minor; } ic_DLPackVersion;
    typedef struct { int32_t device_type; int32_t device_id; } ic_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } ic_DLDataType;
    typedef struct {
        void* data;
        ic_DLDevice device;
        int32_t ndim;
        ic_DLDataType dtype;
        int64_t* shape;
        int64_t* strides;
        uint64_t byte_offset;
    } ic_DLTensor;
    typedef struct ic_DLManagedTensor {
        ic_DLTensor dl_tensor;
        void* manager_ctx;
        void (*deleter)(struct ic_DLManagedTensor*);
    } ic_DLManagedTensor;
    typedef struct ic_DLManagedTensorVersioned {
        ic_DLPackVersion version;
        void* manager_ctx;
        void (*deleter)(struct ic_DLManagedTensorVersioned*);
        uint64_t flags;
        ic_DLTensor dl_tensor;
    } ic_DLManagedTensorVersioned;

    /* DLPack 1.3 C exchange API (the table a type publishes as __dlpack_c_exchange_api__,
       in a capsule named "dlpack_exchange_api").  Device types travel as C enums, i.e. int. */
    typedef void (*ic_DLPackSetError)(void* error_ctx, const char* kind, const char* message);
    typedef int (*ic_DLPackManagedTensorAllocator)(
        ic_DLTensor* prototype, ic_DLManagedTensorVersioned** out, void* error_ctx,
        ic_DLPackSetError set_error);
    typedef int (*ic_DLPackManagedTensorFromPyObjectNoSync)(
        void* py_object, ic_DLManagedTensorVersioned** out);
    typedef int (*ic_DLPackManagedTensorToPyObjectNoSync)(
        ic_DLManagedTensorVersioned* tensor, void** out_py_object);
    typedef int (*ic_DLPackDLTensorFromPyObjectNoSync)(void* py_object, ic_DLTensor* out);
    typedef int (*ic_DLPackCurrentWorkStream)(
        int device_type, int32_t device_id, void** out_current_stream);
    typedef struct ic_DLPackExchangeAPIHeader {
        ic_DLPackVersion version;
        struct ic_DLPackExchangeAPIHeader* prev_api;
    } ic_DLPackExchangeAPIHeader;
    typedef struct ic_DLPackExchangeAPI {
        ic_DLPackExchangeAPIHeader header;
        ic_DLPackManagedTensorAllocator managed_tensor_allocator;
        ic_DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
        ic_DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
        ic_DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
        ic_DLPackCurrentWorkStream current_work_stream;
    } ic_DLPackExchangeAPI;
    """
    ctypedef struct DLPackVersion "ic_DLPackVersion":
        uint32_t major
        uint32_t minor

    ctypedef struct DLDevice "ic_DLDevice":
        int32_t device_type
        int32_t device_id

    ctypedef struct DLDataType "ic_DLDataType":
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor "ic_DLTensor":
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor "ic_DLManagedTensor":
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept

    ctypedef struct DLManagedTensorVersioned "ic_DLManagedTensorVersioned":
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*) noexcept
        uint64_t flags
        DLTensor dl_tensor

    # DLPack 1.3 C exchange API.  Every function returns 0 on success and -1 on failure with a
    # Python exception set (the allocator reports through set_error instead).
    ctypedef void (*DLPackSetError "ic_DLPackSetError")(
        void* error_ctx, const char* kind, const char* message) noexcept nogil
    ctypedef int (*DLPackManagedTensorAllocator "ic_DLPackManagedTensorAllocator")(
        DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
        DLPackSetError set_error) noexcept nogil
    ctypedef int (*DLPackManagedTensorFromPyObjectNoSync
                  "ic_DLPackManagedTensorFromPyObjectNoSync")(
        void* py_object, DLManagedTensorVersioned** out) noexcept nogil
    ctypedef int (*DLPackManagedTensorToPyObjectNoSync "ic_DLPackManagedTensorToPyObjectNoSync")(
        DLManagedTensorVersioned* tensor, void** out_py_object) noexcept nogil
    ctypedef int (*DLPackDLTensorFromPyObjectNoSync "ic_DLPackDLTensorFromPyObjectNoSync")(
        void* py_object, DLTensor* out) noexcept nogil
    ctypedef int (*DLPackCurrentWorkStream "ic_DLPackCurrentWorkStream")(
        int device_type, int32_t device_id, void** out_current_stream) noexcept nogil

    ctypedef struct DLPackExchangeAPIHeader "ic_DLPackExchangeAPIHeader":
        DLPackVersion version
        DLPackExchangeAPIHeader* prev_api   # borrowed: an older table of the same producer

    ctypedef struct DLPackExchangeAPI "ic_DLPackExchangeAPI":
        DLPackExchangeAPIHeader header
        DLPackManagedTensorAllocator managed_tensor_allocator
        DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync
        DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync
        DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync  # may be NULL
        DLPackCurrentWorkStream current_work_stream


# The newest DLPack version this library reads and writes.
cdef enum:
    DLPACK_MAJOR = 1
    DLPACK_MINOR = 3

# DLManagedTensorVersioned.flags bits.
cdef enum:
    DLPACK_FLAG_READ_ONLY = 1 << 0
    DLPACK_FLAG_IS_COPIED = 1 << 1
    DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

# DLDeviceType values.
cpdef enum DLDeviceType:
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18

# DLDataTypeCode values.
cpdef enum DLDataTypeCode:
    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17
