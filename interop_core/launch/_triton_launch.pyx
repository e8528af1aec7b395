# The Triton wrapper's per-call path, in C (see _triton_launch.pxd).
#
# fast[grid](*args, **kwargs) here: bind the arguments to the kernel's parameters as Triton does
# (positional, keywords, defaults; launch options such as num_warps as keywords), read every
# runtime argument with launch_args (tensors of any framework into C records, scalars into
# 8-byte slots, every producer ordered before the stream), pack the key of what Triton
# specialises on, find the compiled kernel for it, and launch its function handle with Triton's
# parameter layout.  A key seen for the first time goes to _triton.py, which has Triton compile
# it (its cache, its semantics) and checks the layout; whatever this path cannot do exactly as
# Triton does goes to Triton's own launch.
#
# Key words (int64), after the header word key_new writes:
#   environment  0x45 ('E') << 56 | instrumentation-mode id << 20 | debug << 16 | device
#   runtime arg  0x52 ('R') << 56 | kind << 48 | kind-specific bits (see _runtime_word)
#   constexpr    0x43 ('C') << 56 | kind << 48 | payload, and for ints and floats a second word
#                holding the value (floats: their bits)
#   option       0x4F ('O') << 56 | interned id of (name, type, value), sorted
# What Triton 3.6 specialises a runtime argument on (jit.py, create_function_from_signature and
# native_specialize_impl): a pointer's dtype and whether it is 16-byte aligned; an int's being
# 1 (then a constexpr), its type (i32 / i64 / u64 by range) and whether it is divisible by 16;
# a bool as u1 and a float as fp32 (values not specialised); None as a constexpr.
# do_not_specialize drops the value-derived parts, do_not_specialize_on_alignment the alignment
# and divisibility, and a type annotation fixes the type.

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
cimport cython
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.long cimport PyLong_AsSsize_t
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, intptr_t, uint16_t, uint32_t
from libc.stdint cimport uint64_t, uintptr_t
from libc.string cimport memcpy, memset

from ..core._dlpack_abi cimport kDLCUDA, kDLCUDAHost, kDLCUDAManaged
from ..core._key cimport KEY_NONE, KEY_TRITON, LaunchKey, key_finish, key_new
from ..core._record cimport ViewRecord
from ..cuda._cuda cimport primary_context
from ..cuda._memory cimport stream_device
from ..cuda._module cimport DeviceLimits, device_limits, launch_function, require_module_api
from ..cuda._streams cimport canonical_stream
from ._launch cimport (
    ARG_NONE,
    ARG_SCALAR,
    ARG_TENSOR,
    CT_BOOL,
    CT_FLOAT64,
    CT_INT64,
    CT_UINT64,
    LaunchArgs,
    build_launch_args,
    device_label,
    type_name,
)

__all__ = ["CompiledLaunch", "TritonKernel"]

cdef extern from "Python.h":
    int PY_LITTLE_ENDIAN

cdef extern from *:
    # PyFloat_Pack2 is public from Python 3.11; 3.10 has the same function as _PyFloat_Pack2
    # (unsigned char* buffer), so name that there (as _launch.pyx does).
    """
    #if PY_VERSION_HEX < 0x030B0000
    #define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
    #endif
    """
    int PyFloat_Pack2(double x, char* p, int le) except -1

# Parameter modes and specialisation flags (TritonKernel.modes / .flags).
cdef enum:
    P_CONSTEXPR = 1
    P_RUNTIME = 2
    F_SPECIALIZE = 1        # not in do_not_specialize
    F_ALIGN = 2             # not in do_not_specialize_on_alignment
    F_TYPED = 4             # annotated with a type: the argument's type does not change it
    F_TYPED_FIXED = 8       # annotated u1, fp* or bf*: Triton specialises nothing on the value

# How a runtime argument is passed (CompiledLaunch.storage), from the compiled signature.
cdef enum:
    S_SKIP = 0              # a constexpr in this specialisation (None, an int equal to 1)
    S_PTR = 1
    S_I8 = 2
    S_I16 = 3
    S_I32 = 4
    S_I64 = 5
    S_U8 = 6
    S_U16 = 7
    S_U32 = 8
    S_U64 = 9
    S_FP16 = 10
    S_BF16 = 11
    S_FP32 = 12
    S_FP64 = 13

