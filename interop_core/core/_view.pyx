# StridedMemoryView and Buffer: the Python objects over a ViewRecord.
#
# This module owns the objects and their properties; it never parses an exchange protocol
# itself.  Each protocol module (_dlpack, _interfaces) fills a view's record on the way in and
# reads it on the way out.

from . cimport _refcount  # 64-bit reference-count increments: see the file
cimport cython
from cpython.buffer cimport Py_buffer, PyObject_CheckBuffer
from cpython.number cimport PyNumber_Index
from cpython.pycapsule cimport PyCapsule_CheckExact
from cpython.exc cimport PyErr_Occurred
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from cpython.object cimport PyObject, PyTypeObject, destructor
from cpython.type cimport PyType_Modified
from libc.stdint cimport INT32_MAX, int32_t, int64_t, intptr_t, uintptr_t

from ..cuda._cuda cimport order_streams, pointer_device
from ..protocols._dlpack cimport (
    exchange_api_capsule,
    export_dlpack,
    export_dlpack_device,
    has_exchange_api,
    read_dlpack,
    read_dlpack_capsule,
    read_dlpack_exchange_api,
    register_view_type,
)
from ._dlpack_abi cimport (
    DLDataType,
    kDLCPU,
    kDLCUDA,
    kDLCUDAHost,
    kDLCUDAManaged,
    kDLOneAPI,
    kDLROCM,
    kDLROCMHost,
)
from ._dtypes cimport (
    dtype_from_object,
    dtype_itemsize,
    describe_dtype,
    dtype_to_numpy,
    record_set_dtype,
)
from ..protocols._interfaces cimport (
    export_array_interface,
    export_buffer,
    export_cuda_array_interface,
    read_array_interface,
    read_buffer_protocol,
    read_cuda_array_interface,
    release_buffer,
)
from ._key cimport key_of_record
from ._layout cimport (
    StridedLayout,
    extents_getitem,
    extents_offset_bounds,
    extents_shape_tuple,
    extents_strides_tuple,
    extents_validate,
    extents_volume,
    layout_from_extents,
)
from ._record cimport (
    MAX_CACHED_TYPES,
    Extents,
    ViewRecord,
    extents_copy,
    extents_free,
    extents_init,
    extents_resize,
    record_init,
)
from ..cuda._streams cimport resolve_stream

__all__ = ["StridedMemoryView", "Buffer", "DeferredKeepalive"]

_DEVICE_NAMES = {
    kDLCPU: "cpu", kDLCUDA: "cuda", kDLCUDAHost: "cuda_host", kDLCUDAManaged: "cuda_managed",
    kDLROCM: "rocm", kDLROCMHost: "rocm_host", kDLOneAPI: "oneapi",
}
_DEVICE_BY_NAME = {name: code for code, name in _DEVICE_NAMES.items()}
cdef enum:
    # dlpack.h's DLDeviceType: kDLCPU (1) .. kDLTrn (18); 5 and 6 are unused.
    _DLPACK_FIRST_DEVICE = 1
    _DLPACK_LAST_DEVICE = 18


cdef inline bint _host_accessible(int32_t device_type) noexcept nogil:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLCUDAManaged or device_type == kDLROCMHost)


cdef inline bint _device_accessible(int32_t device_type) noexcept nogil:
    return device_type != kDLCPU


cdef inline PyObject* _cache(object value):
    # A new reference for one of a view's raw cache slots (see _view.pxd).
    Py_INCREF(value)
    return <PyObject*> value


cdef StridedMemoryView view_new():
    return StridedMemoryView.__new__(StridedMemoryView)


cdef StridedMemoryView _derived_view(StridedMemoryView base):
    """A new view sharing `base`'s memory, owner and keep-alive; extents left for the caller."""
    cdef StridedMemoryView v = view_new()
    v.rec.ptr = base.rec.ptr
    v.rec.dtype = base.rec.dtype
    v.rec.itemsize = base.rec.itemsize
    v.rec.device_type = base.rec.device_type
    v.rec.device_id = base.rec.device_id
    v.rec.readonly = base.rec.readonly
    v.rec.has_producer_stream = base.rec.has_producer_stream
    v.rec.producer_stream = base.rec.producer_stream
    v.owner = base.owner
    v._keepalive = base._keepalive
    return v


# --- one function per protocol, shared by the from_* classmethods and from_any -----------------

cdef StridedMemoryView _view_dlpack(object obj, object stream):
    cdef StridedMemoryView v = view_new()
    cdef type t = type(obj)
    if PyCapsule_CheckExact(obj):
        _stream_checked(stream)
        v._keepalive = read_dlpack_capsule(obj, &v.rec)
    elif has_exchange_api(t):
        v._keepalive = read_dlpack_exchange_api(obj, stream, &v.rec)
    else:
        v._keepalive = read_dlpack(obj, stream, &v.rec)
    v.owner = obj
    return v


cdef StridedMemoryView _view_cai(object obj, object stream):
    cdef StridedMemoryView v = view_new()
    cdef intptr_t consumer = 0
    v._keepalive = read_cuda_array_interface(obj, stream, &v.rec)
    v.owner = obj
    # CUDA Array Interface v3: the consumer must wait on the interface's stream.
    if resolve_stream(stream, &consumer):
        order_view(v, consumer)
    return v


# Set by interop_core.registry._registry: owner -> the producer stream its plugin reports, or None.
cdef object _producer_stream_lookup = None


def _set_producer_stream_lookup(lookup):
    global _producer_stream_lookup
    _producer_stream_lookup = lookup


cdef bint knows_producer_stream(StridedMemoryView v) except -1:
    # Core readers record the producer's stream as the view is made; for the rest, the owner's
    # plugin strategy is asked on first need (ordering, an export) and its answer recorded.
    if v.rec.has_producer_stream:
        return True
    if v.rec.device_type == kDLCPU or _producer_stream_lookup is None:
        return False
    producer = _producer_stream_lookup(v.owner)
    if producer is None:
        return False        # the producer named no stream: nothing pending to order after
    v.rec.producer_stream = <intptr_t> producer
    v.rec.has_producer_stream = True
    return True


cdef int order_view(StridedMemoryView v, intptr_t consumer) except -1:
    if v.rec.device_type != kDLCPU:
        if knows_producer_stream(v):
            order_streams(v.rec.producer_stream, consumer, v.rec.device_id)
    elif not v.rec.has_producer_stream and _producer_stream_lookup is not None:
        # Host memory has no stream to order on, but a producer with asynchronous host work
        # (jax on the CPU) finishes it when its plugin's strategy is asked; the answer is None.
        _producer_stream_lookup(v.owner)
    return 0


