# torch.Tensor through the PyTorch AOTI stable C ABI (torch/csrc/inductor/aoti_torch/c/shim.h).
#
# Nothing here is a build-time dependency on torch: the aoti_torch_* functions are looked up
# with dlopen(RTLD_NOLOAD) / dlsym in the torch libraries the process has already loaded, the
# first time a tensor is read (importing this module imports no framework).
#
# Two undocumented details of torch are relied on, and both are validated once per process
# against torch's Python API before the reader is trusted:
# - where the at::Tensor (whose address is an AtenTensorHandle) sits in the Python tensor
#   object: right after PyObject_HEAD, either directly (torch >= 2.12-ish) or inside a
#   c10::MaybeOwned<at::Tensor> (a bool, then a union of a borrowed pointer and an owned
#   tensor; older torch).  Told apart by comparing with Tensor._cdata, the TensorImpl address.
# - where the TensorImpl keeps its DispatchKeySet, and which of its bits mean "conjugate",
#   "negative", "nested", "zero tensor": found by diffing canary tensors that differ in exactly
#   one of those properties.  One 64-bit load then tells, per call, that a tensor's memory does
#   not mean what its metadata says; without it (not found) the reader asks the Python API
#   (is_neg() always, is_conj() for complex dtypes) at some tens of ns per call.
# Anything unexpected (a missing symbol, a canary read differently from what torch says) makes
# the reader fall back, for the rest of the process, to torch's DLPack C exchange API, then
# to __dlpack__, with the unusable-tensor checks done through the Python API.
#
# Memory: a view of a tensor keeps the tensor object itself alive (the keep-alive returned is
# `obj`), which keeps its storage alive.

from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, intptr_t, uint8_t, uint32_t, uint64_t, uintptr_t

from .protocols._dlpack cimport has_exchange_api, read_dlpack, read_dlpack_exchange_api
from .protocols._dlpack cimport py_object_via_exchange_api
from .core._dlpack_abi cimport DLDataType, kDLCPU, kDLCUDA
from .core._dtypes cimport record_set_dtype
from .core._record cimport ViewRecord, extents_free, extents_resize, record_init
from .registry._registry cimport add_core_reader
from .core._view cimport StridedMemoryView

__all__ = ["validation_status", "set_validation_result", "to_torch", "aoti_producer_stream"]


cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char* filename, int flags)
    void* dlsym(void* handle, const char* symbol)
    int dlclose(void* handle)
    int RTLD_LAZY
    int RTLD_NOLOAD


# The shim's signatures (AOTITorchError is int32_t, 0 = success; AtenTensorHandle is an
# at::Tensor*; int32_t codes for dtype / device / layout come from the constant getters).
ctypedef int32_t (*get_ptr_fn)(void* h, void** out) noexcept nogil
ctypedef int32_t (*get_i64_fn)(void* h, int64_t* out) noexcept nogil
ctypedef int32_t (*get_arr_fn)(void* h, int64_t** out) noexcept nogil
ctypedef int32_t (*get_i32_fn)(void* h, int32_t* out) noexcept nogil
ctypedef int32_t (*const_fn)() noexcept nogil
ctypedef int32_t (*cuda_stream_fn)(int32_t device_index, void** out) noexcept nogil

cdef get_ptr_fn _get_data_ptr = NULL
cdef get_i64_fn _get_dim = NULL
cdef get_arr_fn _get_sizes = NULL
cdef get_arr_fn _get_strides = NULL
cdef get_i32_fn _get_dtype = NULL
cdef get_i32_fn _get_device_type = NULL
cdef get_i32_fn _get_device_index = NULL
cdef get_i32_fn _get_layout = NULL
cdef cuda_stream_fn _get_cuda_stream = NULL   # optional: only in libtorch_cuda

cdef int32_t _dev_cpu = -1
cdef int32_t _dev_cuda = -1
cdef int32_t _layout_strided = -1

# torch ScalarType code -> DLPack triple; itemsize 0 marks a code we do not map (slow path).
cdef enum:
    N_CODES = 64
cdef DLDataType _dl_of[N_CODES]
cdef int64_t _size_of[N_CODES]

# Where the at::Tensor sits in the Python object.
cdef enum:
    HANDLE_UNKNOWN = 0
    HANDLE_DIRECT = 1        # at::Tensor right after PyObject_HEAD
    HANDLE_MAYBE_OWNED = 2   # c10::MaybeOwned<at::Tensor>: bool is_borrowed, then the union