# Runtime-argument kinds in key words.
cdef enum:
    K_POINTER = 1
    K_NONE = 2
    K_BOOL = 3
    K_FLOAT = 4
    K_INT = 5
    # int classes (bits 40..41): what type Triton gives the value
    INT_ONE = 0             # == 1: a constexpr
    INT_I32 = 1
    INT_I64 = 2
    INT_U64 = 3
    # constexpr kinds
    C_INT = 1
    C_BOOL = 2
    C_NONE = 3
    C_FLOAT = 4
    C_OTHER = 5
    STACK_PARAMS = 32
    MAX_OPTIONS = 32

cdef dict _STORAGE_BY_TYPE = {
    "i1": S_I8, "i8": S_I8, "i16": S_I16, "i32": S_I32, "i64": S_I64,
    "u1": S_U8, "u8": S_U8, "u16": S_U16, "u32": S_U32, "u64": S_U64,
    "fp16": S_FP16, "bf16": S_BF16, "fp32": S_FP32, "f32": S_FP32, "fp64": S_FP64,
}
cdef tuple _STORAGE_SIZES = (0, 8, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8)

# The per-key marker for "this key goes through Triton's own launch" (module-owned).
cdef object _OWN = object()
# The placeholder of a parameter without a default (module-owned).
_NO_DEFAULT = object()

# Process-wide: 0 until the first compile validated this Triton, 1 validated, 2 every call goes
# through Triton's own launch (set by _triton.py with the reason it keeps).
cdef int _process_mode = 0


def _set_process_mode(int mode):
    global _process_mode
    _process_mode = mode


def _process_mode_value():
    return _process_mode


def _own_marker():
    """The marker a compile hook returns for a key that goes through Triton's own launch."""
    return _OWN


@cython.final
cdef class CompiledLaunch:
    """One compiled specialisation of a Triton kernel, as the wrapper launches it (internal)."""

    def __init__(self):
        raise TypeError("made by the Triton wrapper")


def _new_compiled(kernel, uintptr_t function, int device, unsigned int num_warps,
                  unsigned int num_ctas, unsigned int shared, bint cooperative,
                  bint programmatic, tuple storage_types, tuple layout,
                  size_t global_scratch_size, size_t global_scratch_align,
                  size_t profile_scratch_size, size_t profile_scratch_align):
    """A CompiledLaunch (for _triton.py): `storage_types` has one Triton type per runtime
    parameter, "constexpr" for those this specialisation makes constexpr."""
    cdef CompiledLaunch c = CompiledLaunch.__new__(CompiledLaunch)
    codes = bytearray(len(storage_types))
    for i, ty in enumerate(storage_types):
        if ty == "constexpr":
            codes[i] = S_SKIP
        elif isinstance(ty, str) and ty.startswith("*"):
            codes[i] = S_PTR
        elif ty in _STORAGE_BY_TYPE:
            codes[i] = _STORAGE_BY_TYPE[ty]
        else:
            raise ValueError(f"no storage for the Triton type {ty!r}")
    require_module_api()
    c.kernel = kernel
    c.function = <void*> function
    c.context = primary_context(device)
    c.device = device
    c.num_warps = num_warps
    c.num_ctas = num_ctas
    c.shared = shared
    c.cooperative = cooperative
    c.programmatic = programmatic
    c.storage = bytes(codes)
    c.layout = layout
    c.global_scratch_size = global_scratch_size
    c.global_scratch_align = global_scratch_align
    c.profile_scratch_size = profile_scratch_size
    c.profile_scratch_align = profile_scratch_align
    return c


def _storage_sizes(tuple storage_types):
    """Bytes each passed parameter takes (the scratch pointers not included)."""
    sizes = []
    for ty in storage_types:
        if ty == "constexpr":
            continue
        code = S_PTR if ty.startswith("*") else _STORAGE_BY_TYPE[ty]
        sizes.append(_STORAGE_SIZES[code])
    return tuple(sizes)


cdef inline int64_t _word(int tag, int kind, uint64_t payload) noexcept nogil:
    return <int64_t> ((<uint64_t> tag << 56) | (<uint64_t> kind << 48) | payload)