# Set by interop_core._registry: type -> whether a plugin declared its objects immutable.
cdef object _readonly_type_lookup = None


def _set_readonly_type_lookup(lookup):
    global _readonly_type_lookup
    _readonly_type_lookup = lookup


cdef StridedMemoryView _declared_readonly(StridedMemoryView v, object obj):
    # The generic entry points read what the protocol says; a protocol without a read-only flag
    # (a legacy DLPack capsule) cannot say that a framework's arrays are immutable (jax's), so
    # the type's plugin declaration is consulted too.  A bare capsule has no type to ask about.
    if not v.rec.readonly and _readonly_type_lookup is not None and \
            not PyCapsule_CheckExact(obj) and _readonly_type_lookup(type(obj)):
        v.rec.readonly = True
    return v


cdef StridedMemoryView _view_array_interface(object obj):
    cdef StridedMemoryView v = view_new()
    v._keepalive = read_array_interface(obj, &v.rec)
    v.owner = obj
    return v


cdef StridedMemoryView _view_buffer_protocol(object obj):
    cdef StridedMemoryView v = view_new()
    v._keepalive = read_buffer_protocol(obj, &v.rec)
    v.owner = obj
    return v


cdef object _stream_checked(object stream):
    # Validate the argument everywhere, even where no ordering is needed yet.
    cdef intptr_t handle
    resolve_stream(stream, &handle)
    return stream


cdef tuple parse_device(object device):
    """(device_type, device_id) from "cpu", "cuda", "cuda:1", ..., an object whose str() is such
    a name (torch.device), or a DLPack (device_type, device_id) pair of ints: the one parser of
    every ``device=`` the package takes."""
    if isinstance(device, tuple) and len(device) == 2:
        kind, ordinal = device
        if (not isinstance(kind, int) or not isinstance(ordinal, int) or isinstance(kind, bool)
                or isinstance(ordinal, bool)):
            raise TypeError(f"device tuple must hold two ints, got {device!r}")
        kind = int(kind)            # an IntEnum (DLDeviceType) as its value
        ordinal = int(ordinal)
    elif device is None or isinstance(device, (tuple, list, int, float)):
        raise TypeError(
            f"device must be a string like 'cuda:0' or a (device_type, device_id) tuple, got "
            f"{device!r}")
    else:
        text = device if isinstance(device, str) else str(device)   # torch.device and alike
        name, colon, index = text.partition(":")
        if name not in _DEVICE_BY_NAME:
            raise ValueError(
                f"unknown device {device!r}; expected one of {sorted(_DEVICE_BY_NAME)} "
                "optionally followed by ':<ordinal>', or a (device_type, device_id) pair")
        # Digits only, as torch and jax write ordinals: not "cuda:", " 1", "+1" or "01".
        if colon and not (index.isascii() and index.isdigit()
                          and (index == "0" or index[0] != "0")):
            raise ValueError(f"device ordinal in {device!r} is not a non-negative integer "
                             "written in decimal digits")
        ordinal = int(index) if colon else 0
        kind = _DEVICE_BY_NAME[name]
    if not _DLPACK_FIRST_DEVICE <= kind <= _DLPACK_LAST_DEVICE or kind in (5, 6):
        raise ValueError(f"device {device!r}: {kind} is not a DLPack device type")
    if not 0 <= ordinal <= INT32_MAX:
        raise ValueError(f"device {device!r}: the ordinal must be >= 0 and fit in int32, got "
                         f"{ordinal}")
    if (kind == kDLCPU or kind == kDLCUDAHost or kind == kDLROCMHost) and ordinal != 0:
        raise ValueError(
            f"device {device!r}: host memory is one device, DLPack ({kind}, 0); ordinal "
            f"{ordinal} names none.  Several host devices are a framework's own (jax's "
            f"forced host devices): that framework places onto them, e.g. "
            f"to(x, 'jax', device=jax.devices('cpu')[{ordinal}])")
    return (kind, ordinal)


# Out of the garbage collector: it refers to a plugin's state and hold, never to a view (the
# ABI says so), so it is never part of a cycle, and views of such producers made in a loop
# do not add to the collector's counts.
@cython.final
@cython.no_gc
cdef class DeferredKeepalive:
    """What keeps a view's memory alive, taken when the memory is first used.

    A plugin's reader hands one out (the C ABI's ``deferred_keepalive``) where holding the
    memory costs more than describing it -- jax's external reference on a buffer, which jax's
    ``delete()`` and donation respect, costs about as much as jax's own ``__dlpack__()``.  The
    view is exact from the start (address, shape, strides, dtype, device); before anything uses
    the memory -- ``ptr``, every export, copies, ``to()``, ``launch_args`` -- the hold is
    taken, once, for the view and every view sliced from it.  If the producer freed the memory
    in between (a jax array deleted or donated), that use raises ``BufferError``: nothing ever
    reads freed memory.  Never made by hand.
    """

    def __init__(self):
        raise TypeError("DeferredKeepalive objects are made by plugins' readers")

    cdef int take(self) except -1:
        cdef PyObject* out = NULL
        if self.held is not None:
            return 0
        if self.acquire(<PyObject*> self.state, &out) != 0:
            Py_XDECREF(out)
            if PyErr_Occurred() == NULL:
                raise SystemError("a plugin's deferred keep-alive failed without an exception")
            return -1
        if out == NULL:
            raise SystemError("a plugin's deferred keep-alive returned no object")
        held = <object> out
        Py_DECREF(held)     # <object> took a reference of its own; `out` was a new one
        self.held = held
        return 0

    @property
    def taken(self):
        """bool: Whether the hold was taken (the memory has been used through a view)."""
        return self.held is not None

    def __repr__(self):
        return (f"<interop_core DeferredKeepalive: "
                f"{'taken: ' + repr(self.held) if self.held is not None else 'not taken yet'}>")


cdef PyObject* new_deferred_keepalive(acquire_keepalive_t acquire, PyObject* state) except NULL:
    # Called by plugins through the ABI table with the GIL held (NULL with an exception set).
    if acquire == NULL or state == NULL:
        raise TypeError("deferred_keepalive needs an acquire function and a state object")
    cdef DeferredKeepalive k = DeferredKeepalive.__new__(DeferredKeepalive)
    k.acquire = acquire
    k.state = <object> state
    Py_INCREF(k)
    return <PyObject*> k


