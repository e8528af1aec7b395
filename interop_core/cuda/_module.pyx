# Modules and kernel launches through the lazily loaded CUDA driver (see _module.pxd).
#
# The driver entry points used here are resolved from the libcuda that _cuda loaded (one dlopen
# per process), on the first load.  Modules live in a device's primary context, the context
# torch, cupy, jax and numba use, so kernels launched here run on those frameworks' streams.
#
# Kernel.launch is the public launch: a LaunchArgs record (pointers, scalars, the stream every
# producer was ordered before) in, every check a launch can fail on made before the driver is
# called (arity and sizes, devices, grid and block against the device's limits, the stream's
# device), then one cuLaunchKernel (cuLaunchKernelEx for thread-block clusters).

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport intptr_t, uintptr_t
from libc.string cimport memset, strlen

import os

from ..core._dlpack_abi cimport kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged
from ..core._record cimport ViewRecord
from ..launch._launch cimport (
    ARG_NONE,
    ARG_SCALAR,
    ARG_TENSOR,
    LaunchArgs,
    ctype_size,
    device_label,
    type_name,
)
from ._cuda cimport (
    check_status,
    driver_available,
    driver_symbol,
    enter_context,
    leave_context,
    primary_context,
)
from ._memory cimport stream_device
from ._streams cimport resolve_stream

from ..launch._launch import SCALAR_TYPES

__all__ = ["Kernel", "Module", "launch", "load_module", "load_ptx"]

# Driver API values (from the CUDA driver API documentation).
cdef enum:
    CU_JIT_ERROR_LOG_BUFFER = 5
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
    ERROR_LOG_BYTES = 4096
    CUDA_ERROR_INVALID_VALUE = 1
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2          # Y = 3, Z = 4
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5           # Y = 6, Z = 7
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
    CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1
    # Dynamic shared memory a kernel may use without opting in (cuFuncSetAttribute).
    DEFAULT_DYNAMIC_SHARED = 48 * 1024
    MAX_DEVICES = 64
    MAX_PARAMS = 4096           # far beyond the driver's 32 KiB of parameters at 8 bytes each

# CUlaunchAttribute: a 4-byte id, 4 bytes of padding, a 64-byte value union (8-byte aligned).
ctypedef struct LaunchAttribute:
    int id
    char pad[4]
    unsigned long long value[8]

# CUlaunchConfig, member for member.
ctypedef struct LaunchConfig:
    unsigned int grid_x
    unsigned int grid_y
    unsigned int grid_z
    unsigned int block_x
    unsigned int block_y
    unsigned int block_z
    unsigned int shared_mem
    void* stream
    LaunchAttribute* attrs
    unsigned int num_attrs

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
ctypedef int (*cuLaunchKernelEx_t)(const LaunchConfig* config, void* f, void** kernel_params,
                                   void** extra) noexcept nogil
ctypedef int (*cuFuncGetParamInfo_t)(void* f, size_t index, size_t* offset,
                                     size_t* size) noexcept nogil
ctypedef int (*cuFuncGetParamCount_t)(void* f, size_t* count) noexcept nogil
ctypedef int (*cuFuncSetAttribute_t)(void* f, int attribute, int value) noexcept nogil
ctypedef int (*cuDeviceGetAttribute_t)(int* value, int attribute, int device) noexcept nogil

cdef cuModuleLoadDataEx_t _cuModuleLoadDataEx = NULL
cdef cuModuleGetFunction_t _cuModuleGetFunction = NULL
cdef cuModuleUnload_t _cuModuleUnload = NULL
cdef cuDeviceGetAttribute_t _cuDeviceGetAttribute = NULL
cdef cuLaunchKernelEx_t _cuLaunchKernelEx = NULL           # optional (CUDA 11.8+)
cdef cuFuncGetParamInfo_t _cuFuncGetParamInfo = NULL       # optional (CUDA 12.4+)
cdef cuFuncGetParamCount_t _cuFuncGetParamCount = NULL     # optional (newer drivers)
cdef cuFuncSetAttribute_t _cuFuncSetAttribute = NULL
cdef cuLaunchKernel_t _cuLaunchKernel = NULL

