# The torch reader: exact torch.Tensor / torch.nn.Parameter -> interop_core_tensor_info through
# the PyTorch AOTI stable C ABI (torch/csrc/inductor/aoti_torch/c/shim.h), registered through
# interop-core's public C ABI (interop_core.h, version 2) exactly as a third party's would be.
#
# Nothing here is a build-time dependency on torch: the aoti_torch_* functions are looked up
# with dlopen(RTLD_NOLOAD) / dlsym in the torch libraries the process has already loaded, by
# prepare() (importing this module imports no framework).
#
# Two undocumented details of torch are relied on; prepare() finds both and checks them against
# torch's Python API before the reader is used, then the core reads every canary with this
# reader and with the fallback and compares (registry prepare= / canaries=):
# - where the at::Tensor (whose address is an AtenTensorHandle) sits in the Python tensor
#   object: right after PyObject_HEAD, either directly (torch >= 2.12-ish) or inside a
#   c10::MaybeOwned<at::Tensor> (a bool, then a union of a borrowed pointer and an owned
#   tensor; older torch).  Told apart by comparing with Tensor._cdata, the TensorImpl address.
# - where the TensorImpl keeps its DispatchKeySet, and which of its bits mean "conjugate",
#   "negative", "nested", "zero tensor": found by diffing canary tensors that differ in exactly
#   one of those properties.  One 64-bit load then tells, per call, that a tensor's memory does
#   not mean what its metadata says; without it (not found) the reader asks the Python API
#   (is_neg() always, is_conj() for complex dtypes) at some tens of ns per call.
# Anything unexpected (a missing symbol, a canary read differently) installs the fallback,
# `read_checked`, for the rest of the process.
#
# The direct path (_read_fields): for plain tensors the reader reads the TensorImpl's own fields
# (inline sizes / strides, storage offset, numel, dtype, device, the StorageImpl's data
# pointer) instead of calling the AOTI shims, ~8 calls per tensor.  prepare() finds every
# offset by comparing canary tensors' memory with the shims' answers (_find_fields), checks the
# result on a second set against the shims and torch's Python API (_check_fields), and keeps
# the AOTI path when anything is not found or differs; tensors that are not plain (see
# _read_fields) go through the AOTI path still.  `doctor` reports which is in use ("fields").
#
# Per object, the reader declines (returns INTEROP_CORE_READ_DECLINED; the core then calls the
# fallback) whatever its one pass cannot describe: conjugate / negative / nested / zero tensors,
# layouts other than strided, devices other than CPU and CUDA, dtypes outside its table, tensors
# without memory.  The fallback names why such a tensor cannot be viewed (BufferError), or reads
# it through torch's DLPack (other devices, dtypes we do not map).
#
# Memory: the reader leaves `keepalive` NULL, so a view keeps the tensor object itself alive,
# which keeps its storage alive.

from cpython.object cimport PyObject
from cpython.exc cimport PyErr_Occurred
from cpython.ref cimport Py_REFCNT
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from libc.stdint cimport int8_t, int32_t, int64_t, intptr_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

from interop_core.abi cimport (
    INTEROP_CORE_READ_DECLINED,
    INTEROP_CORE_READ_OK,
    INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE,
    INTEROP_CORE_READER_V2_CAPSULE,
    interop_core_tensor_info,
    interop_core_api,
    interop_core_import_api,
)

from interop_core import StridedMemoryView

__all__ = ["reader_capsule", "read_checked", "prepare", "canaries", "aoti_producer_stream",
           "to_torch", "import_limits", "export_rule_capsule", "export_rule_status",
           "equivalence_check_capsule"]


cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char* filename, int flags)
    void* dlsym(void* handle, const char* symbol)
    int RTLD_LAZY
    int RTLD_NOLOAD


cdef enum:
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_COMPLEX = 5
    MAX_NDIM = 64            # what interop-core views hold; deeper tensors go to the fallback


# The shim's signatures (AOTITorchError is int32_t, 0 = success; AtenTensorHandle is an
# at::Tensor*; int32_t codes for dtype / device / layout come from the constant getters).
ctypedef int32_t (*get_ptr_fn)(void* h, void** out) noexcept nogil
ctypedef int32_t (*get_i64_fn)(void* h, int64_t* out) noexcept nogil
ctypedef int32_t (*get_arr_fn)(void* h, int64_t** out) noexcept nogil
ctypedef int32_t (*get_i32_fn)(void* h, int32_t* out) noexcept nogil
ctypedef int32_t (*const_fn)() noexcept nogil
ctypedef int32_t (*cuda_stream_fn)(int32_t device_index, void** out) noexcept nogil

# All set by prepare(), before _ready.
cdef get_ptr_fn _get_data_ptr = NULL
cdef get_i64_fn _get_dim = NULL
cdef get_arr_fn _get_sizes = NULL
cdef get_arr_fn _get_strides = NULL
cdef get_i32_fn _get_dtype = NULL
cdef get_i32_fn _get_device_type = NULL
cdef get_i32_fn _get_device_index = NULL
cdef get_i32_fn _get_layout = NULL
# torch's current CUDA stream (only in libtorch_cuda): set only once prepare() saw it agree with
# torch.cuda.current_stream(); NULL otherwise (the plugin's Python strategy is used instead).
cdef cuda_stream_fn _get_cuda_stream = NULL

cdef int32_t _dev_cpu = -1
cdef int32_t _dev_cuda = -1
cdef int32_t _layout_strided = -1

# torch ScalarType code -> DLPack triple; bits 0 marks a code we do not map (declined).
cdef enum:
    N_CODES = 64

ctypedef struct Triple:
    uint8_t code
    uint8_t bits
    uint16_t lanes

cdef Triple _dl_of[N_CODES]

# Where the at::Tensor sits in the Python object.
cdef enum:
    HANDLE_UNKNOWN = 0
    HANDLE_DIRECT = 1        # at::Tensor right after PyObject_HEAD
    HANDLE_MAYBE_OWNED = 2   # c10::MaybeOwned<at::Tensor>: bool is_borrowed, then the union
cdef int _handle_mode = HANDLE_UNKNOWN
cdef Py_ssize_t _head = sizeof(PyObject)
cdef Py_ssize_t _union_at = (sizeof(PyObject) + 1 + sizeof(void*) - 1) // sizeof(void*) * sizeof(void*)

# The DispatchKeySet word in TensorImpl and the bits that send a tensor to the fallback; -1 when
# not in use (the Python API is asked instead).  _found_* keep what prepare() found.
cdef Py_ssize_t _keyset_at = -1
cdef uint64_t _bad_keys = 0
cdef Py_ssize_t _found_keyset_at = -1
cdef uint64_t _found_bad_keys = 0

cdef bint _ready = False     # prepare() set everything above: the reader may run
cdef bint _cuda_ok = False   # CUDA tensors are read too (CUDA was available and checked)
# CUDA was available but not initialized when prepare() ran: validating would have created a
# CUDA context for a process that may never use one, so the CUDA half is checked, once, when
# the fallback meets the first CUDA tensor (CUDA is initialized then).
cdef bint _cuda_pending = False
cdef cuda_stream_fn _found_cuda_stream_fn = NULL   # AOTI's current-stream getter, if exported

# torch.Tensor.is_neg / is_conj (owned here), for the per-call checks without the key set.
cdef object _is_neg = None
cdef object _is_conj = None
cdef object _torch = None    # the torch module, once imported by prepare() or the fallback

# Whether the running core sets `batch` (ABI version 3; an older core's struct ends before it),
# and the current stream last read within a batch: one launch_args call over many tensors of a
# device asks torch for that device's current stream once.
cdef bint _core_sets_batch = interop_core_import_api(0).abi_version >= 3
cdef uint64_t _stream_batch = 0
cdef int32_t _stream_device = -1
cdef void* _stream_of_batch = NULL
cdef dict _details = None    # what prepare() reported, once it succeeded in this process

# Direct field reads (see "the direct path" below): where prepare() found each TensorImpl /
# StorageImpl field, by comparing canary tensors' memory with the AOTI shims' answers.  Only
# read while _fields is set (found and checked); _found_fields keeps what prepare() found, for
# the test switch _set_field_reads.
cdef bint _fields = False
cdef bint _found_fields = False
# The plain c10::TensorImpl's vtable address (libc10's, never freed): compared, never followed.
# Every TensorImpl subclass (nested, sparse, quantized, functional, batched, opaque) has another.
cdef void* _f_vtable = NULL
cdef Py_ssize_t _f_keyset_at = 0     # TensorImpl: DispatchKeySet (uint64)
cdef uint64_t _f_odd_keys = 0        # key bits of tensors the AOTI path must judge
cdef Py_ssize_t _f_flags_at = 0      # TensorImpl: first byte of the bit fields after the device
cdef uint64_t _f_flags_mask = 0      # bits of those 8 bytes set by custom sizes/strides/device/layout
cdef Py_ssize_t _f_ndim_at = 0       # TensorImpl: SizesAndStrides::size_ (size_t)
cdef Py_ssize_t _f_sizes_at = 0      # TensorImpl: the inline sizes (int64[_f_inline])
cdef Py_ssize_t _f_strides_at = 0    # TensorImpl: the inline strides (int64[_f_inline])
cdef uint64_t _f_inline = 0          # ndim the inline storage holds; deeper ones use AOTI
cdef Py_ssize_t _f_offset_at = 0     # TensorImpl: storage_offset_ (int64, elements)
cdef Py_ssize_t _f_numel_at = 0      # TensorImpl: numel_ (int64)
cdef Py_ssize_t _f_dtype_at = 0      # TensorImpl: caffe2::TypeMeta index (uint16) == ScalarType
cdef Py_ssize_t _f_device_at = 0     # TensorImpl: optional<Device>: type, index, has_value bytes
cdef Py_ssize_t _f_storage_at = 0    # TensorImpl: intrusive_ptr<StorageImpl> (one pointer)
cdef Py_ssize_t _f_data_at = 0       # StorageImpl: DataPtr's data pointer
cdef Py_ssize_t _f_check_at = 0      # StorageImpl: the "data pointer access has checks" flag
cdef uint8_t _itemsize_of[N_CODES]   # bytes per element, per torch ScalarType code (0: unknown)


# --- the reader (the hot path) -----------------------------------------------------------------

cdef inline void* _handle_of(PyObject* obj) noexcept:
    cdef char* base = <char*> obj
    if _handle_mode == HANDLE_DIRECT:
        return base + _head
    # MaybeOwned: borrowed -> the union holds a const at::Tensor*; owned -> the tensor itself.
    if (<uint8_t*> (base + _head))[0]:
        return (<void**> (base + _union_at))[0]
    return base + _union_at