cdef class Buffer:
    """A span of memory: address, size in bytes, device, and the object that keeps it alive.

    Build one with :meth:`Buffer.from_handle`; turn it into a typed view with
    :meth:`StridedMemoryView.from_buffer`.
    """

    def __init__(self):
        raise TypeError("use Buffer.from_handle(ptr, size, owner=..., device=...)")

    @staticmethod
    def from_handle(ptr, size, owner=None, device=None):
        """Wrap external memory.

        Parameters
        ----------
        ptr : int
            Address of the first byte.
        size : int
            Length in bytes (>= 0).
        owner : object, optional
            Kept alive as long as this buffer and every view made from it.  Pass the object
            that owns the allocation; with ``None`` the caller guarantees the memory outlives
            every view.
        device : None, str or tuple, optional
            ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"cuda_host"``, ``"cuda_managed"``, or a
            DLPack ``(device_type, device_id)`` pair.  ``None`` (the default) asks the CUDA
            driver where ``ptr`` lives (device, managed or pinned host memory) and means host
            memory when there is no driver or the driver does not know the pointer.

        Returns
        -------
        Buffer
        """
        if not isinstance(ptr, int) or isinstance(ptr, bool):
            raise TypeError(f"ptr must be an int address, got {type(ptr).__name__}")
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"size must be an int, got {type(size).__name__}")
        if ptr < 0 or ptr >= 2 ** 64:
            raise ValueError(f"ptr {ptr:#x} is not a valid address")
        if not 0 <= size < 2 ** 63:
            raise ValueError(f"size must be >= 0 and fit in int64, got {size}")
        if ptr == 0 and size != 0:
            raise ValueError(f"ptr is a null pointer, but size is {size} bytes")
        if ptr + size > 2 ** 64:
            raise ValueError(f"ptr {ptr:#x} with size {size} reaches past the end of the "
                             "address space")
        cdef Buffer b = Buffer.__new__(Buffer)
        b.ptr = ptr
        b.size = size
        cdef int32_t device_type = kDLCPU, device_id = 0
        if device is None:
            pointer_device(<uintptr_t> ptr, &device_type, &device_id)
            b.device_type, b.device_id = device_type, device_id
        else:
            b.device_type, b.device_id = parse_device(device)
        b.owner = owner
        return b

    def __repr__(self):
        device = _DEVICE_NAMES.get(self.device_type, str(self.device_type))
        return (f"Buffer(ptr={self.ptr:#x}, size={self.size}, device='{device}:{self.device_id}', "
                f"owner={type(self.owner).__name__})")