cdef int _handle_mode = HANDLE_UNKNOWN
cdef Py_ssize_t _head = sizeof(PyObject)
cdef Py_ssize_t _union_at = (sizeof(PyObject) + 1 + sizeof(void*) - 1) // sizeof(void*) * sizeof(void*)

# The DispatchKeySet word in TensorImpl and the bits that send a tensor to the checked path.
cdef Py_ssize_t _keyset_at = -1
cdef uint64_t _bad_keys = 0

cdef enum:
    STATE_UNVALIDATED = 0
    STATE_VALIDATING = 1
    STATE_AOTI = 2           # validated: the AOTI path is used
    STATE_FALLBACK = 3       # not usable: DLPack C exchange API / __dlpack__
cdef int _state = STATE_UNVALIDATED
cdef int _cuda_checked = 0   # 0 not yet, 1 CUDA canaries agreed, -1 they did not
cdef object _reason = None   # why the fallback is used (str), for validation_status()
cdef object _torch = None    # the torch module (kept for the slow paths; set when validated)

# Cached Python-API methods for the checked paths.
cdef object _is_neg = None
cdef object _is_conj = None


# --- the hot path ------------------------------------------------------------------------------

cdef inline void* _handle_of(object obj) noexcept:
    cdef char* base = <char*> <PyObject*> obj
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


cdef int _aoti_fill(object obj, ViewRecord* rec) except -1:
    """Read `obj` through AOTI into `rec`; 0 on success, 1 when the slow path must decide."""
    cdef void* h = _handle_of(obj)
    cdef int32_t layout, dtype, dev_type, dev_index
    cdef int64_t ndim, numel
    cdef int64_t* sizes
    cdef int64_t* strides
    cdef void* data
    cdef int i
    cdef void* cstream = NULL
    if _get_layout(h, &layout) != 0 or layout != _layout_strided:
        return 1
    if _get_dtype(h, &dtype) != 0 or dtype < 0 or dtype >= N_CODES or _size_of[dtype] == 0:
        return 1
    if _get_device_type(h, &dev_type) != 0:
        return 1
    if dev_type == _dev_cpu:
        rec.device_type = kDLCPU
        rec.device_id = 0
    elif dev_type == _dev_cuda:
        if _cuda_checked <= 0:
            return 1
        if _get_device_index(h, &dev_index) != 0:
            return 1
        rec.device_type = kDLCUDA
        rec.device_id = dev_index
    else:
        return 1
    # Nested tensors fail here (they have no sizes): the slow path names them.
    if (_get_dim(h, &ndim) != 0 or _get_sizes(h, &sizes) != 0
            or _get_strides(h, &strides) != 0 or _get_data_ptr(h, &data) != 0):
        return 1
    extents_resize(&rec.ext, <int> ndim)
    numel = 1
    for i in range(ndim):
        rec.ext.shape[i] = sizes[i]
        rec.ext.strides[i] = strides[i]
        numel *= sizes[i]
    if data == NULL and numel != 0:
        return 1          # no memory behind a non-empty tensor (e.g. an efficient zero tensor)
    rec.dtype = _dl_of[dtype]
    rec.itemsize = _size_of[dtype]
    rec.ptr = <uintptr_t> data
    rec.readonly = False
    rec.has_producer_stream = False
    # The producer's stream is part of what the view says (its CUDA Array Interface export
    # carries it, a later sync() orders after it), so it is read now, with or without a
    # consumer stream: torch's current stream may have changed by the time the view is used.
    if rec.device_type == kDLCUDA:
        if _get_cuda_stream != NULL and _get_cuda_stream(rec.device_id, &cstream) == 0:
            rec.has_producer_stream = True
            rec.producer_stream = <intptr_t> cstream
    return 0


cdef object _read_aoti(object obj, object stream, ViewRecord* rec):
    cdef void* h
    if _keyset_at >= 0:
        h = _handle_of(obj)
        if _keyset_of(h) & _bad_keys:
            return _read_slow(obj, stream, rec)
    else:
        if _is_neg(obj):
            _raise_unusable(obj)
    if _aoti_fill(obj, rec) != 0:
        return _read_slow(obj, stream, rec)
    # Only complex tensors can carry the conjugate bit: ask only for them.
    if _keyset_at < 0 and rec.dtype.code == 5 and _is_conj(obj):
        _raise_unusable(obj)
    return obj


