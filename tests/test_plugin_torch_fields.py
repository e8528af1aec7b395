"""The torch reader's direct path: TensorImpl fields read in place, found and checked once.

Every plain tensor is read by both paths (the direct field reads and the AOTI shims) and
compared with torch's own Python API; unusual tensors must be left to the AOTI path or the
fallback; a search that cannot find the fields leaves the AOTI path in use.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from conftest import validation_result  # noqa: E402
from interop_torch import _reader  # noqa: E402

import interop_core  # noqa: E402
from interop_core.plugins import reader_for  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent

# torch dtype -> DLPack triple, for every dtype the reader maps (the rest are declined).
DLPACK = {
    "bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
    "int64": (0, 64, 1), "uint8": (1, 8, 1), "uint16": (1, 16, 1), "uint32": (1, 32, 1),
    "uint64": (1, 64, 1), "float16": (2, 16, 1), "bfloat16": (4, 16, 1),
    "float32": (2, 32, 1), "float64": (2, 64, 1), "complex32": (5, 32, 1),
    "complex64": (5, 64, 1), "complex128": (5, 128, 1), "float8_e5m2": (12, 8, 1),
    "float8_e4m3fn": (10, 8, 1), "float8_e5m2fnuz": (13, 8, 1), "float8_e4m3fnuz": (11, 8, 1),
    "float8_e8m0fnu": (14, 8, 1),
}
ALL_DTYPES = sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)


def _name(dtype):
    return str(dtype).replace("torch.", "")


def _expected(t):
    return (t.data_ptr() if t.numel() else 0, tuple(t.shape), tuple(t.stride()),
            DLPACK[_name(t.dtype)], (1, 0))


def _got(v):
    return (v.ptr, v.shape, v.strides, v.dlpack_dtype, (v.device_type, v.device_id))


@pytest.fixture(params=["direct", "aoti"])
def path(request):
    """Both ways the compiled reader reads a plain tensor (the validation's result stays)."""
    result = validation_result("torch:Tensor")
    assert result.validated, result.reason
    assert _reader._set_field_reads(request.param == "direct") == (request.param == "direct")
    yield request.param
    _reader._set_field_reads(True)


def _base(n=400, dtype=torch.float32):
    return torch.arange(n).to(dtype)


LAYOUTS = {
    "contiguous": lambda: _base().reshape(20, 20),
    "row slice": lambda: _base().reshape(20, 20)[3:9],
    "column slice": lambda: _base().reshape(20, 20)[:, 5:11],
    "stepped": lambda: _base().reshape(20, 20)[1::3, 2::4],
    "transposed": lambda: _base().reshape(20, 20).T,
    "permuted": lambda: _base(360).reshape(3, 4, 5, 6).permute(2, 0, 3, 1),
    "expanded": lambda: _base(7).expand(5, 7),
    "expanded middle": lambda: _base(7).reshape(7, 1).expand(7, 4)[None].expand(3, 7, 4),
    "storage offset": lambda: _base()[17:],
    "storage offset 2-d": lambda: _base()[13:13 + 60].view(6, 10),
    "select": lambda: _base().reshape(20, 20)[7],
    "0-d": lambda: _base().reshape(20, 20)[4, 9],
    "0-d scalar": lambda: torch.tensor(3.5),
    "empty": lambda: _base()[:0],
    "empty 2-d": lambda: _base().reshape(20, 20)[5:5],
    "empty offset": lambda: _base()[30:30].view(0, 3, 0),
    "diagonal": lambda: _base().reshape(20, 20).diagonal(),
    "unfold (overlapping)": lambda: _base(50).unfold(0, 5, 2),
    "as_strided": lambda: torch.as_strided(_base(), (4, 3), (1, 7), 9),
    "view of view of view": lambda: _base().view(4, 100)[1:][:, 10:90].view(3, 4, 20)[1][::2],
    "narrow": lambda: _base().reshape(20, 20).narrow(1, 3, 4),
    "channels last": lambda: torch.ones(2, 3, 4, 5).to(memory_format=torch.channels_last),
    "channels last 3d": lambda: torch.ones(2, 3, 4, 5, 6).to(
        memory_format=torch.channels_last_3d),
    "requires grad": lambda: torch.ones(3, 4, requires_grad=True),
    "requires grad slice": lambda: torch.ones(3, 4, requires_grad=True)[1:],
    "parameter": lambda: torch.nn.Parameter(torch.ones(5, 2)),
    "detached": lambda: torch.ones(3, 4, requires_grad=True).detach()[:, 1:],
    "inference mode": lambda: _inference(),
    "from numpy": lambda: torch.from_numpy(__import__("numpy").arange(12.0).reshape(3, 4)[1:]),
    "frombuffer": lambda: torch.frombuffer(bytearray(range(64)), dtype=torch.int16)[3:],
    "resized": lambda: torch.ones(2).resize_(4, 5),
    "set_ onto storage": lambda: torch.empty(0).set_(_base().untyped_storage(), 8, (3, 5),
                                                    (1, 3)),
}


def _inference():
    with torch.inference_mode():
        return torch.ones(4, 6)[:, 2:]


NDIMS = {f"{n}-d": (lambda n=n: _base(4 * 3 ** n + 5)[5:5 + 2 * 3 ** max(n - 1, 0)].view(
    (2,) + (3,) * (n - 1)) if n else _base()[11]) for n in range(9)}
NDIMS.update({f"{n}-d transposed": (lambda n=n: torch.ones((2, 3) * (n // 2)).transpose(0, -1))
              for n in (2, 4, 6, 8)})


@pytest.mark.parametrize("make", list(LAYOUTS.values()) + list(NDIMS.values()),
                         ids=list(LAYOUTS) + list(NDIMS))
def test_both_paths_read_every_layout_as_torch_describes_it(make, path):
    t = make()
    v = interop_core.view(t)
    assert _got(v) == _expected(t)
    want = "direct" if path == "direct" and t.dim() <= 5 else "aoti"
    assert _reader._path_of(t) == want


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_every_torch_dtype_reads_the_same_on_both_paths(dtype):
    assert validation_result("torch:Tensor").validated
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = torch.zeros(64, dtype=dtype)[6:].view(2, 29)[:, 3::2]
    except Exception:
        pytest.skip(f"torch cannot make a {dtype} tensor here")
    read = {}
    for mode in ("direct", "aoti"):
        assert _reader._set_field_reads(mode == "direct") == (mode == "direct")
        try:
            read[mode] = (_reader._path_of(t), _got(interop_core.view(t)))
        except (BufferError, RuntimeError) as exc:   # the fallback's (torch's DLPack) refusal
            read[mode] = (_reader._path_of(t), type(exc).__name__)
        finally:
            _reader._set_field_reads(True)
    if _name(dtype) in DLPACK and read["aoti"][0] == "aoti":
        assert read["direct"][0] == "direct"
        assert read["direct"][1] == read["aoti"][1]
        if _name(dtype) != "complex32":    # which the core refuses whoever reads it
            assert read["direct"][1] == _expected(t)
    else:   # quantized, sub-byte, or a dtype this torch's AOTI does not name
        assert read["direct"] == read["aoti"]
        assert read["direct"][0] == "declined"


def test_validation_reports_the_direct_path():
    result = validation_result("torch:Tensor")
    assert result.validated, result.reason
    assert result.details["fields"] == "direct", result.details["fields_reason"]
    assert "inline ndim <= 5" in result.details["fields_reason"]


def test_the_test_switch_turns_the_direct_path_off_and_on():
    t = torch.ones(3, 4)
    assert _reader._set_field_reads(False) is False
    try:
        assert _reader._path_of(t) == "aoti"
        assert _got(interop_core.view(t)) == _expected(t)
    finally:
        assert _reader._set_field_reads(True) is True
    assert _reader._path_of(t) == "direct"


def test_forced_fallback_still_reads_plain_tensors(force_validation):
    force_validation("torch:Tensor", False, "simulated canary mismatch")
    t = torch.ones(3, 4)[1:]
    assert reader_for(torch.Tensor).reader is _reader.read_checked
    assert _got(interop_core.view(t)) == _expected(t)


def _odd():
    c = torch.ones(3, dtype=torch.complex64)
    makers = {
        "conjugate": (lambda: c.conj(), "declined"),
        "negative": (lambda: torch._neg_view(torch.ones(3)), "declined"),
        "zero tensor": (lambda: torch._efficientzerotensor(3), "declined"),
        "nested": (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
                   "declined"),
        "sparse": (lambda: torch.ones(3).to_sparse(), "declined"),
        "sparse csr": (lambda: torch.ones(2, 2).to_sparse_csr(), "declined"),
        "quantized": (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
                      "declined"),
        "meta": (lambda: torch.ones(3, device="meta"), "declined"),
        "mkldnn": (lambda: torch.ones(2, 2).to_mkldnn(), "declined"),
        "functional": (lambda: torch._to_functional_tensor(torch.ones(3)), "declined"),
        "6-d (heap sizes)": (lambda: torch.ones(1, 2, 1, 2, 1, 2), "aoti"),
    }
    return makers


@pytest.mark.parametrize("name", list(_odd()))
def test_unusual_tensors_never_take_the_direct_path(name):
    make, want = _odd()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            t = make()
        except Exception:
            pytest.skip(f"this torch cannot make a {name} tensor")
    assert not _reader._takes_direct(t)
    assert _reader._path_of(t) == want


class _Policy(torch.Tensor):
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return NotImplemented


@pytest.mark.parametrize("kwargs", [{"dispatch_sizes_strides_policy": "sizes"},
                                    {"dispatch_sizes_strides_policy": "strides"},
                                    {"dispatch_device": True}, {"dispatch_layout": True}],
                         ids=["custom sizes", "custom strides", "custom device",
                              "custom layout"])
def test_custom_policies_never_take_the_direct_path(kwargs):
    assert validation_result("torch:Tensor").validated
    t = torch.Tensor._make_wrapper_subclass(_Policy, (2, 3), **kwargs)
    assert not _reader._takes_direct(t)
    # Refused for the policy itself (the flag bits), not only for having no memory.
    assert _reader._policy_bits(t) != 0
    assert _reader._policy_bits(torch.Tensor._make_wrapper_subclass(_Policy, (2, 3))) == 0
    assert _reader._policy_bits(torch.ones(2, 3)) == 0


def test_copy_on_write_storage_goes_through_aoti_which_materializes_it():
    src = torch.arange(6.0)
    clone = torch._lazy_clone(src)
    assert not _reader._takes_direct(clone) and not _reader._takes_direct(src)
    v = interop_core.view(clone)           # AOTI's data_ptr() materializes the copy
    assert v.ptr == clone.data_ptr() != src.data_ptr()
    assert _reader._takes_direct(clone)    # a storage of its own now


def test_launch_args_mixes_direct_aoti_and_declined_reads():
    args = [torch.ones(4, 8), torch.ones(1, 2, 1, 2, 1, 2), torch.ones(3)[1:],
            torch.zeros(0, 5), torch.tensor(2.0)]
    paths = [_reader._path_of(a) for a in args]
    assert paths == ["direct", "aoti", "direct", "direct", "direct"]
    record = interop_core.launch_args(args)
    views = [interop_core.view(a) for a in args]
    assert record.key == interop_core.launch_args(args).key
    for a, v in zip(args, views, strict=True):
        assert _got(v) == _expected(a)


def _run(code, env=None):
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins")]))
    full_env.pop("INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=full_env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


_BROKEN = {
    # torch misreports a field the search relies on: no single offset matches it
    "storage offset": ("torch.Tensor.storage_offset = lambda self: 12345",
                       "field not found: storage offset"),
    # a canary the search needs cannot be made
    "copy-on-write": ("del torch._lazy_clone", "cannot make a canary"),
    # custom policies cannot be made: their flag bits cannot be found
    "policies": ("torch.Tensor._make_wrapper_subclass = None",
                 "cannot make tensors with custom sizes"),
}


@pytest.mark.parametrize("case", list(_BROKEN))
def test_a_search_that_fails_leaves_the_aoti_path_in_use(case):
    patch, reason = _BROKEN[case]
    code = (f"import json, torch; {patch}\n"
            "import interop_core\n"
            "from interop_torch import _reader\n"
            "t = torch.ones(3, 4)[1:]\n"
            "v = interop_core.view(t)\n"
            "from interop_core.registry import _validation\n"
            "r = [r for r in _validation.results() if r.type_path == 'torch:Tensor'][0]\n"
            "print(json.dumps([r.validated, r.details, _reader._path_of(t), v.ptr,\n"
            "                  t.untyped_storage().data_ptr() + 4 * 4, v.shape, v.strides]))\n")
    validated, details, path, ptr, want_ptr, shape, strides = json.loads(_run(code))
    assert validated
    assert details["fields"] == "aoti"
    assert reason in details["fields_reason"]
    assert path == "aoti"
    assert (ptr, shape, strides) == (want_ptr, [2, 4], [4, 1])


def test_doctor_reports_which_path_reads_torch_tensors(doctor_import):
    row = next(r for r in doctor_import["json"]["readers"] if r["type"] == "torch:Tensor")
    assert row["validated"] and row["details"]["fields"] == "direct"
    text = doctor_import["text"]
    assert "fields" in text and "direct" in text
