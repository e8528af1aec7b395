"""The torch plugin: the AOTI reader, its validation and fallback, streams, and the exporter."""

from __future__ import annotations

import gc
import pathlib
import re
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")

import interop_torch  # noqa: E402
from conftest import validation_result  # noqa: E402
from interop_torch import _reader  # noqa: E402

import interop_core  # noqa: E402
from interop_core.plugins import ReadOnlyHandoffWarning, reader_for  # noqa: E402
from interop_core.registry import _registry  # noqa: E402
from interop_core.testing import Expected, PluginConformance  # noqa: E402

TENSOR_TYPES = ("torch:Tensor", "torch.nn.parameter:Parameter")

DLPACK = {
    torch.bool: (6, 8, 1), torch.int8: (0, 8, 1), torch.int16: (0, 16, 1),
    torch.int32: (0, 32, 1), torch.int64: (0, 64, 1), torch.uint8: (1, 8, 1),
    torch.float16: (2, 16, 1), torch.bfloat16: (4, 16, 1), torch.float32: (2, 32, 1),
    torch.float64: (2, 64, 1), torch.complex64: (5, 64, 1), torch.complex128: (5, 128, 1),
}
DTYPES = list(DLPACK)


def _layouts(device="cpu"):
    base = torch.arange(60, dtype=torch.float64, device=device).reshape(5, 12)
    return {
        "contiguous": lambda: base.clone(),
        "sliced": lambda: base[1:4, ::3],
        "transposed": lambda: base.T,
        "storage_offset": lambda: base.reshape(-1)[7:19],
        "expanded": lambda: base[0].expand(3, 12),
        "zero_size": lambda: base[:0],
        "zero_d": lambda: base[2, 5],
        "seven_d": lambda: torch.ones((1, 2, 1, 2, 1, 2, 1), device=device),
    }


def _expected(t):
    device = (1, 0) if t.device.type == "cpu" else (2, t.device.index)
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), DLPACK[t.dtype], device)


def _got(v):
    return (v.ptr, v.shape, v.strides, v.dlpack_dtype, (v.device_type, v.device_id))


@pytest.fixture(params=["keyset", "python_checks"])
def detection(request):
    """Both ways of spotting unusable tensors: the DispatchKeySet load and the Python API."""
    result = validation_result("torch:Tensor")
    assert result.validated, result.reason
    assert _reader._set_keyset_detection(request.param == "keyset") == (
        request.param == "keyset")
    yield request.param
    _reader._set_keyset_detection(True)


@pytest.fixture
def fallback(force_validation):
    """The AOTI reader's validation failed (forced): every tensor takes the fallback."""
    for path in TENSOR_TYPES:
        force_validation(path, False, "simulated canary mismatch")


# --- registration ------------------------------------------------------------------------------

def test_plugin_package_is_this_worktrees():
    assert interop_torch.__file__.startswith(
        str(pathlib.Path(interop_core.__file__).parent.parent))


@pytest.mark.parametrize("t", [torch.Tensor, torch.nn.Parameter])
def test_exact_types_use_the_plugins_compiled_reader_through_the_public_abi(t):
    obj = torch.ones(2) if t is torch.Tensor else torch.nn.Parameter(torch.ones(2))
    interop_core.view(obj)
    entry = reader_for(type(obj))
    assert entry.plugin == "torch"
    assert entry.kind == 3                      # a capsule, as a third party registers
    assert entry.fallback.reader is _reader.read_checked
    assert entry.subclasses == (t is torch.Tensor)     # Parameter's are Tensor's


def test_the_compiled_reader_cimports_nothing_of_the_core_but_the_public_abi():
    folder = pathlib.Path(_reader.__file__).parent
    for name in ("_reader.pyx", "_reader.pxd"):
        source = (folder / name).read_text()
        cimported = set(re.findall(r"^\s*(?:from\s+(\S+)\s+)?cimport\s+(\S+)", source, re.M))
        core = {m or n for m, n in cimported if (m or n).startswith(("interop_core", "."))}
        assert core == {"interop_core.abi"}, (name, core)


def test_parameter_is_registered_under_its_real_module():
    assert (torch.nn.Parameter.__module__, torch.nn.Parameter.__qualname__) == (
        "torch.nn.parameter", "Parameter")