# Per device: 0 not asked yet, 1 limits cached in _limits.
cdef char _limits_known[MAX_DEVICES]
cdef DeviceLimits _limits[MAX_DEVICES]
memset(_limits_known, 0, sizeof(_limits_known))

# The magic numbers at the start of binary images (anything else is taken as PTX text).
cdef bytes _ELF_MAGIC = b"\x7fELF"
cdef bytes _FATBIN_MAGIC = b"\x50\xed\x55\xba"     # 0xBA55ED50, little-endian


cdef int require_module_api() except -1:
    global _cuModuleLoadDataEx, _cuModuleGetFunction, _cuModuleUnload, _cuLaunchKernel
    global _cuDeviceGetAttribute, _cuLaunchKernelEx, _cuFuncGetParamInfo, _cuFuncSetAttribute
    if _cuLaunchKernel != NULL:
        return 0
    if not driver_available():
        raise RuntimeError(
            "loading and launching kernels needs the CUDA driver (libcuda), which is not "
            "available here")
    load = <cuModuleLoadDataEx_t> driver_symbol(b"cuModuleLoadDataEx")
    get_function = <cuModuleGetFunction_t> driver_symbol(b"cuModuleGetFunction")
    unload = <cuModuleUnload_t> driver_symbol(b"cuModuleUnload")
    attribute = <cuDeviceGetAttribute_t> driver_symbol(b"cuDeviceGetAttribute")
    launch_kernel = <cuLaunchKernel_t> driver_symbol(b"cuLaunchKernel")
    if (load == NULL or get_function == NULL or unload == NULL or launch_kernel == NULL
            or attribute == NULL):
        raise RuntimeError("this CUDA driver lacks the module API (cuModuleLoadDataEx, "
                           "cuModuleGetFunction, cuModuleUnload, cuLaunchKernel, "
                           "cuDeviceGetAttribute)")
    _cuModuleLoadDataEx = load
    _cuModuleGetFunction = get_function
    _cuModuleUnload = unload
    _cuDeviceGetAttribute = attribute
    _cuLaunchKernelEx = <cuLaunchKernelEx_t> driver_symbol(b"cuLaunchKernelEx")
    _cuFuncGetParamInfo = <cuFuncGetParamInfo_t> driver_symbol(b"cuFuncGetParamInfo")
    global _cuFuncGetParamCount
    _cuFuncGetParamCount = <cuFuncGetParamCount_t> driver_symbol(b"cuFuncGetParamCount")
    _cuFuncSetAttribute = <cuFuncSetAttribute_t> driver_symbol(b"cuFuncSetAttribute")
    _cuLaunchKernel = launch_kernel        # set last: it marks the whole API as resolved
    return 0


cdef const DeviceLimits* device_limits(int device_id) except NULL:
    cdef DeviceLimits* limits
    cdef int value = 0
    cdef int i
    if device_id < 0 or device_id >= MAX_DEVICES:
        raise ValueError(f"CUDA device ordinal {device_id} is out of range")
    limits = &_limits[device_id]
    if _limits_known[device_id]:
        return limits
    require_module_api()
    for i in range(3):
        check_status(_cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i,
                                           device_id), b"cuDeviceGetAttribute")
        limits.max_grid[i] = <unsigned int> value
        check_status(_cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i,
                                           device_id), b"cuDeviceGetAttribute")
        limits.max_block[i] = <unsigned int> value
    check_status(_cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                       device_id), b"cuDeviceGetAttribute")
    limits.max_threads_per_block = <unsigned int> value
    check_status(_cuDeviceGetAttribute(
        &value, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_id),
        b"cuDeviceGetAttribute")
    limits.max_shared_optin = <unsigned int> value
    # Newer attributes: a driver that does not know one says so with an error; read it as "no".
    value = 0
    if _cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, device_id) != 0:
        value = 0
    limits.cluster_launch = value
    value = 0
    if _cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, device_id) != 0:
        value = 0
    limits.cooperative_launch = value
    _limits_known[device_id] = 1
    return limits


