"""The cupy plugin: compiled reader (validated once, with a fallback), streams, exporter.

On a CPU machine cupy imports but cannot allocate; cupy arrays over host memory wrapped in
``cupy.cuda.UnownedMemory`` still carry real cupy metadata, so the reader's attribute path,
the fallback and the exporter are exercised here.  ``gpu`` tests use real device arrays.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest

import interop_core
from interop_core import _cupy_reader
from interop_core.testing import Expected, PluginConformance

DLPACK = {"bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
          "int64": (0, 64, 1), "uint8": (1, 8, 1), "float16": (2, 16, 1), "float32": (2, 32, 1),
          "float64": (2, 64, 1), "complex64": (5, 64, 1)}
LAYOUTS = {
    "contiguous": lambda a: a,
    "sliced": lambda a: a[1:, ::2],
    "transposed": lambda a: a.T,
    "negative_strides": lambda a: a[::-1, 1:],
    "zero_size": lambda a: a[2:2],
    "zero_d": lambda a: a[2, 3],
}


def test_loading_the_plugin_imports_no_cupy():
    code = textwrap.dedent("""
        import sys, interop_core
        interop_core.plugins.discover()
        info = {i.name: i for i in interop_core.plugin_status()}["cupy"]
        import interop_cupy
        print(info.status, "|", "cupy" in sys.modules, "|", interop_cupy.__file__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status, imported, path = (part.strip() for part in out.stdout.split("|"))
    assert status in ("loaded", "framework not installed")
    assert imported == "False"
    assert path.startswith(str(Path(__file__).resolve().parents[1]))


def test_plugin_declares_exact_type_stream_types_and_exporter():
    interop_core.plugins.discover()
    info = {i.name: i for i in interop_core.plugin_status()}["cupy"]
    assert "cupy:ndarray" in info.claims
    assert info.exporters == ("cupy",)
    assert "cupy" in interop_core.registry._registry.core_reader_names()


def test_set_mode_rejects_unknown_modes():
    with pytest.raises(ValueError, match="mode must be one of"):
        _cupy_reader.set_mode("fast")


# --- CPU: cupy metadata over host memory --------------------------------------------------------

cupy = pytest.importorskip("cupy")


def host_cupy(array: np.ndarray, device_id: int = 0):
    """A cupy.ndarray describing ``array``'s host memory (never touched by the device)."""
    memory = cupy.cuda.UnownedMemory(array.ctypes.data, array.nbytes, array, device_id=device_id)
    return cupy.ndarray(array.shape, array.dtype, cupy.cuda.MemoryPointer(memory, 0),
                        array.strides)


# Host buffers behind the canaries below, kept for the whole session.
_CANARY_BUFFERS = [np.zeros((4, 6), np.float32), np.arange(10.0),
                   np.zeros((2, 3, 4, 5), np.int16), np.zeros((), np.complex64)]


def field_canaries():
    """Arrays whose pointers, shapes, strides, dtypes and device ids all differ."""
    first, second, third, fourth = (host_cupy(b) for b in _CANARY_BUFFERS)
    return [first, host_cupy(_CANARY_BUFFERS[1], device_id=3)[2:],
            host_cupy(_CANARY_BUFFERS[2], device_id=1).transpose(3, 1, 0, 2),
            host_cupy(_CANARY_BUFFERS[3], device_id=2), second, third, fourth]


@pytest.fixture(params=["attributes", "fields"])
def fast_mode(request):
    """Each of the reader's two paths over cupy's own metadata."""
    previous = _cupy_reader.mode()
    if request.param == "fields":
        assert _cupy_reader.locate_fields(field_canaries()) is None
    _cupy_reader.set_mode(request.param)
    yield request.param
    _cupy_reader.set_mode(previous)


@pytest.fixture
def attributes_mode():
    previous = _cupy_reader.mode()
    _cupy_reader.set_mode("attributes")
    yield
    _cupy_reader.set_mode(previous)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", list(DLPACK))
def test_fast_reader_reports_cupys_own_metadata(fast_mode, dtype, layout):
    base = host_cupy(np.zeros((4, 6), dtype=dtype), device_id=5)
    a = LAYOUTS[layout](base)
    v = interop_core.view(a)
    assert v.owner is a
    assert v.shape == a.shape
    assert v.strides_in_bytes == a.strides or a.size == 0
    assert v.dlpack_dtype == DLPACK[dtype]
    assert (v.device_type, v.device_id) == (2, 5)
    assert not v.readonly
    if a.size:
        assert v.ptr == a.data.ptr


def test_fields_path_reads_arrays_of_many_dimensions(fast_mode):
    buffer = np.zeros((2,) * 9, np.float32)
    a = host_cupy(buffer)[..., ::2].transpose()
    v = interop_core.view(a)
    assert (v.shape, v.strides_in_bytes) == (a.shape, a.strides)


class LooksLikeCupy:
    """Not a cupy.ndarray, but with the attributes the cupy reader reads."""

    def __init__(self, a):
        self.data, self.shape, self.strides, self.dtype = a.data, a.shape, a.strides, a.dtype


def test_the_fields_path_reads_only_the_type_it_located_fields_for(fast_mode, registered):
    registered(lambda r: r.add_type(LooksLikeCupy, "cupy"), "imitation")
    a = host_cupy(np.arange(12.0).reshape(3, 4), device_id=2)[:, 1:]
    v = interop_core.view(LooksLikeCupy(a))
    assert (v.ptr, v.shape, v.strides_in_bytes, v.device_id) == (
        a.data.ptr, a.shape, a.strides, 2)


@pytest.mark.parametrize(("arrays", "problem"), [
    (lambda: [], "too few canary arrays"),
    (lambda: [host_cupy(b) for b in _CANARY_BUFFERS], "two device ids"),
])
def test_fields_that_cannot_be_located_are_not_used(arrays, problem):
    previous = _cupy_reader.mode()
    try:
        assert problem in _cupy_reader.locate_fields(arrays())
        with pytest.raises(ValueError, match="located first"):
            _cupy_reader.set_mode("fields")
    finally:
        _cupy_reader.set_mode(previous if previous != "fields" else "unchecked")


def test_cupy_type_is_read_by_the_cupy_plugins_reader():
    entry = interop_core.plugins.reader_for(cupy.ndarray)
    assert (entry.plugin, entry.reader) == ("cupy", "cupy")


def test_subclasses_of_cupy_ndarray_do_not_take_the_fast_path():
    class Sub(cupy.ndarray):
        pass

    entry = interop_core.plugins.reader_for(Sub)
    assert entry is None or entry.plugin != "cupy"


def test_validation_without_a_device_falls_back_to_the_interface():
    if interop_core.cuda._cuda.device_count():
        pytest.skip("a device exists: validation succeeds here")
    previous = _cupy_reader.mode()
    try:
        assert _cupy_reader.validate() == "cuda_array_interface"
        assert "validation raised" in _cupy_reader.failure()
        a = host_cupy(np.zeros(3, np.float32))
        # The fallback really is cupy's interface, which needs a driver here.
        with pytest.raises(BufferError, match="__cuda_array_interface__"):
            interop_core.view(a)
    finally:
        _cupy_reader.set_mode(previous)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cupy_stream_objects_resolve_to_their_handle():
    interop_core.plugins.discover()
    s = cupy.cuda.ExternalStream(1234)
    interop_core.plugins.reader_for(cupy.ndarray)  # resolves cupy's declarations
    assert interop_core.cuda._streams.resolve_consumer_stream(s) == 1234


def test_exporting_host_memory_to_cupy_is_a_clear_buffer_error():
    with pytest.raises(BufferError, match="host memory to cupy"):
        interop_core.to(np.arange(3.0), "cupy")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_exporter_round_trips_zero_copy(attributes_mode, layout):
    keep = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = LAYOUTS[layout](host_cupy(keep))
    v = interop_core.view(a)
    out = interop_core.to(v, "cupy")
    assert type(out) is cupy.ndarray
    back = interop_core.view(out)
    assert (back.ptr, back.shape, back.dlpack_dtype) == (v.ptr, v.shape, v.dlpack_dtype)
    if a.size:
        assert back.strides == v.strides
    held = weakref.ref(v)
    del v, back
    gc.collect()
    assert held() is not None  # the exported array keeps the view (and so `a`) alive
    del out
    gc.collect()
    assert held() is None


def test_to_cupy_by_type_uses_the_cupy_exporter(attributes_mode):
    a = host_cupy(np.arange(6, dtype=np.int32))
    assert type(interop_core.to(a, cupy.ndarray)) is cupy.ndarray


# --- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_validation_chooses_a_fast_path():
    a = cupy.arange(4)
    interop_core.view(a)
    assert _cupy_reader.mode() in ("fields", "attributes", "dlpack_c_exchange_api"), (
        _cupy_reader.failure())


@pytest.mark.gpu
def test_gpu_validation_locates_cupys_fields():
    assert _cupy_reader.validate() == "fields", _cupy_reader.failure()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", list(DLPACK))
def test_gpu_view_matches_cupys_interface(dtype, layout):
    a = LAYOUTS[layout](cupy.zeros((4, 6), dtype=dtype))
    v = interop_core.view(a)
    reference = interop_core.StridedMemoryView.from_cuda_array_interface(a)
    assert (v.shape, v.dlpack_dtype) == (reference.shape, reference.dlpack_dtype)
    assert (v.device_type, v.device_id) == (2, a.device.id)
    if a.size:
        assert v.ptr == reference.ptr == a.data.ptr
        assert v.strides_in_bytes == a.strides


@pytest.mark.gpu
def test_gpu_producer_stream_is_cupys_current_stream():
    a = cupy.arange(8)
    with cupy.cuda.Stream(non_blocking=True) as s:
        v = interop_core.view(a, stream=s)
        assert v.producer_stream == s.ptr
        assert interop_cupy_producer(a) == s.ptr
    assert interop_core.view(a, stream=0).producer_stream == cupy.cuda.get_current_stream().ptr


@pytest.mark.gpu
def test_gpu_cupys_current_stream_is_read_in_c():
    _cupy_reader.validate()
    assert _cupy_reader.stream_reader() == "c_api"


@pytest.mark.gpu
def test_gpu_cupy_streams_clear_their_weak_references_when_freed():
    # What keep_last="weak" relies on (torch 2.11's CUDA streams, for one, do not).
    import gc
    import weakref

    cleared = []
    s = cupy.cuda.Stream(non_blocking=True)
    ref = weakref.ref(s, cleared.append)
    assert interop_core.resolve_consumer_stream(s) == s.ptr
    del s
    gc.collect()
    assert ref() is None and len(cleared) == 1
    for _ in range(20):             # new streams, some at the freed address
        fresh = cupy.cuda.Stream(non_blocking=True)
        assert interop_core.resolve_consumer_stream(fresh) == fresh.ptr


def interop_cupy_producer(a):
    import interop_cupy

    return interop_cupy.producer_stream(a)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["memory", "dlpack"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gpu_exporter_round_trips_zero_copy(monkeypatch, path, layout):
    import interop_cupy

    monkeypatch.setattr(interop_cupy, "EXPORT_PATH", path)
    a = LAYOUTS[layout](cupy.arange(24, dtype=cupy.float32).reshape(4, 6))
    out = interop_core.to(a, "cupy")
    assert out.shape == a.shape
    if a.size:
        assert out.data.ptr == a.data.ptr
        assert out.strides == a.strides
        assert bool((out == a).all())


@pytest.mark.gpu
class TestCupyConformance(PluginConformance):
    plugin_name = "cupy"
    framework_modules = ("cupy",)
    exporter_target = "cupy"

    def make_samples(self):
        base = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
        return {name: make(base) for name, make in LAYOUTS.items()}

    def expected(self, obj):
        return Expected(ptr=obj.data.ptr, shape=obj.shape,
                        strides=tuple(s // obj.itemsize for s in obj.strides),
                        dtype=DLPACK[obj.dtype.name], device=(2, obj.device.id), readonly=False)