@pytest.mark.parametrize("path", TENSOR_TYPES)
def test_validation_passes_on_this_torch(path):
    result = validation_result(path)
    assert result.validated, result.reason
    assert result.canaries >= 21
    assert result.details["handle"] in ("direct", "maybe_owned")
    assert result.details["keyset_offset"] is not None
    cuda = result.details["cuda"]
    if torch.cuda.is_available():
        # Checked at validation, or (CUDA not initialized then) at the first CUDA tensor.
        assert cuda is True or "at the first CUDA tensor" in str(cuda), cuda
    else:
        assert cuda is False


def _read_without_fallback(t):
    entry = _registry.new_entry(_reader.reader_capsule(), plugin="test")
    return _registry.read_with(entry, t)


# --- metadata ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(_layouts()))
def test_view_matches_torch_metadata(detection, dtype, layout):
    t = _layouts()[layout]().to(dtype) if layout in ("contiguous", "seven_d") else None
    if t is None:
        # Keep the layout (to(dtype) would make it contiguous): build it in the dtype.
        base = torch.arange(60, device="cpu").to(dtype).reshape(5, 12)
        t = {"sliced": base[1:4, ::3], "transposed": base.T,
             "storage_offset": base.reshape(-1)[7:19], "expanded": base[0].expand(3, 12),
             "zero_size": base[:0], "zero_d": base[2, 5]}[layout]
    v = interop_core.view(t)
    assert _got(v) == _expected(t)
    assert v.readonly is False
    assert v.owner is t


def test_view_shares_memory_with_the_tensor():
    t = torch.zeros(3, 4)
    v = interop_core.view(t.T)
    memoryview(v)[2, 1] = 7.0
    assert t[1, 2].item() == 7.0


@pytest.mark.parametrize(("dtype", "code"), [
    (torch.uint16, (1, 16, 1)), (torch.uint32, (1, 32, 1)), (torch.uint64, (1, 64, 1)),
    (torch.float8_e4m3fn, (10, 8, 1)), (torch.float8_e5m2, (12, 8, 1)),
    (torch.complex32, (5, 32, 1))], ids=str)
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_newer_dtypes_keep_their_dlpack_code(dtype, code):
    t = torch.zeros(4, dtype=dtype)
    for v in (interop_core.view(t), interop_core.StridedMemoryView.from_dlpack(t)):
        assert v.dlpack_dtype == code
        assert (v.ptr, v.shape, v.itemsize) == (t.data_ptr(), (4,), t.element_size())
    back = interop_core.to(interop_core.view(t), "torch")
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()


def test_requires_grad_and_parameters_are_fine():
    p = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    g = torch.ones(3, requires_grad=True)
    assert _got(interop_core.view(p)) == _expected(p)
    assert _got(interop_core.view(g)) == _expected(g)


def test_view_keeps_the_tensor_alive():
    t = torch.arange(8.0)
    ref = weakref.ref(t)
    v = interop_core.view(t)
    del t
    gc.collect()
    assert ref() is not None and v.owner is ref()
    del v
    gc.collect()
    assert ref() is None


def test_cpu_tensor_has_no_producer_stream():
    v = interop_core.view(torch.ones(2), stream=0)
    assert v.producer_stream is None


# --- unusable tensors --------------------------------------------------------------------------

