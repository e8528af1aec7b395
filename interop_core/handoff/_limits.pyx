# What a target framework can import (ImportLimits), declared once by the exporter's plugin
# (`registry.add_exporter(..., limits=ImportLimits(...))`) and checked by to() on the view
# record before the exporter runs.
#
# Why before, and in one place: a consumer handed a layout it cannot take may abort the
# interpreter (torch's DLPack import throws a C++ exception through a noexcept boundary for
# negative strides or a span beyond int64), copy behind the caller's back (jax, host memory not
# aligned to 64 bytes) or change the dtype (jax without x64).  The exporter learns of it too
# late to honour copy=; to() knows whether the call allows a copy, so it either hands over a
# dense copy or raises a BufferError naming the limit, the value and the fix.
#
# Cost: what to() reads on every call is `layout_bits` (0 for a target that takes every
# layout: numpy, cupy) and one bit of `device_mask`; the layout walk below runs only for
# targets that declared a layout limit, over a record already in cache.

from cpython.exc cimport PyErr_Occurred
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport strcmp

from ..core._dtypes cimport describe_dtype
from ..core._layout cimport extents_shape_tuple, extents_strides_tuple, layout_from_extents
from ..core._record cimport MAX_NDIM, ViewRecord
from ..core._view cimport StridedMemoryView

import operator

__all__ = ["ImportLimits", "ExportRule", "new_export_rule"]

# The capsule name of a C export rule (registry.add_export_rule; plugins.EXPORT_RULE_CAPSULE).
cdef str EXPORT_RULE_CAPSULE = "interop_core.export_rule_v1"

cdef enum:
    KDL_CPU = 1
    KDL_CUDA_HOST = 3
    KDL_ROCM_HOST = 11

cdef tuple _LAYOUTS = ("strided", "compact", "c_contiguous")


cdef inline uint32_t _dtype_key(int code, int bits, int lanes) noexcept:
    return (<uint32_t> (code & 0xff) << 24) | (<uint32_t> (bits & 0xff) << 16) | (lanes & 0xffff)


