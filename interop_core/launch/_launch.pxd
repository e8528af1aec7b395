# The launch path: N arguments -> specialization key, pointer arrays and consumer stream, in one
# compiled call (see _launch.pyx).

from libc.stdint cimport uint8_t, uint64_t

from ..core._record cimport ViewRecord


cdef class LaunchArgs:
    cdef Py_ssize_t n
    cdef void* block               # one PyMem block holding the arrays below; owned, freed on
                                   # dealloc (or kept as the module's spare block)
    cdef size_t block_size         # its size in bytes (at least what the n arguments need)
    cdef ViewRecord* recs          # n records (tensors filled, others left initialised)
    cdef uint64_t* values          # n slots: a tensor's data pointer, a scalar's value, 0 for None
    cdef void** pointers           # n: data pointer (tensors), &values[i] (scalars), NULL (None)
    cdef void** params             # n: &values[i] for every argument (cuLaunchKernel's form)
    cdef uint8_t* kinds            # n: ARG_* of each argument
    cdef uint8_t* ctypes           # n: the C type a scalar is stored as (CT_*), 0 otherwise
    cdef readonly tuple args       # the arguments as given: keeps every owner alive
    """tuple: The arguments as given (kept alive as long as the record)."""
    cdef tuple _keepalives         # per argument, what its reader returned when that is not the
                                   # argument itself (a DLPack holder, a view); None entries
                                   # otherwise; the whole tuple None when no argument needed one
    cdef readonly object key
    """LaunchKey or None: The specialization key (``None`` with ``key=None``)."""
    cdef readonly object stream
    """int or None: The consumer stream handle, every producer ordered before it; ``None``
    when no stream was given."""
    cdef tuple _views              # built on first read of .views; owned
    cdef str _caller               # who asked, for error messages ("launch_args" when None)
    cdef tuple _names              # the arguments' names for error messages (None: positions)

    cdef int _allocate(self, Py_ssize_t n) except -1
    cdef int _keep(self, Py_ssize_t i, object keepalive) except -1
    cdef int _take_deferred(self) except -1
    cdef object _slot_view(self, void** slots)
    cdef str _label(self, Py_ssize_t i, bint prefix=*)


# launch_args() for compiled callers (@viewable): `policy` is a core._key KeyPolicy value.
# `caller` and `names` only change error messages ("f(): argument 'x'" rather than
# "launch_args: argument 0").
# `in_call`: the record never leaves the caller's call and its memory is used before that call
# returns (a Triton launch): a reader's deferred keep-alive stays deferred in the record, and the
# caller calls _take_deferred() before anything runs Python code between the read and the launch
# (a compilation, an allocator): a read ends with the memory's state the launch may rely on only
# while no Python code runs (jax: delete() in another thread, a finalizer).
cdef LaunchArgs build_launch_args(object args, object stream, int policy, object writable,
                                  bint same_device, object scalar_types, str caller=*,
                                  tuple names=*, bint in_call=*)

# The KeyPolicy for a `key=` argument ("static", "dynamic" or None); ValueError otherwise.
cdef int key_policy(object key) except -1

# "module.QualName" of obj's type ("int" for builtins), for messages naming an argument's type.
cdef str type_name(object obj)


# What each argument of a LaunchArgs is (its `kinds` entry).
cdef enum:
    ARG_TENSOR = 1
    ARG_SCALAR = 2
    ARG_NONE = 3

# The C type a scalar is stored as (its `ctypes` entry; codes also packed into keys), numbered as
# SCALAR_TYPES is ordered, from 1.
cdef enum:
    CT_BOOL = 1
    CT_INT8 = 2
    CT_INT16 = 3
    CT_INT32 = 4
    CT_INT64 = 5
    CT_UINT8 = 6
    CT_UINT16 = 7
    CT_UINT32 = 8
    CT_UINT64 = 9
    CT_FLOAT16 = 10
    CT_FLOAT32 = 11
    CT_FLOAT64 = 12

# Bytes a scalar of C type `ctype` (a CT_* code) takes; 0 for anything else.
cdef inline int ctype_size(int ctype) noexcept nogil:
    if ctype == CT_BOOL or ctype == CT_INT8 or ctype == CT_UINT8:
        return 1
    if ctype == CT_INT16 or ctype == CT_UINT16 or ctype == CT_FLOAT16:
        return 2
    if ctype == CT_INT32 or ctype == CT_UINT32 or ctype == CT_FLOAT32:
        return 4
    if ctype == CT_INT64 or ctype == CT_UINT64 or ctype == CT_FLOAT64:
        return 8
    return 0

# "cuda:0", "cpu:0", "cuda_host:0" ... for messages naming where an argument's memory is.
cdef str device_label(const ViewRecord* rec)