cdef inline uint64_t _keyset_of(void* handle) noexcept:
    # at::Tensor is an intrusive_ptr<TensorImpl>: one pointer to the TensorImpl.
    cdef char* impl = <char*> (<void**> handle)[0]
    return (<uint64_t*> (impl + _keyset_at))[0]


cdef int read_tensor(PyObject* obj, PyObject* stream, interop_core_tensor_info* out) except -1:
    cdef void* h
    cdef int32_t layout, dtype, dev_type
    cdef int32_t dev_index = 0
    cdef int64_t ndim, numel
    cdef int64_t* sizes
    cdef int64_t* strides
    cdef void* data
    cdef int i
    if not _ready:
        return INTEROP_CORE_READ_DECLINED
    h = _handle_of(obj)
    if _keyset_at >= 0:
        if _keyset_of(h) & _bad_keys:
            return INTEROP_CORE_READ_DECLINED
    elif _is_neg(<object> obj):
        return INTEROP_CORE_READ_DECLINED
    if _fields and _read_fields(<char*> (<void**> h)[0], out):
        return _producer_stream(out)
    if _get_layout(h, &layout) != 0 or layout != _layout_strided:
        return INTEROP_CORE_READ_DECLINED
    if _get_dtype(h, &dtype) != 0 or dtype < 0 or dtype >= N_CODES or _dl_of[dtype].bits == 0:
        return INTEROP_CORE_READ_DECLINED
    # Only complex tensors can carry the conjugate bit: ask only for them.  (Asked before torch's
    # extents are taken below: nothing Python-level runs between that and the core's copy.)
    if _keyset_at < 0 and _dl_of[dtype].code == KDL_COMPLEX and _is_conj(<object> obj):
        return INTEROP_CORE_READ_DECLINED
    if _get_device_type(h, &dev_type) != 0:
        return INTEROP_CORE_READ_DECLINED
    if dev_type == _dev_cpu:
        out.device_type = KDL_CPU
        out.device_id = 0
    elif dev_type == _dev_cuda and _cuda_ok:
        if _get_device_index(h, &dev_index) != 0:
            return INTEROP_CORE_READ_DECLINED
        out.device_type = KDL_CUDA
        out.device_id = dev_index
    else:
        return INTEROP_CORE_READ_DECLINED
    # Nested tensors fail here (they have no sizes).
    if (_get_dim(h, &ndim) != 0 or ndim > MAX_NDIM or _get_sizes(h, &sizes) != 0
            or _get_strides(h, &strides) != 0 or _get_data_ptr(h, &data) != 0):
        return INTEROP_CORE_READ_DECLINED
    if data == NULL:
        # No memory behind a non-empty tensor (e.g. an efficient zero tensor).
        numel = 1
        for i in range(ndim):
            numel *= sizes[i]
        if numel != 0:
            return INTEROP_CORE_READ_DECLINED
    out.data = data
    out.ndim = <int32_t> ndim
    out.shape = sizes            # torch's own arrays, valid while the tensor lives: the core
    out.strides = strides        # copies them during this call (strides in elements)
    out.dtype_code = _dl_of[dtype].code
    out.dtype_bits = _dl_of[dtype].bits
    out.dtype_lanes = _dl_of[dtype].lanes
    return _producer_stream(out)


cdef inline int _producer_stream(interop_core_tensor_info* out) noexcept:
    # The producer's stream is part of what the view says (its CUDA Array Interface export
    # carries it, a later sync() orders after it), so it is read now, with or without a
    # consumer stream: torch's current stream may have changed by the time the view is used.
    cdef int32_t dev_index = out.device_id
    cdef void* cstream = NULL
    if out.device_type == KDL_CUDA and _get_cuda_stream != NULL:
        if _core_sets_batch and out.batch != 0:
            if out.batch != _stream_batch or dev_index != _stream_device:
                if _get_cuda_stream(dev_index, &cstream) != 0:
                    return INTEROP_CORE_READ_OK
                _remember_stream(out.batch, dev_index, cstream)
            cstream = _stream_of_batch
        elif _get_cuda_stream(dev_index, &cstream) != 0:
            return INTEROP_CORE_READ_OK
        out.has_producer_stream = 1
        out.producer_stream = <intptr_t> cstream
    return INTEROP_CORE_READ_OK


# --- the direct path: TensorImpl's fields read in place -----------------------------------------
#
# What the AOTI shims return, read without calling them: at::TensorImpl keeps sizes and strides
# inline for small ndim (SizesAndStrides), the element offset and count, the dtype as a TypeMeta
# index (equal to the ScalarType code), the device in an optional<Device>, and an
# intrusive_ptr<StorageImpl> whose DataPtr holds the memory's address.  None of those offsets
# is written here: prepare() finds each one on canary tensors (_find_fields) and checks the
# result on others, and only then sets _fields.  Everything this path does not know to be
# plain goes to the AOTI path (which stays the reference): another TensorImpl class, custom
# sizes / strides / device / layout policies (symbolic shapes, Python subclasses), ndim beyond
# the inline storage, devices other than CPU and CUDA, dtypes outside the table, a storage
# that is missing or checks its data pointer accesses (copy-on-write, fake), unusual keys.

cdef inline bint _read_fields(char* impl, interop_core_tensor_info* out) noexcept:
    """Fill `out` from the TensorImpl at `impl` (borrowed from the tensor, alive for the call);
    False: not a plain tensor this path reads, `out` is then left for the AOTI path to fill."""
    cdef uint64_t flags
    cdef uint64_t ndim
    cdef uint16_t dtype
    cdef uint8_t* device
    cdef char* storage      # borrowed: the tensor's StorageImpl, alive while the tensor is
    cdef char* base         # borrowed: the storage's memory, alive while the storage is
    cdef int64_t numel
    if (<void**> impl)[0] != _f_vtable:
        return False
    if (<uint64_t*> (impl + _f_keyset_at))[0] & _f_odd_keys:
        return False
    memcpy(&flags, impl + _f_flags_at, 8)       # unaligned: one load on the machines we run
    if flags & _f_flags_mask:
        return False
    ndim = (<uint64_t*> (impl + _f_ndim_at))[0]
    if ndim > _f_inline:
        return False
    dtype = (<uint16_t*> (impl + _f_dtype_at))[0]
    if dtype >= N_CODES or _itemsize_of[dtype] == 0:
        return False
    device = <uint8_t*> (impl + _f_device_at)   # type, index (int8), has_value
    if device[2] != 1:
        return False
    if device[0] == _dev_cpu:
        out.device_type = KDL_CPU
        out.device_id = 0
    elif device[0] == _dev_cuda and _cuda_ok:
        out.device_type = KDL_CUDA
        out.device_id = <int8_t> device[1]
    else:
        return False
    storage = (<char**> (impl + _f_storage_at))[0]
    if storage == NULL or (<uint8_t*> (storage + _f_check_at))[0] != 0:
        return False
    numel = (<int64_t*> (impl + _f_numel_at))[0]
    if numel == 0:
        out.data = NULL          # what TensorImpl::data() answers for an empty tensor
    else:
        base = (<char**> (storage + _f_data_at))[0]
        if base == NULL:
            return False         # no memory: the AOTI path decides (it declines)
        out.data = base + _itemsize_of[dtype] * (<int64_t*> (impl + _f_offset_at))[0]
    out.ndim = <int32_t> ndim
    out.shape = <int64_t*> (impl + _f_sizes_at)      # inside the TensorImpl, alive with the
    out.strides = <int64_t*> (impl + _f_strides_at)  # tensor: the core copies them this call
    out.dtype_code = _dl_of[dtype].code
    out.dtype_bits = _dl_of[dtype].bits
    out.dtype_lanes = _dl_of[dtype].lanes
    return True


cdef inline void _remember_stream(uint64_t batch, int32_t device, void* stream) noexcept:
    global _stream_batch, _stream_device, _stream_of_batch
    _stream_batch = batch
    _stream_device = device
    _stream_of_batch = stream


def reader_capsule():
    """The AOTI reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2).

    Returns
    -------
    PyCapsule
        Named ``"interop_core.reader_v2"``.  It declines every tensor until :func:`prepare`
        has succeeded.
    """
    return PyCapsule_New(<void*> read_tensor, INTEROP_CORE_READER_V2_CAPSULE, NULL)


# --- the fallback (the checked path) -----------------------------------------------------------

cdef object _torch_module():
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch


# Tensors without memory meet a launcher when torch.compile / export / make_fx trace it.
_CUSTOM_OP_HINT = (
    "to call a kernel launcher from code torch.compile traces, register the launcher as a "
    "torch.library.custom_op with a fake implementation (register_fake): the compiled graph "
    "then calls it with real tensors")


cdef str _unusable_reason(object obj):
    """Why the memory of `obj` does not mean what its metadata says, or None."""
    torch = _torch_module()
    is_functional = getattr(torch, "_is_functional_tensor", None)
    if is_functional is not None and is_functional(obj):
        return ("is a functional tensor wrapper (functionalization, as torch.compile's tracing "
                f"does) with no memory of its own; {_CUSTOM_OP_HINT}")
    if obj.is_nested:
        return "is a nested tensor (its memory is not one strided array)"
    if obj.layout is not torch.strided:
        return (f"has layout {obj.layout} (only torch.strided tensors describe their memory "
                "with shape and strides; call .to_dense() first)")
    if obj.is_quantized:
        return (f"is quantized ({obj.dtype}); its memory holds integers that mean scaled "
                "values; call .dequantize() or .int_repr() first")
    if obj.is_meta:
        return f"is on the meta device and has no memory; {_CUSTOM_OP_HINT}"
    if obj.is_conj():
        return ("has its conjugate bit set (its memory holds the unconjugated values); call "
                ".resolve_conj() first")
    if obj.is_neg():
        return ("has its negative bit set (its memory holds the negated values); call "
                ".resolve_neg() first")
    is_zero = getattr(torch, "_is_zerotensor", None)
    if is_zero is not None and is_zero(obj):
        return "is an efficient zero tensor with no memory behind it"
    return None


