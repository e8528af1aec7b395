# cuda.core's StridedMemoryView, StridedLayout and args_viewable_as_strided_memory, thin over
# interop-core's compiled core (see interop_core/compat/cuda_core.py for the public module and
# docs/migrating_from_cuda_core.md for what differs).
#
# StridedMemoryView here is a compiled subclass of the core's view that adds no C field: a view
# the core has just made for a call (through the exact-type table and the plugins' readers,
# exactly as interop_core.view() makes it) becomes one of these by changing its type in place,
# which costs a pointer store instead of a second object.  Only cuda.core's conventions live
# here: `strides` None for C-contiguous memory, `device_id` -1 for host memory, `stream_ptr=`,
# `exporting_obj`, views without a dtype, cuda.core's error messages.
#
# StridedLayout wraps the core's (final) StridedLayout and adds what cuda.core's layout says
# beyond the layout itself: whether it was made without strides (then `strides` is None), the
# zero strides cuda.core gives the layouts of no element some operations make, and cuda.core's
# error types and messages.

cimport cython
from cpython.number cimport PyNumber_Index
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t

from ..core._dlpack_abi cimport DLDataType, kDLCPU, kDLUInt
from ..core._dtypes cimport dtype_from_object, dtype_to_numpy, record_set_dtype
from ..core._layout cimport StridedLayout as CoreLayout
from ..core._layout cimport (
    extents_compatible_itemsize,
    extents_is_c_contiguous,
    extents_merge_mask,
    extents_offset_bounds,
    extents_shape_tuple,
    extents_strides_tuple,
    extents_volume,
    layout_from_extents,
    layout_max_compatible_itemsize,
    layout_merged,
    layout_repacked,
)
from ..core._record cimport extents_copy, record_copy
from ..core._view cimport (
    PROTOCOL_ARRAY_INTERFACE,
    PROTOCOL_CAI,
    PROTOCOL_DLPACK,
    PROTOCOL_NONE,
    plain_static_methods,
    raise_pending,
    view_through,
)
from ..core._view cimport StridedMemoryView as CoreView
from ..core._view cimport Buffer as CoreBuffer
from ..cuda._cuda cimport pointer_device
from ..registry._registry cimport view_if_equivalent

__all__ = ["StridedMemoryView", "StridedLayout"]


cdef extern from "Python.h":
    Py_ssize_t Py_REFCNT(object o)
    void Py_SET_TYPE(object o, PyTypeObject* t)
    unsigned long PyType_GetFlags(PyTypeObject* t)
    unsigned long Py_TPFLAGS_HEAPTYPE
    int PyErr_WarnEx(object category, const char* message, Py_ssize_t stack_level) except -1

cdef extern from *:
    """
    /* The data descriptors (getters and members) `sub` inherits from `base` and does not define
     * itself, but for dunders, made again for `sub` and put in its dict.  A descriptor checks on every read that
     * the object is an instance of the class it was made for: for an instance of a subclass that
     * is a walk of the MRO (PyType_IsSubtype) instead of a pointer comparison.  The new ones
     * share the base's PyGetSetDef / PyMemberDef (the same C getters, the same docstrings), which
     * read the same C layout.  Returns how many, or -1 with an exception set. */
    #if PY_VERSION_HEX < 0x030C0000
    #include "structmember.h"       /* PyMemberDef, in Python.h itself from 3.12 */
    #endif
    static int interop_compat_rebind_descriptors(PyTypeObject* sub, PyTypeObject* base) {
        PyObject* dict;
        PyGetSetDef* gs;
        PyMemberDef* m;
        int count = 0;
    #if PY_VERSION_HEX >= 0x030C0000
        dict = PyType_GetDict(sub);
    #else
        dict = sub->tp_dict;
        Py_XINCREF(dict);
    #endif
        if (dict == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "interop_core.compat: a type without a dict");
            return -1;
        }
        for (gs = base->tp_getset; gs != NULL && gs->name != NULL; gs++) {
            PyObject* descr;
            /* The subclass's own, and the protocols' dunders (documented once, on the core). */
            if (PyDict_GetItemString(dict, gs->name) != NULL || strncmp(gs->name, "__", 2) == 0)
                continue;
            descr = PyDescr_NewGetSet(sub, gs);
            if (descr == NULL || PyDict_SetItemString(dict, gs->name, descr) < 0) {
                Py_XDECREF(descr);
                Py_DECREF(dict);
                return -1;
            }
            Py_DECREF(descr);
            count++;
        }
        for (m = base->tp_members; m != NULL && m->name != NULL; m++) {
            PyObject* descr;
            if (PyDict_GetItemString(dict, m->name) != NULL || strncmp(m->name, "__", 2) == 0)
                continue;
            descr = PyDescr_NewMember(sub, m);
            if (descr == NULL || PyDict_SetItemString(dict, m->name, descr) < 0) {
                Py_XDECREF(descr);
                Py_DECREF(dict);
                return -1;
            }
            Py_DECREF(descr);
            count++;
        }
        Py_DECREF(dict);
        PyType_Modified(sub);
        return count;
    }
    """
    int interop_compat_rebind_descriptors(PyTypeObject* sub, PyTypeObject* base) except -1


# --- views ---------------------------------------------------------------------------------------

# A view of the core whose only reference is the caller's becomes a compat view in place; any
# other (a view handed in and returned as is) is copied into a new one.
cdef inline object _compat(CoreView v, Py_ssize_t held):
    cdef CoreView c
    if type(v) is CoreView and Py_REFCNT(v) == held:    # a view made for this call: the usual
        Py_SET_TYPE(v, <PyTypeObject*> StridedMemoryView)
        return v
    if type(v) is StridedMemoryView:
        return v
    c = StridedMemoryView.__new__(StridedMemoryView)
    record_copy(&c.rec, &v.rec)
    c.owner = v.owner
    c._keepalive = v._keepalive
    return c


cdef inline object _no_order(object stream_ptr):
    # cuda.core's "no ordering" is -1: the same as None to the core, which then has no stream
    # argument to resolve at all.
    if type(stream_ptr) is int and stream_ptr == -1:
        return None
    return stream_ptr


# The constructors' one body: the core's exact-type fast path (the registry's view_if_equivalent,
# what the core's own from_* constructors call through a function pointer), else the protocol
# (view_through, which asks the fast path once more: a dictionary lookup, on the slow path only).
# Called directly, as C functions, with no Python-level dispatch, argument parsing or type test
# between the compat call and the core: the view they return is a StridedMemoryView by contract,
# so the cast is unchecked.
cdef inline object _view_of(int protocol, object obj, object stream):
    cdef object v = view_if_equivalent(obj, stream, protocol)
    if v is None:
        v = view_through(protocol, obj, stream)
    return _compat(<CoreView> v, 1)


# _view_of as a C function whose NULL result (it raised) the constructors below inspect outside
# any try block (see raise_pending): their refusals are translated to cuda.core's words only
# once one happened.
cdef object _view_or_raise(int protocol, object obj, object stream):
    return _view_of(protocol, obj, stream)


ctypedef PyObject* (*_unchecked_view_t)(int protocol, object obj, object stream) noexcept


cdef inline object _owned(PyObject* made):
    # The object of the new reference `made`, that reference released once the result holds one.
    result = <object> made
    Py_XDECREF(made)
    return result


