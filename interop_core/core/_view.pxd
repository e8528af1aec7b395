from cpython.object cimport PyObject
from libc.stdint cimport intptr_t, uintptr_t

from ._record cimport ViewRecord


# A keep-alive taken on first use of the memory (interop_core.h: `deferred_keepalive`).  A
# reader whose hold costs more than the rest of its read (jax's external reference on a buffer)
# hands the view one of these instead: the view's metadata is exact from the start, and the
# hold is taken, once, before anything uses the memory -- its address read, an export, a copy,
# a launch.  `acquire` then fails with a BufferError where the memory is gone (a jax array
# deleted or donated in between): no use ever reaches freed memory.
ctypedef int (*acquire_keepalive_t)(PyObject* state, PyObject** held) noexcept

cdef class DeferredKeepalive:
    cdef acquire_keepalive_t acquire  # the plugin's: 0 and `held` a new reference, or -1 with
                                      # an exception set; called with the GIL held
    cdef object state                 # owned: what `acquire` reads (the plugin's own object)
    cdef object held                  # owned: what `acquire` returned; None until first use
    cdef int take(self) except -1


cdef class StridedMemoryView:
    cdef ViewRecord rec          # pointer, extents, dtype, device; owned by this object
    cdef readonly object owner   # the object the view was made from (what a user handed us)
    """object: The object the view was made from; kept alive as long as the view."""
    cdef object _keepalive       # what actually keeps the memory alive: a DLPack holder, a
                                 # buffer holder, or the owner itself; released when the view dies
    # Caches for .dtype / .shape / .strides / .strides_in_bytes, built on first read: a view's
    # metadata never changes once it is returned, so launchers reading it on every call pay for
    # one object per view.  Owned references, NULL until first read, released when the view dies
    # (_release_and_dealloc in _view.pyx).
    # Raw pointers rather than object fields: an object field starts as None, and the None
    # reference counting of four more fields on every view's creation and death cost more than
    # the reader itself (a chain of dependent writes to one counter).  They can hold only a numpy
    # dtype and tuples of ints, which never refer back to a view, so the garbage collector need
    # not see them.
    cdef PyObject* _numpy_dtype
    cdef PyObject* _shape
    cdef PyObject* _strides
    cdef PyObject* _strides_in_bytes
    cdef object __weakref__


cdef class Buffer:
    cdef readonly uintptr_t ptr      # address of the first byte
    """int: Address of the first byte."""
    cdef readonly Py_ssize_t size    # bytes
    """int: Length in bytes."""
    cdef readonly int device_type    # DLDeviceType
    """int: DLPack device type (1 CPU, 2 CUDA, 3 CUDA pinned host, 13 CUDA managed)."""
    cdef readonly int device_id
    """int: Device ordinal (0 for host memory)."""
    cdef readonly object owner       # keeps the memory alive; referenced for the Buffer's life
    """object: Kept alive as long as the buffer and every view made from it."""


# A new empty view (record initialised, no owner).  Readers fill view.rec directly.
cdef StridedMemoryView view_new()

# Replace `cls`'s staticmethod wrappers of builtin functions by the functions themselves (the
# same callables for the class and its instances, found without a descriptor call).
cdef int plain_static_methods(type cls) except -1


# The generic exchange protocols, in the order from_any tries them.
cdef enum Protocol:
    PROTOCOL_NONE = 0
    PROTOCOL_SELF = 1               # already a StridedMemoryView
    PROTOCOL_DLPACK = 2             # C exchange API when the type has it, else __dlpack__
    PROTOCOL_CAI = 3
    PROTOCOL_ARRAY_INTERFACE = 4
    PROTOCOL_BUFFER = 5

# Which protocol `obj` offers (PROTOCOL_NONE when none); looks at the object, caches nothing.
cdef int choose_protocol(object obj) except -1

# The protocol StridedMemoryView.from_any chooses for `obj` (choose_protocol, cached per type
# for the types that offer one).
cdef int protocol_for_any(object obj) except -1

# A view of `obj` through `protocol` (not PROTOCOL_NONE).
cdef object view_by_protocol(int protocol, object obj, object stream)