cdef int64_t _runtime_word(LaunchArgs r, Py_ssize_t i, unsigned char flags) except? -1:
    cdef const ViewRecord* rec
    cdef unsigned char kind = r.kinds[i]
    cdef unsigned char ctype
    cdef int64_t value
    cdef uint64_t payload = 0
    cdef int cls
    cdef bint specialize = flags & F_SPECIALIZE
    cdef bint align = (flags & F_ALIGN) and specialize
    if flags & F_TYPED_FIXED:
        # Annotated u1 / fp* / bf*: Triton passes the annotation's type, specialises nothing.
        return _word(0x52, K_POINTER if kind == ARG_TENSOR else kind + 8, 0)
    if kind == ARG_TENSOR:
        rec = &r.recs[i]
        if not (flags & F_TYPED):
            payload = ((<uint64_t> rec.dtype.code << 32) | (<uint64_t> rec.dtype.bits << 16)
                       | <uint64_t> rec.dtype.lanes)
        if align and rec.ptr % 16 == 0:
            payload |= <uint64_t> 1 << 40
        return _word(0x52, K_POINTER, payload)
    if kind == ARG_NONE:
        return _word(0x52, K_NONE, 0)
    ctype = r.ctypes[i]
    if ctype == CT_BOOL:
        return _word(0x52, K_BOOL, 0)
    if ctype == CT_FLOAT64:
        return _word(0x52, K_FLOAT, 0)
    if ctype == CT_UINT64:
        cls = INT_U64
        payload = (<uint64_t> (r.values[i] % 16 == 0)) << 39
    else:
        value = <int64_t> r.values[i]
        if value == 1 and specialize:
            cls = INT_ONE       # a constexpr (with an annotation: a distinct specialisation)
        elif -2147483648 <= value <= 2147483647:
            cls = INT_I32
        else:
            cls = INT_I64
        payload = (<uint64_t> (value % 16 == 0)) << 39
    if not align:
        payload = 0
    if flags & F_TYPED and cls != INT_ONE:
        cls = INT_I32           # the annotation fixes the type: only divisibility remains
    return _word(0x52, K_INT, payload | (<uint64_t> cls << 40))


@cython.freelist(8)
@cython.final
cdef class _Grid:
    """``fast[grid]``: Triton's call syntax (a grid bound to a kernel, called with the
    arguments)."""

    cdef TritonKernel kernel
    cdef object grid

    def __call__(self, *args, **kwargs):
        return self.kernel.call(self.grid, args, kwargs, None)


cdef int _dim(object value, Py_ssize_t i, unsigned int* out) except -1:
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"grid[{i}] must be an int, got {type(value).__name__}")
        value = value.__index__()
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"grid[{i}] must be between 0 and 2**32 - 1, got {value}")
    out[i] = <unsigned int> value
    return 0


cdef int _grid_dims(object grid, unsigned int* out) except -1:
    cdef Py_ssize_t n, i
    out[0] = out[1] = out[2] = 1
    if type(grid) is int:
        return _dim(grid, 0, out)
    if type(grid) is not tuple:
        if not isinstance(grid, (tuple, list)):
            raise TypeError(f"the grid must be a tuple of 1 to 3 ints (or a callable returning "
                            f"one), got {type(grid).__name__}")
        grid = tuple(grid)
    n = PyTuple_GET_SIZE(grid)
    if not 1 <= n <= 3:
        raise TypeError(f"the grid must have 1 to 3 dimensions, got {grid!r}")
    for i in range(n):
        _dim(<object> PyTuple_GET_ITEM(grid, i), i, out)
    return 0