def _unusable():
    c = torch.arange(4.0).to(torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "conjugate": (c.conj(), "conjugate bit"),
            "negative (conj().imag)": (c.conj().imag, "negative bit"),
            "negative (_neg_view int)": (torch._neg_view(torch.ones(3, dtype=torch.int32)),
                                         "negative bit"),
            "sparse": (torch.ones(3).to_sparse(), "layout torch.sparse_coo"),
            "sparse_csr": (torch.eye(3).to_sparse_csr(), "layout torch.sparse_csr"),
            "quantized": (torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
                          "quantized"),
            "meta": (torch.ones(3, device="meta"), "meta device"),
            "nested": (torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested"),
            "zero tensor": (torch._efficientzerotensor(3), "zero tensor"),
        }


@pytest.mark.parametrize("case", list(_unusable()))
def test_unusable_tensors_raise_a_clear_error(detection, case):
    t, words = _unusable()[case]
    with pytest.raises(BufferError, match=words):
        interop_core.view(t)


@pytest.mark.parametrize("case", list(_unusable()))
def test_the_compiled_reader_declines_unusable_tensors_to_the_fallback(detection, case):
    t, _ = _unusable()[case]
    with pytest.raises(BufferError, match="declined this object"):
        _read_without_fallback(t)


@pytest.mark.parametrize("layout", list(_layouts()))
def test_the_compiled_reader_reads_ordinary_tensors_itself(detection, layout):
    t = _layouts()[layout]()
    assert _got(_read_without_fallback(t)) == _expected(t)


@pytest.mark.parametrize("case", list(_unusable()))
def test_unusable_tensors_raise_on_the_fallback_too(fallback, case):
    t, words = _unusable()[case]
    with pytest.raises(BufferError, match=words):
        interop_core.view(t)


def test_bit_set_in_place_is_seen_on_the_next_view():
    t = torch.arange(3.0).to(torch.complex64)
    interop_core.view(t)
    torch._C._set_conj(t, True)
    with pytest.raises(BufferError, match="conjugate"):
        interop_core.view(t)
    torch._C._set_conj(t, False)
    assert interop_core.view(t).ptr == t.data_ptr()


def test_resolved_tensors_are_fine():
    c = torch.arange(4.0).to(torch.complex64)
    r = c.conj().resolve_conj()
    n = c.conj().imag.resolve_neg()
    assert _got(interop_core.view(r)) == _expected(r)
    assert _got(interop_core.view(n)) == _expected(n)


# --- fallback ----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", list(_layouts()))
def test_fallback_when_validation_fails_gives_the_same_metadata(fallback, layout):
    result = validation_result("torch:Tensor")
    assert (result.validated, result.reason) == (False, "simulated canary mismatch")
    assert reader_for(torch.Tensor).reader is _reader.read_checked
    t = _layouts()[layout]()
    v = interop_core.view(t)
    assert _got(v) == _expected(t)
    # The keep-alive is torch's DLPack tensor holder, the owner the tensor itself.
    assert v.owner is t


def test_fallback_reads_requires_grad_tensors(fallback):
    p = torch.nn.Parameter(torch.ones(2, 2))
    g = torch.ones(3, requires_grad=True)
    assert reader_for(torch.nn.Parameter).reader is _reader.read_checked
    assert _got(interop_core.view(p)) == _expected(p)
    assert _got(interop_core.view(g)) == _expected(g)


def test_lifting_a_failed_validation_restores_the_aoti_reader(force_validation):
    from interop_core.registry import _validation

    force_validation("torch:Tensor", False, "test")
    assert reader_for(torch.Tensor).reader is _reader.read_checked
    _validation._force("torch:Tensor", None)
    assert validation_result("torch:Tensor").validated
    assert reader_for(torch.Tensor).kind == 3


# --- subclasses --------------------------------------------------------------------------------

class MyTensor(torch.Tensor):
    pass


def test_subclasses_are_read_by_torchs_reader():
    s = torch.arange(6.0).reshape(2, 3)[:, ::2].as_subclass(MyTensor)
    v = interop_core.view(s)
    assert _got(v) == _expected(s) and v.owner is s
    assert reader_for(MyTensor).plugin == "torch"
    assert interop_core.StridedMemoryView.from_dlpack(s).ptr == s.data_ptr()


# Every way in: a tensor whose memory does not hold its values (torch's DLPack exports, the C
# exchange API above all, hand such memory on without the bit) is refused by each, never read.
ENTRY_POINTS = {
    "view": interop_core.view,
    "from_dlpack": interop_core.StridedMemoryView.from_dlpack,
    "from_any": interop_core.StridedMemoryView.from_any,
    "to numpy": lambda t: interop_core.to(t, "numpy"),
    "compat from_dlpack": lambda t: __import__(
        "interop_core.compat.cuda_core", fromlist=["x"]).StridedMemoryView.from_dlpack(t, -1),
}


@pytest.mark.parametrize("subclass", [False, True], ids=["tensor", "subclass"])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("case", list(_unusable()))
def test_unusable_tensors_are_refused_by_every_entry_point(case, entry, subclass):
    t, words = _unusable()[case]
    if subclass:
        if case in ("nested", "quantized", "sparse", "sparse_csr"):
            pytest.skip(f"torch cannot make a {case} tensor a Python subclass")
        t = t.as_subclass(MyTensor)
    if entry in ("view", "to numpy") or not case.startswith(("sparse", "quantized", "meta",
                                                              "nested")):
        # torch's own exports would describe these, wrongly: the reader's refusal stands.
        with pytest.raises(BufferError, match=words):
            ENTRY_POINTS[entry](t)
    else:
        # torch's DLPack export refuses these too, and the constructor says so in its words.
        with pytest.raises((BufferError, RuntimeError)):
            ENTRY_POINTS[entry](t)


def test_fake_tensor_does_not_take_the_torch_reader():
    fake = pytest.importorskip("torch._subclasses.fake_tensor")
    with fake.FakeTensorMode():
        f = torch.ones(3)
    assert type(f) is not torch.Tensor
    with pytest.raises(BufferError, match="FakeTensor"):
        interop_core.view(f)
    assert reader_for(type(f)).reader != "torch"


# --- exporter ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "transposed", "zero_d", "zero_size"])
def test_exporter_round_trip_is_zero_copy(dtype, layout):
    base = torch.arange(60).to(dtype).reshape(5, 12)
    t = {"contiguous": base, "sliced": base[1:4, ::3], "transposed": base.T,
         "zero_d": base[2, 5], "zero_size": base[:0]}[layout]
    v = interop_core.view(t)
    out = interop_core.to(v, "torch")
    assert type(out) is torch.Tensor
    assert (out.data_ptr(), tuple(out.shape), out.stride(), out.dtype) == (
        t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)


def test_exported_tensor_keeps_the_view_alive():
    t = torch.arange(6.0)
    v = interop_core.view(t)
    ref = weakref.ref(v)
    out = interop_core.to(v, torch.Tensor)
    del v, t
    gc.collect()
    assert ref() is not None
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    del out
    gc.collect()
    assert ref() is None


def test_exporter_refuses_what_is_not_a_view():
    with pytest.raises(TypeError, match="StridedMemoryView.*Tensor"):
        _reader.to_torch(torch.ones(2))


def test_exporting_readonly_memory_warns_once_and_shares_it():
    src = bytes(range(8))
    with pytest.warns(ReadOnlyHandoffWarning) as record:
        out = interop_core.to(src, "torch")
    assert len(record) == 1
    assert out.dtype == torch.uint8 and out.tolist() == list(range(8))
    assert out.data_ptr() == interop_core.view(src).ptr


# --- streams -----------------------------------------------------------------------------------

def test_the_aoti_stream_read_is_used_only_where_prepare_checked_it():
    if torch.cuda.is_available():
        # CUDA's half is checked at validation, or at the first CUDA tensor if CUDA was not
        # initialized then: view one, so that it has been checked either way.
        interop_core.view(torch.ones(1, device="cuda"))
    details = validation_result("torch:Tensor").details
    assert details["current_stream"] == ("aoti" if _reader.aoti_producer_stream(0) is not None
                                         else "python" if torch.cuda.is_available() else None)


def test_stream_types_are_declared():
    assert interop_torch.stream_handle(type("S", (), {"cuda_stream": 1234})()) == 1234
    assert interop_torch.producer_stream(torch.ones(1)) is None


@pytest.mark.gpu
@pytest.mark.parametrize("entry", ["view", "from_dlpack", "from_any", "from_cuda_array_interface",
                                   "compat from_dlpack"])
@pytest.mark.parametrize("bit", ["conjugate", "negative"])
def test_cuda_tensors_whose_memory_misleads_are_never_viewed(entry, bit):
    z = torch.arange(4.0, device="cuda").to(torch.complex64)
    t = z.conj() if bit == "conjugate" else z.conj().imag
    read = {**ENTRY_POINTS, "from_cuda_array_interface":
            interop_core.StridedMemoryView.from_cuda_array_interface}[entry]
    if entry == "from_cuda_array_interface":
        # torch's own interface refuses these (in its words), or the reader's refusal stands.
        with pytest.raises((BufferError, RuntimeError, TypeError)):
            read(t)
    else:
        with pytest.raises(BufferError, match=f"{bit} bit"):
            read(t)


@pytest.mark.gpu
def test_cuda_tensor_views_through_aoti():
    t = torch.arange(24.0, device="cuda").reshape(4, 6)[1:, ::2]
    v = interop_core.view(t)
    assert _got(v) == _expected(t)
    assert _got(_read_without_fallback(t)) == _expected(t)     # not declined
    details = validation_result("torch:Tensor").details
    assert details["cuda"] is True
    assert details["current_stream"] == "aoti"
    assert v.producer_stream == torch.cuda.current_stream().cuda_stream


_LATE_CUDA_PROBE = """
import json, torch, interop_core
from interop_core.registry import _validation
interop_core.view(torch.zeros(3))                     # validates the torch reader on the CPU
before = torch.cuda.is_initialized()
t = torch.arange(6.0, device="cuda")
first = interop_core.view(t)                          # the fallback checks the CUDA half once
again = interop_core.view(t)
details = [r.details for r in _validation.results() if r.type_path == "torch:Tensor"][0]
print(json.dumps({"cuda_initialized_by_validation": before, "details": details,
                  "ptr_ok": first.ptr == again.ptr == t.data_ptr(),
                  "stream_ok": again.producer_stream == torch.cuda.current_stream().cuda_stream}))
"""


@pytest.mark.gpu
def test_validation_creates_no_cuda_context_and_checks_cuda_at_the_first_cuda_tensor():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _LATE_CUDA_PROBE], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["cuda_initialized_by_validation"] is False
    assert report["details"]["cuda"] is True
    assert report["details"]["current_stream"] == "aoti"
    assert report["ptr_ok"] and report["stream_ok"]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(_layouts()))