cdef class ImportLimits:
    """What a target framework can import: the layouts, memory and dtypes ``to()`` may hand it.

    A plugin declares it with its exporter (``registry.add_exporter(target, exporter,
    limits=ImportLimits(...))``).  Before the exporter runs, :func:`interop_core.to` checks the
    source against it: a layout or address the target cannot take is copied (``copy=None``:
    dense, on the source's device and the given stream) or refused with a ``BufferError``
    naming the limit, the value and the fix (``copy=False``); memory on a device type the target
    does not import, and what ``check`` refuses, are refused whatever ``copy`` says.  The
    defaults take everything: ``ImportLimits()`` changes nothing.

    Parameters
    ----------
    negative_strides : bool, optional
        The target imports negative strides (torch does not: its DLPack import aborts).
    zero_strides : bool, optional
        The target imports zero (broadcast) strides.
    overlapping : bool, optional
        The target imports layouts whose elements overlap (zero strides included).
    layout : {"strided", "compact", "c_contiguous"}, optional
        ``"strided"``: any strides the flags above allow.  ``"compact"``: a permutation of a
        dense layout (every element once, no gaps, positive strides: jax).
        ``"c_contiguous"``: dense row-major only.  Dimensions of extent 1 may have any stride.
    host_alignment : int, optional
        Bytes the address of host memory (DLPack CPU, CUDA-pinned and ROCm-pinned) must be a
        multiple of (jax on the CPU: 64); 1 for any.
    device_types : iterable of int, optional
        The DLPack device types the target imports (numpy: host-accessible ones); ``None``
        for any.  A view on another kind of memory is refused: the user passes ``device=``.
    check : callable, optional
        ``check(view) -> None or str``: a limit no copy fixes, asked before anything is copied
        (jax without ``jax_enable_x64``: 64-bit types).  A str says why the target cannot
        take the view and how to fix it; ``to()`` raises ``BufferError`` with it.
    check_dtypes : iterable of tuple, optional
        DLPack ``(code, bits, lanes)`` triples: ``check`` is asked only about views of these
        types (so that every other handoff costs nothing).  ``None``: about every view.
    resolve_device : callable, optional
        ``resolve_device(device) -> (device_type, device_id, handle)``, for a target that
        places its objects itself (jax: its device objects, several host devices): the DLPack
        device the memory must be on, and what the exporter is then called with as
        ``exporter(view, stream, device=handle)``.  Raise ``ValueError`` for a device the
        target does not have.  Without it, ``to(..., device=)`` takes the core's spellings
        (``"cpu"``, ``"cuda:N"``, a DLPack pair, ``torch.device``) and only one host device.
    source_device : callable, optional
        ``source_device(view) -> handle or None``, for a target with several devices of one
        DLPack device (jax's host devices all say ``(kDLCPU, 0)``): the device handle the
        source's memory is on, asked before ``to()`` copies a view without ``device=``, so
        that the copy is handed on as ``exporter(copy, stream, device=handle)`` and lands
        beside its source.  None: the exporter decides, as for any view.

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type or out of range, naming them.
    """

    def __init__(self, *, bint negative_strides=True, bint zero_strides=True,
                 bint overlapping=True, layout="strided", host_alignment=1, device_types=None,
                 check=None, check_dtypes=None, resolve_device=None, source_device=None):
        cdef int bits = 0
        cdef int k
        if layout not in _LAYOUTS:
            raise ValueError(f"ImportLimits: layout must be one of {_LAYOUTS}, got {layout!r}")
        if isinstance(host_alignment, bool):
            raise TypeError(f"ImportLimits: host_alignment must be an int, got {host_alignment!r}")
        try:
            alignment = operator.index(host_alignment)
        except TypeError:
            raise TypeError(f"ImportLimits: host_alignment must be an int, got "
                            f"{host_alignment!r}") from None
        if not 1 <= alignment <= 1 << 20:
            raise ValueError(f"ImportLimits: host_alignment must be between 1 and 2**20 bytes, "
                             f"got {alignment}")
        types = None
        if device_types is not None:
            types = tuple(device_types)
            for t in types:
                if type(t) is bool or not isinstance(t, int) or not 0 <= t < 64:
                    raise ValueError(f"ImportLimits: device_types must be DLPack device types "
                                     f"(ints 0..63), got {t!r} in {types!r}")
        if check is not None and not callable(check):
            raise TypeError(f"ImportLimits: check must be callable, got {type(check).__name__}")
        dtypes = None
        if check_dtypes is not None:
            if check is None:
                raise ValueError("ImportLimits: check_dtypes filters check=, which is missing")
            dtypes = tuple(tuple(d) for d in check_dtypes)
            if len(dtypes) > MAX_CHECK_DTYPES:
                raise ValueError(f"ImportLimits: at most {MAX_CHECK_DTYPES} check_dtypes, got "
                                 f"{len(dtypes)}")
            for d in dtypes:
                if (len(d) != 3 or not all(isinstance(x, int) and type(x) is not bool for x in d)
                        or not (0 <= d[0] < 256 and 0 < d[1] < 256 and 0 < d[2] < 65536)):
                    raise ValueError(f"ImportLimits: check_dtypes must hold DLPack (code, bits, "
                                     f"lanes) triples, got {d!r}")
        if resolve_device is not None and not callable(resolve_device):
            raise TypeError(f"ImportLimits: resolve_device must be callable, got "
                            f"{type(resolve_device).__name__}")
        if source_device is not None and not callable(source_device):
            raise TypeError(f"ImportLimits: source_device must be callable, got "
                            f"{type(source_device).__name__}")
        self.negative_strides = negative_strides
        self.zero_strides = zero_strides
        self.overlapping = overlapping
        self.layout = layout
        self.host_alignment = alignment
        self.device_types = types
        self.check = check
        self.has_check = check is not None
        self.check_dtypes = dtypes
        self.resolve_device = resolve_device
        self.source_device = source_device
        if not negative_strides:
            bits |= LIMIT_NEGATIVE_STRIDES
        if not zero_strides:
            bits |= LIMIT_ZERO_STRIDES
        if not overlapping:
            bits |= LIMIT_OVERLAPPING
        if layout == "compact":
            bits |= LIMIT_COMPACT
        elif layout == "c_contiguous":
            bits |= LIMIT_C_CONTIGUOUS
        if alignment > 1:
            bits |= LIMIT_ALIGNMENT
        if bits:
            # A target that checks layouts at all computes their span too (torch aborts on one
            # beyond int64): such a view describes no memory, so it is refused first.
            bits |= LIMIT_SPAN
        self.layout_bits = bits
        self.device_any = types is None
        self.device_mask = 0
        for t in types or ():
            self.device_mask |= (<uint64_t> 1) << <int> t
        if dtypes is None:
            self.n_check_dtypes = -1
        else:
            self.n_check_dtypes = len(dtypes)
            for k in range(self.n_check_dtypes):
                self.check_dtype_keys[k] = _dtype_key(dtypes[k][0], dtypes[k][1], dtypes[k][2])

    def problem(self, view):
        """What about ``view`` the target cannot import, in words, or None.

        Every limit: layout, address, device type and ``check``.  ``to()`` asks the same
        questions in C; this is for exporters called on their own, tests and messages.

        Parameters
        ----------
        view : interop_core.StridedMemoryView

        Returns
        -------
        str or None
        """
        cdef ViewRecord* rec
        cdef int found
        if type(view) is not StridedMemoryView:
            raise TypeError(f"ImportLimits.problem() takes a StridedMemoryView, got "
                            f"{type(view).__name__}")
        rec = &(<StridedMemoryView> view).rec
        if not device_imported(self, rec):
            limit, value = describe_problem(self, LIMIT_DEVICE, rec)
            return f"{limit}: {value}"
        if check_applies(self, rec):
            said = self.check(view)
            if said is not None:
                return str(said)
        found = layout_problem(self, rec)
        if found == 0:
            return None
        limit, value = describe_problem(self, found, rec)
        return f"{limit}: {value}"

    def __repr__(self):
        parts = []
        if not self.negative_strides:
            parts.append("negative_strides=False")
        if not self.zero_strides:
            parts.append("zero_strides=False")
        if not self.overlapping:
            parts.append("overlapping=False")
        if self.layout != "strided":
            parts.append(f"layout={self.layout!r}")
        if self.host_alignment != 1:
            parts.append(f"host_alignment={self.host_alignment}")
        if self.device_types is not None:
            parts.append(f"device_types={self.device_types!r}")
        if self.check is not None:
            parts.append(f"check={self.check!r}")
        if self.check_dtypes is not None:
            parts.append(f"check_dtypes={self.check_dtypes!r}")
        if self.resolve_device is not None:
            parts.append(f"resolve_device={self.resolve_device!r}")
        if self.source_device is not None:
            parts.append(f"source_device={self.source_device!r}")
        return f"ImportLimits({', '.join(parts)})"