cdef int _store(LaunchArgs r, Py_ssize_t i, unsigned char code, str name) except -1:
    # Rewrite argument i's 8-byte slot as the C type the compiled kernel takes (in place: the
    # record is this call's own).
    cdef unsigned char kind = r.kinds[i]
    cdef unsigned char ctype = r.ctypes[i]
    cdef uint64_t* slot = &r.values[i]
    cdef double d
    cdef float f
    cdef int64_t v
    cdef uint32_t bits
    cdef uint16_t half
    if code == S_PTR:
        if kind == ARG_TENSOR or (kind == ARG_SCALAR and (ctype == CT_INT64 or ctype == CT_UINT64)):
            return 0
        raise TypeError(f"{name}: argument {r._names[i]!r} ({type_name(r.args[i])}) must be "
                        "a tensor (the kernel was compiled with a pointer there)")
    if kind != ARG_SCALAR:
        raise TypeError(f"{name}: argument {r._names[i]!r} ({type_name(r.args[i])}) must be a "
                        "scalar (the kernel was compiled with a scalar there)")
    if code >= S_FP16:
        if ctype == CT_FLOAT64:
            memcpy(&d, slot, 8)
        elif ctype == CT_UINT64:
            d = <double> slot[0]
        elif ctype == CT_BOOL:
            d = <double> (slot[0] & 0xFF)
        else:
            d = <double> (<int64_t> slot[0])
        if code == S_FP64:
            memcpy(slot, &d, 8)
        elif code == S_FP32:
            f = <float> d
            memcpy(slot, &f, 4)
        elif code == S_BF16:
            # Triton packs bf16 by truncating the float32 (its launcher's pack_bf16).
            f = <float> d
            memcpy(&bits, &f, 4)
            half = <uint16_t> (bits >> 16)
            memcpy(slot, &half, 2)
        else:
            PyFloat_Pack2(d, <char*> slot, PY_LITTLE_ENDIAN)
        return 0
    if ctype == CT_FLOAT64:
        raise TypeError(f"{name}: argument {r._names[i]!r} is a float, but the kernel takes an "
                        "integer there")
    if ctype == CT_UINT64:
        if code != S_U64 and code != S_U32 and code != S_U16 and code != S_U8:
            raise ValueError(f"{name}: argument {r._names[i]!r} ({r.args[i]}) does not fit the "
                             "kernel's signed integer parameter")
        return 0       # Triton's unsigned formats take the low bytes
    v = <int64_t> slot[0]
    if ((code == S_I32 and not (-2147483648 <= v <= 2147483647))
            or (code == S_I16 and not (-32768 <= v <= 32767))
            or (code == S_I8 and not (-128 <= v <= 127))):
        raise ValueError(f"{name}: argument {r._names[i]!r} ({r.args[i]}) does not fit the "
                         f"kernel's {_STORAGE_SIZES[code] * 8}-bit parameter")
    return 0