cdef Py_ssize_t function_param_sizes(void* function, void* context, size_t* out,
                                     Py_ssize_t capacity) except -2:
    cdef size_t offset = 0, size = 0, count = 0
    cdef Py_ssize_t i = 0
    cdef int status = 0
    cdef int pushed
    cdef bint counted = False
    require_module_api()
    if _cuFuncGetParamInfo == NULL:
        return -1
    pushed = enter_context(context)
    try:
        # Where the driver can count the parameters, no call is made past the last one (an
        # error return, which compute-sanitizer reports as a failed API call).
        if _cuFuncGetParamCount != NULL and _cuFuncGetParamCount(function, &count) == 0:
            counted = True
        while True:
            if counted and <size_t> i >= count:
                status = CUDA_ERROR_INVALID_VALUE       # what the driver says past the last
                break
            status = _cuFuncGetParamInfo(function, <size_t> i, &offset, &size)
            if status != 0:
                break
            if i >= capacity:
                raise ValueError(f"the kernel has more than {capacity} parameters")
            out[i] = size
            i += 1
    finally:
        leave_context(pushed)
    # Past the last parameter the driver answers CUDA_ERROR_INVALID_VALUE; any other error at
    # the first index means it cannot say for this function.
    if status != CUDA_ERROR_INVALID_VALUE and i == 0:
        return -1
    return i


cdef int launch_function(void* function, void* context, const unsigned int* grid,
                         const unsigned int* block, unsigned int shared_mem, intptr_t stream,
                         void** params, const unsigned int* cluster, bint spread,
                         bint cooperative, bint programmatic) except -1:
    cdef int status
    cdef int pushed
    cdef LaunchConfig config
    cdef LaunchAttribute attrs[4]
    cdef unsigned int n = 0
    if cluster == NULL and not cooperative and not programmatic:
        pushed = enter_context(context)
        status = _cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                                 block[2], shared_mem, <void*> stream, params, NULL)
        leave_context(pushed)
        return check_status(status, b"cuLaunchKernel")
    if _cuLaunchKernelEx == NULL:
        raise RuntimeError("this CUDA driver lacks cuLaunchKernelEx (CUDA 11.8 and later), "
                           "needed for thread-block clusters, cooperative and PDL launches")
    memset(attrs, 0, sizeof(attrs))
    if programmatic:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        (<int*> attrs[n].value)[0] = 1
        n += 1
    if cooperative:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        (<int*> attrs[n].value)[0] = 1
        n += 1
    if cluster != NULL:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        (<unsigned int*> attrs[n].value)[0] = cluster[0]
        (<unsigned int*> attrs[n].value)[1] = cluster[1]
        (<unsigned int*> attrs[n].value)[2] = cluster[2]
        n += 1
        if spread:
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
            (<int*> attrs[n].value)[0] = CU_CLUSTER_SCHEDULING_POLICY_SPREAD
            n += 1
    config.grid_x = grid[0]
    config.grid_y = grid[1]
    config.grid_z = grid[2]
    config.block_x = block[0]
    config.block_y = block[1]
    config.block_z = block[2]
    config.shared_mem = shared_mem
    config.stream = <void*> stream
    config.attrs = attrs
    config.num_attrs = n
    pushed = enter_context(context)
    status = _cuLaunchKernelEx(&config, function, params, NULL)
    leave_context(pushed)
    return check_status(status, b"cuLaunchKernelEx")