# Whether the view's producer stream is known: recorded, else asked of the owner's plugin
# strategy (and then recorded).  Host memory: False.
cdef bint knows_producer_stream(StridedMemoryView v) except -1

# Order `consumer` after the view's producer: its recorded producer stream, else the stream the
# owner's plugin reports (and then recorded).  Unknown producers: nothing to do.  Host memory:
# no stream, but the owner's plugin strategy is asked (a producer with asynchronous host work,
# jax on the CPU, finishes it there).
cdef int order_view(StridedMemoryView v, intptr_t consumer) except -1


# copies._copy.copy_views, which that module installs here as it is imported (it imports this
# module, so this one cannot import it at load time): copy_to / copy_from call it directly, as
# a C function, once the copies module is loaded and both sides are already views.
ctypedef int (*copy_views_t)(StridedMemoryView dst, StridedMemoryView src,
                             object stream) except -1
cdef void install_copy_views(copy_views_t copy) noexcept


# What StridedMemoryView.from_dlpack / from_cuda_array_interface / from_array_interface /
# from_buffer_protocol do for `protocol`, and from_any for PROTOCOL_NONE (`stream` ignored for
# the two host protocols): for compiled callers (interop_core.compat).
cdef object view_through(int protocol, object obj, object stream)

# The registry's exact-type fast path for the from_* classmethods (registry._registry installs
# view_if_equivalent here as it is imported: it imports this module, so this one cannot import
# it).  Returns the view a registered reader makes when its plugin declared it equivalent to
# `protocol` (PROTOCOL_NONE: the protocol from_any would choose), or None for the protocol path.
ctypedef object (*fast_from_t)(object obj, object stream, int protocol)
cdef void install_fast_from(fast_from_t fast_from) noexcept


# Error handling off the success path.  A `try` block saves and restores the thread's exception
# state on every call, failed or not; a hot path calls the function that may raise as a C
# function returning PyObject* (NULL: raised) outside any `try`, and hands a NULL to a cold
# function whose `try: raise_pending() except ...:` clauses see the exception already set.
cdef extern from *:
    """
    static inline int ic_raise_pending(void) { return -1; }
    """
    int raise_pending "ic_raise_pending"() except -1


# Before the memory of `v` is used (its address handed out, exported, copied, launched on):
# takes a deferred keep-alive (DeferredKeepalive) if the view has one not yet taken.  A type
# comparison for every other view.
cdef inline int hold_memory(StridedMemoryView v) except -1:
    if type(v._keepalive) is DeferredKeepalive:
        if (<DeferredKeepalive> v._keepalive).held is None:
            return (<DeferredKeepalive> v._keepalive).take()
    return 0

# Before a view's memory is exported or copied: ValueError for a view that describes no memory
# (no element type: cuda.core's StridedMemoryView() with no arguments; address 0 for its
# elements), naming `what` is refused.  Two comparisons for every other view.
cdef int refuse_no_memory(StridedMemoryView v, str what) except -1

cdef inline int check_describes_memory(StridedMemoryView v, str what) except -1:
    if v.rec.itemsize <= 0 or v.rec.ptr == 0:
        return refuse_no_memory(v, what)
    return 0

# What keeps the memory behind a reader's keep-alive alive once it is used: a deferred one is
# taken first (its hold returned); a view's deferred keep-alive likewise; anything else as is.
cdef inline object used_keepalive(object keepalive):
    if type(keepalive) is DeferredKeepalive:
        if (<DeferredKeepalive> keepalive).held is None:
            (<DeferredKeepalive> keepalive).take()
        return (<DeferredKeepalive> keepalive).held
    return keepalive

# A new DeferredKeepalive (the ABI's `deferred_keepalive`): a new reference, or NULL with an
# exception set.
cdef PyObject* new_deferred_keepalive(acquire_keepalive_t acquire, PyObject* state) except NULL

# (device_type, device_id) from a ``device=`` argument: "cpu", "cuda:1", ..., str()-able objects
# (torch.device), DLPack pairs; every device= of the package is parsed here.
cdef tuple parse_device(object device)