cdef extern from *:
    """
    #define ic_limits_mul_ovf(a, b, out) __builtin_mul_overflow((a), (b), (out))
    #define ic_limits_add_ovf(a, b, out) __builtin_add_overflow((a), (b), (out))
    """
    bint _mul_overflows "ic_limits_mul_ovf"(int64_t a, int64_t b, int64_t* out) noexcept
    bint _add_overflows "ic_limits_add_ovf"(int64_t a, int64_t b, int64_t* out) noexcept


cdef inline int64_t _abs64(int64_t x) noexcept:
    return -x if x < 0 else x


cdef bint _is_compact(const ViewRecord* rec) noexcept:
    """A permutation of a dense layout: taken by increasing stride, the dimensions of extent
    > 1 have strides 1, then the product of the extents before."""
    cdef int i, j, best, n = rec.ext.ndim
    cdef int64_t expected = 1
    cdef bint used[MAX_NDIM]
    for i in range(n):
        used[i] = False
        if rec.ext.shape[i] == 0:
            return True
    for i in range(n):
        best = -1
        for j in range(n):
            if (not used[j] and rec.ext.shape[j] > 1
                    and (best < 0 or rec.ext.strides[j] < rec.ext.strides[best])):
                best = j
        if best < 0:
            return True
        if rec.ext.strides[best] != expected:
            return False
        used[best] = True
        expected *= rec.ext.shape[best]
    return True


