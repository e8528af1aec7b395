# PTX modules and kernel launches through the lazily loaded CUDA driver (see _module.pxd).
#
# The driver entry points used here are resolved from the libcuda that _cuda loaded (one dlopen
# per process), on the first load_ptx.  Modules live in a device's primary context, the context
# torch, cupy, jax and numba use, so kernels launched here run on those frameworks' streams.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport intptr_t, uintptr_t
from libc.string cimport strlen

from ._cuda cimport (
    check_status,
    driver_available,
    driver_symbol,
    enter_context,
    leave_context,
    primary_context,
)
from ._streams cimport resolve_stream

__all__ = ["Kernel", "Module", "launch", "load_ptx"]

# CUjit_option values (CUDA driver API): where the PTX JIT writes its error log, and its size.
cdef enum:
    CU_JIT_ERROR_LOG_BUFFER = 5
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
    ERROR_LOG_BYTES = 4096

# CUmodule, CUfunction, CUstream are opaque pointers; CUjit_option is a C enum (int).
ctypedef int (*cuModuleLoadDataEx_t)(void** module, const void* image, unsigned int num_options,
                                     int* options, void** option_values) noexcept nogil
ctypedef int (*cuModuleGetFunction_t)(void** function, void* module,
                                      const char* name) noexcept nogil
ctypedef int (*cuModuleUnload_t)(void* module) noexcept nogil
ctypedef int (*cuLaunchKernel_t)(void* f, unsigned int grid_x, unsigned int grid_y,
                                 unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                 unsigned int block_z, unsigned int shared_mem_bytes,
                                 void* stream, void** kernel_params, void** extra) noexcept nogil

cdef cuModuleLoadDataEx_t _cuModuleLoadDataEx = NULL
cdef cuModuleGetFunction_t _cuModuleGetFunction = NULL
cdef cuModuleUnload_t _cuModuleUnload = NULL
cdef cuLaunchKernel_t _cuLaunchKernel = NULL


cdef int _require_module_api() except -1:
    global _cuModuleLoadDataEx, _cuModuleGetFunction, _cuModuleUnload, _cuLaunchKernel
    if _cuLaunchKernel != NULL:
        return 0
    if not driver_available():
        raise RuntimeError(
            "loading and launching kernels needs the CUDA driver (libcuda), which is not "
            "available here")
    load = <cuModuleLoadDataEx_t> driver_symbol(b"cuModuleLoadDataEx")
    get_function = <cuModuleGetFunction_t> driver_symbol(b"cuModuleGetFunction")
    unload = <cuModuleUnload_t> driver_symbol(b"cuModuleUnload")
    launch_kernel = <cuLaunchKernel_t> driver_symbol(b"cuLaunchKernel")
    if load == NULL or get_function == NULL or unload == NULL or launch_kernel == NULL:
        raise RuntimeError("this CUDA driver lacks the module API (cuModuleLoadDataEx, "
                           "cuModuleGetFunction, cuModuleUnload, cuLaunchKernel)")
    _cuModuleLoadDataEx = load
    _cuModuleGetFunction = get_function
    _cuModuleUnload = unload
    _cuLaunchKernel = launch_kernel        # set last: it marks the whole API as resolved
    return 0


cdef class Module:
    """A PTX module loaded into a device's primary context (made by :func:`load_ptx`).

    Unloaded when the object is freed; every :class:`Kernel` taken from it keeps it alive.
    """

    def __init__(self):
        raise TypeError("use interop_core.cuda._module.load_ptx(ptx, device_id)")

    def __dealloc__(self):
        cdef int pushed = 0
        if self.cu_module == NULL:
            return
        # The module must be unloaded in its own context; an error at interpreter exit (the
        # driver already torn down) leaves nothing to release.
        try:
            pushed = enter_context(self.context)
        except Exception:
            return
        _cuModuleUnload(self.cu_module)
        leave_context(pushed)
        self.cu_module = NULL

    def kernel(self, name):
        """The kernel (a ``.entry`` of the PTX) called ``name``.

        Parameters
        ----------
        name : str
            The entry's name as the PTX spells it (mangled, for C++ sources).

        Returns
        -------
        Kernel
            Keeps this module alive.

        Raises
        ------
        TypeError
            If ``name`` is not a str.
        ValueError
            If the module has no such entry.
        """
        cdef void* function = NULL
        cdef int pushed
        cdef int status
        cdef Kernel k
        if not isinstance(name, str):
            raise TypeError(f"kernel name must be a str, got {type(name).__name__}")
        encoded = (<str> name).encode()
        if b"\0" in encoded:
            raise ValueError(f"kernel name {name!r} contains a NUL character")
        pushed = enter_context(self.context)
        try:
            status = _cuModuleGetFunction(&function, self.cu_module, encoded)
        finally:
            leave_context(pushed)
        if status != 0 or function == NULL:
            raise ValueError(f"the module has no kernel named {name!r} "
                             f"(cuModuleGetFunction returned {status})")
        k = Kernel.__new__(Kernel)
        k.cu_function = function
        k.module = self
        k.name = name
        return k

    @property
    def handle(self):
        """int: The ``CUmodule`` handle."""
        return <uintptr_t> self.cu_module

    def __repr__(self):
        return f"<Module {<uintptr_t> self.cu_module:#x} on device {self.device_id}>"


cdef class Kernel:
    """One kernel of a :class:`Module` (made by :meth:`Module.kernel`)."""

    def __init__(self):
        raise TypeError("use Module.kernel(name)")

    @property
    def handle(self):
        """int: The ``CUfunction`` handle (valid while this object lives)."""
        return <uintptr_t> self.cu_function

    def __repr__(self):
        return f"<Kernel {self.name!r} of {self.module!r}>"