def read_checked(obj, stream):
    """The fallback: torch's Python API checks, then torch's own DLPack export.

    Reads what the AOTI reader declines, and every tensor when its validation failed.  torch
    exports negative-bit and zero tensors through DLPack as if their memory held their values,
    so those (and every other tensor whose memory does not mean what its metadata says) are
    refused first.

    Parameters
    ----------
    obj : torch.Tensor
    stream : None or int
        The consumer stream, resolved by interop-core; passed on to torch's DLPack export.

    Returns
    -------
    interop_core.StridedMemoryView
        Its keep-alive is torch's DLPack tensor, its owner the tensor (a detached alias of it
        for tensors that require grad).

    Raises
    ------
    BufferError
        Naming why the tensor cannot be viewed: nested, not strided, quantized, on the meta
        device, conjugate or negative bit set, an efficient zero tensor; or what torch's
        DLPack export refused.
    """
    if _cuda_pending and obj.is_cuda:
        _check_cuda_late()
    why = _unusable_reason(obj)
    if why is not None:
        raise BufferError(f"cannot view this torch.Tensor: it {why}")
    # torch's __dlpack__ refuses tensors that require grad; the memory is the same without.
    # (The view's owner is then the detached alias, which holds the same storage.)
    if obj.requires_grad:
        # detach() is a dispatched op: outside any fake / functional mode the caller is in, it
        # stays a real tensor over the same memory.
        with _real_tensors(_torch_module()):
            obj = obj.detach()
    return StridedMemoryView.from_dlpack(obj, stream)


# --- validation (run once by the core, see interop_core/registry/_validation.py) --------------

# torch dtype name -> DLPack (code, bits, lanes), what DLPack producers (torch too) report.
cdef dict _DL_BY_NAME = {
    "bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
    "int64": (0, 64, 1), "uint8": (1, 8, 1), "uint16": (1, 16, 1), "uint32": (1, 32, 1),
    "uint64": (1, 64, 1), "float16": (2, 16, 1), "bfloat16": (4, 16, 1),
    "float32": (2, 32, 1), "float64": (2, 64, 1), "complex32": (5, 32, 1),
    "complex64": (5, 64, 1), "complex128": (5, 128, 1), "float8_e5m2": (12, 8, 1),
    "float8_e4m3fn": (10, 8, 1), "float8_e5m2fnuz": (13, 8, 1), "float8_e4m3fnuz": (11, 8, 1),
    "float8_e8m0fnu": (14, 8, 1),
}


def _canary_devices(torch):
    devices = [torch.device("cpu")]
    # Only where CUDA is initialized already: validation never creates a CUDA context.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        devices.append(torch.device("cuda", torch.cuda.current_device()))
    return devices


cdef int _check_cuda_late() except -1:
    """The CUDA half of prepare(), at the first CUDA tensor after it (once per process)."""
    global _cuda_pending, _cuda_ok, _get_cuda_stream
    _cuda_pending = False
    torch = _torch_module()
    device = torch.device("cuda", torch.cuda.current_device())
    _cuda_ok = True            # the check runs the reader's CUDA branch itself
    _check_fields_late(torch, device)
    try:
        reason = _check_reader(torch, device)
    except Exception as exc:  # a check that breaks is a check that failed
        reason = f"the check raised {type(exc).__name__}: {exc}"
    if reason is not None:
        _cuda_ok = False
        _details["cuda"] = f"fell back at the first CUDA tensor: {reason}"
        return 0
    stream_checked = _current_stream_agrees(torch, device, _found_cuda_stream_fn)
    if stream_checked:
        _get_cuda_stream = _found_cuda_stream_fn
    _details["cuda"] = True
    _details["current_stream"] = "aoti" if stream_checked else "python"
    return 0


cdef int _check_fields_late(object torch, object device) except -1:
    """The direct path on CUDA tensors (CUDA was not initialized at prepare()): checked as
    prepare() checks it; any difference sends every tensor to the AOTI path from now on."""
    global _fields, _found_fields
    if not _found_fields:
        return 0
    was = _fields
    try:
        reason = _check_fields(torch, [device])
    except Exception as exc:  # a check that breaks is a check that failed
        reason = f"the check raised {type(exc).__name__}: {exc}"
    if reason is None:
        _fields = was
        return 0
    _fields = _found_fields = False
    _details["fields"] = "aoti"
    _details["fields_reason"] = f"at the first CUDA tensor: {reason}"
    return 0


def _plain_canaries(torch, device):
    """Tensors the reader must read (name -> tensor): layouts, dtypes, grad, Parameter, 7-d."""
    base = torch.arange(24, dtype=torch.float32, device=device).reshape(4, 6)
    out = {
        "contiguous": base,
        "sliced": base[1:, ::2],
        "transposed": base.T,
        "storage offset": base.reshape(-1)[5:],
        "0-d": base[2, 3],
        "expanded": torch.arange(3, dtype=torch.float32, device=device).expand(4, 3),
        "zero-size": torch.empty(0, 3, device=device),
        "requires_grad": torch.ones(2, 3, device=device, requires_grad=True),
        "parameter": torch.nn.Parameter(torch.ones(3, device=device)),
        "7-d": torch.ones((1, 2, 1, 2, 1, 2, 1), device=device),
    }
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                 "float64", "complex64", "complex128"):
        out[name] = torch.ones(2, 3, dtype=getattr(torch, name), device=device)[:, 1:]
    return out


def _declined_canaries(torch, device):
    """Tensors the reader must decline (name -> tensor), those this torch can make."""
    c = torch.ones(3, dtype=torch.complex64, device=device)
    makers = {
        "conjugate": lambda: c.conj(),
        "negative": lambda: c.conj().imag,
        "negative int": lambda: torch._neg_view(torch.ones(3, dtype=torch.int32, device=device)),
        "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]).to(device),
        "zero tensor": lambda: torch._efficientzerotensor(3, device=device),
    }
    if device.type == "cpu":
        makers.update({
            "sparse": lambda: torch.ones(3).to_sparse(),
            "quantized": lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
            "meta": lambda: torch.ones(3, device="meta"),
        })
    return _made(makers)


def _made(makers):
    """name -> tensor for every maker this torch can run (the others name a kind of tensor this
    torch cannot make, so there is nothing of that kind to decline)."""
    import warnings

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in makers.items():
            try:
                out[name] = make()
            except Exception:
                continue
    return out


def canaries():
    """Tensors the core reads with both this reader and the fallback, which must agree.

    Returns
    -------
    list of torch.Tensor
        Layouts (sliced, transposed, storage offset, 0-d, expanded, empty, 7-d), dtypes,
        ``requires_grad`` tensors and a ``Parameter``, on the CPU and, when
        ``torch.cuda.is_available()``, on the current CUDA device.
    """
    torch = _torch_module()
    out = []
    with _real_tensors(torch):
        for device in _canary_devices(torch):
            out.extend(_plain_canaries(torch, device).values())
    return out


class _real_tensors:
    """Outside torch's Python dispatch modes and functorch transforms, for validation.

    Validation runs on the first torch view of the process, which may come from code that
    torch.compile, make_fx or torch.func.functionalize is tracing: the canaries made there would
    be fake or functional tensors without memory, and the reader would fall back for good.
    """

    def __init__(self, torch):
        self._contexts = []
        try:
            from torch.utils._python_dispatch import _disable_current_modes

            self._contexts.append(_disable_current_modes())
        except ImportError:  # a torch without dispatch modes has none to leave
            pass
        disable_functorch = getattr(torch._C, "_DisableFuncTorch", None)
        if disable_functorch is not None:
            self._contexts.append(disable_functorch())

    def __enter__(self):
        for context in self._contexts:
            context.__enter__()
        return self

    def __exit__(self, *exc):
        for context in reversed(self._contexts):
            context.__exit__(*exc)
        return False


def prepare():
    """Find torch's AOTI functions and the object layouts the reader relies on; check them.

    Run once per process by the core before the reader is first used (again only to report,
    for a second type the same reader is registered for).

    Returns
    -------
    dict or str
        On success the details: ``handle`` (``"direct"`` or ``"maybe_owned"``: where the
        at::Tensor sits in the Python object), ``keyset_offset`` (offset of the DispatchKeySet
        in TensorImpl used to decline conjugate / negative / nested / zero tensors with one
        load; None: the Python API is asked instead), ``cuda`` (CUDA tensors are read too),
        ``current_stream`` (``"aoti"``: views of CUDA tensors read torch's current stream
        through AOTI as they are made; ``"python"``: the plugin's strategy asks torch's Python
        API when ordering needs it; None without CUDA), ``fields`` (``"direct"``: plain
        tensors are read from their TensorImpl's fields, found and checked on canaries;
        ``"aoti"``: through the AOTI shims) and ``fields_reason`` (what was found, or why the
        direct path is not used).  Otherwise why the reader must not be used.
    """
    # The details themselves, not a copy: a CUDA check made later (see _check_cuda_late) shows.
    if _details is not None:
        return _details
    torch = _torch_module()
    with _real_tensors(torch):
        reason = _prepare(torch)
    return reason if reason is not None else _details


cdef void* _open_loaded(str path):
    cdef bytes b = path.encode()
    return dlopen(b, RTLD_LAZY | RTLD_NOLOAD)


cdef void* _sym(list handles, str name):
    cdef bytes b = name.encode()
    cdef void* p
    cdef uintptr_t h
    for h in handles:
        p = dlsym(<void*> h, b)
        if p != NULL:
            return p
    return NULL


cdef list _torch_libraries(object torch):
    """Handles of torch's already-loaded libraries, libtorch_cpu first."""
    import os
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    handles = []
    for name in ("libtorch_cpu.so", "libtorch.so", "libtorch_cuda.so"):
        h = _open_loaded(os.path.join(lib, name))
        if h != NULL:
            handles.append(<uintptr_t> h)
    return handles