cdef bint _is_c_contiguous(const ViewRecord* rec) noexcept:
    cdef int i
    cdef int64_t expected = 1
    for i in range(rec.ext.ndim):
        if rec.ext.shape[i] == 0:
            return True
    for i in range(rec.ext.ndim - 1, -1, -1):
        if rec.ext.shape[i] == 1:
            continue
        if rec.ext.strides[i] != expected:
            return False
        expected *= rec.ext.shape[i]
    return True


cdef int layout_problem(ImportLimits limits, const ViewRecord* rec) noexcept:
    cdef int bits = limits.layout_bits
    cdef int i, found = 0
    cdef int64_t extent, stride, reach = 0, step
    cdef bint overflow = False
    if bits == 0:
        return 0
    # One pass: an empty view (nothing is read: any layout will do, but not any address --
    # jax refuses unaligned host memory even for no elements), the span (a view beyond int64
    # bytes describes no memory), negative and zero strides.
    for i in range(rec.ext.ndim):
        extent = rec.ext.shape[i]
        if extent == 0:
            return _alignment_problem(limits, rec, bits)
        if extent == 1:
            continue
        stride = rec.ext.strides[i]
        if stride < 0:
            if bits & LIMIT_NEGATIVE_STRIDES and not found:
                found = LIMIT_NEGATIVE_STRIDES
            stride = -stride
        elif stride == 0 and bits & LIMIT_ZERO_STRIDES and not found:
            found = LIMIT_ZERO_STRIDES
        overflow = (overflow or _mul_overflows(extent - 1, stride, &step)
                    or _add_overflows(reach, step, &reach))
    if overflow or _add_overflows(reach, 1, &reach) or _mul_overflows(
            reach, rec.itemsize if rec.itemsize > 0 else 1, &reach):
        return LIMIT_SPAN
    if found:
        return found
    if bits & LIMIT_COMPACT and not _is_compact(rec):
        return LIMIT_COMPACT
    if bits & LIMIT_C_CONTIGUOUS and not _is_c_contiguous(rec):
        return LIMIT_C_CONTIGUOUS
    if bits & LIMIT_OVERLAPPING and not _is_unique(rec):
        return LIMIT_OVERLAPPING
    return _alignment_problem(limits, rec, bits)


cdef inline int _alignment_problem(ImportLimits limits, const ViewRecord* rec, int bits) noexcept:
    if (bits & LIMIT_ALIGNMENT and (rec.device_type == KDL_CPU or rec.device_type == KDL_CUDA_HOST
                                    or rec.device_type == KDL_ROCM_HOST)
            and rec.ptr % <uint64_t> limits.host_alignment):
        return LIMIT_ALIGNMENT
    return 0


cdef bint _is_unique(const ViewRecord* rec) noexcept:
    # The layout's own answer (exact but for pathological layouts, where it says False).  Only
    # for targets that refuse overlapping layouts; none of the first-party ones do.
    try:
        return layout_from_extents(&rec.ext, rec.itemsize, 0).is_unique
    except Exception:
        return False


cdef bint check_applies(ImportLimits limits, const ViewRecord* rec) noexcept:
    cdef int k
    cdef uint32_t key
    if not limits.has_check:
        return False
    if limits.n_check_dtypes < 0:
        return True
    key = _dtype_key(rec.dtype.code, rec.dtype.bits, rec.dtype.lanes)
    for k in range(limits.n_check_dtypes):
        if limits.check_dtype_keys[k] == key:
            return True
    return False