cdef object _from_any_interface(object obj, object stream_ptr):
    cdef PyObject* made = (<_unchecked_view_t> _view_or_raise)(PROTOCOL_NONE, obj,
                                                               _no_order(stream_ptr))
    if made != NULL:
        return _owned(made)
    try:
        raise_pending()
    except TypeError:
        if not (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")):
            raise _no_protocol(obj) from None
        raise


cdef object _interface_view(int protocol, object obj, object stream_ptr):
    # from_cuda_array_interface / from_array_interface: element types the core's reader refuses
    # (ValueError: no DLPack type names them) are read by cuda.core's rules instead.
    cdef PyObject* made = (<_unchecked_view_t> _view_or_raise)(protocol, obj,
                                                               _no_order(stream_ptr))
    if made != NULL:
        return _owned(made)
    try:
        raise_pending()
    except ValueError as refusal:
        return _opaque_view(protocol, obj, stream_ptr, refusal)
    except BufferError as refusal:
        _raise_if_strides_not_divisible(protocol, obj, refusal)
        raise


cdef str _interface_attribute(int protocol):
    return "__cuda_array_interface__" if protocol == PROTOCOL_CAI else "__array_interface__"


cdef object _interface_or_none(object obj, str attribute):
    # Asked again after the core refused the object: a property that raises (torch's interface
    # raises KeyError for float8 tensors) already gave the core's refusal, which stands.
    try:
        return getattr(obj, attribute, None)
    except Exception:
        return None


cdef int _raise_if_strides_not_divisible(int protocol, object obj, object refusal) except -1:
    # The core refuses byte strides its itemsize does not divide with a BufferError (memory it
    # cannot describe in elements); cuda.core with a ValueError, which its users catch.
    attribute = _interface_attribute(protocol)
    interface = _interface_or_none(obj, attribute)
    if type(interface) is not dict:
        return 0
    strides = interface.get("strides")
    dtype = _numpy_dtype_of_typestr(interface.get("typestr"))
    if (dtype is None or dtype.itemsize == 0 or not isinstance(strides, (tuple, list))
            or not all(type(s) is int for s in strides)):
        return 0
    if any(s % dtype.itemsize for s in strides):
        raise ValueError(f"strides must be divisible by itemsize: {attribute}['strides'] "
                         f"{strides} (bytes), itemsize {dtype.itemsize}") from refusal
    return 0


cdef object _no_protocol(object obj):
    return BufferError("the input object does not support any data exchange protocol "
                       f"(type {type(obj).__module__}.{type(obj).__qualname__})")


cdef inline PyObject* _new_ref(object value):
    # A new reference for one of the core view's raw cache slots.
    Py_INCREF(value)
    return <PyObject*> value


cdef inline bint _untyped(CoreView v) noexcept:
    # A view made without a dtype keeps None in the dtype cache (see from_buffer).
    return v._numpy_dtype == <PyObject*> None


cdef str _simple_repr(object obj):
    cdef object cls = obj if isinstance(obj, type) else type(obj)
    if cls.__module__ in (None, "builtins"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__name__}"


cdef class StridedMemoryView(CoreView):
    """cuda.core's ``StridedMemoryView``, over interop-core's compiled view.

    A :class:`interop_core.StridedMemoryView` (every property and method of it works) with
    cuda.core's conventions: ``strides`` is ``None`` for C-contiguous memory, ``device_id`` is
    ``-1`` for host memory, ``exporting_obj`` is the viewed object, constructors take
    ``stream_ptr`` (``-1``: no stream ordering), and a view made from a buffer without a dtype
    has ``dtype`` ``None``.  Build views with :meth:`from_dlpack`,
    :meth:`from_cuda_array_interface`, :meth:`from_array_interface`,
    :meth:`from_any_interface` or :meth:`from_buffer`; each reads through interop-core's plugins
    as :func:`interop_core.view` does.

    Parameters
    ----------
    obj : object, optional
        Deprecated, as in cuda.core: an object supporting DLPack or the CUDA Array Interface;
        use :meth:`from_any_interface`.
    stream_ptr : int, optional
        The consumer stream (a ``CUstream`` address); ``-1`` or ``None``: no ordering.
    """

    def __init__(self, obj=None, stream_ptr=None):
        # PyErr_WarnEx is what warnings.warn runs, without importing and calling the module.
        cdef CoreView v
        if obj is None:
            PyErr_WarnEx(
                DeprecationWarning,
                b"Constructing an empty StridedMemoryView is deprecated; use one of the "
                b"static methods from_dlpack, from_cuda_array_interface or from_any_interface",
                2)
            return
        if not hasattr(obj, "__dlpack__") and hasattr(obj, "__cuda_array_interface__"):
            PyErr_WarnEx(
                DeprecationWarning,
                b"Constructing a StridedMemoryView directly from a CUDA-array-interface-"
                b"supporting object is deprecated; use StridedMemoryView.from_cuda_array_interface"
                b" or StridedMemoryView.from_any_interface instead", 2)
        else:
            PyErr_WarnEx(
                DeprecationWarning,
                b"Constructing a StridedMemoryView directly from an object is deprecated; use "
                b"StridedMemoryView.from_dlpack or StridedMemoryView.from_any_interface instead",
                2)
        v = <CoreView> _from_any_interface(obj, stream_ptr)
        record_copy(&self.rec, &v.rec)
        self.owner = v.owner
        self._keepalive = v._keepalive

    # --- construction --------------------------------------------------------------------------

    @staticmethod
    def from_dlpack(obj, stream_ptr=None):
        """View an object through DLPack (its type's C exchange API, else ``__dlpack__``).

        Parameters
        ----------
        obj : object
            An object implementing DLPack.
        stream_ptr : int, optional
            The consumer stream; ``-1`` or ``None``: no ordering.  Otherwise the producer
            orders its pending work before it.

        Returns
        -------
        StridedMemoryView
        """
        return _view_of(PROTOCOL_DLPACK, obj, _no_order(stream_ptr))

    @staticmethod
    def from_cuda_array_interface(obj, stream_ptr=None):
        """View an object through ``__cuda_array_interface__``.

        Parameters
        ----------
        obj : object
            An object implementing the CUDA Array Interface.
        stream_ptr : int, optional
            The consumer stream; it waits for the interface's ``stream`` unless ``-1`` or
            ``None``.

        Returns
        -------
        StridedMemoryView
        """
        return _interface_view(PROTOCOL_CAI, obj, stream_ptr)

    @staticmethod
    def from_array_interface(obj):
        """View host memory through ``__array_interface__``.

        Parameters
        ----------
        obj : object
            An object implementing the NumPy array interface (e.g. a numpy array).

        Returns
        -------
        StridedMemoryView
        """
        return _interface_view(PROTOCOL_ARRAY_INTERFACE, obj, None)

    @staticmethod
    def from_any_interface(obj, stream_ptr=None):
        """View an object through the best protocol it offers.

        DLPack first, then the CUDA Array Interface, then (beyond cuda.core) the array
        interface and the buffer protocol; types a plugin reads are read by it.

        Parameters
        ----------
        obj : object
        stream_ptr : int, optional
            The consumer stream; ``-1`` or ``None``: no ordering.

        Returns
        -------
        StridedMemoryView

        Raises
        ------
        BufferError
            If ``obj`` offers no protocol.
        """
        return _from_any_interface(obj, stream_ptr)

    @staticmethod
    def from_buffer(buffer, shape, strides=None, *, itemsize=None, dtype=None,
                    bint is_readonly=False):
        """A view of ``buffer`` with the given shape, strides and element type.

        Parameters
        ----------
        buffer : cuda.core.Buffer or interop_core.Buffer
            The memory (any object with ``handle`` and ``size`` attributes).  It is the view's
            ``exporting_obj`` and is kept alive by it.
        shape : tuple of int
        strides : tuple of int, optional
            In elements; ``None`` means C-contiguous.
        itemsize : int, optional
            Bytes per element, when no ``dtype`` is given (the view's ``dtype`` is then None).
        dtype : numpy.dtype, optional
        is_readonly : bool, optional

        Returns
        -------
        StridedMemoryView

        Raises
        ------
        ValueError
            Neither ``itemsize`` nor ``dtype`` given, or both and they disagree; a buffer of
            known size too small for the layout, or a layout reaching below its start.
        """
        cdef _LaidOutView v
        cdef StridedLayout layout
        cdef int32_t device_type = kDLCPU, device_id = 0
        if itemsize is None and dtype is None:
            raise ValueError("Either itemsize or dtype must be specified")
        if dtype is not None:
            import numpy

            dtype = numpy.dtype(dtype)
            if itemsize is not None and itemsize != dtype.itemsize:
                raise ValueError(
                    f"itemsize ({itemsize}) does not match dtype.itemsize ({dtype.itemsize})")
            itemsize = dtype.itemsize
        layout = StridedLayout(shape, strides, itemsize)
        if isinstance(buffer, CoreBuffer):
            ptr = (<CoreBuffer> buffer).ptr
            size = (<CoreBuffer> buffer).size
            device_type = (<CoreBuffer> buffer).device_type
            device_id = (<CoreBuffer> buffer).device_id
            checked = True
        else:
            ptr = int(buffer.handle)
            size = buffer.size
            pointer_device(<uintptr_t> ptr, &device_type, &device_id)
            # As cuda.core: external memory (no memory resource) may lie around its handle.
            checked = getattr(buffer, "memory_resource", None) is not None
        if checked:
            required = layout.required_size_in_bytes()
            if size < required:
                raise ValueError(f"Buffer size is too small for the layout. Expected at least "
                                 f"{required} bytes, got {size} bytes.")
        v = _LaidOutView.__new__(_LaidOutView)
        extents_copy(&v.rec.ext, &layout._base.ext)
        if dtype is not None:
            _set_element_type(v, dtype)
        else:
            _set_bytes(v, itemsize, None)
        v.rec.ptr = <uintptr_t> ptr
        v.rec.device_type = device_type
        v.rec.device_id = device_id
        v.rec.readonly = is_readonly
        v.owner = buffer
        v._keepalive = buffer
        v._given_layout = layout
        v._base_ptr = <uintptr_t> ptr
        v._buffer_size = size if checked else None
        return v

    # --- cuda.core's conventions ---------------------------------------------------------------

    @property
    def strides(self):
        """tuple of int or None: Strides in elements; ``None`` for C-contiguous memory."""
        # The core's cache slot (see core/_view.pxd) holds this property's answer, None
        # included: a view's extents never change, and on a compat view `strides` is always
        # this property (the core's C code reads the slot only in its own `strides` getter).
        if self._strides == NULL:
            self._strides = _new_ref(None if extents_is_c_contiguous(&self.rec.ext)
                                     else extents_strides_tuple(&self.rec.ext, 1))
        return <object> self._strides

    @property
    def device_id(self):
        """int: The CUDA device ordinal; ``-1`` for host memory."""
        return -1 if self.rec.device_type == kDLCPU else self.rec.device_id

    @property
    def exporting_obj(self):
        """object: The object this view was made from (a Buffer for :meth:`from_buffer`)."""
        return self.owner

    @property
    def dtype(self):
        """numpy.dtype or None: The element type; ``None`` for a view made without one."""
        if self.rec.dtype.bits == 0:
            return None                 # StridedMemoryView(): nothing described yet
        if self._numpy_dtype == NULL:   # the core's cache; None for a view without a dtype
            self._numpy_dtype = _new_ref(dtype_to_numpy(self.rec.dtype))
        return <object> self._numpy_dtype

    @property
    def _layout(self):
        """StridedLayout: Shape, strides and itemsize (strides ``None`` when C-contiguous).

        ``ValueError`` for ``StridedMemoryView()``, which describes no memory."""
        return _layout_of_record(self)

    @property
    def layout(self):
        """StridedLayout: The same as :attr:`_layout`."""
        return _layout_of_record(self)

    def view(self, layout=None, dtype=None):
        """A view of the same memory with another layout and/or dtype.

        Parameters
        ----------
        layout : StridedLayout, optional
            Its ``slice_offset`` counts from this view's element 0 (from the buffer's start for
            a view made by :meth:`from_buffer`, as in cuda.core).  It must stay inside the
            buffer, or, for memory of another producer, inside the memory this view spans.
            Default: this view's layout.  The new view's ``_layout`` is this object.
        dtype : numpy.dtype, optional
            Its itemsize must be the layout's.  Default: this view's dtype.

        Returns
        -------
        StridedMemoryView
            ``self`` when neither is given.
        """
        if layout is None and dtype is None:
            return self
        return _laid_out(self, self._layout if layout is None else layout,
                         self.dtype if dtype is None else dtype)

    def copy_from(self, other, stream, allocator=None, blocking=None):
        """Copy ``other``'s elements into this view, on ``stream``.

        Parameters
        ----------
        other : StridedMemoryView or object
        stream : stream object or int
        allocator : None
            Not supported (temporaries come from interop-core's own allocations).
        blocking : bool, optional
            True: the host waits for the copy.  None or False: as interop-core's
            ``copy_from`` (device-to-device copies do not block; host memory may).
        """
        _check_allocator(allocator)
        CoreView.copy_from(self, other, stream)
        _maybe_block(stream, blocking)

    def copy_to(self, other, stream=None, allocator=None, blocking=None):
        """Copy this view's elements into ``other`` (see :meth:`copy_from`)."""
        _check_allocator(allocator)
        CoreView.copy_to(self, other, stream)
        _maybe_block(stream, blocking)

    def as_tensor_map(self, *args, **kwargs):
        """Not supported: make tensor maps with cuda.core itself."""
        raise NotImplementedError(
            "as_tensor_map is not supported by interop_core.compat.cuda_core; hand the view to "
            "cuda.core (interop_core.to(view, 'cuda.core')) and call it there")

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (see :meth:`interop_core.StridedMemoryView.__dlpack__`)."""
        if _untyped(self):
            raise BufferError("Cannot export StridedMemoryView via DLPack without dtype "
                              "information; create the view with dtype specified.")
        if _without_dlpack_type(self):
            raise BufferError(_no_dlpack_type_message(self.dtype))
        return CoreView.__dlpack__(self, stream=stream, max_version=max_version,
                                   dl_device=dl_device, copy=copy)

    __c_dlpack_exchange_api__ = CoreView.__dlpack_c_exchange_api__

    def __repr__(self):
        return (f"StridedMemoryView(ptr={self.rec.ptr},\n"
                f"                  shape={self.shape},\n"
                f"                  strides={self.strides},\n"
                f"                  itemsize={self.rec.itemsize},\n"
                f"                  dtype={_simple_repr(self.dtype)},\n"
                f"                  device_id={self.device_id},\n"
                f"                  is_device_accessible={self.is_device_accessible},\n"
                f"                  readonly={self.readonly},\n"
                f"                  exporting_obj={_simple_repr(self.owner)})")


cdef tuple _untyped_triple(int64_t itemsize):
    # No element type: unsigned integers of the itemsize (a vector of bytes for other sizes),
    # what exports and copies move.
    if itemsize in (1, 2, 4, 8):
        return (<int> kDLUInt, <int> (8 * itemsize), 1)
    return (<int> kDLUInt, 8, <int> itemsize)


class _InterfaceCarrier:
    """An object whose interface dict is another's, its element type replaced (_opaque_view)."""

    def __init__(self, attribute, interface):
        setattr(self, attribute, interface)


cdef object _opaque_view(int protocol, object obj, object stream_ptr, object refusal):
    # Element types the core's interface readers refuse because no DLPack type names them --
    # structured elements ('|V12' with named fields in `descr`), non-native byte order ('>f8'),
    # strings ('|S3', '<U2'), datetimes ('<M8[s]'), extended precision ('<f16') -- cuda.core
    # views with numpy's dtype of the typestr.  So does this: the core's reader reads the same
    # interface with the typestr replaced by opaque bytes of the same size (every other field
    # checked as always), and the view's element type is set from the typestr (see
    # _set_element_type).  A refusal for any other reason is raised as it was.
    cdef CoreView v
    cdef PyObject* made
    attribute = _interface_attribute(protocol)
    interface = _interface_or_none(obj, attribute)
    if type(interface) is not dict:
        raise refusal
    dtype = _numpy_dtype_of_typestr(interface.get("typestr"))
    if dtype is None or dtype.itemsize == 0 or _holds_objects(interface.get("descr")):
        raise refusal
    opaque = dict(interface)
    opaque["typestr"] = f"|V{dtype.itemsize}"
    opaque.pop("descr", None)
    if opaque.get("data") is None and protocol != PROTOCOL_CAI:
        opaque["data"] = obj        # the object's own buffer, as the array interface says
    carrier = _InterfaceCarrier(attribute, opaque)
    made = (<_unchecked_view_t> _view_or_raise)(protocol, carrier, _no_order(stream_ptr))
    if made == NULL:
        try:
            raise_pending()
        except BufferError as opaque_refusal:
            _raise_if_strides_not_divisible(protocol, obj, opaque_refusal)
            raise
    v = <CoreView> _owned(made)
    _set_element_type(v, dtype)
    v.owner = obj
    if v._keepalive is carrier:
        # The reader held the carrier: the memory is the object's.  Anything else it holds
        # (the buffer it acquired from `data`) is what keeps the memory, and stays.
        v._keepalive = obj
    return v


cdef bint _holds_objects(object descr):
    # Whether an interface's descr has a field of Python objects (whose bytes are references).
    if not isinstance(descr, list):
        return False
    import numpy

    try:
        return numpy.dtype(descr).hasobject
    except (TypeError, ValueError):
        return False


cdef object _numpy_dtype_of_typestr(object typestr):
    # numpy's dtype of an interface's typestr, or None where numpy reads none.
    if not isinstance(typestr, str):
        return None
    import numpy

    try:
        return numpy.dtype(typestr)
    except (TypeError, ValueError):
        return None


cdef int _set_element_type(CoreView v, object dtype) except -1:
    # The view's element type from a numpy dtype.  One DLPack names is recorded as such; one
    # none does (structured, void, byte-swapped, strings, datetimes) is recorded as opaque bytes
    # of its itemsize, which copies and to() move whole, with the numpy dtype kept for `dtype`,
    # as cuda.core keeps it; DLPack export refuses such a view (__dlpack__), as cuda.core's
    # does.  Object elements are Python references, never memory to hand out.
    cdef DLDataType dt
    try:
        dtype_from_object(dtype, &dt)
    except (TypeError, ValueError):
        if dtype.hasobject:
            raise TypeError(f"dtype {dtype!r} holds Python objects: their memory is references, "
                            "not data, and is not viewed") from None
        return _set_bytes(v, dtype.itemsize, dtype)
    record_set_dtype(&v.rec, dt, True)
    return 0


cdef str _no_dlpack_type_message(object dtype):
    # cuda.core's words for each kind of dtype its DLPack export refuses.
    if dtype.fields is not None:
        return f"Structured dtypes are not supported for DLPack export (dtype {dtype})"
    if dtype.byteorder == (">" if _LITTLE_ENDIAN else "<"):
        return f"Non-native-endian dtypes are not supported for DLPack export (dtype {dtype})"
    return f"Unsupported dtype for DLPack export: {dtype} (no DLPack type describes its elements)"


cdef bint _LITTLE_ENDIAN = __import__("sys").byteorder == "little"


cdef bint _without_dlpack_type(CoreView v):
    # A view whose numpy dtype no DLPack type names (see _set_element_type).
    cdef DLDataType dt
    if v._numpy_dtype == NULL or <object> v._numpy_dtype is None:
        return False
    try:
        dtype_from_object(<object> v._numpy_dtype, &dt)
    except (TypeError, ValueError):
        return True
    return False


cdef int _set_bytes(CoreView v, object itemsize, object numpy_dtype) except -1:
    # The record gets _untyped_triple's type (bytes, which copies and to() move whole); the
    # dtype cache holds `numpy_dtype`: None for a view made without a dtype, else the dtype no
    # DLPack type names (_set_element_type).
    cdef DLDataType dt
    cdef PyObject* old = v._numpy_dtype
    dtype_from_object(_untyped_triple(itemsize), &dt)
    record_set_dtype(&v.rec, dt, True)
    v._numpy_dtype = _new_ref(numpy_dtype)
    Py_XDECREF(old)
    return 0


cdef object _check_allocator(object allocator):
    if allocator is not None:
        raise NotImplementedError("allocator= is not supported by interop_core.compat.cuda_core")
    return None


cdef object _maybe_block(object stream, object blocking):
    if blocking and stream is not None:
        sync = getattr(stream, "sync", None)
        if sync is None:
            raise TypeError(f"blocking=True needs a stream object with sync(), got {stream!r}")
        sync()
    return None


cdef class _LaidOutView(StridedMemoryView):
    """A view made with a given layout (``from_buffer``, ``view()``): it keeps that layout as
    its ``_layout``, as cuda.core does, and the address the layout's slice offset counts
    from."""

    cdef StridedLayout _given_layout   # owned: the layout the view was made with
    cdef uintptr_t _base_ptr           # where the layout's slice_offset counts from
    cdef object _buffer_size           # bytes of the Buffer it views, None for other memory

    @property
    def strides(self):
        """tuple of int or None: The strides of the layout this view was made with (``None``
        where that layout was made with ``strides=None``), as cuda.core's."""
        return self._given_layout.strides

    @property
    def _layout(self):
        """StridedLayout: The layout this view was made with."""
        return self._given_layout

    @property
    def layout(self):
        """StridedLayout: The same as :attr:`_layout`."""
        return self._given_layout


cdef object _laid_out(StridedMemoryView src, StridedLayout layout, object dtype):
    cdef _LaidOutView v
    cdef int64_t isz = layout._base.itemsize, lo, hi, new_lo, new_hi
    cdef uintptr_t base = src.rec.ptr
    size = None
    if type(src) is _LaidOutView:
        base = (<_LaidOutView> src)._base_ptr
        size = (<_LaidOutView> src)._buffer_size
    if dtype is not None:
        import numpy

        dtype = numpy.dtype(dtype)
        if dtype.itemsize != isz:
            raise ValueError(f"The dtype's itemsize ({dtype.itemsize}) does not match the "
                             f"layout's itemsize ({isz}).")
    if size is not None:
        required = layout.required_size_in_bytes()
        if size < required:
            raise ValueError(f"Buffer size is too small for the layout. Expected at least "
                             f"{required} bytes, got {size} bytes.")
    elif extents_volume(&layout._base.ext):
        # Memory of another producer: the new layout must stay inside what this view spans.
        extents_offset_bounds(&src.rec.ext, &lo, &hi)
        extents_offset_bounds(&layout._base.ext, &new_lo, &new_hi)
        new_lo = (new_lo + layout._base.slice_offset) * isz
        new_hi = (new_hi + layout._base.slice_offset + 1) * isz
        if (extents_volume(&src.rec.ext) == 0 or new_lo < lo * src.rec.itemsize
                or new_hi > (hi + 1) * src.rec.itemsize):
            raise ValueError(
                f"the layout reaches bytes [{new_lo}, {new_hi}) relative to element 0, outside "
                f"the bytes [{lo * src.rec.itemsize}, {(hi + 1) * src.rec.itemsize}) this "
                "view spans")
    v = _LaidOutView.__new__(_LaidOutView)
    extents_copy(&v.rec.ext, &layout._base.ext)
    if dtype is not None:
        _set_element_type(v, dtype)
    else:
        _set_bytes(v, isz, None)
    v.rec.ptr = <uintptr_t> (<int64_t> base + layout._base.slice_offset * isz)
    v.rec.device_type = src.rec.device_type
    v.rec.device_id = src.rec.device_id
    v.rec.readonly = src.rec.readonly
    v.rec.has_producer_stream = src.rec.has_producer_stream
    v.rec.producer_stream = src.rec.producer_stream
    v.owner = src.owner
    v._keepalive = src._keepalive
    v._given_layout = layout
    v._base_ptr = base
    v._buffer_size = size
    return v


cdef StridedLayout _layout_of_record(CoreView v):
    # The view's layout says what the view's `strides` says: None where the view is
    # C-contiguous, every view of no element included.  Such a layout is the one cuda.core
    # makes with strides=None (what the array interfaces give for C-contiguous memory), whose
    # strides underneath are 0 when it holds no element, whatever the producer's were.
    cdef StridedLayout out
    if v.rec.dtype.bits == 0:
        # StridedMemoryView(): no element size, so no layout (a layout of itemsize 0 would
        # claim one element in no bytes).
        raise ValueError("Cannot infer layout from the exporting object: the view describes "
                         "no memory")
    out = StridedLayout.__new__(StridedLayout)
    out._base = layout_from_extents(&v.rec.ext, v.rec.itemsize, 0)
    if extents_volume(&v.rec.ext) == 0:
        out._base = _zero_strides_if_empty(out._base)
        out._implicit = True
    else:
        out._implicit = -1  # decided on first need (_is_implicit)
    return out


cdef inline bint _is_implicit(StridedLayout layout) noexcept:
    # Whether a view's layout holding an element is C-contiguous (strides None): a question for
    # the layout's strides, not for making it (a launcher reading `layout` on every call may
    # never ask it).
    if layout._implicit < 0:
        layout._implicit = extents_is_c_contiguous(&layout._base.ext)
    return layout._implicit


# --- layouts -------------------------------------------------------------------------------------

cdef object _as_shape_tuple(object shape, str what):
    if not isinstance(shape, tuple):
        raise TypeError(f"Argument '{what}' has incorrect type (expected tuple, got "
                        f"{type(shape).__name__})")
    return shape


cdef StridedLayout _wrap(CoreLayout base):
    # A derived layout, with explicit strides.  cuda.core keeps the strides an operation
    # derives, whether or not the layout holds an element; the operations whose layouts of no
    # element cuda.core gives zero strides pass them through _zero_strides_if_empty first.
    cdef StridedLayout out = StridedLayout.__new__(StridedLayout)
    out._base = base
    out._implicit = False
    return out


cdef CoreLayout _zero_strides_if_empty(CoreLayout base):
    """``base``, or, when it holds no element, ``base`` with every stride 0.

    cuda.core's dense strides of a layout of no element are all 0: those ``strides=None``
    implies, and those of ``dense``, ``to_dense``, ``dense_like`` and ``reshaped``; so are
    those of a slice that selects no element along one of its axes.  (The core's dense strides
    skip extents of 0, as numpy's do.)
    """
    cdef CoreLayout zeroed
    cdef int i
    if extents_volume(&base.ext) != 0:
        return base
    zeroed = layout_from_extents(&base.ext, base.itemsize, base.slice_offset)
    for i in range(zeroed.ext.ndim):    # a copy no one else has seen yet
        zeroed.ext.strides[i] = 0
    return zeroed


# A view's `layout` makes one of these around a new core layout on every read: kept out of the
# garbage collector (it holds only a core layout, which holds no Python object, so it can be in
# no reference cycle) and recycled through a freelist, it costs about what the core layout does.
@cython.no_gc
@cython.freelist(8)
cdef class StridedLayout:
    """cuda.core's ``_StridedLayout``, over interop-core's :class:`interop_core.StridedLayout`.

    Shape, strides (in elements) and itemsize of strided memory, immutable, with cuda.core's
    conventions: a layout made with ``strides=None`` reports ``strides`` ``None`` and
    ``stride_order`` C order until a transformation makes its strides explicit; the dense
    strides of a layout that holds no element are all 0 (those ``strides=None`` implies, and
    those of :meth:`dense`, :meth:`to_dense`, :meth:`dense_like`, :meth:`reshaped` and
    :meth:`squeezed`), and so are those of a slice that selects no element along an axis,
    while the other operations keep the strides they derive; ``stride_order`` breaks ties by
    extent, ``offset_bounds`` is ``(0, -1)`` when empty, ``required_size_in_bytes()`` is a
    method, and errors carry cuda.core's messages.

    Parameters
    ----------
    shape : tuple of int
    strides : tuple of int or None
        In elements (in bytes with ``divide_strides=True``); ``None``: C order.
    itemsize : int
    divide_strides : bool, optional
        Divide ``strides`` by ``itemsize`` (they must be multiples of it).
    """

    def __init__(self, shape, strides, itemsize, divide_strides=False):
        cdef int64_t isz = itemsize
        if isz <= 0:
            raise ValueError("itemsize must be positive")
        shape = tuple(shape)
        for extent in shape:
            if extent < 0:
                raise ValueError("Extents must be non-negative")
        if strides is not None:
            strides = tuple(strides)
            if len(strides) != len(shape):
                raise ValueError(
                    f"Strides, if provided, must have the same length as shape. Shape has "
                    f"{len(shape)} dimensions, but strides has {len(strides)} elements.")
            if divide_strides:
                if any(s % isz for s in strides):
                    raise ValueError("strides must be divisible by itemsize")
                strides = tuple(s // isz for s in strides)
        if strides is None:
            self._base = _zero_strides_if_empty(CoreLayout(shape, None, isz))
        else:
            self._base = CoreLayout(shape, strides, isz)
        self._implicit = strides is None

    @classmethod
    def dense(cls, shape, itemsize, stride_order="C"):
        """A dense layout: C or F order, or a permutation (last entry: the stride-1 axis).

        Parameters
        ----------
        shape : tuple of int
        itemsize : int
        stride_order : {"C", "F"} or tuple of int, optional

        Returns
        -------
        StridedLayout
        """
        for extent in shape:
            if extent < 0:
                raise ValueError("Extents must be non-negative")
        return _wrap(_zero_strides_if_empty(CoreLayout.dense(
            shape, itemsize, _order_arg(stride_order, False, len(shape)))))

    @classmethod
    def dense_like(cls, StridedLayout other not None, stride_order="K"):
        """A dense layout with ``other``'s shape and itemsize: ``other.to_dense(stride_order)``.

        Parameters
        ----------
        other : StridedLayout
        stride_order : {"K", "C", "F"} or tuple of int, optional
            ``"K"`` keeps ``other``'s stride order.

        Returns
        -------
        StridedLayout
            ``other`` itself when it is already dense in the order a letter names (see
            :meth:`to_dense`).
        """
        return _to_dense(other, stride_order)

    # --- what the layout says ------------------------------------------------------------------

    @property
    def itemsize(self):
        """int: Bytes per element."""
        return self._base.itemsize

    @property
    def slice_offset(self):
        """int: Elements from the base pointer to element 0 (accumulated by slicing)."""
        return self._base.slice_offset

    @property
    def slice_offset_in_bytes(self):
        """int: ``slice_offset * itemsize``."""
        return self._base.slice_offset * self._base.itemsize

    @property
    def ndim(self):
        """int: Number of dimensions."""
        return self._base.ext.ndim

    @property
    def shape(self):
        """tuple of int: Extent of each dimension."""
        return extents_shape_tuple(&self._base.ext)

    @property
    def strides(self):
        """tuple of int or None: Strides in elements; ``None`` for a layout made without them."""
        if _is_implicit(self):
            return None
        return extents_strides_tuple(&self._base.ext, 1)

    @property
    def strides_in_bytes(self):
        """tuple of int or None: Strides in bytes; ``None`` for a layout made without them."""
        if _is_implicit(self):
            return None
        return extents_strides_tuple(&self._base.ext, self._base.itemsize)

    @property
    def stride_order(self):
        """tuple of int: Axes from the largest to the smallest stride (ties: larger extent
        first, then lower axis); C order for a layout made without strides."""
        if _is_implicit(self):
            # strides=None means C order, whatever the extents (the zero strides of a layout
            # of no element would sort by extent)
            return tuple(range(self._base.ext.ndim))
        return self._base.stride_order

    @property
    def volume(self):
        """int: Number of elements."""
        return extents_volume(&self._base.ext)

    @property
    def is_unique(self):
        """bool: Every element has its own memory offset."""
        return self._base.is_unique

    @property
    def is_contiguous_c(self):
        """bool: Contiguous in C order."""
        return self._base.is_contiguous_c

    @property
    def is_contiguous_f(self):
        """bool: Contiguous in F order."""
        return self._base.is_contiguous_f

    @property
    def is_contiguous_any(self):
        """bool: Contiguous in some axis order."""
        return self._base.is_contiguous_any

    @property
    def is_dense(self):
        """bool: Contiguous in some order, with no slice offset."""
        return self._base.is_dense

    @property
    def offset_bounds(self):
        """tuple of int: ``(min_offset, max_offset)`` in elements; ``(0, -1)`` when empty."""
        if extents_volume(&self._base.ext) == 0:
            return (0, -1)
        return (self._base.min_offset, self._base.max_offset)

    @property
    def min_offset(self):
        """int: See :attr:`offset_bounds`."""
        return self.offset_bounds[0]

    @property
    def max_offset(self):
        """int: See :attr:`offset_bounds`."""
        return self.offset_bounds[1]

    def required_size_in_bytes(self):
        """Bytes a buffer needs so that every element of this layout lies inside it.

        Returns
        -------
        int
            ``(max_offset + 1) * itemsize``.

        Raises
        ------
        ValueError
            If some element lies below the base pointer (``min_offset < 0``).
        """
        lo, hi = self.offset_bounds
        if lo < 0:
            raise ValueError(
                "Allocation size for a layout that maps elements to negative memory offsets is "
                f"ambiguous. The layout's min_offset is {lo}.")
        return (hi + 1) * self._base.itemsize

    def flattened_axis_mask(self):
        """A mask of the axes :meth:`flattened` would merge into the axis before them.

        Returns
        -------
        int
            Bit ``i`` set: axis ``i`` merges into axis ``i - 1`` (cuda.core's rule: the stride
            of axis ``i - 1`` is that of axis ``i`` times its extent, whether or not the layout
            holds an element).  Masks of layouts with the same ``ndim`` combine with ``&``.
        """
        return _merge_mask(self._base)

    # --- derived layouts ----------------------------------------------------------------------

    def to_dense(self, stride_order="K"):
        """A dense layout with this shape and itemsize.

        Parameters
        ----------
        stride_order : {"K", "C", "F"} or tuple of int, optional
            ``"K"``: this layout's :attr:`stride_order`.

        Returns
        -------
        StridedLayout
            ``self`` when ``stride_order`` is a letter and this layout is already dense in
            that order (contiguous in it, any order for ``"K"``, with no slice offset): its
            strides, ``None`` included, are kept, as cuda.core keeps them.  Otherwise (a
            permutation always) a new dense layout, whose strides are all 0 when it holds no
            element.
        """
        return _to_dense(self, stride_order)

    def reshaped(self, shape):
        """The same elements, in C order, with another shape (no copy).

        Parameters
        ----------
        shape : tuple of int
            One extent may be -1 (inferred).

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            If the volumes differ or the strides cannot express the new shape.
        """
        cdef CoreLayout reshaped
        _as_shape_tuple(shape, "shape")
        try:
            reshaped = self._base.reshaped(shape)
        except ValueError:
            _reshape_error(extents_volume(&self._base.ext), shape)
            raise
        if extents_volume(&reshaped.ext) == 0:
            return _wrap(_zero_strides_if_empty(reshaped))
        # The same shape: the same strides (those of extents of 1 included), as numpy.
        return _wrap(self._base if reshaped == self._base or
                     reshaped.shape == self._base.shape else reshaped)

    def permuted(self, axis_order):
        """The layout with its axes reordered (numpy ``transpose``).

        Parameters
        ----------
        axis_order : tuple of int

        Returns
        -------
        StridedLayout
        """
        try:
            return _wrap(self._base.permuted(axis_order))
        except ValueError:
            _check_permutation(tuple(axis_order), self._base.ext.ndim,
                               "Invalid permutation:")
            raise

    def flattened(self, start_axis=0, end_axis=-1, mask=None):
        """Every run of adjacent axes that can be merged (within the range, or the mask),
        merged.

        Parameters
        ----------
        start_axis, end_axis : int, optional
            The inclusive range of axes considered; an empty range changes nothing.
        mask : int, optional
            Instead of the range: bit ``i`` lets axis ``i`` merge into axis ``i - 1`` (see
            :meth:`flattened_axis_mask`).

        Returns
        -------
        StridedLayout
            Each merged axis has the product of the extents and the stride of the last axis
            merged; the other axes keep their strides, whether or not the layout holds an
            element.  A 0-d layout gives shape ``(1,)``.
        """
        cdef int ndim = self._base.ext.ndim
        start_axis = _int_arg(start_axis, "start_axis")
        end_axis = _int_arg(end_axis, "end_axis")
        if mask is not None:
            mask = _int_arg(mask, "mask")
        start = start_axis + ndim if start_axis < 0 else start_axis
        end = end_axis + ndim if end_axis < 0 else end_axis
        if mask is None and not (start_axis == 0 and end_axis == -1):
            # cuda.core's checks and words (the defaults pass for any ndim, 0 included).
            if not 0 <= start < ndim:
                raise ValueError(f"Invalid start axis: {start_axis} out of range for {ndim}D "
                                 "tensor")
            if not 0 <= end < ndim:
                raise ValueError(f"Invalid end axis: {end_axis} out of range for {ndim}D tensor")
        if mask is not None and not 0 <= mask < 2 ** 64:
            raise OverflowError(f"mask {mask} does not fit in an unsigned 64-bit integer")
        if ndim == 0:
            return _wrap(CoreLayout((1,), (1,), self._base.itemsize, self._base.slice_offset))
        if mask is None:
            if start >= end:
                return _wrap(self._base)
            one = 1     # a Python int: masks of 64 axes overflow a C shift
            mask = ((one << (end + 1)) - 1) & ~((one << (start + 1)) - 1)
        # Where cuda.core's rule allows a merge, the core's allows it too (a layout of no
        # element merges wherever the mask says), so the AND of the masks is cuda.core's.
        return _wrap(self._base.merged(mask=mask & _merge_mask(self._base)))

    def squeezed(self):
        """The layout without axes of extent 1 (``(0,)`` with stride 0 when it is empty).

        Returns
        -------
        StridedLayout
        """
        if self._base.ext.ndim and extents_volume(&self._base.ext) == 0:
            return _wrap(CoreLayout((0,), (0,), self._base.itemsize, self._base.slice_offset))
        return _wrap(self._base.squeezed())

    def unsqueezed(self, axis):
        """The layout with axes of extent 1 inserted (numpy ``expand_dims``).

        Parameters
        ----------
        axis : int or sequence of int
            Positions in the result (negative count from its end), as a tuple, a list or any
            other sequence.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            With cuda.core's messages: an axis out of range, or one named twice (negative
            axes counted from the end first: ``(0, -3)`` of a 1-d layout names axis 0 twice).
        TypeError
            An axis that is not an integer (``1.0`` included), naming it.
        """
        axes = _axes_arg(axis, "axis")
        if not axes:
            return self
        n = self._base.ext.ndim + len(axes)
        inserted = set()
        # One pass in cuda.core's order: each axis is checked, then normalized, then compared
        # with those before it, so the first bad axis is the one reported.
        for a in axes:
            if not -n <= a < n:
                raise ValueError(f"Invalid axis: {a} out of range for {n}D tensor")
            a = a + n if a < 0 else a
            if a in inserted:
                raise ValueError(f"Axis {a} appears multiple times.")
            inserted.add(a)
        shape = extents_shape_tuple(&self._base.ext)
        strides = extents_strides_tuple(&self._base.ext, 1)
        new_shape = []
        k = 0
        for i in range(n):
            if i in inserted:
                new_shape.append(1)
            else:
                new_shape.append(shape[k])
                k += 1
        return _wrap(CoreLayout(tuple(new_shape),
                                _expand_dims_strides(tuple(new_shape), inserted, strides),
                                self._base.itemsize, self._base.slice_offset))

    def broadcast_to(self, shape):
        """The layout broadcast to ``shape`` (numpy's rules; new extents get stride 0).

        Parameters
        ----------
        shape : tuple of int

        Returns
        -------
        StridedLayout
        """
        shape = tuple(shape)
        if len(shape) < self._base.ext.ndim:
            raise ValueError(
                f"The broadcast shape ndim ({len(shape)}) must be greater than or equal to the "
                f"input shape ndim ({self._base.ext.ndim}).")
        try:
            return _wrap(self._base.broadcast_to(shape))
        except ValueError:
            own = self.shape
            lead = len(shape) - len(own)
            for i, extent in enumerate(own):
                if extent != 1 and extent != shape[lead + i]:
                    raise ValueError(
                        "Shapes cannot be broadcast together: the original extent must be 1 or "
                        f"be equal to broadcast extent, got {extent} and {shape[lead + i]} for "
                        f"axis {i}.") from None
            raise

    def repacked(self, itemsize, data_ptr=0, axis=-1, keep_dim=True):
        """The same bytes seen as elements of ``itemsize`` bytes, re-cut along ``axis``.

        Parameters
        ----------
        itemsize : int
        data_ptr : int, optional
            The address of element 0; it must be aligned to a larger new itemsize.
        axis : int, optional
            Its stride must be 1.
        keep_dim : bool, optional
            False: drop ``axis`` when its extent becomes 1.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            With cuda.core's messages: ``axis`` out of range, of extent 0 or not contiguous,
            ``itemsize`` not positive, and, packing, ``data_ptr``, the slice offset, ``axis``'s
            extent or another stride not fitting the new itemsize.
        """
        if itemsize == self._base.itemsize:
            return self
        if itemsize <= 0:
            raise ValueError(f"new itemsize must be greater than zero, got {itemsize}.")
        cdef int ax = _cc_axis(axis, self._base.ext.ndim)
        if self._base.ext.shape[ax] == 0:
            # the core re-cuts an empty axis; cuda.core refuses to, either way
            raise ValueError(f"The axis {ax} extent must be non-zero, got 0.")
        if extents_volume(&self._base.ext) == 0:
            # No element: the core re-cuts the axis whatever the strides; cuda.core checks them
            # as for a layout with elements (the axis stride, 0 for the layouts of no element
            # made with strides=None, whatever its extent; then those _repack_error names).
            if self._base.ext.strides[ax] != 1:
                raise ValueError(f"The axis {ax} stride must be 1, got "
                                 f"{self._base.ext.strides[ax]}.")
            _repack_error(self._base, itemsize, data_ptr, ax)
        try:
            return _wrap(self._base.repacked(itemsize, data_ptr, axis, keep_dim))
        except ValueError:
            _repack_error(self._base, itemsize, data_ptr, ax)
            raise

    def max_compatible_itemsize(self, max_itemsize=16, data_ptr=0, axis=-1):
        """The largest itemsize, at most ``max_itemsize``, that :meth:`repacked` accepts.

        Returns
        -------
        int
            The greatest common divisor of ``max_itemsize``, ``data_ptr``, the bytes of
            ``axis``, the slice offset in bytes and the strides in bytes of the other axes;
            ``itemsize`` where ``axis`` is not contiguous.  A layout of no element answers as
            one with elements would, from the same strides (``itemsize`` when ``axis`` has
            extent 0), as in cuda.core.

        Raises
        ------
        ValueError
            With cuda.core's messages: ``max_itemsize`` not positive or below ``itemsize``,
            ``axis`` out of range.
        """
        max_itemsize = _int_arg(max_itemsize, "max_itemsize")
        if max_itemsize <= 0:
            raise ValueError(f"max_itemsize must be greater than zero, got {max_itemsize}.")
        cdef int ax = _cc_axis(axis, self._base.ext.ndim)
        if max_itemsize < self._base.itemsize:
            raise ValueError(f"max_itemsize ({max_itemsize}) cannot be less than itemsize "
                             f"({self._base.itemsize}).")
        if extents_volume(&self._base.ext) == 0:
            # The core answers itemsize for a layout of no element (nothing to repack);
            # cuda.core answers from its strides, as repacked() checks them here.
            if self._base.ext.shape[ax] == 0 or self._base.ext.strides[ax] != 1:
                return self._base.itemsize
            ptr = 0 if data_ptr is None else _int_arg(data_ptr, "data_ptr")
            return extents_compatible_itemsize(&self._base.ext, self._base.itemsize,
                                               self._base.slice_offset, max_itemsize,
                                               <uint64_t> (ptr % max_itemsize), ax)
        return self._base.max_compatible_itemsize(max_itemsize, data_ptr, axis)

    def sliced(self, slices):
        """The layout of ``array[slices]`` (ints and slices).

        Parameters
        ----------
        slices : int, slice or tuple of them

        Returns
        -------
        StridedLayout
        """
        return _sliced(self, slices)

    def __getitem__(self, slices):
        """The same as :meth:`sliced`: ``layout[1:, ::2]``."""
        return _sliced(self, slices)

    # --- comparisons -------------------------------------------------------------------------

    def __eq__(self, other):
        if not isinstance(other, StridedLayout):
            return NotImplemented
        return self._base == (<StridedLayout> other)._base

    def __hash__(self):
        return hash(self._base)

    def __repr__(self):
        offset = (f", _slice_offset={self._base.slice_offset}"
                  if self._base.slice_offset else "")
        return (f"{type(self).__name__}(shape={self.shape}, strides={self.strides}, "
                f"itemsize={self._base.itemsize}{offset})")


cdef int _cc_axis(object axis, int ndim) except -1:
    """``axis`` normalized to ``[0, ndim)``, or cuda.core's ValueError."""
    axis = _int_arg(axis, "axis")
    if not -ndim <= axis < ndim:
        raise ValueError(f"Invalid axis: {axis} out of range for {ndim}D tensor")
    return axis % ndim


cdef object _int_arg(object value, str name):
    """``value`` as an int (what ``operator.index`` takes: ints, bools, numpy integers), or a
    TypeError naming the argument and the value.  cuda.core truncates floats (``1.5`` is axis
    1); an axis or a mask is an integer, so a float is refused, as extents are."""
    try:
        return PyNumber_Index(value)
    except TypeError:
        raise TypeError(f"Argument '{name}' has incorrect type (expected int, got "
                        f"{type(value).__name__} {value!r})") from None


cdef tuple _axes_arg(object axis, str name):
    """One axis, or a sequence of them (tuple, list, range, array), as a tuple of ints."""
    try:
        return (PyNumber_Index(axis),)
    except TypeError:
        pass
    try:
        items = tuple(axis)
    except TypeError:
        raise TypeError(f"Argument '{name}' has incorrect type (expected int or a sequence of "
                        f"ints, got {type(axis).__name__} {axis!r})") from None
    return tuple([_int_arg(a, name) for a in items])


cdef object _repack_error(CoreLayout base, object itemsize, object data_ptr, int ax):
    """Raise cuda.core's message for a repacking cuda.core refuses, where one names the cause
    (returns otherwise: after a refusal of the core's, the caller re-raises the core's own
    error)."""
    cdef int64_t isz = base.itemsize
    cdef tuple shape = extents_shape_tuple(&base.ext)
    cdef tuple strides = extents_strides_tuple(&base.ext, 1)
    if shape[ax] != 1 and strides[ax] != 1:
        raise ValueError(f"The axis {ax} stride must be 1, got {strides[ax]}.") from None
    if itemsize < isz or itemsize % isz:
        return None
    vec = itemsize // isz
    ptr = 0 if data_ptr is None else int(data_ptr)
    if ptr % itemsize:
        raise ValueError(f"The data pointer ({ptr}) must be aligned to the packed itemsize "
                         f"({itemsize}).") from None
    if shape[ax] % vec:
        raise ValueError(f"The axis {ax} extent ({shape[ax]}) must be divisible by "
                         f"{vec}.") from None
    if base.slice_offset % vec:
        raise ValueError(f"The slice offset ({base.slice_offset}) must be divisible by "
                         f"{vec}.") from None
    for i in range(len(shape)):
        if i != ax and shape[i] != 1 and strides[i] % vec:
            raise ValueError(f"The {i} axis stride ({strides[i]}) must be divisible by "
                             f"{vec}.") from None
    return None


cdef object _merge_mask(CoreLayout base):
    # cuda.core's rule, whether or not the layout holds an element: axis i merges into axis
    # i - 1 when stride[i - 1] == stride[i] * extent[i] (the core also merges extents of 1
    # whatever their strides, and every axis of a layout of no element).  The product is a
    # Python int: in a layout of no element, nothing bounds an extent times a stride.
    cdef int i
    mask = 0
    for i in range(1, base.ext.ndim):
        if base.ext.strides[i - 1] == (<object> base.ext.strides[i]) * base.ext.shape[i]:
            mask |= (<object> 1) << i
    return mask


cdef tuple _expand_dims_strides(tuple new_shape, set inserted, tuple strides):
    # cuda.core's rule (numpy's expand_dims for layouts without extents of 1): the dims keep
    # their strides; a new dim takes the stride times the extent of the next old dim, or, after
    # the last one, that dim's stride (1 when there is none).
    cdef list out = [None] * len(new_shape)
    cdef int i, k = 0
    old = []
    for i in range(len(new_shape)):
        if i not in inserted:
            out[i] = strides[k]
            old.append(i)
            k += 1
    last = out[old[len(old) - 1]] if old else 1
    for i in range(len(new_shape) - 1, -1, -1):
        if i in inserted:
            out[i] = last
        else:
            last = out[i] * new_shape[i]
    return tuple(out)


cdef StridedLayout _to_dense(StridedLayout layout, object stride_order):
    # to_dense and dense_like: cuda.core returns the layout itself where a letter names an order
    # it is already dense in (an empty layout is contiguous in every order), and makes a new
    # one otherwise, even for a permutation that describes the layout as it is.
    order = _order_arg(stride_order, True, layout._base.ext.ndim)
    if layout._base.slice_offset == 0 and isinstance(order, str) and (
            (order == "K" and layout._base.is_contiguous_any)
            or (order == "C" and layout._base.is_contiguous_c)
            or (order == "F" and layout._base.is_contiguous_f)):
        return layout
    return _wrap(_zero_strides_if_empty(layout._base.to_dense(order)))


cdef object _order_arg(object stride_order, bint allow_k, int ndim):
    """A stride order as the core takes it: "C", "F", "K" (where ``allow_k``) or a permutation
    of ``range(ndim)`` as a tuple of ints; anything else (None, an int, bytes) is cuda.core's
    ValueError naming the argument and the value."""
    if isinstance(stride_order, str):
        if stride_order in ("C", "F") or (allow_k and stride_order == "K"):
            return stride_order
    elif not isinstance(stride_order, (bytes, bytearray)):
        try:
            entries = tuple(stride_order)
        except TypeError:
            entries = None      # not a sequence: refused below
        if entries is not None:
            axes = tuple([_int_arg(a, "stride_order") for a in entries])
            _check_permutation(axes, ndim, "The stride order must be a permutation.")
            return axes
    names = "'K', 'C', 'F'" if allow_k else "'C', 'F'"
    raise ValueError(f"The stride_order must be {names}, or a permutation tuple. "
                     f"Got: {stride_order}")


cdef object _check_permutation(tuple axes, int ndim, str prefix):
    seen = set()
    if len(axes) != ndim:
        raise ValueError(f"Permutation must have the same length as the number of dimensions, "
                         f"got {len(axes)} for {ndim}D tensor.")
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"{prefix} axis {a} out of range for {ndim}D tensor")
        if a % ndim in seen:
            raise ValueError(f"{prefix} axis {a} appears multiple times.")
        seen.add(a % ndim)
    return None


cdef object _reshape_error(int64_t volume, tuple shape):
    # cuda.core's words for what the core refused (the first that applies).
    if any(e < -1 for e in shape):
        raise ValueError("Extents must be non-negative") from None
    if sum(1 for e in shape if e == -1) > 1:
        raise ValueError("There can be at most one -1 extent in a shape") from None
    known = 1
    for e in shape:
        if e != -1:
            known *= e
    if -1 in shape:
        if known == 0:
            raise ValueError("The -1 extent is ambiguous when the specified sub-volume is 0") \
                from None
        if volume % known:
            raise ValueError(f"The original volume {volume} must be divisible by the specified "
                             f"sub-volume {known}") from None
        known = volume
    if known != volume:
        raise ValueError(f"The original volume {volume} and the new volume {known} must be "
                         "equal.") from None
    raise ValueError("Layout strides are incompatible with the new shape") from None


cdef StridedLayout _sliced(StridedLayout self, object slices):
    cdef int ndim = self._base.ext.ndim, dim = 0
    cdef CoreLayout result
    key = slices if isinstance(slices, tuple) else (slices,)
    for item in key:
        if not isinstance(item, (int, slice)) or isinstance(item, bool):
            raise TypeError(f"Invalid slice: {item}. Expected slice instance or integer.")
    if len(key) > ndim:
        raise ValueError(f"The number of slices ({len(key)}) is greater than the number of "
                         f"dimensions ({ndim}).")
    try:
        result = self._base.sliced(key)
    except IndexError:
        for axis, item in enumerate(key):
            if isinstance(item, int):
                extent = self._base.ext.shape[axis]
                if not -extent <= item < extent:
                    raise ValueError(f"Invalid index: {item} out of range for axis {axis} with "
                                     f"extent {extent}") from None
        raise
    # cuda.core zeroes every stride when a slice selects no element along its axis; integer
    # indices and the axes left out keep theirs, even in a layout of no element.  Each slice
    # keeps its axis, in order, so `dim` is the result's axis of the slice at hand.
    for item in key:
        if isinstance(item, slice):
            if result.ext.shape[dim] == 0:
                return _wrap(_zero_strides_if_empty(result))
            dim += 1
    return _wrap(result)


# --- the decorator ----------------------------------------------------------------------------

@cython.final
cdef class _StridedMemoryViewProxy:
    """What a decorated function receives for each argument it asked to view."""

    cdef readonly object obj      # the argument as the caller passed it
    """object: The argument as passed."""
    cdef readonly bint has_dlpack
    """bool: Whether the argument offers DLPack (else the CUDA Array Interface)."""

    def __init__(self, obj):
        self.obj = obj
        if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
            self.has_dlpack = True
        elif hasattr(obj, "__cuda_array_interface__"):
            self.has_dlpack = False
        else:
            raise _no_protocol(obj)

    cpdef view(self, stream_ptr=None):
        """The argument's :class:`StridedMemoryView`, ordered on ``stream_ptr``.

        Parameters
        ----------
        stream_ptr : int, optional
            The consumer stream; ``-1`` or ``None``: no ordering.

        Returns
        -------
        StridedMemoryView
        """
        return _view_of(PROTOCOL_DLPACK if self.has_dlpack else PROTOCOL_CAI, self.obj,
                        _no_order(stream_ptr))


# The in-place retyping above relies on these (checked once, at import).
if (StridedMemoryView.__basicsize__ != CoreView.__basicsize__
        or PyType_GetFlags(<PyTypeObject*> StridedMemoryView) & Py_TPFLAGS_HEAPTYPE):
    raise ImportError("interop_core.compat: the compat view's C layout differs from the core's")

# The compat view adds no field, so it dies as a core view does: the core's deallocator (the
# core's _release_and_dealloc, installed as the core type's tp_dealloc when the core module was
# imported, before this one).  The one Cython generated for the subclass only untracks the object
# from the garbage collector, tracks it again and calls the core's.
(<PyTypeObject*> StridedMemoryView).tp_dealloc = (<PyTypeObject*> CoreView).tp_dealloc

# The core's accessors (ptr, shape, size, readonly, owner, ...), made for the compat type: read
# on a compat view, the core's own descriptors would check the subclass relation on every read.
interop_compat_rebind_descriptors(<PyTypeObject*> StridedMemoryView, <PyTypeObject*> CoreView)

# from_dlpack and the other constructors found as plain functions (the core's, _view.pyx).
plain_static_methods(StridedMemoryView)