cdef class Module:
    """A module (PTX, cubin or fatbin) loaded into a device's primary context.

    Made by :func:`interop_core.load_module`.  Unloaded when the object is freed; every
    :class:`Kernel` taken from it keeps it alive.
    """

    def __init__(self):
        raise TypeError("use interop_core.load_module(image, device) (or "
                        "interop_core.cuda._module.load_ptx(ptx, device_id))")

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

    def kernel(self, name, signature=None):
        """The kernel (an entry of the module) called ``name``.

        Parameters
        ----------
        name : str
            The entry's name as the image spells it (mangled, for C++ sources).
        signature : sequence of str, optional
            The kernel's parameters, one entry each: ``"pointer"`` or the C type of a scalar,
            a name from :data:`interop_core.launch.SCALAR_TYPES` (``"float32"``, ``"int64"``,
            ...).  :meth:`Kernel.launch` then checks every record against it (a tensor for each
            pointer, a scalar stored as exactly that type for each scalar).  Without one, the
            record is checked against the parameter sizes the driver reports (CUDA 12.4+).

        Returns
        -------
        Kernel
            Keeps this module alive.

        Raises
        ------
        TypeError
            If ``name`` is not a str or ``signature`` is malformed.
        ValueError
            If the module has no such entry, or ``signature`` disagrees with the parameter
            sizes the driver reports.
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
        declared, declared_names = _parse_signature(signature)
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
        k._nparams = -2
        k._declared = declared
        k._declared_names = declared_names
        if declared is not None:
            _check_declared_against_driver(k)
        return k

    @property
    def handle(self):
        """int: The ``CUmodule`` handle."""
        return <uintptr_t> self.cu_module

    def __repr__(self):
        return (f"<Module ({self.kind}) {<uintptr_t> self.cu_module:#x} on device "
                f"{self.device_id}>")


cdef tuple _parse_signature(object signature):
    if signature is None:
        return None, None
    if isinstance(signature, (str, bytes)) or not hasattr(signature, "__iter__"):
        raise TypeError("signature must be a sequence of 'pointer' or scalar C type names, got "
                        f"{type(signature).__name__}")
    names = tuple(signature)
    codes = bytearray(len(names))
    for i, entry in enumerate(names):
        if entry == "pointer":
            continue
        if not isinstance(entry, str) or entry not in SCALAR_TYPES:
            raise TypeError(f"signature[{i}] must be 'pointer' or one of {SCALAR_TYPES}, "
                            f"got {entry!r}")
        codes[i] = SCALAR_TYPES.index(entry) + 1
    return bytes(codes), names


cdef int _param_info(Kernel k) except -1:
    # Once per kernel: the driver's parameter sizes (or -1: it cannot say).
    cdef size_t sizes[256]
    cdef Py_ssize_t n
    if k._nparams != -2:
        return 0
    n = function_param_sizes(k.cu_function, k.module.context, sizes, 256)
    if n > 0:
        k._param_sizes = <size_t*> PyMem_Malloc(n * sizeof(size_t))
        if k._param_sizes == NULL:
            raise MemoryError()
        for i in range(n):
            k._param_sizes[i] = sizes[i]
    k._nparams = n
    return 0


cdef int _check_declared_against_driver(Kernel k) except -1:
    cdef Py_ssize_t i, n = len(k._declared)
    cdef const unsigned char* codes = <const unsigned char*> PyBytes_AS_STRING(k._declared)
    cdef size_t want
    _param_info(k)
    if k._nparams < 0:
        return 0
    if k._nparams != n:
        raise ValueError(f"kernel {k.name!r}: the declared signature has {n} parameters, but "
                         f"the driver reports {k._nparams}")
    for i in range(n):
        want = 8 if codes[i] == 0 else <size_t> ctype_size(codes[i])
        if k._param_sizes[i] != want:
            raise ValueError(f"kernel {k.name!r}: signature[{i}] is "
                             f"{k._declared_names[i]!r} ({want} bytes), but the driver reports "
                             f"a parameter of {k._param_sizes[i]} bytes")
    return 0


cdef str _stored_as(LaunchArgs r, Py_ssize_t i):
    if r.kinds[i] == ARG_TENSOR:
        return "a pointer (8 bytes)"
    if r.kinds[i] == ARG_NONE:
        return "a NULL pointer (8 bytes)"
    code = r.ctypes[i]
    return f"a scalar stored as {SCALAR_TYPES[code - 1]} ({ctype_size(code)} bytes)"


cdef int _check_record(Kernel k, LaunchArgs r) except -1:
    # Every argument against the declared signature (or the driver's sizes), and every
    # tensor's device against the module's.
    cdef Py_ssize_t i, n = r.n
    cdef const unsigned char* codes = NULL
    cdef const ViewRecord* rec
    cdef size_t have
    cdef int device = k.module.device_id
    cdef unsigned char kind
    if k._declared is not None:
        codes = <const unsigned char*> PyBytes_AS_STRING(k._declared)
        if n != PyTuple_GET_SIZE(k._declared_names):
            raise TypeError(f"kernel {k.name!r} takes {PyTuple_GET_SIZE(k._declared_names)} "
                            f"parameters {k._declared_names}, but the record has {n} arguments")
    else:
        _param_info(k)
        if k._nparams >= 0 and n != k._nparams:
            raise TypeError(f"kernel {k.name!r} takes {k._nparams} parameters (the driver "
                            f"says), but the record has {n} arguments")
    for i in range(n):
        kind = r.kinds[i]
        if codes != NULL:
            if codes[i] == 0 and kind == ARG_SCALAR:
                raise TypeError(f"kernel {k.name!r}: argument {i} ({type_name(r.args[i])}) is "
                                "a scalar, but the parameter is a pointer")
            if codes[i] != 0 and (kind != ARG_SCALAR or r.ctypes[i] != codes[i]):
                raise TypeError(
                    f"kernel {k.name!r}: argument {i} ({type_name(r.args[i])}) is "
                    f"{_stored_as(r, i)}, but the parameter is "
                    f"{SCALAR_TYPES[codes[i] - 1]} (pass scalar_types= to launch_args)")
        elif k._nparams >= 0:
            have = 8 if kind != ARG_SCALAR else <size_t> ctype_size(r.ctypes[i])
            if have != k._param_sizes[i]:
                raise TypeError(
                    f"kernel {k.name!r}: argument {i} ({type_name(r.args[i])}) is "
                    f"{_stored_as(r, i)}, but the kernel's parameter {i} takes "
                    f"{k._param_sizes[i]} bytes (pass scalar_types= to launch_args, or declare "
                    "the signature)")
        if kind != ARG_TENSOR:
            continue
        rec = &r.recs[i]
        if rec.device_type == kDLCUDA:
            if rec.device_id != device:
                raise ValueError(f"kernel {k.name!r}: argument {i} ({type_name(r.args[i])}) is "
                                 f"on {device_label(rec)}, but the kernel is loaded on "
                                 f"cuda:{device}")
        elif rec.device_type != kDLCUDAHost and rec.device_type != kDLCUDAManaged:
            raise ValueError(f"kernel {k.name!r}: argument {i} ({type_name(r.args[i])}) is in "
                             f"{device_label(rec)} memory, which a CUDA kernel cannot address "
                             "(device, managed or pinned host memory only)")
    return 0


cdef int _dims(object value, str what, unsigned int* out, const unsigned int* limit,
               int device, str limit_name) except -1:
    cdef Py_ssize_t i, n
    if type(value) is int:
        n = 1
    elif type(value) is tuple:
        n = PyTuple_GET_SIZE(value)
    else:
        if isinstance(value, int) and not isinstance(value, bool):
            value = int(value)
            n = 1
        elif isinstance(value, (tuple, list)):
            value = tuple(value)
            n = len(value)
        else:
            raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got "
                            f"{type(value).__name__}")
    if not 1 <= n <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    out[0] = out[1] = out[2] = 1
    for i in range(n):
        d = value if type(value) is int else <object> PyTuple_GET_ITEM(value, i)
        if type(d) is not int:
            if not isinstance(d, int) or isinstance(d, bool):
                raise TypeError(f"{what}[{i}] must be an int, got {type(d).__name__}")
            d = int(d)
        if limit != NULL and not 1 <= d <= limit[i]:
            raise ValueError(f"{what}[{i}] must be between 1 and {limit[i]} (cuda:{device}'s "
                             f"{limit_name}_{'XYZ'[i]}), got {d}")
        if not 1 <= d <= 0xFFFFFFFF:
            raise ValueError(f"{what}[{i}] must be between 1 and 2**32 - 1, got {d}")
        out[i] = <unsigned int> d
    return 0


cdef class Kernel:
    """One kernel of a :class:`Module` (made by :meth:`Module.kernel`).

    Call :meth:`launch` with a :func:`interop_core.launch_args` record.
    """

    def __init__(self):
        raise TypeError("use Module.kernel(name)")

    def __dealloc__(self):
        PyMem_Free(self._param_sizes)

    @property
    def handle(self):
        """int: The ``CUfunction`` handle (valid while this object lives)."""
        return <uintptr_t> self.cu_function

    @property
    def device_id(self):
        """int: The device the kernel's module is loaded on."""
        return self.module.device_id

    @property
    def signature(self):
        """tuple of str or None: The declared signature (see :meth:`Module.kernel`)."""
        return self._declared_names

    @property
    def param_sizes(self):
        """tuple of int or None: Each parameter's size in bytes, as the driver reports it
        (``cuFuncGetParamInfo``, CUDA 12.4+); ``None`` where the driver cannot say."""
        _param_info(self)
        if self._nparams < 0:
            return None
        return tuple([self._param_sizes[i] for i in range(self._nparams)])

    def launch(self, grid, block, args, *, shared_mem=0, cluster=None):
        """Launch the kernel with a :func:`interop_core.launch_args` record, without waiting.

        The launch goes on the record's stream, which every producer of a tensor argument was
        ordered before when the record was made.  Everything is checked before the driver is
        called: nothing is launched on a failed call.

        Parameters
        ----------
        grid, block : int or tuple of int
            Blocks in the grid and threads per block, 1 to 3 dimensions, each at least 1 and
            within the device's limits (asked of the driver once per device).
        args : LaunchArgs
            ``interop_core.launch_args(arguments, stream, ...)``: one entry per kernel
            parameter, in order; scalars stored as the parameter's C type (``scalar_types=``);
            ``writable=`` makes it refuse read-only arrays where the kernel writes.
        shared_mem : int
            Dynamic shared memory per block, in bytes.  Above 48 KiB the kernel is allowed that
            much (``cuFuncSetAttribute``), up to the device's opt-in limit.
        cluster : int or tuple of int, optional
            Thread-block cluster dimensions (compute capability 9.0+, ``cuLaunchKernelEx``);
            each grid dimension must be a multiple of the cluster's.

        Raises
        ------
        TypeError
            For an argument that does not match the kernel's parameter (a scalar where a
            pointer goes, a scalar stored as another type or size than the parameter's, another
            number of arguments), or malformed dimensions.
        ValueError
            For a record without a stream, a tensor on another device than the kernel's (or in
            pageable host memory), a stream of another device, a dimension of 0 or beyond the
            device's limits, or a cluster the device cannot launch.
        RuntimeError
            When the driver refuses the launch (the message names the error).
        """
        cdef unsigned int g[3]
        cdef unsigned int b[3]
        cdef unsigned int c[3]
        cdef const unsigned int* cluster_dims = NULL
        cdef const DeviceLimits* limits
        cdef LaunchArgs r
        cdef intptr_t stream
        cdef int device = self.module.device_id
        cdef unsigned long long threads
        cdef int i
        if type(args) is not LaunchArgs:
            raise TypeError(f"args must be a LaunchArgs record (interop_core.launch_args(args, "
                            f"stream, ...)), got {type(args).__name__}")
        r = <LaunchArgs> args
        limits = device_limits(device)
        _dims(grid, "grid", g, limits.max_grid, device, "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM")
        _dims(block, "block", b, limits.max_block, device, "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM")
        threads = <unsigned long long> b[0] * b[1] * b[2]
        if threads > limits.max_threads_per_block:
            raise ValueError(f"block {block!r} has {threads} threads, beyond cuda:{device}'s "
                             f"limit of {limits.max_threads_per_block} per block")
        if type(shared_mem) is not int:
            if not isinstance(shared_mem, int) or isinstance(shared_mem, bool):
                raise TypeError(f"shared_mem must be an int, got {type(shared_mem).__name__}")
            shared_mem = int(shared_mem)
        if shared_mem < 0 or shared_mem > limits.max_shared_optin:
            raise ValueError(f"shared_mem is {shared_mem} bytes; cuda:{device} allows 0 to "
                             f"{limits.max_shared_optin} per block")
        if cluster is not None:
            _dims(cluster, "cluster", c, NULL, device, "")
            if not limits.cluster_launch:
                raise ValueError(f"cuda:{device} cannot launch thread-block clusters "
                                 "(compute capability 9.0 and later can)")
            for i in range(3):
                if g[i] % c[i]:
                    raise ValueError(f"grid[{i}] ({g[i]}) is not a multiple of cluster[{i}] "
                                     f"({c[i]})")
            cluster_dims = c
        if r.stream is None:
            raise ValueError("the record has no stream: make it with launch_args(args, stream) "
                             "so that every producer is ordered before the launch")
        stream = <intptr_t> r.stream
        _check_record(self, r)
        if not (0 <= stream <= 2) and not (self._last_stream_ok and stream == self._last_stream):
            actual = stream_device(stream, device)
            if actual != device:
                raise ValueError(f"the record's stream {stream:#x} belongs to cuda:{actual}, but "
                                 f"kernel {self.name!r} is loaded on cuda:{device}")
            self._last_stream = stream
            self._last_stream_ok = True
        if shared_mem > DEFAULT_DYNAMIC_SHARED and shared_mem > self._dynamic_shared_set:
            _allow_dynamic_shared(self, <unsigned int> shared_mem)
        launch_function(self.cu_function, self.module.context, g, b, <unsigned int> shared_mem,
                        stream, r.params if r.n else NULL, cluster_dims, False, False, False)

    def __repr__(self):
        return f"<Kernel {self.name!r} of {self.module!r}>"