# Views are made and dropped once per call on every hot path (view(), to(), the launch path's
# fallbacks): a small freelist hands the last few dead views' memory to the next ones instead of
# a trip through the object allocator and the garbage collector's bookkeeping each (about 190
# instructions of the ~860 a view of a numpy array took on Python 3.12).  Cython keeps Python
# subclasses (heap types) off it.
@cython.freelist(16)
cdef class StridedMemoryView:
    """A zero-copy, strided view of memory owned by another object.

    A view records where element 0 is (``ptr``), the shape and strides (in elements), the
    element type (a DLPack triple, with a numpy ``dtype`` on demand), the device, whether it is
    read-only, and the object that keeps the memory alive (``owner``).  It never copies.

    Build views with :meth:`from_any`, :meth:`from_dlpack`, :meth:`from_cuda_array_interface`,
    :meth:`from_array_interface`, :meth:`from_buffer_protocol` or :meth:`from_buffer`.  Hand
    them on through ``__dlpack__``, ``__cuda_array_interface__``, ``__array_interface__`` or the
    buffer protocol: every export keeps the owner alive until its consumer lets go.
    """

    def __cinit__(self):
        record_init(&self.rec)

    # No __dealloc__: a view's own resources are released by _release_and_dealloc (below).

    def __init__(self, *args, **kwargs):
        raise TypeError("use StridedMemoryView.from_any(obj) or another from_* constructor")

    # --- construction ---------------------------------------------------------------------

    @staticmethod
    def from_dlpack(obj, stream=None):
        """View an object through the DLPack protocol.

        Uses the type's DLPack C exchange API when it publishes one, else ``obj.__dlpack__``.
        A bare DLPack capsule is accepted too (and consumed).  When a plugin declared its
        reader of ``type(obj)`` equivalent to DLPack (same pointer, layout, dtype, device,
        read-only flag and stream ordering), that reader reads instead, as :func:`view` does.

        Parameters
        ----------
        obj : object
            An object with ``__dlpack__`` (or a ``dltensor`` / ``dltensor_versioned`` capsule).
        stream : None, int or stream object, optional
            The consumer stream.  ``None`` or ``-1``: no synchronisation.  Otherwise it is
            passed to the producer, which orders its pending work before that stream.

        Returns
        -------
        StridedMemoryView
        """
        if _fast_from != NULL:
            fast = _fast_from(obj, stream, PROTOCOL_DLPACK)
            if fast is not None:
                return fast
        return _through_protocol(PROTOCOL_DLPACK, obj, stream)

    @staticmethod
    def from_cuda_array_interface(obj, stream=None):
        """View an object through ``__cuda_array_interface__`` (v2 or v3).

        The interface's ``stream`` field is kept as :attr:`producer_stream`.  A plugin reader
        declared equivalent to the interface (same stream semantics included) reads instead.

        Parameters
        ----------
        obj : object
            An object with a ``__cuda_array_interface__`` dict.
        stream : None, int or stream object, optional
            The consumer stream (validated; see the stream contract).

        Returns
        -------
        StridedMemoryView
        """
        if _fast_from != NULL:
            fast = _fast_from(obj, stream, PROTOCOL_CAI)
            if fast is not None:
                return fast
        return _through_protocol(PROTOCOL_CAI, obj, stream)

    @staticmethod
    def from_array_interface(obj):
        """View host memory through NumPy's ``__array_interface__`` (v3).

        A plugin reader declared equivalent to the interface reads instead.

        Parameters
        ----------
        obj : object
            An object with an ``__array_interface__`` dict.

        Returns
        -------
        StridedMemoryView
        """
        if _fast_from != NULL:
            fast = _fast_from(obj, None, PROTOCOL_ARRAY_INTERFACE)
            if fast is not None:
                return fast
        return _through_protocol(PROTOCOL_ARRAY_INTERFACE, obj, None)

    @staticmethod
    def from_buffer_protocol(obj):
        """View host memory through the Python buffer protocol.

        The exported buffer is held (and released) by the view.  A plugin reader declared
        equivalent to the buffer protocol reads instead (the view then holds ``obj``).

        Parameters
        ----------
        obj : object
            Anything ``memoryview(obj)`` accepts.

        Returns
        -------
        StridedMemoryView
        """
        if _fast_from != NULL:
            fast = _fast_from(obj, None, PROTOCOL_BUFFER)
            if fast is not None:
                return fast
        return _through_protocol(PROTOCOL_BUFFER, obj, None)

    @staticmethod
    def from_any(obj, stream=None):
        """View any supported object, trying the exchange protocols in a fixed order.

        The order is: a ``StridedMemoryView`` itself, the DLPack C exchange API, ``__dlpack__``,
        ``__cuda_array_interface__``, ``__array_interface__``, the buffer protocol.  The
        choice is cached per type.  A plugin reader declared equivalent to the chosen protocol
        reads instead.

        Parameters
        ----------
        obj : object
            The tensor-like object.
        stream : None, int or stream object, optional
            The consumer stream; ``None`` or ``-1`` for no synchronisation.

        Returns
        -------
        StridedMemoryView

        Raises
        ------
        TypeError
            If no protocol applies; the message names the type and what was tried.
        """
        if _fast_from != NULL:
            fast = _fast_from(obj, stream, PROTOCOL_NONE)
            if fast is not None:
                return fast
        return _through_protocol(PROTOCOL_NONE, obj, stream)

    @classmethod
    def from_pointer(cls, ptr, shape, strides=None, dtype="uint8", *, device=None,
                     readonly=False, owner=None):
        """A view of memory described piece by piece (the fast constructor for plugin readers).

        Nothing is checked against an allocation: the caller vouches that every element the
        shape and strides reach is valid memory owned by ``owner``.  Only an empty view may
        have address 0.

        Parameters
        ----------
        ptr : int
            Address of element 0.
        shape : tuple of int
            Extent of each dimension (at most 64).
        strides : tuple of int, optional
            Step of each dimension in elements; ``None`` means C-contiguous.
        dtype : optional
            Element type: numpy dtype, name (``"float32"``, ``"bfloat16"``) or DLPack triple.
        device : None, str or tuple, optional
            As for :meth:`Buffer.from_handle`; ``None`` means host memory.
        readonly : bool
            Whether writes through the view are forbidden.
        owner : object, optional
            Kept alive as long as the view and everything derived from it.

        Returns
        -------
        StridedMemoryView

        Raises
        ------
        ValueError
            For address 0 with elements, an address outside 0 to 2**64, a negative extent, or
            a shape and strides whose offsets leave the int64 range.
        """
        cdef StridedMemoryView v = view_new()
        cdef DLDataType dt
        cdef int i, ndim
        cdef int64_t stride = 1
        if not isinstance(ptr, int) or isinstance(ptr, bool):
            raise TypeError(f"ptr must be an int address, got {type(ptr).__name__}")
        if ptr < 0 or ptr >= 2 ** 64:
            raise ValueError(f"ptr {ptr:#x} is not a valid address")
        shape = tuple(shape)
        ndim = len(shape)
        if strides is not None:
            strides = tuple(strides)
            if len(strides) != ndim:
                raise ValueError(f"strides has {len(strides)} entries but shape has {ndim}")
        extents_resize(&v.rec.ext, ndim)
        for i in range(ndim - 1, -1, -1):
            if shape[i] < 0:
                raise ValueError(f"shape entries must be >= 0, got {shape}")
            v.rec.ext.shape[i] = shape[i]
            if strides is None:
                v.rec.ext.strides[i] = stride
                stride *= shape[i] if shape[i] > 0 else 1
            else:
                v.rec.ext.strides[i] = strides[i]
        if extents_volume(&v.rec.ext) < 0:
            raise ValueError(f"shape {shape} has more elements than fit in 64 bits")
        dtype_from_object(dtype, &dt)
        record_set_dtype(&v.rec, dt, True)
        extents_validate(&v.rec.ext, v.rec.itemsize, 0)
        if ptr == 0 and extents_volume(&v.rec.ext) != 0:
            raise ValueError(f"ptr is 0 (a null address) for a view of shape {shape}: only an "
                             "empty view may have no memory")
        v.rec.ptr = ptr
        if device is not None:
            v.rec.device_type, v.rec.device_id = parse_device(device)
        v.rec.readonly = bool(readonly)
        v.owner = owner
        v._keepalive = owner
        return v

    @staticmethod
    def from_buffer(Buffer buffer not None, StridedLayout layout not None, dtype=None):
        """A typed view of a :class:`Buffer`, after checking that the layout fits inside it.

        Parameters
        ----------
        buffer : Buffer
            The memory.  Its owner is kept alive by the view.
        layout : StridedLayout
            Shape and strides in elements; ``layout.slice_offset`` elements from the start of
            the buffer to element 0.
        dtype : optional
            Element type (numpy dtype, name such as ``"bfloat16"``, or DLPack triple).  Its
            itemsize must equal ``layout.itemsize``.  Default: the unsigned integer of that size.

        Returns
        -------
        StridedMemoryView

        Raises
        ------
        ValueError
            If the dtype's itemsize differs from the layout's, or any element of the layout
            falls outside the buffer.
        """
        cdef DLDataType dt
        cdef int64_t lo, hi
        # subbyte_padded=True here and below: a user-named sub-byte dtype (ml_dtypes float4,
        # int4...) means one element per byte, as ml_dtypes stores it.
        if dtype is None:
            if layout.itemsize not in (1, 2, 4, 8):
                raise TypeError(f"pass a dtype for itemsize {layout.itemsize}")
            dtype = (1, layout.itemsize * 8, 1)
        dtype_from_object(dtype, &dt)
        if dtype_itemsize(dt, True) != layout.itemsize:
            raise ValueError(
                f"dtype {describe_dtype(dt)} has itemsize {dtype_itemsize(dt, True)} but the layout "
                f"has itemsize {layout.itemsize}")
        if extents_volume(&layout.ext) != 0:
            extents_offset_bounds(&layout.ext, &lo, &hi)
            lo += layout.slice_offset
            hi += layout.slice_offset
            if lo < 0 or (hi + 1) * layout.itemsize > buffer.size:
                raise ValueError(
                    f"layout reaches bytes [{lo * layout.itemsize}, "
                    f"{(hi + 1) * layout.itemsize}) but the buffer has {buffer.size} bytes")
        cdef StridedMemoryView v = view_new()
        v.rec.ptr = buffer.ptr + layout.slice_offset * layout.itemsize
        extents_copy(&v.rec.ext, &layout.ext)
        record_set_dtype(&v.rec, dt, True)
        v.rec.device_type = buffer.device_type
        v.rec.device_id = buffer.device_id
        v.owner = buffer.owner
        v._keepalive = buffer
        return v

    # --- metadata --------------------------------------------------------------------------

    @property
    def ptr(self):
        """int: Address of element 0.

        Reading it counts as using the memory: a view whose plugin defers its hold (jax) takes
        the hold now, and raises ``BufferError`` if the producer freed the memory since the
        view was made (a jax array deleted or donated).
        """
        hold_memory(self)     # the address is handed out: the memory must be held from now
        return self.rec.ptr

    @property
    def shape(self):
        """tuple of int: Extent of each dimension."""
        if self._shape == NULL:
            self._shape = _cache(extents_shape_tuple(&self.rec.ext))
        return <object> self._shape

    @property
    def strides(self):
        """tuple of int: Step of each dimension, in elements (may be negative or zero)."""
        if self._strides == NULL:
            self._strides = _cache(extents_strides_tuple(&self.rec.ext, 1))
        return <object> self._strides

    @property
    def strides_in_bytes(self):
        """tuple of int: Step of each dimension, in bytes."""
        if self._strides_in_bytes == NULL:
            self._strides_in_bytes = _cache(
                extents_strides_tuple(&self.rec.ext, self.rec.itemsize))
        return <object> self._strides_in_bytes

    @property
    def key(self):
        """LaunchKey: This view's specialization key: dtype, shape, strides, device, read-only.

        Equal to ``interop_core.launch_args([self]).key`` (the ``"static"`` policy), and to the
        key of any other framework's tensor with the same properties.
        """
        return key_of_record(&self.rec)

    @property
    def ndim(self):
        """int: Number of dimensions."""
        return self.rec.ext.ndim

    @property
    def size(self):
        """int: Number of elements."""
        return extents_volume(&self.rec.ext)

    @property
    def nbytes(self):
        """int: ``size * itemsize``."""
        return extents_volume(&self.rec.ext) * self.rec.itemsize

    @property
    def itemsize(self):
        """int: Bytes per element."""
        return self.rec.itemsize

    @property
    def dtype(self):
        """numpy.dtype: The element type as numpy sees it (numpy imported on first use).

        bfloat16 and the float8/6/4 types need ``ml_dtypes``; a ``TypeError`` names what is
        missing.  :attr:`dlpack_dtype` is always available.
        """
        if self._numpy_dtype == NULL:
            self._numpy_dtype = _cache(dtype_to_numpy(self.rec.dtype))
        return <object> self._numpy_dtype

    @property
    def dlpack_dtype(self):
        """tuple: The DLPack ``(code, bits, lanes)`` triple, the source of truth for the type."""
        return (self.rec.dtype.code, self.rec.dtype.bits, self.rec.dtype.lanes)

    @property
    def device_type(self):
        """int: DLPack device type (1 CPU, 2 CUDA, 3 CUDA pinned host, 13 CUDA managed, ...)."""
        return self.rec.device_type

    @property
    def device_id(self):
        """int: Device ordinal (0 for host memory)."""
        return self.rec.device_id

    @property
    def is_device_accessible(self):
        """bool: Whether a GPU kernel can read this memory."""
        return _device_accessible(self.rec.device_type)

    @property
    def is_host_accessible(self):
        """bool: Whether the CPU can read this memory directly."""
        return _host_accessible(self.rec.device_type)

    @property
    def readonly(self):
        """bool: Whether the producer forbids writes through this view."""
        return self.rec.readonly

    @property
    def producer_stream(self):
        """int or None: The CUDA stream after whose enqueued work this memory is ready.

        Read as the view is made where the producer has one (torch's and cupy's current
        stream on the memory's device, the CUDA Array Interface's ``stream``), so a view
        remembers the stream that was current then; else the owner's plugin strategy is asked
        on first need; or the consumer stream a DLPack producer was asked to order itself
        before.  ``0`` is the legacy default stream.  ``None`` when unknown (host memory, or a
        producer that named no stream: no ordering is then possible or needed).
        """
        return self.rec.producer_stream if knows_producer_stream(self) else None

    @property
    def _recorded_producer_stream(self):
        # For exporters that bind their result to the producer's stream where it is already
        # known (recorded as the view was made, or by an earlier ordering), without asking the
        # owner's plugin: jax's strategy orders pending work onto a stream of its own to answer.
        return self.rec.producer_stream if self.rec.has_producer_stream else None

    @property
    def layout(self):
        """StridedLayout: Shape, strides and itemsize of this view (a new immutable object)."""
        return layout_from_extents(&self.rec.ext, self.rec.itemsize, 0)

    # --- derived views ---------------------------------------------------------------------

    def __getitem__(self, key):
        """Slice like numpy (ints, slices with steps, Ellipsis, None); the result shares memory."""
        cdef int64_t offset = 0
        cdef StridedMemoryView v = _derived_view(self)
        extents_getitem(&self.rec.ext, key, &v.rec.ext, &offset)
        v.rec.ptr = <uintptr_t> (<intptr_t> self.rec.ptr + <intptr_t> (offset * self.rec.itemsize))
        return v

    def view(self, layout=None, dtype=None):
        """A new view of the same memory with another layout and/or element type.

        Parameters
        ----------
        layout : StridedLayout, optional
            The new shape/strides (relative to this view's element 0, shifted by
            ``layout.slice_offset``).  It must stay inside the memory this view spans.
        dtype : optional
            The new element type.  With no layout and a different itemsize, the last
            dimension is repacked (e.g. float32 pairs become complex64).

        Returns
        -------
        StridedMemoryView
        """
        cdef DLDataType dt = self.rec.dtype
        cdef Py_ssize_t new_itemsize = self.rec.itemsize
        cdef StridedLayout new_layout
        cdef int64_t lo, hi, new_lo, new_hi
        # subbyte_padded=True: sub-byte types in a view are stored one element per byte.
        if dtype is not None:
            dtype_from_object(dtype, &dt)
            new_itemsize = dtype_itemsize(dt, True)
        if layout is None:
            new_layout = self.layout
            if new_itemsize != self.rec.itemsize:
                new_layout = new_layout.repacked(new_itemsize)
        elif isinstance(layout, StridedLayout):
            new_layout = <StridedLayout> layout
            if new_layout.itemsize != new_itemsize:
                raise ValueError(
                    f"layout itemsize {new_layout.itemsize} does not match the element type's "
                    f"itemsize {new_itemsize}")
        else:
            raise TypeError(f"layout must be a StridedLayout, got {type(layout).__name__}")
        # The new layout must not reach bytes this view does not span.
        if extents_volume(&new_layout.ext) != 0:
            extents_offset_bounds(&self.rec.ext, &lo, &hi)
            extents_offset_bounds(&new_layout.ext, &new_lo, &new_hi)
            lo *= self.rec.itemsize
            hi = (hi + 1) * self.rec.itemsize
            new_lo = (new_lo + new_layout.slice_offset) * new_itemsize
            new_hi = (new_hi + new_layout.slice_offset + 1) * new_itemsize
            if extents_volume(&self.rec.ext) == 0 or new_lo < lo or new_hi > hi:
                raise ValueError(
                    f"the new layout reaches bytes [{new_lo}, {new_hi}) relative to element 0, "
                    f"outside the bytes [{lo}, {hi}) this view spans")
        cdef StridedMemoryView v = _derived_view(self)
        extents_copy(&v.rec.ext, &new_layout.ext)
        record_set_dtype(&v.rec, dt, True)
        v.rec.ptr = <uintptr_t> (<intptr_t> self.rec.ptr
                                 + <intptr_t> (new_layout.slice_offset * new_itemsize))
        return v

    def __repr__(self):
        device = _DEVICE_NAMES.get(self.rec.device_type, str(self.rec.device_type))
        flags = ", readonly" if self.rec.readonly else ""
        return (f"StridedMemoryView(ptr={self.rec.ptr:#x}, shape={self.shape}, "
                f"strides={self.strides}, dtype={describe_dtype(self.rec.dtype)}, "
                f"device='{device}:{self.rec.device_id}'{flags}, "
                f"owner={type(self.owner).__name__})")

    def sync(self, stream):
        """Order ``stream`` after the producer's pending work on this memory, without blocking.

        For a view made without a stream (metadata only), call this before a kernel on
        ``stream`` reads or writes it: an event is recorded on the producer's stream and
        ``stream`` waits on it.  A no-op for the producer's own stream and when the producer
        named no stream; for host memory, a producer whose host work is asynchronous (jax's
        CPU backend) is waited for on the host, a no-op for every other.

        Parameters
        ----------
        stream : int or stream object
            The consumer stream (see the stream contract); ``None`` or ``-1`` do nothing.

        Returns
        -------
        StridedMemoryView
            ``self``, for chaining.
        """
        cdef intptr_t consumer = 0
        if resolve_stream(stream, &consumer):
            hold_memory(self)   # a kernel on `stream` uses the memory next
            order_view(self, consumer)
        return self

    # --- copies ----------------------------------------------------------------------------

    def copy_to(self, dst, stream=None):
        """Copy this view's elements into ``dst``, on ``stream``.

        Same shape (this view broadcasts to ``dst``'s, numpy's rules), same dtype, any strides
        on either side, between host memory, device memory of one device and peer devices.
        Enqueued after the producers of both views (the stream contract), without blocking
        the host when a stream is given.  The "Copies" page of the documentation says when
        the host waits (pageable host memory; ``stream=None``).

        Parameters
        ----------
        dst : StridedMemoryView or object
            The destination: a view, or anything :func:`interop_core.view` accepts.  Must be
            writable, without overlapping elements.
        stream : None, int or stream object, optional
            The stream to copy on (an int ``CUstream`` or a stream object).  ``None`` (or
            ``-1``): the legacy default stream of the copying device, and the call returns
            once the copy is complete.  Ignored for host-to-host copies beyond waiting for it.

        Returns
        -------
        StridedMemoryView
            The destination's view; after a copy on a stream, its ``producer_stream`` is that
            stream.

        Raises
        ------
        ValueError
            Shapes that do not broadcast, different dtypes, a destination with overlapping
            elements, a CUDA device that does not exist, a stream of an unrelated device.
        BufferError
            A read-only destination; memory no engine here reaches (no CUDA driver, another
            device type, peers without peer access for a strided layout).

        Notes
        -----
        Overlapping source and destination are copied correctly (through a temporary).
        Nothing is written when the call raises.
        """
        if _copy_views != NULL and type(dst) is StridedMemoryView:
            _copy_views(<StridedMemoryView> dst, self, stream)
            return dst
        return _copies().copy(dst, self, stream)

    def copy_from(self, src, stream=None):
        """Copy ``src``'s elements into this view, on ``stream`` (see :meth:`copy_to`).

        Parameters
        ----------
        src : StridedMemoryView or object
            The source (a view, or anything :func:`interop_core.view` accepts); broadcast to
            this view's shape.
        stream : None, int or stream object, optional
            As for :meth:`copy_to`.

        Returns
        -------
        StridedMemoryView
            ``self``.
        """
        if _copy_views != NULL and type(src) is StridedMemoryView:
            _copy_views(self, <StridedMemoryView> src, stream)
            return self
        return _copies().copy(self, src, stream)

    @staticmethod
    def empty_like(view, device=None, layout=None, stream=None):
        """A view of new, uninitialised memory with ``view``'s shape and dtype.

        Parameters
        ----------
        view : StridedMemoryView or object
            What to imitate (anything :func:`interop_core.view` accepts).
        device : str or tuple, optional
            Where: ``"cpu"`` (malloc), ``"cuda_host"`` (pinned, ``cuMemHostAlloc``),
            ``"cuda"`` / ``"cuda:N"`` (device memory), ``"cuda_managed"``, or a DLPack
            ``(device_type, device_id)`` pair.  Default: ``view``'s device.
        layout : {"K", "C", "F"} or StridedLayout, optional
            Dense in ``view``'s stride order (``"K"``, the default), C or Fortran order, or an
            explicit layout of the same shape and itemsize without overlapping elements.
        stream : None, int or stream object, optional
            For device memory: allocate stream-ordered on this stream (``cuMemAllocAsync``,
            where the device supports memory pools); the memory is then released with
            ``cuMemFreeAsync`` on the same stream when its owner dies, and the stream object
            is kept alive until then.  ``None``: ``cuMemAlloc``, usable on any stream.

        Returns
        -------
        StridedMemoryView
            Writable; its ``owner`` is the :class:`interop_core.cuda.Allocation` that frees
            the memory exactly once, when the last view of it dies.
        """
        return _copies().empty_like(view, device, layout, stream)

    # --- exports ---------------------------------------------------------------------------

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (array-API signature); the view stays alive meanwhile.

        A ``stream`` (the consumer's) is ordered after the view's producer first, as the
        DLPack protocol asks of producers.

        ``copy=True``, or a ``dl_device`` other than the view's own, exports a copy in new
        memory (dense, in the view's stride order) with the ``IS_COPIED`` flag: made on
        ``stream`` for a device consumer; for ``dl_device=(kDLCPU, 0)`` ``stream`` must be
        None and the copy is complete when the capsule is returned.  ``copy=False`` raises
        ``BufferError`` where a copy would be needed; ``copy=None`` copies only then.
        """
        cdef intptr_t consumer = 0
        cdef StridedMemoryView copied
        if copy is not None and not isinstance(copy, bool):
            raise TypeError(f"__dlpack__: copy must be None, True or False, got {copy!r}")
        check_describes_memory(self, "__dlpack__")
        if dl_device is not None:
            try:
                dev_type, dev_id = dl_device
                if isinstance(dev_type, bool) or isinstance(dev_id, bool):
                    raise TypeError
                # Integers of any kind (numpy's too); a float would be truncated: refused.
                dl_device = (int(PyNumber_Index(dev_type)), int(PyNumber_Index(dev_id)))
            except (TypeError, ValueError):
                raise TypeError(
                    f"__dlpack__: dl_device must be a (device_type, device_id) pair of ints, "
                    f"got {dl_device!r}") from None
            if dl_device == (self.rec.device_type, self.rec.device_id):
                dl_device = None
        if copy or dl_device is not None:
            if copy is False:
                raise BufferError(
                    f"__dlpack__: the view is on device ({self.rec.device_type}, "
                    f"{self.rec.device_id}); exporting it to {dl_device} needs a copy, and "
                    "copy=False forbids one")
            if dl_device is not None and dl_device[0] == kDLCPU and dl_device[1] != 0:
                raise BufferError(f"__dlpack__: there is no CPU device {dl_device[1]}")
            if ((dl_device is None and self.rec.device_type == kDLCPU or dl_device is not None
                 and dl_device[0] == kDLCPU) and stream is not None and stream != -1):
                raise BufferError("__dlpack__: stream must be None or -1 for a copy in host "
                                  f"(CPU) memory (it is complete on return), got {stream!r}")
            copied = _copies().export_copy(self, dl_device, stream)
            return export_dlpack(copied, &copied.rec, None, max_version, None, copy, True)
        hold_memory(self)
        if resolve_stream(stream, &consumer) and self.rec.device_type != kDLCPU:
            order_view(self, consumer)
        return export_dlpack(self, &self.rec, stream, max_version, None, copy, False)

    def __dlpack_device__(self):
        """``(device_type, device_id)`` per the DLPack protocol."""
        return export_dlpack_device(&self.rec)

    @property
    def __cuda_array_interface__(self):
        """dict: CUDA Array Interface v3 (device-accessible memory only)."""
        if not _device_accessible(self.rec.device_type):
            raise AttributeError("__cuda_array_interface__: this view is of host memory")
        check_describes_memory(self, "__cuda_array_interface__")
        hold_memory(self)
        knows_producer_stream(self)
        return export_cuda_array_interface(&self.rec)

    @property
    def __array_interface__(self):
        """dict: NumPy array interface v3 (host-accessible memory only)."""
        if not _host_accessible(self.rec.device_type):
            raise AttributeError("__array_interface__: this view is of device memory")
        check_describes_memory(self, "__array_interface__")
        hold_memory(self)
        return export_array_interface(&self.rec)

    def __getbuffer__(self, Py_buffer* buf, int flags):
        check_describes_memory(self, "the buffer protocol")
        hold_memory(self)
        export_buffer(&self.rec, buf, flags)
        buf.obj = self

    def __releasebuffer__(self, Py_buffer* buf):
        release_buffer(buf)

    __dlpack_c_exchange_api__ = exchange_api_capsule()


cdef object view_through(int protocol, object obj, object stream):
    # The from_* constructors' one body: a plugin reader declared equivalent to the protocol,
    # else the protocol itself (PROTOCOL_NONE: the one from_any chooses).  The constructors
    # spell out the first half, a call less on their fast path.
    if _fast_from != NULL:
        fast = _fast_from(obj, stream, protocol)
        if fast is not None:
            return fast
    return _through_protocol(protocol, obj, stream)


cdef object _through_protocol(int protocol, object obj, object stream):
    cdef type t
    if protocol == PROTOCOL_DLPACK:
        return _declared_readonly(_view_dlpack(obj, stream), obj)
    if protocol == PROTOCOL_CAI:
        return _declared_readonly(_view_cai(obj, stream), obj)
    if protocol == PROTOCOL_ARRAY_INTERFACE:
        return _declared_readonly(_view_array_interface(obj), obj)
    if protocol == PROTOCOL_BUFFER:
        return _declared_readonly(_view_buffer_protocol(obj), obj)
    protocol = protocol_for_any(obj)
    if protocol == PROTOCOL_NONE:
        t = type(obj)
        raise TypeError(
            f"cannot view an object of type {t.__module__}.{t.__qualname__}: it has none of "
            "__dlpack_c_exchange_api__, __dlpack__, __cuda_array_interface__, "
            "__array_interface__ or the buffer protocol")
    if protocol == PROTOCOL_SELF:
        return view_by_protocol(protocol, obj, stream)
    return _declared_readonly(view_by_protocol(protocol, obj, stream), obj)


# The registry's view_if_equivalent, installed by interop_core.registry._registry as it is
# imported (before any view can be made through the public API); NULL until then.
cdef fast_from_t _fast_from = NULL


cdef void install_fast_from(fast_from_t fast_from) noexcept:
    global _fast_from
    _fast_from = fast_from


# interop_core.copies._copy, imported on the first copy (it imports this module).
cdef object _copy_module = None
# Its copy_views (a C function of a module that stays loaded), set by install_copy_views as
# that module is imported; NULL until then.
cdef copy_views_t _copy_views = NULL


cdef void install_copy_views(copy_views_t copy) noexcept:
    global _copy_views
    _copy_views = copy


cdef object _copies():
    global _copy_module
    if _copy_module is None:
        from ..copies import _copy

        _copy_module = _copy
    return _copy_module


cdef ViewRecord* _record_of(object obj) except NULL:
    # Subclasses too (interop_core.compat's views): the record is the same C struct.
    if not isinstance(obj, StridedMemoryView):
        raise TypeError(f"expected a StridedMemoryView, got {type(obj).__name__}")
    check_describes_memory(<StridedMemoryView> obj, "the DLPack exchange API")
    hold_memory(<StridedMemoryView> obj)    # every caller exports the memory
    return &(<StridedMemoryView> obj).rec


cdef int refuse_no_memory(StridedMemoryView v, str what) except -1:
    cdef int64_t volume
    if v.rec.itemsize <= 0:
        raise ValueError(f"{what}: the view has no element type (itemsize {v.rec.itemsize}): it "
                         "describes no memory (a StridedMemoryView made with no arguments)")
    volume = extents_volume(&v.rec.ext)
    if v.rec.ptr == 0 and volume != 0:
        raise ValueError(f"{what}: the view has a null address for its {volume} element(s)")
    return 0


cdef object _view_from_record(ViewRecord* rec, object keepalive, object owner):
    cdef StridedMemoryView v = view_new()
    v.rec.ptr = rec.ptr
    extents_copy(&v.rec.ext, &rec.ext)
    v.rec.dtype = rec.dtype
    v.rec.itemsize = rec.itemsize
    v.rec.device_type = rec.device_type
    v.rec.device_id = rec.device_id
    v.rec.readonly = rec.readonly
    v.rec.has_producer_stream = rec.has_producer_stream
    v.rec.producer_stream = rec.producer_stream
    v._keepalive = keepalive
    v.owner = owner
    return v


register_view_type(StridedMemoryView, _record_of, _view_from_record)


# --- the generic protocols, shared with the registry ----------------------------------------

# from_any's per-type choice (only types that offer a protocol are cached: an object may carry
# an interface as an instance attribute that another instance of its type lacks).
cdef dict _PROTOCOL_BY_TYPE = {}


cdef int protocol_for_any(object obj) except -1:
    cdef type t = type(obj)
    cdef object cached = _PROTOCOL_BY_TYPE.get(t)
    cdef int protocol
    if cached is not None:
        return cached
    protocol = choose_protocol(obj)
    if protocol != PROTOCOL_NONE:
        if len(_PROTOCOL_BY_TYPE) >= MAX_CACHED_TYPES:
            _PROTOCOL_BY_TYPE.clear()   # it keeps the types alive: bounded, made again on need
        _PROTOCOL_BY_TYPE[t] = protocol
    return protocol


cdef int choose_protocol(object obj) except -1:
    cdef type t = type(obj)
    if t is StridedMemoryView:
        return PROTOCOL_SELF
    if hasattr(t, "__dlpack__") or PyCapsule_CheckExact(obj):
        return PROTOCOL_DLPACK
    # Instances may carry these as plain attributes, so ask the object, not the type.
    if _offers(obj, "__cuda_array_interface__"):
        return PROTOCOL_CAI
    if _offers(obj, "__array_interface__"):
        return PROTOCOL_ARRAY_INTERFACE
    # The type's slot, not a request: the exporter's answer (and its errors) are the reader's
    # to report, naming the type.
    if PyObject_CheckBuffer(obj):
        return PROTOCOL_BUFFER
    return PROTOCOL_NONE


cdef bint _offers(object obj, str name) except -1:
    # A property that raises is offered all the same: its reader reports the failure as a
    # BufferError naming the type, the original exception chained.
    try:
        getattr(obj, name)
    except AttributeError:
        return False
    except Exception:
        return True
    return True


cdef object view_by_protocol(int protocol, object obj, object stream):
    if protocol == PROTOCOL_DLPACK:
        return _view_dlpack(obj, stream)
    if protocol == PROTOCOL_SELF:
        _stream_checked(stream)
        return obj
    if protocol == PROTOCOL_CAI:
        return _view_cai(obj, stream)
    _stream_checked(stream)
    if protocol == PROTOCOL_ARRAY_INTERFACE:
        return _view_array_interface(obj)
    if protocol == PROTOCOL_BUFFER:
        return _view_buffer_protocol(obj)
    raise ValueError(f"unknown protocol {protocol}")


# --- a view's death ------------------------------------------------------------------------------
# A view's own resources (heap extents beyond INLINE_NDIM dimensions, the four caches) are released
# here, then the object goes on to the deallocator Cython generated for the class (garbage-collector
# untracking, weak references, owner and keep-alive, the freelist).  Not a __dealloc__: Cython
# wraps one in a save and restore of the pending exception, since a __dealloc__ may run Python
# code, and on Python 3.12 those are two calls into the interpreter that cost more than the rest
# of a view's death (SIGPROF samples of view(numpy), dev VM: 13 % of the call).  Freeing a block
# and releasing tuples of ints and a numpy dtype run no Python code.  Python subclasses reach
# this too: their deallocator calls the nearest base's `tp_dealloc`, read when it runs.

# Cython's deallocator for StridedMemoryView, taken from the type when this module is imported.
cdef destructor _generated_dealloc = NULL


cdef void _release_and_dealloc(PyObject* o) noexcept:
    # `o` is dying (reference count 0): raw field access only; an object reference to it here
    # would revive it and free it a second time when released.
    extents_free(&(<StridedMemoryView> o).rec.ext)
    Py_XDECREF((<StridedMemoryView> o)._numpy_dtype)
    Py_XDECREF((<StridedMemoryView> o)._shape)
    Py_XDECREF((<StridedMemoryView> o)._strides)
    Py_XDECREF((<StridedMemoryView> o)._strides_in_bytes)
    _generated_dealloc(o)       # frees the memory, or clears it for the freelist's next view


_generated_dealloc = (<PyTypeObject*> StridedMemoryView).tp_dealloc
(<PyTypeObject*> StridedMemoryView).tp_dealloc = _release_and_dealloc


# --- static methods looked up as plain functions --------------------------------------------------
#
# A cuda.core user writes `StridedMemoryView.from_dlpack(x)`: the class attribute is looked up
# on every call.  A static method of a compiled class is a staticmethod wrapping a builtin
# function, a descriptor, so CPython's attribute lookup on the class cannot be specialised
# (3.12+: LOAD_ATTR_CLASS takes only non-descriptors) and goes through type_getattro and the
# wrapper's __get__ each time (Python 3.12, dev VM: 17 ns of a 156 ns call).  A builtin function
# has no __get__: stored in the class's dictionary in place of its wrapper, it is what both the
# class and its instances give for the name, exactly as the staticmethod gave, and the lookup is
# specialised.  Python functions are left wrapped (on an instance they would bind).

cdef type _BuiltinFunction = type(len)


cdef int plain_static_methods(type cls) except -1:
    cdef dict namespace = <dict> (<PyTypeObject*> cls).tp_dict
    for name, attribute in list(namespace.items()):
        if type(attribute) is staticmethod and type(attribute.__func__) is _BuiltinFunction:
            namespace[name] = attribute.__func__
    PyType_Modified(cls)       # the attribute caches saw the wrappers
    return 0


plain_static_methods(StridedMemoryView)
plain_static_methods(Buffer)


# --- no view without a constructor ----------------------------------------------------------------
#
# `StridedMemoryView.__new__(StridedMemoryView)` from Python would make a view that describes
# nothing (no element type, a null address): copies and exports of it would read address 0.
# The core makes its views through the type's C slot (view_new), which this does not touch;
# from Python, `__new__` (and so copy.copy and pickle, which call it) refuses.

def _refuse_new(cls, *args, **kwargs):
    raise TypeError(f"{cls.__name__} objects are made by its from_* constructors and "
                    "interop_core.view(), not by __new__")


(<dict> (<PyTypeObject*> StridedMemoryView).tp_dict)["__new__"] = staticmethod(_refuse_new)
PyType_Modified(StridedMemoryView)