cdef tuple describe_problem(ImportLimits limits, int problem, const ViewRecord* rec):
    shape = extents_shape_tuple(&rec.ext)
    strides = extents_strides_tuple(&rec.ext, 1)
    layout = f"the view has shape {shape} and strides {strides} (in elements)"
    if problem == LIMIT_NEGATIVE_STRIDES:
        return ("cannot import negative strides", f"the view has strides {strides}")
    if problem == LIMIT_ZERO_STRIDES:
        return ("cannot import zero (broadcast) strides", f"the view has strides {strides}")
    if problem == LIMIT_OVERLAPPING:
        return ("cannot import layouts whose elements overlap", layout)
    if problem == LIMIT_COMPACT:
        return ("imports only compact layouts (a permutation of a dense array)", layout)
    if problem == LIMIT_C_CONTIGUOUS:
        return ("imports only C-contiguous (dense row-major) layouts", layout)
    if problem == LIMIT_ALIGNMENT:
        return (f"imports only host memory aligned to {limits.host_alignment} bytes",
                f"the view's address is {rec.ptr:#x}, "
                f"{rec.ptr % <uint64_t> limits.host_alignment} bytes past a multiple of "
                f"{limits.host_alignment}")
    if problem == LIMIT_SPAN:
        return ("cannot import layouts reaching beyond 2**63 bytes (they describe no memory)",
                f"{layout}, of {describe_dtype(rec.dtype)}")
    if problem == LIMIT_DEVICE:
        return (f"imports memory of DLPack device types {limits.device_types} only",
                f"the view is on DLPack device ({rec.device_type}, {rec.device_id})")
    return (f"breaks limit {problem}", layout)


# --- export rules of source types (registry.add_export_rule) -----------------------------------

cdef class ExportRule:
    """A source type's export rule, as ``to()`` applies it (made by :func:`new_export_rule`)."""

    def __init__(self):
        raise TypeError("use interop_core.handoff._limits.new_export_rule(rule)")

    def __call__(self, obj):
        """Apply the rule: None, or the rule's exception raised."""
        apply_rule(self, obj)

    def __repr__(self):
        return f"ExportRule({self.rule!r})"


def new_export_rule(rule, subclasses=False):
    """What a plugin registered as an export rule, checked and made applicable.

    Parameters
    ----------
    rule : callable or PyCapsule
        ``rule(obj) -> None`` (raising to refuse), or a capsule named
        ``"interop_core.export_rule_v1"`` holding ``int rule(PyObject *obj)``.
    subclasses : bool, optional
        Apply the rule to subclasses of its type too (those without an exact rule of their
        own).

    Returns
    -------
    ExportRule

    Raises
    ------
    ValueError
        For a capsule of another name, or holding NULL.
    TypeError
        For anything that is neither callable nor a capsule.
    """
    cdef ExportRule made = ExportRule.__new__(ExportRule)
    cdef const char* name
    if PyCapsule_CheckExact(rule):
        name = PyCapsule_GetName(rule)
        if name == NULL or strcmp(name, b"interop_core.export_rule_v1") != 0:
            shown = None if name == NULL else (<bytes> name).decode("utf-8", "replace")
            raise ValueError(f"an export rule capsule must be named "
                             f"{EXPORT_RULE_CAPSULE!r}, got {shown!r}")
        made.fn = <export_rule_fn> PyCapsule_GetPointer(rule, name)
        if made.fn == NULL:
            raise ValueError("the export rule capsule holds a NULL function pointer")
    elif not callable(rule):
        raise TypeError(f"an export rule must be callable or a PyCapsule named "
                        f"{EXPORT_RULE_CAPSULE!r}, got {type(rule).__name__}")
    made.rule = rule
    made.subclasses = bool(subclasses)
    return made


cdef int rule_failed() except -1:
    if PyErr_Occurred() == NULL:
        raise SystemError("a C export rule returned non-zero without setting an exception")
    return -1


cdef int call_python_rule(ExportRule rule, object obj) except -1:
    rule.rule(obj)
    return 0