cdef object _read_slow(object obj, object stream, ViewRecord* rec):
    # Something about this tensor is unusual: let the Python API say what, then either refuse
    # it or read it through torch's own DLPack (other devices, dtypes we do not map).
    _raise_unusable(obj)
    if (_cuda_checked == 0 and _dev_cuda >= 0 and obj.is_cuda):
        _validate_cuda(obj.device)
        if _cuda_checked > 0 and _aoti_fill(obj, rec) == 0:
            return obj
    return _read_dlpack(obj, stream, rec)


cdef object _read_dlpack(object obj, object stream, ViewRecord* rec):
    # torch refuses to export tensors that require grad; the memory is the same without.
    if obj.requires_grad:
        obj = obj.detach()
    if has_exchange_api(type(obj)):
        return read_dlpack_exchange_api(obj, stream, rec)
    return read_dlpack(obj, stream, rec)


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


cdef int _raise_unusable(object obj) except -1:
    why = _unusable_reason(obj)
    if why is not None:
        raise BufferError(f"cannot view this torch.Tensor: it {why}")
    return 0


cdef object _torch_module():
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch


cdef object read_torch(object obj, object stream, ViewRecord* rec):
    if _state == STATE_AOTI:
        return _read_aoti(obj, stream, rec)
    if _state == STATE_UNVALIDATED:
        _validate()
        if _state == STATE_AOTI:
            return _read_aoti(obj, stream, rec)
    # Fallback (or another thread is validating): torch's DLPack, with our checks first,
    # because torch exports neg-bit and zero tensors as if their memory were their values.
    _raise_unusable(obj)
    return _read_dlpack(obj, stream, rec)


add_core_reader("torch", read_torch)


# --- validation --------------------------------------------------------------------------------

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


cdef int _fail(str reason) except -1:
    global _state, _reason
    _state = STATE_FALLBACK
    _reason = reason
    return 0


cdef int _validate() except -1:
    global _state, _reason
    _state = STATE_VALIDATING
    try:
        reason = _try_validate()
    except BaseException as exc:
        # Validation must never take a view() down: the fallback is always correct.
        reason = f"validation raised {exc!r}"
    if reason is None:
        _state = STATE_AOTI
        _reason = None
    else:
        _fail(reason)
    return 0


cdef object _try_validate():
    global _get_data_ptr, _get_dim, _get_sizes, _get_strides, _get_dtype, _get_device_type
    global _get_device_index, _get_layout, _get_cuda_stream, _dev_cpu, _dev_cuda
    global _layout_strided, _is_neg, _is_conj
    torch = _torch_module()
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
    _get_cuda_stream = <cuda_stream_fn> _sym(handles, "aoti_torch_get_current_cuda_stream")

    cdef int i
    cdef int32_t code
    cdef const_fn getter
    for i in range(N_CODES):
        _size_of[i] = 0
    for name, (c, bits, lanes) in _DL_BY_NAME.items():
        getter = <const_fn> _sym(handles, "aoti_torch_dtype_" + name)
        if getter == NULL:
            continue      # an older torch without this dtype: such tensors take the slow path
        code = getter()
        if code < 0 or code >= N_CODES:
            continue
        _dl_of[code].code = c
        _dl_of[code].bits = bits
        _dl_of[code].lanes = lanes
        _size_of[code] = bits * lanes // 8

    reason = _find_handle_layout(torch)
    if reason is not None:
        return reason
    _find_keyset(torch)
    return _check_canaries(torch, torch.device("cpu"))


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


cdef int _find_keyset(object torch) except -1:
    """Locate the DispatchKeySet word in TensorImpl and the bits of unusable tensors."""
    global _keyset_at, _bad_keys
    _keyset_at = -1
    _bad_keys = 0
    plain = [torch.ones(3), torch.zeros(5, 2), torch.ones(4, dtype=torch.int64),
             torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bfloat16),
             torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex128),
             torch.ones(2, dtype=torch.float16), torch.ones(2, requires_grad=True)]
    neg_pairs = [(plain[0], torch._neg_view(plain[0])), (plain[1], torch._neg_view(plain[1])),
                 (plain[5].imag, plain[5].conj().imag)]
    conj_pairs = [(plain[5], plain[5].conj()), (plain[6], plain[6].conj())]
    found = []
    cdef Py_ssize_t at
    cdef uint64_t neg_bit, conj_bit, x
    # The word sits well inside TensorImpl (offset 168 on torch 2.13); scan its first 256 bytes.
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
            found.append((at, neg_bit, conj_bit))
    if len(found) != 1:
        return 0           # not found, or ambiguous: ask the Python API per call instead
    at, neg_bit, conj_bit = found[0]
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
    _keyset_at = at
    _bad_keys = bad
    return 0