def test_cuda_layouts(layout):
    t = _layouts("cuda")[layout]()
    assert _got(interop_core.view(t)) == _expected(t)


@pytest.mark.gpu
def test_cuda_producer_stream_is_torchs_current_stream_on_a_non_default_stream():
    t = torch.ones(4, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert interop_torch.producer_stream(t) == s.cuda_stream
        assert interop_core.view(t, stream=s).producer_stream == s.cuda_stream
    assert interop_torch.producer_stream(t) == torch.cuda.current_stream().cuda_stream


@pytest.mark.gpu
def test_a_view_on_the_default_stream_exports_the_legacy_stream_to_the_array_interface():
    v = interop_core.view(torch.ones(4, device="cuda"))
    assert v.producer_stream == torch.cuda.default_stream().cuda_stream == 0
    assert v.__cuda_array_interface__["stream"] == 1      # CAI v3 forbids 0


@pytest.mark.gpu
def test_cuda_exporter_round_trip():
    t = torch.arange(12.0, device="cuda").reshape(3, 4).T
    out = interop_core.to(interop_core.view(t), "torch")
    assert (out.data_ptr(), out.stride(), out.device) == (t.data_ptr(), t.stride(), t.device)


@pytest.mark.gpu
def test_cuda_fallback_gives_the_same_metadata(fallback):
    t = torch.arange(12.0, device="cuda").reshape(3, 4).T
    assert _got(interop_core.view(t)) == _expected(t)


# --- conformance kit ---------------------------------------------------------------------------

class TestTorchPluginConformance(PluginConformance):
    plugin_name = "torch"
    framework_modules = ("torch",)
    exporter_target = "torch"

    def make_samples(self):
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        return {
            "contiguous": base,
            "sliced": base[1:, ::2],
            "transposed": base.T,
            "zero_size": torch.zeros((0, 3), dtype=torch.int16),
            "zero_d": base[2, 3],
            "bfloat16": torch.ones(3, 2, dtype=torch.bfloat16),
            "complex": torch.ones(5, dtype=torch.complex64)[::2],
            "bool": torch.ones(4, dtype=torch.bool),
            "parameter": torch.nn.Parameter(torch.ones(3)),
        }

    def expected(self, obj):
        return Expected(ptr=obj.data_ptr(), shape=tuple(obj.shape), strides=tuple(obj.stride()),
                        dtype=DLPACK[obj.dtype], device=(1, 0), readonly=False)


_FAKE_FIRST_PROBE = """
import torch, interop_core
from interop_core.registry import _validation
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode() as mode:
    try:
        interop_core.view(mode.from_tensor(torch.zeros(2)))   # the first torch view of the process
    except BufferError:
        pass
result = [r for r in _validation.results() if r.type_path == "torch:Tensor"][0]
print(result.validated, result.reason)
"""


def test_validation_inside_a_fake_tensor_mode_still_validates_on_real_tensors():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FAKE_FIRST_PROBE], capture_output=True,
                         text=True, timeout=300, check=True).stdout.strip().splitlines()[-1]
    assert out.startswith("True"), out