cdef object _prepare(object torch):
    global _get_data_ptr, _get_dim, _get_sizes, _get_strides, _get_dtype, _get_device_type
    global _get_device_index, _get_layout, _get_cuda_stream, _dev_cpu, _dev_cuda
    global _layout_strided, _is_neg, _is_conj, _ready, _cuda_ok, _details
    global _cuda_pending, _found_cuda_stream_fn
    global _keyset_at, _bad_keys, _found_keyset_at, _found_bad_keys, _fields, _found_fields
    _ready = False
    _fields = _found_fields = False
    _is_neg = torch.Tensor.is_neg
    _is_conj = torch.Tensor.is_conj
    handles = _torch_libraries(torch)
    if not handles:
        return "torch's libraries (torch/lib/libtorch_cpu.so) are not loaded in this process"
    needed = {}
    for name in ("aoti_torch_get_data_ptr", "aoti_torch_get_dim", "aoti_torch_get_sizes",
                 "aoti_torch_get_strides", "aoti_torch_get_dtype", "aoti_torch_get_device_type",
                 "aoti_torch_get_device_index", "aoti_torch_get_layout",
                 "aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda",
                 "aoti_torch_layout_strided"):
        p = <uintptr_t> _sym(handles, name)
        if p == 0:
            return f"torch does not export {name}"
        needed[name] = p
    _get_data_ptr = <get_ptr_fn> <uintptr_t> needed["aoti_torch_get_data_ptr"]
    _get_dim = <get_i64_fn> <uintptr_t> needed["aoti_torch_get_dim"]
    _get_sizes = <get_arr_fn> <uintptr_t> needed["aoti_torch_get_sizes"]
    _get_strides = <get_arr_fn> <uintptr_t> needed["aoti_torch_get_strides"]
    _get_dtype = <get_i32_fn> <uintptr_t> needed["aoti_torch_get_dtype"]
    _get_device_type = <get_i32_fn> <uintptr_t> needed["aoti_torch_get_device_type"]
    _get_device_index = <get_i32_fn> <uintptr_t> needed["aoti_torch_get_device_index"]
    _get_layout = <get_i32_fn> <uintptr_t> needed["aoti_torch_get_layout"]
    _dev_cpu = (<const_fn> <uintptr_t> needed["aoti_torch_device_type_cpu"])()
    _dev_cuda = (<const_fn> <uintptr_t> needed["aoti_torch_device_type_cuda"])()
    _layout_strided = (<const_fn> <uintptr_t> needed["aoti_torch_layout_strided"])()
    cdef cuda_stream_fn stream_fn = <cuda_stream_fn> _sym(handles,
                                                          "aoti_torch_get_current_cuda_stream")
    _found_cuda_stream_fn = stream_fn

    cdef int i
    cdef int32_t code
    cdef const_fn getter
    memset(_dl_of, 0, sizeof(_dl_of))
    for name, (c, bits, lanes) in _DL_BY_NAME.items():
        getter = <const_fn> _sym(handles, "aoti_torch_dtype_" + name)
        if getter == NULL:
            continue      # an older torch without this dtype: such tensors go to the fallback
        code = getter()
        if code < 0 or code >= N_CODES:
            continue
        _dl_of[code].code = c
        _dl_of[code].bits = bits
        _dl_of[code].lanes = lanes

    reason = _find_handle_layout(torch)
    if reason is not None:
        return reason
    found = _find_keyset(torch)
    _found_keyset_at, _found_bad_keys = found if found is not None else (-1, 0)
    _keyset_at, _bad_keys = _found_keyset_at, _found_bad_keys
    devices = _canary_devices(torch)
    _cuda_ok = len(devices) > 1
    try:
        fields_reason = _find_fields(torch, devices)
    except Exception as exc:  # a search that breaks finds nothing: the AOTI path reads
        fields_reason = f"the search raised {type(exc).__name__}: {exc}"
        _found_fields = False
    _ready = True          # the checks below run the reader itself
    checked = False
    try:
        if _found_fields:
            try:
                fields_reason = _check_fields(torch, devices)
            except Exception as exc:  # a check that breaks is a check that failed
                fields_reason = f"the check raised {type(exc).__name__}: {exc}"
            if fields_reason is not None:
                _found_fields = False
        _fields = _found_fields
        for device in devices:
            reason = _check_reader(torch, device)
            if reason is not None:
                return reason
        stream_checked = _cuda_ok and _current_stream_agrees(torch, devices[1], stream_fn)
        checked = True
    finally:
        if not checked:
            _ready = False
            _cuda_ok = False
            _fields = _found_fields = False
    if stream_checked:
        _get_cuda_stream = stream_fn
    _cuda_pending = (not _cuda_ok and torch.cuda.is_available()
                     and not torch.cuda.is_initialized())
    _details = {
        "handle": {HANDLE_DIRECT: "direct", HANDLE_MAYBE_OWNED: "maybe_owned"}[_handle_mode],
        "keyset_offset": _found_keyset_at if _found_keyset_at >= 0 else None,
        "cuda": bool(_cuda_ok) or (
            "checked at the first CUDA tensor (CUDA was not initialized at validation)"
            if torch.cuda.is_available() else False),
        "current_stream": ("aoti" if stream_checked else "python") if _cuda_ok else None,
        "fields": "direct" if _found_fields else "aoti",
        "fields_reason": (f"TensorImpl fields found and checked (inline ndim <= {_f_inline})"
                          if _found_fields else fields_reason),
    }
    return None


cdef object _find_handle_layout(object torch):
    global _handle_mode
    cdef char* base
    samples = [torch.ones(3), torch.zeros(2, 2, dtype=torch.int64)[1:],
               torch.nn.Parameter(torch.ones(2))]
    if torch.Tensor.__basicsize__ < _union_at + sizeof(void*):
        return f"torch.Tensor objects are {torch.Tensor.__basicsize__} bytes, too small"
    mode = HANDLE_UNKNOWN
    for t in samples:
        base = <char*> <PyObject*> t
        impl = <uintptr_t> t._cdata
        if (<uintptr_t*> (base + _head))[0] == impl:
            found = HANDLE_DIRECT
        elif ((<uint8_t*> (base + _head))[0] == 0
              and (<uintptr_t*> (base + _union_at))[0] == impl):
            found = HANDLE_MAYBE_OWNED
        elif ((<uint8_t*> (base + _head))[0] == 1
              and (<uintptr_t*> (base + _union_at))[0] != 0
              and (<uintptr_t**> (base + _union_at))[0][0] == impl):
            found = HANDLE_MAYBE_OWNED
        else:
            return ("the at::Tensor of a Python tensor is neither right after PyObject_HEAD nor "
                    "in a MaybeOwned there")
        if mode != HANDLE_UNKNOWN and found != mode:
            return "tensors disagree on where their at::Tensor sits"
        mode = found
    _handle_mode = mode
    return None


cdef uint64_t _word(object t, Py_ssize_t at):
    return (<uint64_t*> (<char*> <uintptr_t> t._cdata + at))[0]


cdef inline bint _one_bit(uint64_t x) noexcept:
    return x != 0 and (x & (x - 1)) == 0


cdef object _find_keyset(object torch):
    """(offset of the DispatchKeySet word in TensorImpl, bits of unusable tensors), or None."""
    plain = [torch.ones(3), torch.zeros(5, 2), torch.ones(4, dtype=torch.int64),
             torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bfloat16),
             torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex128),
             torch.ones(2, dtype=torch.float16), torch.ones(2, requires_grad=True)]
    neg_pairs = [(plain[0], torch._neg_view(plain[0])), (plain[1], torch._neg_view(plain[1])),
                 (plain[5].imag, plain[5].conj().imag)]
    conj_pairs = [(plain[5], plain[5].conj()), (plain[6], plain[6].conj())]
    found = None
    cdef Py_ssize_t at
    cdef uint64_t neg_bit, conj_bit, x
    # The word sits well inside TensorImpl (offset 168 on torch 2.13): scan its first 256 bytes
    # upwards and stop at the first word that behaves as the key set.  The key set is
    # TensorImpl's last data member on torch 2.x, so the scan must stop there: a word past it
    # lies past the object (another allocation; AddressSanitizer reports the read, and at the
    # end of a mapping it would fault).
    for at in range(8, 256, 8):
        if _word(plain[0], at) != _word(plain[1], at):
            continue
        neg_bit = _word(neg_pairs[0][0], at) ^ _word(neg_pairs[0][1], at)
        conj_bit = _word(conj_pairs[0][0], at) ^ _word(conj_pairs[0][1], at)
        if not _one_bit(neg_bit) or not _one_bit(conj_bit) or neg_bit == conj_bit:
            continue
        ok = True
        for a, b in neg_pairs:
            x = _word(a, at) ^ _word(b, at)
            ok = ok and x == neg_bit and (_word(b, at) & neg_bit) != 0
        for a, b in conj_pairs:
            x = _word(a, at) ^ _word(b, at)
            ok = ok and x == conj_bit and (_word(b, at) & conj_bit) != 0
        for t in plain:
            ok = ok and (_word(t, at) & (neg_bit | conj_bit)) == 0
        if ok:
            found = (at, neg_bit, conj_bit)
            break
    if found is None:
        return None        # not found: ask the Python API per call instead
    at, neg_bit, conj_bit = found
    cdef uint64_t seen = 0
    for t in plain:
        seen |= _word(t, at)
    cdef uint64_t bad = neg_bit | conj_bit
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        odd = [lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
               lambda: torch._efficientzerotensor(3)]
        for make in odd:
            try:
                t = make()
            except Exception:
                continue
            bad |= _word(t, at) & ~seen
    return (at, bad)


cdef int _read_raw(object t, interop_core_tensor_info* info) except -1:
    memset(info, 0, sizeof(interop_core_tensor_info))
    return read_tensor(<PyObject*> t, NULL, info)


cdef tuple _describe(interop_core_tensor_info* info):
    return (<uintptr_t> info.data, tuple(info.shape[i] for i in range(info.ndim)),
            tuple(info.strides[i] for i in range(info.ndim)),
            (info.dtype_code, info.dtype_bits, info.dtype_lanes),
            (info.device_type, info.device_id))


cdef tuple _expected(object t):
    dev = t.device
    device = (KDL_CPU, 0) if dev.type == "cpu" else (KDL_CUDA, dev.index)
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()),
            _DL_BY_NAME[str(t.dtype).replace("torch.", "")], device)


cdef object _check_reader(object torch, object device):
    """None when the reader reads every plain canary as torch's Python API describes it and
    declines every tensor whose memory does not mean what its metadata says."""
    cdef interop_core_tensor_info info
    for name, t in _plain_canaries(torch, device).items():
        if _read_raw(t, &info) != INTEROP_CORE_READ_OK:
            return f"the AOTI reader declined the {name} canary on {device}"
        got = _describe(&info)
        want = _expected(t)
        if got != want:
            return f"the AOTI reader read the {name} canary on {device} as {got}, torch says {want}"
    for name, t in _declined_canaries(torch, device).items():
        if _read_raw(t, &info) != INTEROP_CORE_READ_DECLINED:
            return f"the AOTI reader did not decline the {name} canary on {device}"
    return None


cdef bint _current_stream_agrees(object torch, object device, cuda_stream_fn stream_fn) except -1:
    """Whether AOTI's current-stream read agrees with torch.cuda.current_stream().

    Checked on the default stream and inside ``torch.cuda.stream(side)``; on disagreement the
    plugin's producer strategy (torch's Python API) reports the stream instead.
    """
    if stream_fn == NULL:
        return False
    cdef void* got = NULL
    cdef int32_t index = device.index if device.index is not None else torch.cuda.current_device()
    side = torch.cuda.Stream(device)
    for stream in (None, side):
        with torch.cuda.stream(stream):
            want = torch.cuda.current_stream(device).cuda_stream
            if stream_fn(index, &got) != 0 or <intptr_t> got != <intptr_t> want:
                return False
    return True


