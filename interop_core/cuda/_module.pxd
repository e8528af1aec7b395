# Modules (PTX, cubin, fatbin) and kernel launches through the lazily loaded CUDA driver
# (cuModuleLoadDataEx, cuModuleGetFunction, cuLaunchKernel / cuLaunchKernelEx), for the public
# launch (Module, Kernel), the core's own kernels (copies) and launchers built on the launch path
# (the Triton wrapper).  No NVRTC and no CUDA package: an image in, driver handles out.

from libc.stdint cimport intptr_t


cdef class Module:
    cdef void* cu_module        # CUmodule, owned: unloaded (in its context) when freed
    cdef void* context          # the device's primary context (retained for the process by _cuda)
    cdef readonly int device_id
    """int: The device ordinal whose primary context holds the module."""
    cdef readonly str kind
    """str: What the image was: ``"ptx"`` or ``"binary"`` (cubin, fatbin)."""


cdef class Kernel:
    cdef void* cu_function      # CUfunction, valid while `module` is loaded
    cdef readonly Module module # strong reference: keeps the module loaded while the kernel lives
    """Module: The module this kernel belongs to."""
    cdef readonly str name
    """str: The entry's name."""
    cdef bytes _declared        # one code per parameter (0: a pointer, else a CT_* scalar
                                # code), or None when no signature was declared; owned
    cdef tuple _declared_names  # the declared signature as given (for messages and .signature)
    cdef Py_ssize_t _nparams    # parameters the driver reports (-1: not known, -2: not asked)
    cdef size_t* _param_sizes   # their sizes in bytes, PyMem block owned by this kernel
    cdef intptr_t _last_stream  # the last stream checked to be on the module's device
    cdef bint _last_stream_ok
    cdef unsigned int _dynamic_shared_set  # the largest dynamic shared memory size the kernel
                                           # was allowed (cuFuncSetAttribute), 0 if never raised


# A device's launch limits (cuDeviceGetAttribute, asked once per device and cached).
ctypedef struct DeviceLimits:
    unsigned int max_grid[3]
    unsigned int max_block[3]
    unsigned int max_threads_per_block
    unsigned int max_shared_optin          # dynamic + static shared memory per block, opt-in
    int cluster_launch                     # 1: thread-block clusters can be launched
    int cooperative_launch


# The limits of `device_id` (ValueError for an ordinal out of range; RuntimeError without a
# driver).  The pointer stays valid for the process.
cdef const DeviceLimits* device_limits(int device_id) except NULL

# cuLaunchKernel in the kernel's context: grid and block are 3 dims each; `params` is the
# kernelParams array (one pointer per parameter to that parameter's value), or NULL.
cdef int launch_kernel(Kernel kernel, const unsigned int* grid, const unsigned int* block,
                       void** params, intptr_t stream, unsigned int shared_mem) except -1

# A launch of any CUfunction (made current: `context`): cuLaunchKernel, or cuLaunchKernelEx where
# `cluster` (3 dims, NULL for none), `cooperative` or `programmatic` (PDL) ask for attributes;
# `spread` adds the cluster scheduling policy "spread".  The caller checked the dimensions.
cdef int launch_function(void* function, void* context, const unsigned int* grid,
                         const unsigned int* block, unsigned int shared_mem, intptr_t stream,
                         void** params, const unsigned int* cluster, bint spread,
                         bint cooperative, bint programmatic) except -1

# The sizes of a function's parameters, as the driver reports them (cuFuncGetParamInfo, CUDA
# 12.4+): fills out[0 .. count) and returns the count, or -1 where the driver cannot say (an
# older driver); ValueError when there are more than `capacity`.
cdef Py_ssize_t function_param_sizes(void* function, void* context, size_t* out,
                                     Py_ssize_t capacity) except -2

# Resolve the module API (RuntimeError without a driver or without the entry points).
cdef int require_module_api() except -1
