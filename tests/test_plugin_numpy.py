"""The numpy plugin: its compiled struct reader, its fallback and the "numpy" exporter."""

from __future__ import annotations

import gc
import weakref

import pytest
from conftest import validation_result

import interop_core
from interop_core.testing import Expected, PluginConformance

np = pytest.importorskip("numpy")

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
          "complex64", "complex128", "bfloat16", "float8_e4m3fn"]
LAYOUTS = ["contiguous", "sliced", "transposed", "negative", "zero_size", "zero_d", "fortran",
           "readonly", "many_dims"]


def _np_dtype(name):
    if name in ("bfloat16", "float8_e4m3fn"):
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _make(layout, dtype):
    base = np.arange(48).astype(_np_dtype(dtype)).reshape(6, 8)
    if layout == "contiguous":
        return base
    if layout == "sliced":
        return base[1:5, ::3]
    if layout == "transposed":
        return base.T
    if layout == "negative":
        return base[::-2, ::-1]
    if layout == "zero_size":
        return base[:0]
    if layout == "zero_d":
        return base[2:3, 3:4].reshape(())
    if layout == "fortran":
        return np.asfortranarray(base)
    if layout == "readonly":
        base.flags.writeable = False
        return base[1:]
    return np.zeros((2, 1, 3, 1, 2, 1, 2, 2), _np_dtype(dtype))[:, :, ::-1]


def _expected_dlpack(dtype):
    return interop_core.StridedMemoryView.from_pointer(0, (0,), dtype=dtype).dlpack_dtype