# --- finding the TensorImpl fields (run once by prepare()) -------------------------------------

cdef inline uint64_t _u64(uintptr_t addr, Py_ssize_t at) noexcept:
    return (<uint64_t*> (<char*> addr + at))[0]


cdef inline uint64_t _u64_unaligned(uintptr_t addr, Py_ssize_t at) noexcept:
    cdef uint64_t x
    memcpy(&x, <char*> addr + at, 8)
    return x


cdef inline uint8_t _u8(uintptr_t addr, Py_ssize_t at) noexcept:
    return (<uint8_t*> (<char*> addr + at))[0]


cdef enum:
    # Bytes of StorageImpl searched: its DataPtr and flags come first (data at 16, the flag at
    # 59 on 2.11 and 2.13) and the object is over 100 bytes, so the search never reads past it.
    SCAN_STORAGE = 64


cdef object _aoti_facts(object t):
    """What the AOTI shims (the reference) and torch's Python API say of `t`, with the address
    of its TensorImpl and StorageImpl (both owned by `t`, which the caller keeps alive)."""
    cdef void* h = _handle_of(<PyObject*> t)
    cdef int64_t ndim
    cdef int64_t* sizes
    cdef int64_t* strides
    cdef void* data = NULL
    cdef int32_t dtype, dev_type, dev_index
    if (_get_dim(h, &ndim) != 0 or _get_sizes(h, &sizes) != 0 or _get_strides(h, &strides) != 0
            or _get_dtype(h, &dtype) != 0 or _get_device_type(h, &dev_type) != 0
            or _get_device_index(h, &dev_index) != 0):
        raise ValueError("an AOTI getter failed on a plain canary")
    if t.device.type != "meta" and _get_data_ptr(h, &data) != 0:
        raise ValueError("aoti_torch_get_data_ptr failed on a plain canary")
    return {"impl": <uintptr_t> (<void**> h)[0], "ndim": ndim,
            "sizes": <uintptr_t> sizes, "strides": <uintptr_t> strides, "data": <uintptr_t> data,
            "dtype": dtype, "dev_type": dev_type, "dev_index": dev_index,
            "storage": <uintptr_t> t.untyped_storage()._cdata,
            "offset": t.storage_offset(), "numel": t.numel(), "itemsize": t.element_size()}


cdef object _unique(list found, str what):
    if len(found) != 1:
        raise LookupError(f"{what}: {len(found)} candidate offsets")
    return found[0]


def _field_canaries(torch, devices, int salt):
    """Plain tensors with distinctive extents: ndim 0..8, storage offsets, every dtype, views,
    grad, Parameter, channels-last, empty; `salt` varies the numbers between the two sets."""
    import warnings

    out = []
    dims = (3 + salt, 5, 7 + salt, 2, 4, 6 + salt, 3, 2)
    for device in devices:
        for nd in range(9):
            shape = dims[:nd]
            numel = 1
            for d in shape:
                numel *= d
            offset = 3 + 2 * nd + salt
            flat = torch.zeros(numel + offset + 5, device=device)
            t = flat[offset:offset + numel].view(shape)
            out.append(t)
            if nd >= 2:
                out.append(t.transpose(0, nd - 1)[1:])
                out.append(flat[:dims[1]].expand(*shape[:nd - 2], dims[0], dims[1]))
        for name in _DL_BY_NAME:
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")    # complex32 is "experimental"
                    t = torch.zeros(5 + salt + 5 * (7 + salt), dtype=dtype, device=device)
            except Exception:
                continue     # a dtype this torch cannot make here
            out.append(t[5 + salt:].view(5, 7 + salt)[1:, ::2])
        out.append(torch.ones(2, 3 + salt, device=device, requires_grad=True))
        out.append(torch.nn.Parameter(torch.ones(4 + salt, 2, device=device)))
        out.append(torch.ones(2, 3, 4 + salt, 5, device=device).to(
            memory_format=torch.channels_last))
        out.append(torch.ones(2, 3, 4, 5 + salt, 6, device=device).to(
            memory_format=torch.channels_last_3d))
        out.append(torch.ones(4 + salt, 3, device=device)[1:1])
        out.append(torch.ones(6, 5 + salt, device=device)[2][3:])
        out.append(torch.tensor(2.5 + salt, device=device))
    return out


