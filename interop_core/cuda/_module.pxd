# PTX modules and kernel launches through the lazily loaded CUDA driver (cuModuleLoadDataEx,
# cuModuleGetFunction, cuLaunchKernel), for the core's own kernels (copies) and launchers'
# examples and tests.  No NVRTC and no CUDA package: PTX text in, driver handles out.

from libc.stdint cimport intptr_t


cdef class Module:
    cdef void* cu_module        # CUmodule, owned: unloaded (in its context) when freed
    cdef void* context          # the device's primary context (retained for the process by _cuda)
    cdef readonly int device_id
    """int: The device ordinal whose primary context holds the module."""


cdef class Kernel:
    cdef void* cu_function      # CUfunction, valid while `module` is loaded
    cdef readonly Module module # strong reference: keeps the module loaded while the kernel lives
    """Module: The module this kernel belongs to."""
    cdef readonly str name
    """str: The entry's name."""


# cuLaunchKernel in the kernel's context: grid and block are 3 dims each; `params` is the
# kernelParams array (one pointer per parameter to that parameter's value), or NULL.
cdef int launch_kernel(Kernel kernel, const unsigned int* grid, const unsigned int* block,
                       void** params, intptr_t stream, unsigned int shared_mem) except -1