cdef int _allow_dynamic_shared(Kernel k, unsigned int size) except -1:
    cdef int pushed
    cdef int status
    if _cuFuncSetAttribute == NULL:
        raise RuntimeError("this CUDA driver lacks cuFuncSetAttribute, needed for more than "
                           "48 KiB of dynamic shared memory")
    pushed = enter_context(k.module.context)
    status = _cuFuncSetAttribute(k.cu_function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 <int> size)
    leave_context(pushed)
    check_status(status, b"cuFuncSetAttribute")
    k._dynamic_shared_set = size
    return 0


cdef Module _load_image(bytes image, int device_id, str kind):
    cdef void* handle = NULL
    cdef int options[2]
    cdef void* values[2]
    cdef char log[ERROR_LOG_BYTES]
    cdef int pushed
    cdef int status
    cdef Module m
    require_module_api()
    ctx = <uintptr_t> primary_context(device_id)
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
    m.kind = kind
    return m


cdef int _check_device(object device_id, str what) except -1:
    if not isinstance(device_id, int) or isinstance(device_id, bool):
        raise TypeError(f"{what} must be an int, got {type(device_id).__name__}")
    if device_id < 0:
        raise ValueError(f"{what} must be >= 0, got {device_id}")
    if device_id >= MAX_DEVICES:
        raise ValueError(f"{what} {device_id} is out of range")
    return 0


