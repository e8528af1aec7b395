# The per-call path of the Triton wrapper (see _triton_launch.pyx): binding Triton's call syntax,
# the key of what Triton specialises on, and the launch of a compiled kernel's function handle.
# Triton itself is never imported here: compiling, validating and Triton's own launch are
# _triton.py's, reached through the callables a TritonKernel holds.

from libc.stdint cimport int64_t, intptr_t

from ._launch cimport LaunchArgs


cdef class CompiledLaunch:
    cdef readonly object kernel     # Triton's CompiledKernel (strong reference: its module holds
                                    # the function handle below)
    """object: Triton's ``CompiledKernel`` this entry launches."""
    cdef void* function             # CUfunction, valid while `kernel` lives
    cdef void* context              # the device's primary context (retained for the process)
    cdef readonly int device
    """int: The device the kernel was loaded on."""
    cdef unsigned int num_warps
    cdef unsigned int num_ctas
    cdef unsigned int shared        # dynamic shared memory per block (Triton's metadata.shared)
    cdef bint cooperative
    cdef bint programmatic          # PDL (launch_pdl)
    cdef bytes storage              # per runtime parameter: how its value is passed (S_* codes)
    cdef readonly tuple layout
    """tuple of str: The kernel's parameters as passed: one Triton type per parameter passed
    (constexpr-specialised ones left out), then the two scratch pointers."""
    cdef size_t global_scratch_size
    cdef size_t global_scratch_align
    cdef size_t profile_scratch_size
    cdef size_t profile_scratch_align


cdef class TritonKernel:
    cdef readonly object fn         # the @triton.jit function (a JITFunction); strong reference
    """object: The wrapped ``@triton.jit`` function."""
    cdef readonly str name
    """str: The kernel's name."""
    cdef Py_ssize_t nparams
    cdef readonly tuple names       # parameter names, in order
    """tuple of str: The kernel's parameters, in order."""
    cdef bytes modes                # per parameter: P_CONSTEXPR or P_RUNTIME
    cdef bytes flags                # per parameter: F_* specialisation flags
    cdef tuple defaults             # per parameter: its default, or the module's _NO_DEFAULT
    cdef dict position              # name -> index (owned)
    cdef readonly tuple runtime_names
    """tuple of str: The runtime (non-constexpr) parameters, in order."""
    cdef Py_ssize_t nruntime
    cdef Py_ssize_t* runtime_pos    # PyMem array: parameter index of each runtime parameter
    cdef bint runtime_leading       # the runtime parameters are exactly the first nruntime
    cdef bytes writable             # per runtime parameter: 1 where a read-only array is refused
    cdef readonly tuple writable_names
    """tuple of str: The parameters the kernel writes (``writable=``)."""
    cdef readonly dict reasons
    """dict: Why a key goes through Triton's own launch (LaunchKey -> one line)."""
    cdef frozenset option_names     # launch options Triton takes as keywords (num_warps, ...)
    cdef dict entries               # LaunchKey -> CompiledLaunch, or the fallback marker (owned)
    cdef dict interned              # hashable constexpr / option values -> small ints (owned)
    cdef object last_mode           # Triton's instrumentation mode last seen, and its id
    cdef int64_t last_mode_id
    cdef object prepare_hook        # _triton.py: bring Triton's driver up (first call)
    cdef object compile_hook        # _triton.py: compile on a key miss
    cdef object own_launch          # _triton.py: Triton's own launch (conversions to torch)
    cdef object runtime_knobs       # triton.knobs.runtime: its launch hooks and debug flag
    cdef object compilation_knobs   # triton.knobs.compilation: its instrumentation mode
    cdef object enter_hooks         # the HookChain launch_enter_hook held when wrapped
    cdef object exit_hooks
    cdef list enter_calls           # their call lists (non-empty: a profiler is listening)
    cdef list exit_calls
    cdef object get_device          # torch's current device and current raw stream (Triton's
    cdef object get_stream          # own choice of device and stream), set on the first compile
    cdef readonly bint always_own
    """bool: Every call goes through Triton's own launch (autotuned or heuristics kernels, or a
    kernel whose layout is not known)."""

    cdef object call(self, object grid, tuple args, dict kwargs, object stream)
    cdef object _scratch(self, CompiledLaunch c, const unsigned int* g, intptr_t stream,
                         bint profile)
    cdef bint _hooks_active(self) except -1
    cdef dict _meta(self, tuple args, dict kwargs)
    cdef int64_t _intern(self, object value) except -1
    cdef LaunchArgs _bind_and_key(self, tuple args, dict kwargs, object stream, bint key_only,
                                  intptr_t* stream_out, int* device_out)