def load_ptx(ptx, device_id=0):
    """Load PTX text into device ``device_id``'s primary context (``cuModuleLoadDataEx``).

    The driver compiles the PTX for the device (its JIT); no CUDA toolkit is needed.

    Parameters
    ----------
    ptx : str or bytes
        The PTX source.
    device_id : int
        The CUDA device ordinal.

    Returns
    -------
    Module

    Raises
    ------
    TypeError
        If ``ptx`` is not str or bytes, or ``device_id`` not an int.
    ValueError
        If the driver rejects the PTX (the JIT's error log is in the message), or the device
        ordinal is out of range.
    RuntimeError
        Where there is no CUDA driver.
    """
    cdef void* handle = NULL
    cdef int options[2]
    cdef void* values[2]
    cdef char log[ERROR_LOG_BYTES]
    cdef int pushed
    cdef int status
    cdef Module m
    if isinstance(ptx, str):
        image = (<str> ptx).encode()
    elif isinstance(ptx, bytes):
        image = ptx
    else:
        raise TypeError(f"ptx must be str or bytes, got {type(ptx).__name__}")
    if not isinstance(device_id, int) or isinstance(device_id, bool):
        raise TypeError(f"device_id must be an int, got {type(device_id).__name__}")
    if b"\0" in image:
        raise ValueError("the PTX text contains a NUL character")
    if device_id < 0:
        raise ValueError(f"device_id must be >= 0, got {device_id}")
    _require_module_api()
    ctx = <uintptr_t> primary_context(<int> device_id)
    log[0] = 0
    options[0] = CU_JIT_ERROR_LOG_BUFFER
    values[0] = log
    options[1] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
    values[1] = <void*> <uintptr_t> ERROR_LOG_BYTES
    pushed = enter_context(<void*> ctx)
    try:
        # A bytes object's buffer is NUL-terminated, as cuModuleLoadData wants PTX to be.
        status = _cuModuleLoadDataEx(&handle, PyBytes_AS_STRING(image), 2, options, values)
    finally:
        leave_context(pushed)
    if status != 0:
        log[ERROR_LOG_BYTES - 1] = 0
        detail = log[:strlen(log)].decode("utf-8", "replace").strip()
        try:
            check_status(status, b"cuModuleLoadDataEx")
        except RuntimeError as exc:
            raise ValueError(f"{exc}" + (f": {detail}" if detail else "")) from None
    m = Module.__new__(Module)
    m.cu_module = handle
    m.context = <void*> ctx
    m.device_id = device_id
    return m


cdef int _dims(object value, str what, unsigned int* out) except -1:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    out[0] = out[1] = out[2] = 1
    for i, d in enumerate(value):
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"{what}[{i}] must be an int, got {type(d).__name__}")
        if d < 1 or d > 0xFFFFFFFF:
            raise ValueError(f"{what}[{i}] must be between 1 and 2**32 - 1, got {d}")
        out[i] = <unsigned int> d
    return 0


cdef int launch_kernel(Kernel kernel, const unsigned int* grid, const unsigned int* block,
                       void** params, intptr_t stream, unsigned int shared_mem) except -1:
    cdef int status
    cdef int pushed = enter_context(kernel.module.context)
    try:
        status = _cuLaunchKernel(kernel.cu_function, grid[0], grid[1], grid[2],
                                 block[0], block[1], block[2], shared_mem, <void*> stream,
                                 params, NULL)
    finally:
        leave_context(pushed)
    check_status(status, b"cuLaunchKernel")
    return 0


def launch(Kernel kernel not None, grid, block, params_address, stream, shared_mem=0):
    """Launch ``kernel`` on ``stream`` (``cuLaunchKernel``), without waiting for it.

    Parameters
    ----------
    kernel : Kernel
    grid, block : int or tuple of int
        Blocks in the grid and threads per block, 1 to 3 dimensions.
    params_address : int
        Address of the ``kernelParams`` array: one pointer per kernel parameter, each pointing
        at that parameter's value (for a pointer parameter, at a slot holding the pointer), as
        :attr:`interop_core.LaunchArgs.kernel_params_address` gives.  ``0`` for a kernel
        without parameters.
    stream : int or stream object
        The stream to launch on: a ``CUstream`` handle (``0`` the legacy default stream) or
        anything the stream contract accepts (``__cuda_stream__``, torch / cupy streams).
    shared_mem : int
        Dynamic shared memory per block, in bytes.

    Raises
    ------
    TypeError, ValueError
        For malformed dimensions, address, stream or shared memory size.
    RuntimeError
        When the driver refuses the launch (the message names the error).
    """
    cdef unsigned int g[3]
    cdef unsigned int b[3]
    cdef intptr_t handle = 0
    _dims(grid, "grid", g)
    _dims(block, "block", b)
    if not isinstance(params_address, int) or isinstance(params_address, bool):
        raise TypeError(f"params_address must be an int address, got "
                        f"{type(params_address).__name__}")
    if params_address < 0 or params_address >= 2 ** 64:
        raise ValueError(f"params_address {params_address!r} is not an address")
    if not isinstance(shared_mem, int) or isinstance(shared_mem, bool):
        raise TypeError(f"shared_mem must be an int, got {type(shared_mem).__name__}")
    if shared_mem < 0 or shared_mem > 0xFFFFFFFF:
        raise ValueError(f"shared_mem must be between 0 and 2**32 - 1, got {shared_mem}")
    if not resolve_stream(stream, &handle):
        raise ValueError("launch needs a stream to launch on: None and -1 mean 'no stream' "
                         "(pass 0 for the legacy default stream)")
    launch_kernel(kernel, g, b, <void**> <uintptr_t> params_address, handle,
                  <unsigned int> shared_mem)