def load_module(image, device=0):
    """Load a module into device ``device``'s primary context (``cuModuleLoadDataEx``).

    PTX is compiled for the device by the driver's JIT (no CUDA toolkit needed); a cubin must
    have been built for the device's architecture.

    Parameters
    ----------
    image : str, bytes-like or path-like
        A ``str`` is PTX text.  ``bytes`` (or ``bytearray`` / ``memoryview``) are a binary image
        when they start with the ELF magic (a cubin) or the fatbin magic, PTX text otherwise.
        A path-like object (``pathlib.Path``, ``os.PathLike``) names a file holding either.
    device : int
        The CUDA device ordinal.

    Returns
    -------
    Module
        ``.kernel(name)`` gives a :class:`Kernel` to launch.

    Raises
    ------
    TypeError
        If ``image`` or ``device`` has another type.
    ValueError
        If the driver rejects the image (the JIT's error log is in the message), PTX text holds
        a NUL character, or the device ordinal is out of range.
    OSError
        If the file cannot be read.
    RuntimeError
        Where there is no CUDA driver.
    """
    _check_device(device, "device")
    if isinstance(image, os.PathLike):
        with open(image, "rb") as f:
            data = f.read()
        origin = f"the file {os.fspath(image)!r}"
    elif isinstance(image, str):
        data = (<str> image).encode()
        if b"\0" in data:
            raise ValueError("the PTX text contains a NUL character")
        return _load_image(data, device, "ptx")
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
        origin = "the image"
    else:
        raise TypeError("image must be PTX text (str), an image (bytes) or a path, got "
                        f"{type(image).__name__}")
    if data.startswith(_ELF_MAGIC) or data.startswith(_FATBIN_MAGIC):
        return _load_image(data, device, "binary")
    if not data:
        raise ValueError(f"{origin} is empty")
    if b"\0" in data:
        raise ValueError(f"{origin} is neither a cubin (ELF), a fatbin nor PTX text (it holds a "
                         "NUL character)")
    return _load_image(data, device, "ptx")