def _check(v, a):
    assert v.ptr == a.__array_interface__["data"][0]
    assert v.shape == a.shape
    assert v.strides == tuple(s // a.itemsize for s in a.strides)
    assert v.dlpack_dtype == _expected_dlpack(a.dtype)
    assert v.readonly == (not a.flags.writeable)
    assert (v.device_type, v.device_id) == (1, 0)
    assert v.owner is a


@pytest.fixture(params=[True, False], ids=["struct", "fallback"])
def reader_mode(request, force_validation):
    if not request.param:
        force_validation("numpy:ndarray", False, "simulated by the test")
    yield request.param


def test_struct_layout_validates_on_this_numpy():
    result = validation_result("numpy:ndarray")
    assert result.validated, result.reason
    assert result.canaries > 200


def test_numpy_ndarray_uses_this_plugins_compiled_reader_through_the_public_abi():
    import interop_numpy._reader

    entry = interop_core.plugins.reader_for(np.ndarray)
    assert entry.plugin == "numpy"
    assert entry.kind == 3                      # a capsule, as a third party registers
    assert entry.fallback.reader is interop_numpy._reader.read_with_python_api


def test_a_failed_validation_installs_the_fallback(force_validation):
    import interop_numpy._reader

    force_validation("numpy:ndarray", False, "simulated by the test")
    entry = interop_core.plugins.reader_for(np.ndarray)
    assert entry.reader is interop_numpy._reader.read_with_python_api
    a = np.arange(6.0).reshape(2, 3)[:, ::2]
    assert interop_core.view(a).strides == (3, 2)


def test_plugin_package_comes_from_this_checkout():
    import interop_numpy

    assert interop_numpy.__file__.startswith(
        interop_core.__file__.rsplit("interop_core", 1)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_view_matches_numpy_metadata(reader_mode, layout, dtype):
    a = _make(layout, dtype)
    _check(interop_core.view(a), a)


def test_view_writes_reach_the_array():
    a = np.zeros((3, 4), np.float32)
    memoryview(interop_core.view(a[:, 1:]))[1, 2] = 7.0
    assert a[1, 3] == 7.0


def test_view_keeps_array_alive():
    a = np.arange(10.0)
    ref = weakref.ref(a)
    v = interop_core.view(a[2:])
    del a
    gc.collect()
    assert ref() is not None
    del v
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("dtype", [">f4" if np.little_endian else "<f4", "O", "M8[s]",
                                   "m8[ns]", "S3", "U2", "V8", "f4,i4", "longdouble"])
def test_unsupported_dtypes_raise_buffer_error_naming_the_dtype(reader_mode, dtype):
    a = np.zeros(3, dtype)
    with pytest.raises(BufferError, match="dtype"):
        interop_core.view(a)


def test_stride_not_a_multiple_of_itemsize_is_a_buffer_error(reader_mode):
    raw = np.zeros(40, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[1:].view(np.uint8), (4,), (5,)).view(np.uint8)
    odd32 = np.lib.stride_tricks.as_strided(raw.view(np.float32), (3,), (6,))
    with pytest.raises(BufferError, match="stride"):
        interop_core.view(odd32)
    assert interop_core.view(odd).strides == (5,)


def test_subclasses_do_not_take_the_struct_path():
    class Sub(np.ndarray):
        pass

    m = np.arange(6.0).reshape(2, 3).view(Sub)
    assert interop_core.view(m).shape == (2, 3)
    entry = interop_core.plugins.reader_for(type(m))
    assert entry.plugin is None


def test_bad_stream_argument_is_rejected():
    with pytest.raises((TypeError, ValueError)):
        interop_core.view(np.zeros(3), stream="not a stream")


# --- exporter --------------------------------------------------------------------------------

@pytest.fixture
def export_path(numpy_export_path):
    return numpy_export_path


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("source", ["array", "view"])
def test_to_numpy_round_trips_zero_copy(export_path, source, layout, dtype):
    a = _make(layout, dtype)
    out = interop_core.to(a if source == "array" else interop_core.view(a), "numpy")
    assert type(out) is np.ndarray
    assert out.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert out.shape == a.shape and out.strides == a.strides and out.dtype == a.dtype
    assert out.flags.writeable == a.flags.writeable
    assert out.tobytes() == a.tobytes()


def test_to_numpy_builds_the_array_with_numpys_c_api():
    from interop_numpy import _export

    interop_core.to(np.zeros(2), "numpy")
    ok, how = _export.c_api_status()
    assert ok, how
    assert "PyArray_NewFromDescr" in how


def test_the_python_path_says_why_it_is_used(export_path):
    from interop_numpy import _export

    interop_core.to(np.zeros(2), "numpy")
    ok, why = _export.c_api_status()
    assert ok == (export_path == "c_api")
    assert ok or why == "simulated by the test"


@pytest.mark.parametrize("source", ["array", "view"])
def test_to_numpy_of_read_only_memory_cannot_be_made_writeable(export_path, source):
    a = np.arange(6.0)
    a.flags.writeable = False
    out = interop_core.to(a if source == "array" else interop_core.view(a), "numpy")
    assert not out.flags.writeable
    with pytest.raises(ValueError, match="WRITEABLE"):
        out.flags.writeable = True


def test_to_numpy_of_a_source_is_based_on_the_source_and_of_a_view_on_the_view():
    a = np.arange(4.0)
    v = interop_core.view(a)
    assert interop_core.to(a, "numpy").base is a       # the reader's keep-alive: no view made
    assert interop_core.to(v, "numpy").base is v


@pytest.mark.parametrize("dtype, match", [
    ((2, 32, 4), "numpy cannot hold elements of DLPack type \\(2, 32, 4\\)"),   # a vector type
    ((0, 4, 1), "numpy cannot hold elements of DLPack type \\(0, 4, 1\\)"),     # int4, padded
])
def test_to_numpy_refuses_types_numpy_cannot_hold(export_path, dtype, match):
    host = np.zeros(16, np.uint8)
    v = interop_core.StridedMemoryView.from_pointer(host.ctypes.data, (2,), dtype=dtype,
                                                    owner=host)
    with pytest.raises(BufferError, match=match):
        interop_core.to(v, "numpy")


def test_the_exporter_refuses_what_is_not_a_view():
    from interop_numpy import export_numpy

    with pytest.raises(TypeError, match="needs a StridedMemoryView, got ndarray"):
        export_numpy(np.zeros(2))


def test_to_numpy_of_an_empty_view_at_address_0(export_path):
    empty = interop_core.StridedMemoryView.from_pointer(0, (0, 3), dtype="float32")
    assert interop_core.to(empty, "numpy").shape == (0, 3)


def test_to_numpy_by_type_and_from_a_view():
    a = np.arange(12, dtype=np.int16).reshape(3, 4)
    out = interop_core.to(interop_core.view(a)[:, ::2], np.ndarray)
    assert out.tolist() == a[:, ::2].tolist()
    out[0, 1] = 99
    assert a[0, 2] == 99


def test_to_numpy_keeps_the_source_alive():
    a = np.arange(10.0)
    ref = weakref.ref(a)
    out = interop_core.to(a, "numpy")
    del a
    gc.collect()
    assert ref() is not None and out[3] == 3.0
    del out
    gc.collect()
    assert ref() is None


def test_device_memory_to_numpy_is_a_clear_error():
    host = np.zeros(4, np.float32)
    on_device = interop_core.StridedMemoryView.from_pointer(
        host.ctypes.data, (4,), dtype="float32", device=(2, 0), owner=host)
    with pytest.raises(BufferError, match=r"numpy imports memory of DLPack device types "
                                          r"\(1, 3, 11, 13\) only.*\(2, 0\).*device='cpu'"):
        interop_core.to(on_device, "numpy")
    # The exporter itself, called on its own, says the same in its words.
    exporter = interop_core.plugins.exporter_for("numpy")[0]
    with pytest.raises(BufferError, match="numpy imports memory of DLPack device types .* only|device memory cannot become a numpy array"):
        exporter(on_device, None)


# --- conformance kit -------------------------------------------------------------------------

class TestNumpyPluginConformance(PluginConformance):
    plugin_name = "numpy"
    framework_modules = ("numpy",)
    exporter_target = "numpy"

    def make_samples(self):
        grid = np.arange(24, dtype=np.float32).reshape(4, 6)
        ro = np.arange(6, dtype=np.int64)
        ro.flags.writeable = False
        return {
            "contiguous": grid,
            "sliced": grid[1:, ::2],
            "transposed": grid.T,
            "zero_size": np.zeros((0, 3), np.int16),
            "zero_d": np.array(3.5),
            "negative": grid[::-1, ::-2],
            "readonly": ro,
            "bool": np.ones(5, np.bool_),
            "complex": np.ones((2, 2), np.complex64),
        }

    def expected(self, obj):
        return Expected(ptr=obj.__array_interface__["data"][0], shape=obj.shape,
                        strides=tuple(s // obj.itemsize for s in obj.strides),
                        dtype=_expected_dlpack(obj.dtype), device=(1, 0),
                        readonly=not obj.flags.writeable)