cdef tuple _describe(ViewRecord* rec):
    return (rec.ptr, tuple(rec.ext.shape[i] for i in range(rec.ext.ndim)),
            tuple(rec.ext.strides[i] for i in range(rec.ext.ndim)),
            (rec.dtype.code, rec.dtype.bits, rec.dtype.lanes), (rec.device_type, rec.device_id))


cdef tuple _expected(object t):
    dev = t.device
    device = (kDLCPU, 0) if dev.type == "cpu" else (kDLCUDA, dev.index)
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()),
            _DL_BY_NAME[str(t.dtype).replace("torch.", "")], device)


cdef object _check_canaries(object torch, object device):
    """None when the AOTI path reads every canary as torch's Python API describes it."""
    cdef ViewRecord rec
    base = torch.arange(24, dtype=torch.float32, device=device).reshape(4, 6)
    canaries = {
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
        canaries[name] = torch.ones(2, 3, dtype=getattr(torch, name), device=device)[:, 1:]
    for name, t in canaries.items():
        record_init(&rec)
        try:
            if _aoti_fill(t, &rec) != 0:
                return f"the AOTI reader could not read the {name} canary"
            got = _describe(&rec)
        finally:
            extents_free(&rec.ext)
        want = _expected(t)
        if got != want:
            return f"the AOTI reader read the {name} canary as {got}, torch says {want}"
        # torch's own DLPack must agree too (it is the fallback, and the reference for dtypes).
        record_init(&rec)
        try:
            holder = _read_dlpack(t.detach(), None, &rec)
            theirs = _describe(&rec)
            del holder
        except Exception:
            theirs = None
        finally:
            extents_free(&rec.ext)
        if theirs is not None and theirs != got:
            return f"the AOTI reader read the {name} canary as {got}, torch's DLPack as {theirs}"
    # Unusable tensors must be caught, whatever detection is in use.
    c = torch.ones(3, dtype=torch.complex64, device=device)
    for name, t in (("conjugate", c.conj()), ("negative", c.conj().imag)):
        try:
            record_init(&rec)
            _read_aoti(t, None, &rec)
        except BufferError:
            pass
        else:
            return f"the AOTI reader did not refuse the {name}-bit canary"
        finally:
            extents_free(&rec.ext)
    return None


cdef int _check_current_stream(object torch, object device) except -1:
    """Stop reading the current stream through AOTI unless it agrees with torch's Python API.

    Checked on the default stream and inside ``torch.cuda.stream(side)``; on disagreement the
    plugin's producer strategy (torch's Python API) reports the stream instead.
    """
    global _get_cuda_stream
    if _get_cuda_stream == NULL:
        return 0
    cdef void* got = NULL
    cdef int32_t index = device.index if device.index is not None else torch.cuda.current_device()
    side = torch.cuda.Stream(device)
    for stream in (None, side):
        with torch.cuda.stream(stream):
            want = torch.cuda.current_stream(device).cuda_stream
            if _get_cuda_stream(index, &got) != 0 or <intptr_t> got != <intptr_t> want:
                _get_cuda_stream = NULL
                return 0
    return 0


cdef int _validate_cuda(object device) except -1:
    """Check the AOTI path on CUDA tensors once (on the first CUDA tensor seen)."""
    global _cuda_checked
    _cuda_checked = 1       # let _aoti_fill accept CUDA while checking
    try:
        reason = _check_canaries(_torch_module(), device)
        if reason is None:
            _check_current_stream(_torch_module(), device)
    except BaseException as exc:
        reason = f"CUDA validation raised {exc!r}"
    _cuda_checked = 1 if reason is None else -1
    if reason is not None:
        global _reason
        _reason = f"CUDA tensors use DLPack: {reason}"
    return 0


# --- Python-visible ----------------------------------------------------------------------------

def validation_status():
    """How the torch reader reads tensors in this process.

    Validation runs once, the first time a tensor is read (or when this is called with torch
    imported).

    Returns
    -------
    dict
        ``path``: ``"aoti"`` or ``"dlpack"`` (the fallback) or ``"unvalidated"``; ``reason``:
        why the fallback is used (None otherwise); ``handle``: ``"direct"`` or
        ``"maybe_owned"`` (where the at::Tensor sits in the Python object); ``keyset_offset``:
        offset of the DispatchKeySet in TensorImpl used to refuse conjugate / negative / nested
        tensors with one load (None: the Python API is asked instead); ``cuda``: ``True`` /
        ``False`` once CUDA tensors were checked, else None; ``current_stream``: ``"aoti"``
        when views of CUDA tensors read torch's current stream through AOTI as they are made,
        ``"python"`` when the plugin's strategy asks torch's Python API once ordering needs it
        (CPU builds, or AOTI disagreed with torch), None before CUDA tensors were checked.
    """
    import sys
    if _state == STATE_UNVALIDATED and "torch" in sys.modules:
        _validate()
    path = {STATE_AOTI: "aoti", STATE_FALLBACK: "dlpack"}.get(_state, "unvalidated")
    return {
        "path": path,
        "reason": _reason,
        "handle": {HANDLE_DIRECT: "direct", HANDLE_MAYBE_OWNED: "maybe_owned"}.get(_handle_mode),
        "keyset_offset": _keyset_at if _keyset_at >= 0 else None,
        "cuda": None if _cuda_checked == 0 else _cuda_checked > 0,
        "current_stream": (None if _cuda_checked == 0
                           else "aoti" if _cuda_checked > 0 and _get_cuda_stream != NULL
                           else "python"),
    }


def set_validation_result(ok, reason=None, *, keyset=True):
    """Override the validation outcome (for tests of the fallback).

    Parameters
    ----------
    ok : bool or None
        ``False``: use the DLPack fallback from now on, with ``reason``.  ``True``: revalidate
        now.  ``None``: forget the outcome; the next read validates again.
    reason : str, optional
        The reason reported by :func:`validation_status` when ``ok`` is False.
    keyset : bool
        With ``ok=True``: ``False`` disables the DispatchKeySet detection so that the
        Python-API checks are used instead (what happens where the key set is not found).
    """
    global _state, _reason, _keyset_at, _cuda_checked
    if ok is None:
        _state = STATE_UNVALIDATED
        _reason = None
        _cuda_checked = 0
    elif ok:
        _state = STATE_UNVALIDATED
        _cuda_checked = 0
        _validate()
        if not keyset and _state == STATE_AOTI:
            _keyset_at = -1
    else:
        _fail(reason if reason is not None else "disabled by set_validation_result(False)")


def aoti_producer_stream(int device_index):
    """torch's current CUDA stream on ``device_index`` through AOTI, or None if unavailable.

    Returns
    -------
    int or None
        The ``cudaStream_t`` handle, or None when torch's CUDA library does not export
        ``aoti_torch_get_current_cuda_stream`` (CPU builds) or the reader is not validated.
    """
    cdef void* s = NULL
    if _state == STATE_UNVALIDATED:
        _validate()
    if _get_cuda_stream == NULL or _get_cuda_stream(device_index, &s) != 0:
        return None
    return <intptr_t> s


def to_torch(StridedMemoryView view not None, stream=None):
    """A ``torch.Tensor`` over the memory of ``view`` (same pointer), keeping ``view`` alive.

    Made through torch's DLPack C exchange API (``managed_tensor_to_py_object_no_sync``, no
    Python-level capsule); falls back to ``torch.from_dlpack(view)`` when torch does not
    publish it.  ``stream`` is accepted for the exporter protocol: ``to()`` has already
    ordered the view on it.

    Raises
    ------
    BufferError
        If torch cannot hold the memory (a device or element type torch does not have).
    """
    torch = _torch_module()
    # torch.Tensor's metaclass is a subclass of type: cast, Cython's typed argument is exact.
    cdef type tensor_type = <type> torch.Tensor
    if has_exchange_api(tensor_type):
        return py_object_via_exchange_api(tensor_type, view, &view.rec)
    return torch.from_dlpack(view)