def load_ptx(ptx, device_id=0):
    """Load PTX text into device ``device_id``'s primary context (``cuModuleLoadDataEx``).

    The narrower form of :func:`load_module` the core's own kernels use.

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
    if isinstance(ptx, str):
        image = (<str> ptx).encode()
    elif isinstance(ptx, bytes):
        image = ptx
    else:
        raise TypeError(f"ptx must be str or bytes, got {type(ptx).__name__}")
    _check_device(device_id, "device_id")
    if b"\0" in image:
        raise ValueError("the PTX text contains a NUL character")
    return _load_image(image, device_id, "ptx")


cdef int launch_kernel(Kernel kernel, const unsigned int* grid, const unsigned int* block,
                       void** params, intptr_t stream, unsigned int shared_mem) except -1:
    return launch_function(kernel.cu_function, kernel.module.context, grid, block, shared_mem,
                           stream, params, NULL, False, False, False)


def launch(Kernel kernel not None, grid, block, params_address, stream, shared_mem=0):
    """Launch ``kernel`` on ``stream`` with a raw ``kernelParams`` address (``cuLaunchKernel``).

    The unchecked form under :meth:`Kernel.launch`, for callers that build the parameter array
    themselves (tests, the core's own kernels).

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
    _dims(grid, "grid", g, NULL, 0, "")
    _dims(block, "block", b, NULL, 0, "")
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


def _function_param_sizes(uintptr_t handle, int device_id):
    """The parameter sizes of any ``CUfunction`` on ``device_id`` (``None``: the driver cannot
    say).  For launchers that load kernels themselves (the Triton wrapper checks its layout)."""
    cdef size_t sizes[MAX_PARAMS]
    cdef Py_ssize_t n = function_param_sizes(<void*> handle, primary_context(device_id), sizes,
                                             MAX_PARAMS)
    if n < 0:
        return None
    return tuple([sizes[i] for i in range(n)])


def _device_limits(int device_id):
    """The launch limits of a device, as :meth:`Kernel.launch` checks them (a dict)."""
    cdef const DeviceLimits* limits = device_limits(device_id)
    return {"max_grid": tuple([limits.max_grid[i] for i in range(3)]),
            "max_block": tuple([limits.max_block[i] for i in range(3)]),
            "max_threads_per_block": limits.max_threads_per_block,
            "max_shared_optin": limits.max_shared_optin,
            "cluster_launch": bool(limits.cluster_launch),
            "cooperative_launch": bool(limits.cooperative_launch)}