@cython.final
cdef class TritonKernel:
    """A ``@triton.jit`` kernel launched through interop-core (made by
    :func:`interop_core.triton_kernel`).

    ``fast[grid](*args, **kwargs)`` takes Triton's own call syntax: the grid a tuple of 1 to 3
    ints or a callable of the meta-parameters returning one; arguments positional or by name,
    constexprs and launch options (``num_warps``, ``num_stages``, ...) as keywords.  Arrays come
    from any framework (torch, cupy, jax, numba, anything :func:`interop_core.view` reads, views
    themselves), on the device Triton would launch on (torch's current device); the launch goes
    on torch's current stream of that device, every producer ordered before it.  ``.run(*args,
    grid=, stream=, **kwargs)`` launches on another stream.

    The first call of each specialisation is compiled by Triton itself (its cache, its
    semantics); later calls launch the compiled function directly.
    """

    def __cinit__(self):
        self.runtime_pos = NULL

    def __dealloc__(self):
        PyMem_Free(self.runtime_pos)

    def __init__(self):
        raise TypeError("use interop_core.triton_kernel(kernel)")

    def __getitem__(self, grid):
        """``fast[grid]``: the kernel bound to ``grid`` (a tuple of 1 to 3 ints, or a callable
        taking the parameters by name and returning one); call it with the arguments."""
        cdef _Grid bound = _Grid.__new__(_Grid)
        bound.kernel = self
        bound.grid = grid
        return bound

    def run(self, *args, grid, stream=None, **kwargs):
        """Launch with ``grid`` on ``stream`` (Triton's ``JITFunction.run`` spelling).

        Parameters
        ----------
        *args
            The kernel's arguments, as for ``fast[grid](...)``.
        grid : tuple of int or callable
            As for ``fast[grid]``.
        stream : None, int or stream object
            Where to launch: ``None`` for torch's current stream of the current device (what
            Triton uses), else anything the stream contract takes; it must belong to the
            current device.
        **kwargs
            Arguments by name, constexprs and launch options.

        Returns
        -------
        object
            Triton's ``CompiledKernel`` that ran, as ``kernel[grid](...)`` returns it.
        """
        return self.call(grid, args, kwargs, stream)

    @property
    def parameter_flags(self):
        """tuple of int: Per parameter, the specialisation flags its key word is packed with
        (1 specialise, 2 alignment, 4 typed, 8 type fixed; 0 for constexprs)."""
        return tuple(self.flags)

    @property
    def cache_size(self):
        """int: Specialisations seen so far (keys compiled or routed to Triton's launch)."""
        return len(self.entries)

    def key(self, *args, **kwargs):
        """The key this wrapper files ``fast[grid](*args, **kwargs)`` under (no launch, no
        compile): equal keys mean Triton would run the same compiled kernel.

        Returns
        -------
        LaunchKey
            Its policy is ``"triton"``.
        """
        cdef intptr_t handle
        cdef int device
        return self._bind_and_key(args, kwargs, None, True, &handle, &device).key

    def __repr__(self):
        return f"<TritonKernel {self.name!r}: {len(self.entries)} specialisations>"

    cdef object call(self, object grid, tuple args, dict kwargs, object stream):
        cdef LaunchArgs r
        cdef int device
        cdef LaunchKey key
        cdef CompiledLaunch c
        cdef unsigned int g[3]
        cdef unsigned int block[3]
        cdef unsigned int cluster[3]
        cdef const DeviceLimits* limits
        cdef void* stack_params[STACK_PARAMS + 2]
        cdef void** params = stack_params
        cdef Py_ssize_t i, n_passed = 0
        cdef uint64_t global_scratch = 0, profile_scratch = 0
        cdef unsigned char code
        cdef const unsigned char* storage
        cdef intptr_t handle
        if self.always_own or _process_mode == 2 or self._hooks_active():
            return self.own_launch(self, grid, args, kwargs, stream)
        if self.get_device is None:
            self.prepare_hook(self)             # Triton's driver up: torch's device and stream
        # What runs Python code comes before the arguments are read: from the read to the
        # launch none runs but a compilation or Triton's scratch allocator, and those take the
        # reads' deferred keep-alives first (build_launch_args, `in_call`).
        used = self.fn.used_global_vals
        if used:
            _check_globals(used)
        dims = grid(self._meta(args, kwargs)) if callable(grid) else grid
        _grid_dims(dims, g)
        r = self._bind_and_key(args, kwargs, stream, False, &handle, &device)
        key = <LaunchKey> r.key
        entry = self.entries.get(key)
        if entry is None:
            r._take_deferred()
            entry = self.compile_hook(self, key, r, grid, args, kwargs, device)
            self.entries[key] = entry
        if entry is _OWN:
            return self.own_launch(self, grid, args, kwargs, stream)
        c = <CompiledLaunch> entry
        grid = dims
        if <unsigned long long> g[0] * g[1] * g[2] == 0:
            return c.kernel                         # Triton launches nothing for an empty grid
        limits = device_limits(c.device)
        if (<unsigned long long> g[0] * c.num_ctas > limits.max_grid[0]
                or g[1] > limits.max_grid[1] or g[2] > limits.max_grid[2]):
            raise ValueError(f"{self.name}: grid {grid!r} (x {c.num_ctas} CTAs per cluster in x) "
                             f"is beyond cuda:{c.device}'s limits "
                             f"{tuple([limits.max_grid[i] for i in range(3)])}")
        storage = <const unsigned char*> (<bytes> c.storage)
        if r.n > STACK_PARAMS:
            params = <void**> PyMem_Malloc((r.n + 2) * sizeof(void*))
            if params == NULL:
                raise MemoryError()
        try:
            for i in range(r.n):
                code = storage[i]
                if code == S_SKIP:
                    continue
                _store(r, i, code, self.name)
                params[n_passed] = &r.values[i]
                n_passed += 1
            scratch = None
            profile = None
            if c.global_scratch_size or c.profile_scratch_size:
                r._take_deferred()
            if c.global_scratch_size:
                scratch = self._scratch(c, g, handle, False)
                global_scratch = scratch.data_ptr()
            if c.profile_scratch_size:
                profile = self._scratch(c, g, handle, True)
                profile_scratch = profile.data_ptr()
            params[n_passed] = &global_scratch
            params[n_passed + 1] = &profile_scratch
            block[0] = 32 * c.num_warps
            block[1] = block[2] = 1
            g[0] *= c.num_ctas
            cluster[0] = c.num_ctas
            cluster[1] = cluster[2] = 1
            launch_function(c.function, c.context, g, block, c.shared, handle, params,
                            cluster if c.num_ctas != 1 else NULL, True, c.cooperative,
                            c.programmatic)
        finally:
            if params != stack_params:
                PyMem_Free(params)
        return c.kernel

    cdef object _scratch(self, CompiledLaunch c, const unsigned int* g, intptr_t stream,
                         bint profile):
        # Triton's own allocators (triton.set_allocator), sized as its launcher sizes them.
        from triton.runtime import _allocation
        cdef size_t size = c.profile_scratch_size if profile else c.global_scratch_size
        cdef size_t align = c.profile_scratch_align if profile else c.global_scratch_align
        allocator = _allocation._profile_allocator if profile else _allocation._allocator
        nbytes = (<size_t> g[0]) * g[1] * g[2] * c.num_ctas * size
        return allocator.get()(nbytes, align, stream)

    cdef bint _hooks_active(self) except -1:
        knobs = self.runtime_knobs
        if knobs is None:
            return False
        enter = knobs.launch_enter_hook
        exit_ = knobs.launch_exit_hook
        if enter is not self.enter_hooks or exit_ is not self.exit_hooks:
            return enter is not None or exit_ is not None
        if len(self.enter_calls) or len(self.exit_calls):
            return True
        return len(self.fn.pre_run_hooks) != 0

    cdef dict _meta(self, tuple args, dict kwargs):
        # What a grid callable gets: every parameter by name (Triton's bound arguments).
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(args)
        meta = {}
        for i in range(self.nparams):
            name = <object> PyTuple_GET_ITEM(self.names, i)
            if i < n:
                meta[name] = <object> PyTuple_GET_ITEM(args, i)
            elif name in kwargs:
                meta[name] = kwargs[name]
            else:
                default = <object> PyTuple_GET_ITEM(self.defaults, i)
                if default is _NO_DEFAULT:     # as _bind_and_key says it, before the grid runs
                    raise TypeError(f"{self.name}() missing a required argument: {name!r}")
                meta[name] = default
        return meta

    cdef int64_t _intern(self, object value) except -1:
        found = self.interned.get(value)
        if found is None:
            found = len(self.interned) + 1
            self.interned[value] = found
        return <int64_t> found

    cdef LaunchArgs _bind_and_key(self, tuple args, dict kwargs, object stream, bint key_only,
                                  intptr_t* stream_out, int* device_out):
        cdef Py_ssize_t nargs = PyTuple_GET_SIZE(args)
        cdef Py_ssize_t nparams = self.nparams
        cdef PyObject* stack_vals[STACK_PARAMS]
        cdef PyObject** vals = stack_vals
        cdef int64_t options[MAX_OPTIONS]
        cdef Py_ssize_t noptions = 0
        cdef Py_ssize_t pos = 0, i, j, at, nwords
        cdef PyObject* k
        cdef PyObject* v
        cdef PyObject* found
        cdef const unsigned char* modes = <const unsigned char*> (<bytes> self.modes)
        cdef const unsigned char* flags = <const unsigned char*> (<bytes> self.flags)
        cdef const unsigned char* writable = <const unsigned char*> (<bytes> self.writable)
        cdef int64_t tmp, word
        cdef intptr_t handle = 0
        cdef int device = 0
        cdef bint debug
        cdef LaunchArgs r
        cdef LaunchKey key
        cdef double as_double
        cdef int overflow
        cdef const ViewRecord* rec
        if nargs > nparams:
            raise TypeError(f"{self.name}() takes {nparams} arguments but {nargs} were given")
        if nparams > STACK_PARAMS:
            vals = <PyObject**> PyMem_Malloc(nparams * sizeof(PyObject*))
            if vals == NULL:
                raise MemoryError()
        try:
            memset(vals, 0, nparams * sizeof(PyObject*))
            for i in range(nargs):
                vals[i] = PyTuple_GET_ITEM(args, i)
            debug_given = None
            if kwargs:
                while PyDict_Next(kwargs, &pos, &k, &v):
                    found = PyDict_GetItem(self.position, <object> k)
                    if found != NULL:
                        i = PyLong_AsSsize_t(<object> found)
                        if vals[i] != NULL:
                            raise TypeError(f"{self.name}() got multiple values for argument "
                                            f"{<object> k!r}")
                        vals[i] = v
                        continue
                    name = <object> k
                    if name not in self.option_names:
                        if name in ("stream", "device", "device_type"):
                            raise TypeError(f"{self.name}: {name}= is not a kernel argument "
                                            "(launch on another stream with .run(..., "
                                            "grid=..., stream=...))")
                        raise KeyError(f"Keyword argument {name} was specified but "
                                       "unrecognised")
                    if name == "debug":
                        debug_given = <object> v
                    if noptions == MAX_OPTIONS:
                        raise TypeError(f"{self.name}: more than {MAX_OPTIONS} launch options")
                    try:
                        options[noptions] = self._intern((name, type(<object> v), <object> v))
                    except TypeError:
                        raise TypeError(f"{self.name}: launch option {name}={<object> v!r} is "
                                        "not hashable") from None
                    noptions += 1
            for i in range(nparams):
                if vals[i] == NULL:
                    default = <object> PyTuple_GET_ITEM(self.defaults, i)
                    if default is _NO_DEFAULT:
                        raise TypeError(f"{self.name}() missing a required argument: "
                                        f"{self.names[i]!r}")
                    vals[i] = PyTuple_GET_ITEM(self.defaults, i)
            # The device and stream Triton would launch on: torch's current ones.
            if self.get_device is not None:
                device = self.get_device()
            if stream is None:
                if self.get_stream is not None:
                    handle = self.get_stream(device)
                    canonical = handle
                else:
                    canonical = None
            else:
                canonical = canonical_stream(stream, &handle)
                if canonical is None:
                    raise ValueError(f"{self.name}: stream={stream!r} means 'no stream'; pass "
                                     "a stream to launch on")
                if not 0 <= handle <= 2 and stream_device(handle, device) != device:
                    raise ValueError(f"{self.name}: the stream {handle:#x} does not belong to "
                                     f"cuda:{device}, the current device")
            # The key: environment, runtime arguments, constexprs, options.  Everything but the
            # arguments' words first: it runs Python code (Triton's knobs, hashes of constexpr
            # values), and from the arguments' read to the launch none may run (build_launch_args,
            # `in_call`).
            nwords = 2 + self.nruntime + noptions
            for i in range(nparams):
                if modes[i] == P_CONSTEXPR:
                    nwords += 2
            key = key_new(nwords, KEY_TRITON, nparams)
            knobs = self.runtime_knobs
            debug = bool(debug_given if debug_given is not None else self.fn.debug) or (
                knobs is not None and bool(knobs.debug))
            mode = (self.compilation_knobs.instrumentation_mode
                    if self.compilation_knobs is not None else "")
            if mode is not self.last_mode:
                self.last_mode_id = self._intern(("mode", mode))
                self.last_mode = mode
            key._words[1] = _word(0x45, 0, (<uint64_t> self.last_mode_id << 20)
                                  | (<uint64_t> debug << 16) | <uint64_t> (device & 0xFFFF))
            at = 2 + self.nruntime
            for i in range(nparams):
                if modes[i] != P_CONSTEXPR:
                    continue
                value = <object> vals[i]
                word = 0
                if value is None:
                    tmp = _word(0x43, C_NONE, 0)
                elif value is True or value is False:
                    tmp = _word(0x43, C_BOOL, value is True)
                elif type(value) is int:
                    overflow = 0
                    word = PyLong_AsLongLongAndOverflow(value, &overflow)
                    if overflow:
                        tmp = _word(0x43, C_OTHER, <uint64_t> self._intern((int, value)))
                        word = 0
                    else:
                        tmp = _word(0x43, C_INT, 0)
                elif type(value) is float:
                    as_double = value
                    memcpy(&word, &as_double, 8)
                    tmp = _word(0x43, C_FLOAT, 0)
                else:
                    try:
                        tmp = _word(0x43, C_OTHER,
                                    <uint64_t> self._intern((type(value), value)))
                    except TypeError:
                        raise TypeError(f"{self.name}: constexpr "
                                        f"{self.names[i]!r}={value!r} is not "
                                        "hashable") from None
                key._words[at] = tmp
                key._words[at + 1] = word
                at += 2
            # Options in a fixed order: the same options in any keyword order give one key.
            for i in range(1, noptions):
                tmp = options[i]
                j = i - 1
                while j >= 0 and options[j] > tmp:
                    options[j + 1] = options[j]
                    j -= 1
                options[j + 1] = tmp
            for i in range(noptions):
                key._words[at] = _word(0x4F, 0, <uint64_t> options[i])
                at += 1
            if self.runtime_leading and nargs == self.nruntime:
                runtime = args
            else:
                runtime = PyTuple_New(self.nruntime)
                for j in range(self.nruntime):
                    value = <object> vals[self.runtime_pos[j]]
                    Py_INCREF(value)
                    PyTuple_SET_ITEM(runtime, j, value)
            r = build_launch_args(runtime, None if key_only else canonical, KEY_NONE, False,
                                  False, None, self.name, self.runtime_names, True)
            for j in range(self.nruntime):
                if r.kinds[j] != ARG_TENSOR:
                    continue
                rec = &r.recs[j]
                if writable[j] and rec.readonly:
                    raise BufferError(f"{self.name}: argument {self.runtime_names[j]!r} "
                                      f"({type_name(r.args[j])}) is read-only, but the kernel "
                                      "writes it")
                if key_only:
                    continue
                if rec.device_type == kDLCUDA:
                    if rec.device_id != device:
                        raise ValueError(
                            f"{self.name}: argument {self.runtime_names[j]!r} "
                            f"({type_name(r.args[j])}) is on {device_label(rec)}, but the "
                            f"launch goes to cuda:{device} (torch's current device)")
                elif rec.device_type != kDLCUDAHost and rec.device_type != kDLCUDAManaged:
                    raise ValueError(
                        f"{self.name}: argument {self.runtime_names[j]!r} "
                        f"({type_name(r.args[j])}) is in {device_label(rec)} memory, which a "
                        "Triton kernel cannot address")
            for j in range(self.nruntime):
                key._words[2 + j] = _runtime_word(r, j, flags[self.runtime_pos[j]])
            key_finish(key)
            r.key = key
            stream_out[0] = handle
            device_out[0] = device
            return r
        finally:
            if vals != stack_vals:
                PyMem_Free(vals)


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1