def _policy_variants(torch):
    """Wrapper-subclass tensors that take torch's custom-policy paths, per policy, with plain
    wrapper-subclass twins (name -> (variants, twins)); those this torch can make."""
    class Policy(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    kinds = {"sizes": {"dispatch_sizes_strides_policy": "sizes"},
             "strides": {"dispatch_sizes_strides_policy": "strides"},
             "device": {"dispatch_device": True}, "layout": {"dispatch_layout": True}}
    out = {}
    for name, kwargs in kinds.items():
        try:
            variants = [torch.Tensor._make_wrapper_subclass(Policy, (2, 3 + i), **kwargs)
                        for i in range(4)]
            twins = [torch.Tensor._make_wrapper_subclass(Policy, (2, 3 + i)) for i in range(4)]
        except Exception:
            continue
        out[name] = (variants, twins)
    return out


def _odd_canaries(torch):
    """Tensors the direct path must leave to the AOTI path (name -> tensor), those this torch
    can make: other TensorImpl classes, other devices, keys plain tensors lack."""
    c = torch.ones(3, dtype=torch.complex64)
    makers = {
        "sparse": lambda: torch.ones(3).to_sparse(),
        "sparse csr": lambda: torch.ones(2, 2).to_sparse_csr(),
        "quantized": lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
        "meta": lambda: torch.ones(3, device="meta"),
        "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "zero tensor": lambda: torch._efficientzerotensor(3),
        "conjugate": lambda: c.conj(),
        "negative": lambda: torch._neg_view(torch.ones(3)),
        "copy-on-write": lambda: torch._lazy_clone(torch.ones(3)),
        "mkldnn": lambda: torch.ones(2, 2).to_mkldnn(),
        "functional": lambda: torch._to_functional_tensor(torch.ones(3)),
    }
    return _made(makers)


cdef object _find_fields(object torch, list devices):
    """Find every field the direct path reads; None (and the _f_* set, _found_fields) or why
    not.  Each offset must be the only one that matches every canary."""
    global _f_vtable, _f_keyset_at, _f_odd_keys, _f_flags_at, _f_flags_mask, _f_ndim_at
    global _f_sizes_at, _f_strides_at, _f_inline, _f_offset_at, _f_numel_at, _f_dtype_at
    global _f_device_at, _f_storage_at, _f_data_at, _f_check_at, _found_fields
    cdef Py_ssize_t at
    _found_fields = False
    if _found_keyset_at < 0:
        return "the DispatchKeySet word was not found (needed to keep unusual tensors out)"
    keep = _field_canaries(torch, devices + [torch.device("meta")], 0)
    facts = [_aoti_facts(t) for t in keep]
    host = [f for f, t in zip(facts, keep) if t.device.type != "meta"]

    vtables = {_u64(f["impl"], 0) for f in facts}
    if len(vtables) != 1:
        return f"plain tensors have {len(vtables)} TensorImpl vtables"
    vtable = vtables.pop()

    # Sizes and strides: where AOTI's arrays sit inside the TensorImpl (the inline storage),
    # told by 0-d and 1-d tensors (any inline storage holds those); the boundary is checked
    # below on every canary.  (A deeper tensor's heap arrays may lie just past its TensorImpl.)
    inside = {(<Py_ssize_t> (f["sizes"] - f["impl"]), <Py_ssize_t> (f["strides"] - f["impl"]))
              for f in facts if f["ndim"] <= 1}
    if len(inside) != 1:
        return "0-d and 1-d tensors keep their sizes / strides at different places"
    sizes_at, strides_at = inside.pop()
    # Every field searched for lies before the key set word (TensorImpl's last data member on
    # torch 2.x); searching no further never reads past the object.
    cdef Py_ssize_t scan = _found_keyset_at
    if not 0 < sizes_at < scan:
        return "0-d and 1-d tensors do not keep their sizes inside the TensorImpl"
    if strides_at <= sizes_at or (strides_at - sizes_at) % 8:
        return "inline strides do not follow inline sizes"
    n_inline = (strides_at - sizes_at) // 8
    if strides_at + 8 * n_inline > scan:
        return "the inline strides run into the key set"
    for f in facts:
        inline = (f["sizes"] == f["impl"] + sizes_at and f["strides"] == f["impl"] + strides_at)
        if inline != (f["ndim"] <= n_inline):
            return f"a {f['ndim']}-d tensor's sizes are {'' if inline else 'not '}inline"
    if max(f["ndim"] for f in facts) <= n_inline or min(f["ndim"] for f in facts) != 0:
        return "the canaries do not span the inline storage"

    def words(key, list among=facts):
        return [at for at in range(8, scan, 8)
                if all(_u64(f["impl"], at) == <uint64_t> f[key] for f in among)]

    try:
        ndim_at = _unique(words("ndim"), "ndim")
        offset_at = _unique(words("offset"), "storage offset")
        numel_at = _unique(words("numel"), "numel")
        storage_at = _unique(words("storage"), "storage")
        dtype_at = _unique([at for at in range(0, scan, 2)
                            if all((<uint16_t*> (<char*> <uintptr_t> f["impl"] + at))[0]
                                   == f["dtype"] for f in facts)], "dtype")
        device_at = _unique([at for at in range(0, scan - 2)
                             if all(_u8(f["impl"], at) == f["dev_type"]
                                    and <int8_t> _u8(f["impl"], at + 1) == f["dev_index"]
                                    and _u8(f["impl"], at + 2) == 1 for f in facts)], "device")
        # The storage's data pointer: base address = AOTI's pointer less the element offset.
        # Buffers torch does not allocate (frombuffer) have a DataPtr context other than the
        # data, which tells the two apart.
        buffers = [torch.frombuffer(bytearray(64 + i), dtype=torch.uint8) for i in range(3)]
        keep.extend(buffers)
        based = [f for f in host if f["numel"]] + [_aoti_facts(t) for t in buffers]
        data_at = _unique([at for at in range(8, SCAN_STORAGE, 8)
                           if all(_u64(f["storage"], at)
                                  == f["data"] - f["offset"] * f["itemsize"] for f in based)],
                          "storage data")
        # The flag StorageImpl sets when its data pointer accesses must run checks (copy-on-write
        # materialization, fake / functional storages): one byte, 0 on plain storages, 1 on
        # copy-on-write ones.  The DataPtr's three words (data, deleter, context) are skipped:
        # they are addresses, and a byte of an address can be 0 on every plain storage and 1 on
        # every copy-on-write one (AddressSanitizer's allocator puts the copy-on-write contexts
        # where their fourth byte is 1), which made the search ambiguous.
        plain = [torch.ones(8 + i) for i in range(4)]
        cow = [torch._lazy_clone(torch.ones(8 + i)) for i in range(4)]
        keep.extend(plain + cow)
        check_at = _unique([at for at in range(8, SCAN_STORAGE)
                            if not data_at <= at < data_at + 24
                            and all(_u8(t.untyped_storage()._cdata, at) == 0 for t in plain)
                            and all(_u8(t.untyped_storage()._cdata, at) == 1 for t in cow)],
                           "storage access check")
    except LookupError as exc:
        return f"field not found: {exc}"
    except AttributeError as exc:      # e.g. no torch._lazy_clone
        return f"cannot make a canary: {exc}"

    # The bit fields after the device (contiguity, policies) up to the key set: bits that
    # custom sizes / strides / device / layout policies set, that no plain tensor has.
    flags_at = device_at + 3
    if not flags_at < _found_keyset_at:
        return "the key set does not follow the device"
    cdef uint64_t limit = ~<uint64_t> 0
    if _found_keyset_at - flags_at < 8:
        limit = (<uint64_t> 1 << (8 * (_found_keyset_at - flags_at))) - 1
    cdef uint64_t plain_bits = 0, mask = 0, on, off
    for f in facts:
        plain_bits |= _u64_unaligned(f["impl"], flags_at)
    variants = _policy_variants(torch)
    if "sizes" not in variants or "strides" not in variants:
        return "cannot make tensors with custom sizes / strides to find their flags"
    for name, (group, twins) in variants.items():
        on = ~<uint64_t> 0
        off = 0
        for t in group:
            on &= _u64_unaligned(<uintptr_t> t._cdata, flags_at)
        for t in twins:
            off |= _u64_unaligned(<uintptr_t> t._cdata, flags_at)
        mask |= on & ~off
    mask &= ~plain_bits & limit
    for name, (group, twins) in variants.items():
        for t in group:
            if not _u64_unaligned(<uintptr_t> t._cdata, flags_at) & mask:
                return f"no flag bit tells a custom {name} policy apart"
    keep.append(variants)

    # Key bits of unusual tensors that no plain tensor carries (device and sparse backends,
    # nested, zero, quantized, functional...), and those that decline (conjugate, negative).
    cdef uint64_t plain_keys = 0, odd_keys = _found_bad_keys
    for f in facts:
        plain_keys |= _u64(f["impl"], _found_keyset_at)
    odd = _odd_canaries(torch)
    for t in odd.values():
        odd_keys |= _u64(<uintptr_t> t._cdata, _found_keyset_at)
    odd_keys &= ~plain_keys

    _f_vtable = <void*> <uintptr_t> vtable
    _f_keyset_at = _found_keyset_at
    _f_odd_keys = odd_keys
    _f_flags_at = flags_at
    _f_flags_mask = mask
    _f_ndim_at = ndim_at
    _f_sizes_at = sizes_at
    _f_strides_at = strides_at
    _f_inline = n_inline
    _f_offset_at = offset_at
    _f_numel_at = numel_at
    _f_dtype_at = dtype_at
    _f_device_at = device_at
    _f_storage_at = storage_at
    _f_data_at = data_at
    _f_check_at = check_at
    memset(_itemsize_of, 0, sizeof(_itemsize_of))
    for f in host:
        if 0 <= f["dtype"] < N_CODES and _dl_of[<int> f["dtype"]].bits:
            _itemsize_of[<int> f["dtype"]] = f["itemsize"]
    _found_fields = True
    return None


cdef int _read_as(object t, interop_core_tensor_info* info, bint fields) except -1:
    """read_tensor with the direct path on or off (prepare() and tests only; the GIL is held)."""
    global _fields
    cdef bint was = _fields
    _fields = fields
    try:
        return _read_raw(t, info)
    finally:
        _fields = was


cdef object _check_fields(object torch, list devices):
    """None when the direct path reads a second set of canaries exactly as the AOTI path does
    and as torch's Python API describes them, takes every plain one it can hold, and leaves
    every unusual one to the AOTI path; otherwise what differed."""
    cdef interop_core_tensor_info direct, aoti
    tensors = _field_canaries(torch, devices, 1)
    for device in devices:
        tensors.extend(_plain_canaries(torch, device).values())
    for t in tensors:
        a = _read_as(t, &aoti, False)
        d = _read_as(t, &direct, True)
        if a != d:
            return f"a {t.dtype} {tuple(t.shape)} canary: AOTI {a}, direct {d}"
        if a != INTEROP_CORE_READ_OK:
            code = _dtype_code(t)
            if 0 <= code < N_CODES and _dl_of[<int> code].bits:
                return f"a {t.dtype} {tuple(t.shape)} canary was declined"
            continue      # a dtype AOTI cannot name here: both paths leave it to the fallback
        got, want = _describe(&direct), _describe(&aoti)
        if got != want or got != _expected(t):
            return f"a {tuple(t.shape)} canary read {got}, AOTI read {want}"
        if t.dim() <= <int64_t> _f_inline and not _read_fields(_impl_of(t), &direct):
            return f"the direct path left a plain {t.dtype} {tuple(t.shape)} canary to AOTI"
    odd = dict(_odd_canaries(torch))
    for name, (group, twins) in _policy_variants(torch).items():
        odd[f"custom {name}"] = group[0]
    for name, t in odd.items():
        if _read_fields(_impl_of(t), &direct):
            return f"the direct path read the {name} canary"
    return None


cdef inline char* _impl_of(object t):
    # The TensorImpl, owned by `t` (which the caller holds).
    return <char*> (<void**> _handle_of(<PyObject*> t))[0]


cdef int32_t _dtype_code(object t) except? -1:
    cdef int32_t code = -1
    if _get_dtype(_handle_of(<PyObject*> t), &code) != 0:
        return -1
    return code


def _set_field_reads(bint enabled):
    """Tests and benchmarks only: read plain tensors' TensorImpl fields directly, or always
    through the AOTI shims.

    Returns
    -------
    bool
        Whether the direct path is in use now (False when prepare() did not validate it).
    """
    global _fields
    _fields = enabled and _found_fields
    return _fields


def _takes_direct(t):
    """Tests only: whether the direct path would read ``t`` itself (False before prepare(),
    or while it is off); reads nothing through AOTI, so it changes nothing."""
    cdef interop_core_tensor_info info
    memset(&info, 0, sizeof(info))
    return bool(_ready and _fields and _read_fields(_impl_of(t), &info))


def _policy_bits(t):
    """Tests only: the flag bits of ``t`` that send it to the AOTI path as having a custom
    sizes / strides / device / layout policy (0 before the direct path was found)."""
    if not _found_fields:
        return 0
    return _u64_unaligned(<uintptr_t> _impl_of(t), _f_flags_at) & _f_flags_mask


def _path_of(t):
    """Tests and diagnostics: which path reads ``t`` now.

    Returns
    -------
    str
        ``"direct"`` (TensorImpl fields), ``"aoti"`` (the AOTI shims), ``"declined"`` (the
        fallback reads or refuses it), or ``"not ready"`` (before prepare() succeeded).
    """
    cdef interop_core_tensor_info info
    if not _ready:
        return "not ready"
    # Asked before reading: the AOTI path may change the tensor (it materializes a copy-on-write
    # storage), and the direct path may take it then.
    memset(&info, 0, sizeof(info))
    direct = _fields and _read_fields(_impl_of(t), &info)
    if _read_raw(t, &info) != INTEROP_CORE_READ_OK:
        return "declined"
    return "direct" if direct else "aoti"


def _set_keyset_detection(bint enabled):
    """Tests and benchmarks only: spot unusable tensors by the key set word or the Python API.

    Returns
    -------
    bool
        Whether the key set word is in use now (False when prepare() found none).
    """
    global _keyset_at, _bad_keys
    if enabled:
        _keyset_at, _bad_keys = _found_keyset_at, _found_bad_keys
    else:
        _keyset_at, _bad_keys = -1, 0
    return _keyset_at >= 0


# --- the producer's stream ---------------------------------------------------------------------

def aoti_producer_stream(int device_index):
    """torch's current CUDA stream on ``device_index`` through AOTI, or None if unavailable.

    Returns
    -------
    int or None
        The ``cudaStream_t`` handle, or None when torch's CUDA library does not export
        ``aoti_torch_get_current_cuda_stream`` (CPU builds), when it disagreed with
        ``torch.cuda.current_stream()`` in :func:`prepare`, or before :func:`prepare` ran.
    """
    cdef void* s = NULL
    if _get_cuda_stream == NULL or _get_cuda_stream(device_index, &s) != 0:
        return None
    return <intptr_t> s


# --- the exporter: a torch.Tensor over a view's memory, through the DLPack C exchange API ----
#
# Both ends are public protocols: the view's own table (StridedMemoryView's
# __dlpack_c_exchange_api__) makes the DLManagedTensorVersioned that keeps the view alive, and
# torch's table turns it into a tensor; no Python-level capsule.  Declared from the DLPack 1.3
# specification (dlpack.h): only the members used here are typed.

ctypedef struct DLPackVersion:
    uint32_t major
    uint32_t minor

cdef struct ExchangeHeader:
    DLPackVersion version
    ExchangeHeader* prev_api          # borrowed: an older table of the same producer

ctypedef int (*from_py_object_fn)(void* py_object, void** out) noexcept
ctypedef int (*to_py_object_fn)(void* tensor, void** out_py_object) noexcept

ctypedef struct ExchangeAPI:
    ExchangeHeader header
    void* managed_tensor_allocator
    from_py_object_fn managed_tensor_from_py_object_no_sync
    to_py_object_fn managed_tensor_to_py_object_no_sync
    void* dltensor_from_py_object_no_sync
    void* current_work_stream

ctypedef struct ManagedTensorVersionedHead:
    DLPackVersion version             # a DLManagedTensorVersioned begins with its version

ctypedef struct DLDevice:
    int32_t device_type
    int32_t device_id

ctypedef struct DLTensor:
    void* data
    DLDevice device
    int32_t ndim
    uint8_t dtype_code
    uint8_t dtype_bits
    uint16_t dtype_lanes
    int64_t* shape
    int64_t* strides                  # in elements; NULL for row-major
    uint64_t byte_offset

ctypedef struct ManagedTensorVersioned:
    DLPackVersion version
    void* manager_ctx
    void (*deleter)(ManagedTensorVersioned* self) noexcept
    uint64_t flags
    DLTensor dl_tensor


cdef extern from *:
    """
    static inline PyObject* ic_torch_steal(void* o) { return (PyObject*) o; }
    """
    object _steal "ic_torch_steal"(void* o)


cdef enum:
    EXPORT_UNCHOSEN = 0
    EXPORT_EXCHANGE_API = 1
    EXPORT_FROM_DLPACK = 2

cdef int _export_path = EXPORT_UNCHOSEN
cdef const ExchangeAPI* _view_table = NULL      # borrowed from a capsule in _tables
cdef const ExchangeAPI* _torch_table = NULL     # borrowed from a capsule in _tables
cdef uint32_t _torch_minor = 0
cdef list _tables = []   # the two capsules (owned here), which keep the tables alive


cdef const ExchangeAPI* _table_of(object t) except? NULL:
    """The DLPack 1.x exchange API table `t` publishes, or NULL."""
    capsule = getattr(t, "__dlpack_c_exchange_api__", None)
    if capsule is None or not PyCapsule_IsValid(capsule, b"dlpack_exchange_api"):
        return NULL
    cdef ExchangeHeader* header = <ExchangeHeader*> PyCapsule_GetPointer(
        capsule, b"dlpack_exchange_api")
    # A producer may chain older tables behind a newer one; take the first of major version 1.
    while header != NULL and header.version.major != 1:
        header = header.prev_api
    if header != NULL:
        _tables.append(capsule)
    return <const ExchangeAPI*> header


cdef int _choose_export_path() except -1:
    global _export_path, _view_table, _torch_table, _torch_minor
    torch = _torch_module()
    view_table = _table_of(StridedMemoryView)
    torch_table = _table_of(torch.Tensor)
    if (view_table != NULL and view_table.managed_tensor_from_py_object_no_sync != NULL
            and torch_table != NULL and torch_table.managed_tensor_to_py_object_no_sync != NULL):
        _view_table = view_table
        _torch_table = torch_table
        _torch_minor = torch_table.header.version.minor
        _export_path = EXPORT_EXCHANGE_API
    else:
        _export_path = EXPORT_FROM_DLPACK
    return 0


cdef int _raise_pending(str what) except -1:
    # An exchange API function returned -1: hand on the exception it set.
    if PyErr_Occurred() == NULL:
        raise BufferError(f"{what} failed without setting an exception")
    return -1


cdef enum:
    KDL_CUDA_HOST = 3
    KDL_CUDA_MANAGED = 13

cdef int _layout_torch_refuses(const DLTensor* t) noexcept:
    """Whether torch's DLPack import would abort the process on this layout: 1 for negative
    strides, 2 for a span beyond int64 bytes, else 0.

    torch computes the storage a tensor spans assuming strides >= 0, with an overflow check
    that throws a C++ exception through its noexcept DLPack entry points (std::terminate).
    to() checks the same through the plugin's ImportLimits and copies such views; this guard,
    on the DLPack tensor about to be handed over, keeps a direct call of the exporter from
    taking the process down.
    """
    cdef int i
    cdef int64_t reach = 0, step, row = 1
    for i in range(t.ndim):
        if t.shape[i] == 0:
            return 0
    for i in range(t.ndim - 1, -1, -1):
        if t.strides != NULL:
            if t.shape[i] > 1 and t.strides[i] < 0:
                return 1
            step = t.strides[i]
        else:                           # NULL strides: row-major
            step = row
            if __builtin_mul_overflow(row, t.shape[i], &row):
                return 2
        if (__builtin_mul_overflow(t.shape[i] - 1, step, &step)
                or __builtin_add_overflow(reach, step, &reach)):
            return 2
    if (__builtin_add_overflow(reach, 1, &reach)
            or __builtin_mul_overflow(reach, (t.dtype_bits * t.dtype_lanes + 7) // 8, &reach)):
        return 2
    return 0


cdef str _layout_refusal(object view, int why):
    if why == 1:
        return (f"torch cannot import negative strides (the view has strides {view.strides}); "
                "interop_core.to(x, 'torch') hands it a copy")
    return (f"torch cannot import a layout reaching beyond 2**63 bytes (shape {view.shape}, "
            f"strides {view.strides}): it describes no memory")


cdef extern from *:
    """
    #define ic_torch_mul_ovf(a, b, out) __builtin_mul_overflow((a), (b), (out))
    #define ic_torch_add_ovf(a, b, out) __builtin_add_overflow((a), (b), (out))
    """
    bint __builtin_mul_overflow "ic_torch_mul_ovf"(int64_t a, int64_t b, int64_t* out) noexcept
    bint __builtin_add_overflow "ic_torch_add_ovf"(int64_t a, int64_t b, int64_t* out) noexcept


def to_torch(view, stream=None):
    """A ``torch.Tensor`` over the memory of ``view`` (same pointer), keeping ``view`` alive.

    Made through the DLPack C exchange API of both sides (the view's table makes the DLPack
    tensor, torch's ``managed_tensor_to_py_object_no_sync`` the tensor; no Python-level
    capsule); ``torch.from_dlpack(view)`` when torch does not publish the table.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : None, int or stream object, optional
        Accepted for the exporter protocol: ``to()`` has already ordered the view on it.

    Returns
    -------
    torch.Tensor

    Raises
    ------
    TypeError
        If ``view`` is not a StridedMemoryView.
    BufferError
        If torch cannot hold the memory: negative strides or a span beyond 2**63 bytes (torch's
        import would abort the process; ``to()`` hands torch a copy instead), a device or
        element type torch does not have (torch's own message attached).
    """
    cdef void* tensor = NULL
    cdef void* out = NULL
    cdef DLTensor* described
    cdef int refused
    cdef Py_ssize_t held_by_tensor
    if type(view) is not StridedMemoryView:
        raise TypeError(f"to_torch() takes a StridedMemoryView, got {type(view).__name__}")
    if _export_path != EXPORT_EXCHANGE_API:
        if _export_path == EXPORT_UNCHOSEN:
            _choose_export_path()
        if _export_path == EXPORT_FROM_DLPACK:
            return _through_from_dlpack(view)
    if _view_table.managed_tensor_from_py_object_no_sync(<void*> view, &tensor) != 0:
        _raise_pending("the view's managed_tensor_from_py_object_no_sync")
    described = &(<ManagedTensorVersioned*> tensor).dl_tensor
    refused = _layout_torch_refuses(described)
    if refused:
        (<ManagedTensorVersioned*> tensor).deleter(<ManagedTensorVersioned*> tensor)
        raise BufferError(_layout_refusal(view, refused))
    # torch's import knows neither pinned nor managed memory: pinned host memory is a CPU
    # tensor's, managed memory a CUDA tensor's (the address is the same either way).
    if described.device.device_type == KDL_CUDA_HOST:
        described.device.device_type = 1
        described.device.device_id = 0
    elif described.device.device_type == KDL_CUDA_MANAGED:
        described.device.device_type = 2
    # Offer torch no newer DLPack minor version than its table declares.
    if (<ManagedTensorVersionedHead*> tensor).version.minor > _torch_minor:
        (<ManagedTensorVersionedHead*> tensor).version.minor = _torch_minor
    # torch owns the tensor once its call succeeds.  On failure (a dtype or device torch does
    # not have) torch 2.x returns -1 without running the deleter, which would leak the tensor
    # and the view it holds; a torch that does run it must not see it run twice.  The tensor's
    # deleter drops the one reference it holds to `view` (its manager_ctx): the view's count
    # tells which happened, and the deleter runs here only if torch did not run it.
    held_by_tensor = Py_REFCNT(view)
    if _torch_table.managed_tensor_to_py_object_no_sync(tensor, &out) != 0:
        if Py_REFCNT(view) == held_by_tensor:
            (<ManagedTensorVersioned*> tensor).deleter(<ManagedTensorVersioned*> tensor)
        try:
            _raise_pending("torch's managed_tensor_to_py_object_no_sync")
        except RuntimeError as exc:     # c10::Error: a dtype or device torch does not have
            raise BufferError(_torch_refusal(view, exc)) from exc
    if out == NULL:
        raise BufferError("torch's DLPack exchange API returned no tensor")
    return _steal(out)


cdef object _through_from_dlpack(object view):
    """torch.from_dlpack(view) (torch without the exchange table), with the same guard."""
    if any(step < 0 and extent > 1 for step, extent in zip(view.strides, view.shape,
                                                           strict=True)):
        raise BufferError(_layout_refusal(view, 1))
    if view.device_type == KDL_CUDA_HOST or view.device_type == KDL_CUDA_MANAGED:
        view = StridedMemoryView.from_pointer(
            view.ptr, view.shape, view.strides, dtype=view.dlpack_dtype,
            device=(1, 0) if view.device_type == KDL_CUDA_HOST else (2, view.device_id),
            readonly=view.readonly, owner=view)
    try:
        return _torch.from_dlpack(view)
    except RuntimeError as exc:
        raise BufferError(_torch_refusal(view, exc)) from exc


cdef str _torch_refusal(object view, object exc):
    said = str(exc).split("\n", 1)[0]          # torch's first line; the rest is a C++ trace
    return (f"torch cannot import this view (DLPack dtype {view.dlpack_dtype} on DLPack "
            f"device ({view.device_type}, {view.device_id})): {said}")


# What torch's DLPack import takes (found by experiment on torch 2.13, every DLPack layout,
# dtype and device type handed to it in a subprocess): any strides >= 0 (zero and overlapping
# ones too); negative strides and spans beyond int64 abort the process.  Device types: CPU,
# CUDA, ROCm, Metal, oneAPI, and pinned / managed memory (to_torch renames them).  Element
# types it lacks raise RuntimeError, which to_torch turns into BufferError.
def import_limits():
    """The :class:`interop_core.ImportLimits` of ``to(x, "torch")``.

    Returns
    -------
    interop_core.ImportLimits
        No negative strides; memory of DLPack device types 1 (CPU), 2 (CUDA), 3 (pinned),
        8 (Metal), 10 (ROCm), 13 (managed), 14 (oneAPI).
    """
    from interop_core import ImportLimits

    return ImportLimits(negative_strides=False, device_types=(1, 2, 3, 8, 10, 13, 14))


# --- the export rule: tensors that require grad ------------------------------------------------
#
# torch's own exports (Tensor.__dlpack__, .numpy()) refuse a tensor that requires grad: whoever
# imports it could change values autograd recorded, behind autograd's back.  to() follows that
# rule for every target (registry.add_export_rule); view() and launch_args() do not (a launcher
# reads the pointers of such tensors on purpose).
#
# The rule runs on every to() of a tensor, and torch's `requires_grad` getter costs tens of
# nanoseconds (more than the rest of to(t, "numpy")).  A tensor can require grad only when its
# TensorImpl holds autograd metadata (TensorImpl::requires_grad() is `autograd_meta_ &&
# autograd_meta_->requires_grad()`), and a tensor made without autograd holds none: so the rule
# reads that pointer (located once on canary tensors, as the reader's own fields are) and asks
# torch's getter -- called directly, without the attribute lookup -- only when it is set (views
# made in grad mode, which carry metadata to track their base, and tensors that require grad).

cdef extern from "Python.h":
    ctypedef PyObject* (*py_getter "getter")(PyObject* obj, void* closure)
    ctypedef struct PyGetSetDef:
        py_getter get
        void* closure
    ctypedef struct PyGetSetDescrObject:
        PyGetSetDef* d_getset
    ctypedef struct PyTypeObject:
        pass
    PyTypeObject PyGetSetDescr_Type
    PyObject* Py_True
    void Py_DECREF(PyObject* o)
    PyTypeObject* Py_TYPE(PyObject* o)

cdef enum:
    GRAD_SCAN_BYTES = 128          # where autograd_meta_ is looked for, inside every TensorImpl

cdef int _grad_state = 0            # 0 not bound, 1 torch's getter, -1 the attribute
cdef py_getter _grad_getter = NULL  # borrowed from _grad_descriptor's PyGetSetDef
cdef void* _grad_closure = NULL
cdef object _grad_descriptor = None  # owned: keeps the getter's definition alive
cdef Py_ssize_t _grad_meta_at = 0   # TensorImpl: autograd_meta_ (0: not located, ask torch)


cdef object _requires_grad_samples(object torch):
    """(tensors without autograd metadata, tensors that require grad) for the checks below.

    Not views, nor torch.tensor(data): torch gives every view made in grad mode autograd
    metadata (to track its base), and torch.tensor() sets requires_grad explicitly (which
    makes metadata too); such tensors are told apart by torch's getter.
    """
    plain = [torch.ones(3), torch.zeros(2, 5, dtype=torch.int8), torch.arange(6.0) * 2,
             torch.empty(0), torch.ones(4, 4).contiguous(), torch.full((), 1.5, dtype=torch.float64)]
    leaf = torch.ones(2, 3, requires_grad=True)
    grad = [leaf, leaf * 2, leaf[1], torch.nn.Parameter(torch.ones(5)),
            torch.zeros(3, dtype=torch.float64, requires_grad=True)]
    return plain, grad


cdef Py_ssize_t _locate_grad_meta(object torch) except -1:
    """The byte offset of autograd_meta_ in TensorImpl, or 0 when it cannot be told apart."""
    cdef Py_ssize_t at, found = 0
    cdef char* impl
    cdef bint fits
    if not _ready:
        return 0
    plain, grad = _requires_grad_samples(torch)
    for at in range(sizeof(void*), GRAD_SCAN_BYTES, sizeof(void*)):
        fits = True
        for sample in plain:
            impl = <char*> (<void**> _handle_of(<PyObject*> sample))[0]
            fits = fits and (<void**> (impl + at))[0] == NULL
        for sample in grad:
            impl = <char*> (<void**> _handle_of(<PyObject*> sample))[0]
            fits = fits and (<void**> (impl + at))[0] != NULL
        if fits:
            if found:
                return 0            # two candidates: do not guess
            found = at
    if not found:
        return 0
    # Checked on tensors the search did not see.
    plain, grad = _requires_grad_samples(torch)
    for sample in plain:
        impl = <char*> (<void**> _handle_of(<PyObject*> sample))[0]
        if (<void**> (impl + found))[0] != NULL:
            return 0
    for sample in grad:
        impl = <char*> (<void**> _handle_of(<PyObject*> sample))[0]
        if (<void**> (impl + found))[0] == NULL:
            return 0
    return found


cdef int _bind_grad_getter() except -1:
    global _grad_state, _grad_getter, _grad_closure, _grad_descriptor, _grad_meta_at
    torch = _torch_module()
    descriptor = None
    for klass in torch.Tensor.__mro__:
        descriptor = klass.__dict__.get("requires_grad")
        if descriptor is not None:
            break
    _grad_state = -1
    if descriptor is None or Py_TYPE(<PyObject*> descriptor) != &PyGetSetDescr_Type:
        return 0
    getset = (<PyGetSetDescrObject*> <PyObject*> descriptor).d_getset
    if getset == NULL or getset.get == NULL:
        return 0
    # The getter must answer as the attribute does before it is trusted.
    plain, grad = _requires_grad_samples(torch)
    off = torch.ones(2, requires_grad=True)
    off.requires_grad_(False)           # autograd metadata without requiring grad
    for sample in [*plain, *grad, off, torch.nn.Parameter(torch.ones(1), False)]:
        answer = getset.get(<PyObject*> sample, getset.closure)
        if answer == NULL:
            return -1
        same = (answer == Py_True) == bool(sample.requires_grad)
        Py_DECREF(answer)
        if not same:
            return 0
    _grad_descriptor = descriptor
    _grad_getter = getset.get
    _grad_closure = getset.closure
    _grad_meta_at = _locate_grad_meta(torch)
    _grad_state = 1
    return 0


cdef inline bint _lacks_grad_meta(PyObject* obj) noexcept:
    # No autograd metadata (TensorImpl's pointer located by _bind_grad_getter): the tensor
    # cannot require grad, answered without asking torch.
    cdef char* impl
    if _grad_state > 0 and _grad_meta_at:
        impl = <char*> (<void**> _handle_of(obj))[0]
        return (<void**> (impl + _grad_meta_at))[0] == NULL
    return False


cdef int _requires_grad(PyObject* obj) except -1:
    """1 when the tensor requires grad, else 0."""
    cdef PyObject* answer
    cdef bint requires
    if _lacks_grad_meta(obj):
        return 0
    if _grad_state == 0:
        _bind_grad_getter()
        return _requires_grad(obj)
    if _grad_state > 0:
        answer = _grad_getter(obj, _grad_closure)
        if answer == NULL:
            return -1
        requires = answer == Py_True
        Py_DECREF(answer)
        return requires
    return bool((<object> obj).requires_grad)


cdef int _refuse_requires_grad(PyObject* obj) except -1:
    if _requires_grad(obj):
        raise BufferError(
            f"cannot hand a {type(<object> obj).__name__} that requires grad to another "
            "framework: torch refuses to export it (as Tensor.__dlpack__ and .numpy() do); "
            "call .detach() first (it shares the memory).  interop_core.view() and "
            "launch_args() read such tensors as they are")
    return 0


def export_rule_status():
    """How torch's export rule tells tensors that require grad (``None`` before its first use).

    Returns
    -------
    dict or None
        ``getter``: torch's ``requires_grad`` getter is called directly (else the attribute);
        ``autograd_meta_offset``: where TensorImpl's autograd metadata pointer was located (0:
        not located, the getter is asked for every tensor).
    """
    if _grad_state == 0:
        return None
    return {"getter": _grad_state > 0, "autograd_meta_offset": _grad_meta_at}


def export_rule_capsule():
    """torch's export rule for ``registry.add_export_rule``: tensors that require grad are
    refused (a capsule named ``"interop_core.export_rule_v1"``).

    Returns
    -------
    PyCapsule
    """
    return PyCapsule_New(<void*> _refuse_requires_grad, b"interop_core.export_rule_v1", NULL)



# --- from_cuda_array_interface: when torch's own interface gives the reader's view --------------
#
# torch's __cuda_array_interface__ (version 2: no stream) describes a CUDA tensor as the reader
# does, except where it refuses or says something else: a tensor that requires grad (refused),
# bfloat16 (typestr "<V2", opaque) and the float8 types (no typestr), and the strides of a
# tensor torch calls contiguous (omitted, so C-contiguous, whatever torch keeps for extents of 1
# or for an empty tensor).  Those go to the interface itself, which then answers in torch's own
# words; every other CUDA tensor takes the reader's view.  The reader orders a consumer stream
# after torch's current stream as from_dlpack does, where version 2 orders nothing: the view
# is the interface's, the ordering a strict superset of it.

cdef inline bint _has_typestr(uint8_t code, uint8_t bits, uint16_t lanes) noexcept:
    if lanes != 1:
        return False
    if code == 0 or code == 1:                  # int, uint
        return bits == 8 or bits == 16 or bits == 32 or bits == 64
    if code == 2:                               # float
        return bits == 16 or bits == 32 or bits == 64
    if code == KDL_COMPLEX:
        return bits == 64 or bits == 128
    return code == 6 and bits == 8              # bool


cdef inline bint _same_strides_and_address(const interop_core_tensor_info* read) noexcept:
    # One pass from the last dimension: whether the strides are row-major, whether torch calls
    # the tensor contiguous (row-major with extents of 1 skipped: its interface then omits the
    # strides, meaning row-major), and whether it is empty (the interface then says address 0
    # and omits the strides too).
    cdef int64_t expected = 1, expected_torch = 1, n, stride
    cdef bint row_major = True, contiguous = True, empty = False
    cdef int i
    for i in range(read.ndim - 1, -1, -1):
        n = read.shape[i]
        stride = read.strides[i]
        empty = empty or n == 0
        row_major = row_major and stride == expected
        expected *= n
        if n != 1:
            contiguous = contiguous and stride == expected_torch
            expected_torch *= n
    if empty:
        return row_major and read.data == NULL
    return row_major or not contiguous


cdef int _same_as_interface(PyObject* obj, int32_t protocol,
                            const interop_core_tensor_info* read) except -1:
    if not _has_typestr(read.dtype_code, read.dtype_bits, read.dtype_lanes):
        return 0
    if not _same_strides_and_address(read):
        return 0
    if _lacks_grad_meta(obj):           # the common case, inlined: no call
        return 1
    return 0 if _requires_grad(obj) else 1


def equivalence_check_capsule():
    """The check ``registry.add_type(equivalence_check={"cuda_array_interface": ...})`` takes:
    whether torch's own ``__cuda_array_interface__`` gives the reader's view of a tensor (a
    capsule named ``"interop_core.equivalence_check_v1"``).

    Returns
    -------
    PyCapsule
    """
    return PyCapsule_New(<void*> _same_as_interface, INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE, NULL)