def _check_globals(dict used):
    # Triton refuses a launch once a global its kernel read has changed since it compiled.
    missing = object()
    for (name, _), (value, globals_dict) in used.items():
        if globals_dict.get(name, missing) != value:
            raise RuntimeError(f"Global variable {name} has changed since we compiled this "
                               f"kernel, from {value} to {globals_dict.get(name, missing)}")


def _new_kernel(fn, str name, tuple names, bytes modes, bytes flags, tuple defaults,
                tuple writable_names, frozenset option_names, prepare_hook, compile_hook,
                own_launch, runtime_knobs, compilation_knobs, bint always_own):
    """A TritonKernel (for _triton.py, which reads the JITFunction's parameters)."""
    cdef TritonKernel k = TritonKernel.__new__(TritonKernel)
    cdef Py_ssize_t i, j
    k.fn = fn
    k.name = name
    k.nparams = len(names)
    k.names = names
    k.modes = modes
    k.flags = flags
    k.defaults = defaults
    k.position = {n: i for i, n in enumerate(names)}
    runtime = [i for i in range(k.nparams) if modes[i] == P_RUNTIME]
    k.nruntime = len(runtime)
    k.runtime_names = tuple(names[i] for i in runtime)
    k.runtime_pos = <Py_ssize_t*> PyMem_Malloc((k.nruntime + 1) * sizeof(Py_ssize_t))
    if k.runtime_pos == NULL:
        raise MemoryError()
    for j in range(k.nruntime):
        k.runtime_pos[j] = runtime[j]
    k.runtime_leading = runtime == list(range(k.nruntime))
    unknown = [w for w in writable_names if w not in k.runtime_names]
    if unknown:
        raise ValueError(f"writable names {unknown}, which are not runtime parameters of "
                         f"{name} {k.runtime_names}")
    k.writable = bytes([n in writable_names for n in k.runtime_names])
    k.writable_names = writable_names
    k.reasons = {}
    k.option_names = option_names
    k.entries = {}
    k.interned = {}
    k.prepare_hook = prepare_hook
    k.compile_hook = compile_hook
    k.own_launch = own_launch
    k.runtime_knobs = runtime_knobs
    k.compilation_knobs = compilation_knobs
    if runtime_knobs is not None:
        k.enter_hooks = runtime_knobs.launch_enter_hook
        k.exit_hooks = runtime_knobs.launch_exit_hook
        k.enter_calls = getattr(k.enter_hooks, "calls", None)
        k.exit_calls = getattr(k.exit_hooks, "calls", None)
        if type(k.enter_calls) is not list or type(k.exit_calls) is not list:
            always_own = True           # hooks of a shape this path does not know
    k.always_own = always_own
    return k


def _set_device_functions(TritonKernel k, get_device, get_stream):
    """Torch's current-device and current-stream functions, once Triton's driver is up."""
    k.get_device = get_device
    k.get_stream = get_stream


def _entries(TritonKernel k):
    """The wrapper's cache (for tests and doctor): LaunchKey -> CompiledLaunch or marker."""
    return k.entries
