"""The cupy plugin: compiled readers on the public ABI (validated once), streams, exporter.

On a CPU machine cupy imports but cannot allocate; cupy arrays over host memory wrapped in
``cupy.cuda.UnownedMemory`` still carry real cupy metadata, so both readers, their validation
(which needs no device), the fallback chain and the exporter are exercised here.  ``gpu``
tests use real device arrays.
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
from conftest import validation_result

import interop_core
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
CUPY = "cupy:ndarray"


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


def test_plugin_declares_exact_type_stream_types_and_exporter_and_no_core_reader():
    interop_core.plugins.discover()
    info = {i.name: i for i in interop_core.plugin_status()}["cupy"]
    assert "cupy:ndarray" in info.claims
    assert info.exporters == ("cupy",)
    # Its readers are its own, on the public ABI: the core knows nothing of cupy.
    assert "cupy" not in interop_core.registry._registry.core_reader_names()


# --- CPU: cupy metadata over host memory --------------------------------------------------------

cupy = pytest.importorskip("cupy")


def host_cupy(array: np.ndarray, device_id: int = 0):
    """A cupy.ndarray describing ``array``'s host memory (never touched by the device)."""
    memory = cupy.cuda.UnownedMemory(array.ctypes.data, array.nbytes, array, device_id=device_id)
    return cupy.ndarray(array.shape, array.dtype, cupy.cuda.MemoryPointer(memory, 0),
                        array.strides)


def readers():
    """The plugin's compiled reader module (imported by the plugin's registration)."""
    import interop_cupy._reader

    return interop_cupy._reader


@pytest.fixture(params=["fields", "attributes"])
def reader_mode(request, force_validation):
    """Each of the two readers over cupy's own metadata, installed as view() finds it."""
    if request.param == "fields":
        result = validation_result(CUPY)
        assert result.validated, result.reason
        expected = readers().fields_reader_capsule()
    else:
        force_validation(CUPY, False, "simulated by the test")
        expected = readers().attributes_reader_capsule()
    assert interop_core.plugins.reader_for(cupy.ndarray).reader is expected
    return request.param


def view_by_the_installed_reader_alone(a):
    """view(a), checked to come from the installed reader itself (a decline would raise)."""
    v = interop_core.view(a)
    alone = interop_core.registry._registry.new_entry(
        interop_core.plugins.reader_for(type(a)).reader, plugin="cupy")
    w = interop_core.registry._registry.read_with(alone, a)
    assert (w.ptr, w.shape, w.strides, w.dlpack_dtype, w.device_type, w.device_id) == (
        v.ptr, v.shape, v.strides, v.dlpack_dtype, v.device_type, v.device_id)
    return v


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", list(DLPACK))
def test_fast_reader_reports_cupys_own_metadata(reader_mode, dtype, layout):
    base = host_cupy(np.zeros((4, 6), dtype=dtype), device_id=5)
    a = LAYOUTS[layout](base)
    v = view_by_the_installed_reader_alone(a)
    assert v.owner is a
    assert v.shape == a.shape
    assert v.strides_in_bytes == a.strides or a.size == 0
    assert v.dlpack_dtype == DLPACK[dtype]
    assert (v.device_type, v.device_id) == (2, 5)
    assert not v.readonly
    if a.size:
        assert v.ptr == a.data.ptr


def test_fast_reader_reads_arrays_of_many_dimensions(reader_mode):
    buffer = np.zeros((2,) * 9, np.float32)
    a = host_cupy(buffer)[..., ::2].transpose()
    v = view_by_the_installed_reader_alone(a)
    assert (v.shape, v.strides_in_bytes) == (a.shape, a.strides)


def test_cupy_ndarray_is_read_by_the_plugins_compiled_readers_through_the_public_abi():
    entry = interop_core.plugins.reader_for(cupy.ndarray)
    assert (entry.plugin, entry.kind) == ("cupy", 3)    # a capsule, as a third party registers
    assert entry.reader is readers().fields_reader_capsule()
    assert entry.fallback.reader is readers().attributes_reader_capsule()
    assert entry.fallback.fallback.reader == "cuda_array_interface"


def test_validation_locates_cupys_fields_without_touching_a_device():
    result = validation_result(CUPY)
    assert result.validated, result.reason
    assert result.canaries >= 11
    assert "_shape@" in result.details["fields"]
    assert result.details["stream_reader"].split()[0] == readers()._stream_reader()


class LooksLikeCupy:
    """Not a cupy.ndarray, but with the attributes the cupy readers read."""

    def __init__(self, a):
        self.data, self.shape, self.strides, self.dtype = a.data, a.shape, a.strides, a.dtype


def test_the_fields_reader_reads_only_the_type_it_located_fields_for(registered):
    assert validation_result(CUPY).validated
    fields, attributes = readers().fields_reader_capsule(), readers().attributes_reader_capsule()
    a = host_cupy(np.arange(12.0).reshape(3, 4), device_id=2)[:, 1:]
    registered(lambda r: r.add_type(LooksLikeCupy, fields), "imitation-fields-only")
    with pytest.raises(BufferError, match="declined this object"):
        interop_core.view(LooksLikeCupy(a))
    registered(lambda r: r.add_type(LooksLikeCupy, fields, fallback=attributes), "imitation")
    v = interop_core.view(LooksLikeCupy(a))
    assert (v.ptr, v.shape, v.strides_in_bytes, v.device_id) == (
        a.data.ptr, a.shape, a.strides, 2)


class CupyInterfaceOnly:
    """Exports cupy's interface but has none of the attributes the cupy readers read."""

    def __init__(self, a):
        self.__cuda_array_interface__ = {
            "shape": a.shape, "strides": a.strides, "typestr": a.dtype.str,
            "data": (a.data.ptr, False), "version": 3, "stream": None}


def test_what_the_attributes_reader_declines_goes_to_cupys_interface(registered):
    a = host_cupy(np.arange(12.0).reshape(3, 4))[:, ::2]
    registered(lambda r: r.add_type(CupyInterfaceOnly, readers().attributes_reader_capsule()),
               "interface-only-no-fallback")
    with pytest.raises(BufferError, match="declined this object"):
        interop_core.view(CupyInterfaceOnly(a))
    registered(lambda r: r.add_type(CupyInterfaceOnly, readers().attributes_reader_capsule(),
                                    fallback="cuda_array_interface"), "interface-only")
    v = interop_core.view(CupyInterfaceOnly(a))
    assert (v.ptr, v.shape, v.strides_in_bytes) == (a.data.ptr, a.shape, a.strides)


@pytest.mark.parametrize(("arrays", "problem"), [
    (lambda: [], "too few canary arrays"),
    (lambda: [host_cupy(np.zeros(n)) for n in (2, 3, 4)], "two device ids"),
])
def test_fields_that_cannot_be_located_install_the_attributes_reader_and_say_why(
        force_validation, monkeypatch, arrays, problem):
    module = readers()
    with monkeypatch.context() as patch:
        patch.setattr(module, "canaries", arrays)
        force_validation(CUPY, None)        # validate again, on these canaries
        result = validation_result(CUPY)
        assert not result.validated and problem in result.reason
        assert interop_core.plugins.reader_for(cupy.ndarray).reader is (
            module.attributes_reader_capsule())
        a = host_cupy(np.arange(6.0).reshape(2, 3), device_id=1)[:, ::2]
        v = interop_core.view(a)
        assert (v.ptr, v.shape, v.strides_in_bytes, v.device_id) == (
            a.data.ptr, a.shape, a.strides, 1)
    force_validation(CUPY, None)            # and again on the plugin's own: fields located
    assert validation_result(CUPY).validated


def test_fields_forgotten_after_a_failed_location_are_never_read(force_validation):
    assert validation_result(CUPY).validated
    try:
        assert "two device ids" in readers()._locate_fields(
            [host_cupy(np.zeros(n)) for n in (2, 3, 4)])
        # The installed fields reader now declines every array: its fallback reads them.
        a = host_cupy(np.arange(6.0), device_id=4)[1:]
        v = interop_core.view(a)
        assert (v.ptr, v.shape, v.device_id) == (a.data.ptr, a.shape, 4)
    finally:
        force_validation(CUPY, None)
    assert validation_result(CUPY).validated


def test_subclasses_of_cupy_ndarray_do_not_take_the_fast_path():
    class Sub(cupy.ndarray):
        pass

    entry = interop_core.plugins.reader_for(Sub)
    assert entry is None or entry.plugin != "cupy"


def test_without_a_device_cupys_current_stream_is_asked_of_its_python_api():
    if interop_core.cuda._cuda.device_count():
        pytest.skip("a device exists: cupy's C function is checked and used")
    result = validation_result(CUPY)
    assert result.details["stream_reader"].startswith("python (the check raised")
    assert readers()._stream_reader() == "python"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cupy_stream_objects_resolve_to_their_handle():
    interop_core.plugins.discover()
    s = cupy.cuda.ExternalStream(1234)
    interop_core.plugins.reader_for(cupy.ndarray)  # resolves cupy's declarations
    assert interop_core.cuda._streams.resolve_consumer_stream(s) == 1234


def test_exporting_host_memory_to_cupy_is_a_clear_buffer_error():
    with pytest.raises(BufferError, match=r"cupy imports memory of DLPack device types .* "
                                          r"source is on DLPack device \(1, 0\); pass "
                                          r"device='cuda:N'"):
        interop_core.to(np.arange(3.0), "cupy")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_exporter_round_trips_zero_copy(layout):
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


@pytest.mark.parametrize("source", ["cupy array", "view"])
def test_to_cupy_holds_the_source_through_cupys_unowned_memory(source):
    # A cupy array is read by the compiled reader, whose keep-alive (the array itself) goes
    # straight to the compiled exporter; a view is held itself.
    keep = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = host_cupy(keep)[::-1, 1:]
    src = a if source == "cupy array" else interop_core.view(a)
    held = weakref.ref(src)
    out = interop_core.to(src, "cupy")
    assert (out.data.ptr, out.shape, out.strides) == (a.data.ptr, a.shape, a.strides)
    del src, a
    gc.collect()
    assert held() is not None
    del out
    gc.collect()
    assert held() is None


def test_to_cupy_of_read_only_memory_warns_and_shares_it():
    import warnings

    keep = np.arange(6, dtype=np.int16)
    ro = interop_core.StridedMemoryView.from_pointer(keep.ctypes.data, (2, 3), dtype="int16",
                                                     device=(2, 0), readonly=True, owner=keep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = interop_core.to(ro, "cupy")
    assert out.data.ptr == keep.ctypes.data and out.strides == (6, 2)
    assert [w.category for w in caught] == [interop_core.plugins.ReadOnlyHandoffWarning]


@pytest.mark.parametrize("dtype", ["bfloat16", (2, 32, 2)])
def test_to_cupy_of_a_type_cupys_constructor_lacks_goes_through_dlpack(dtype):
    keep = np.zeros(8, np.uint32)
    v = interop_core.StridedMemoryView.from_pointer(keep.ctypes.data, (2,), dtype=dtype,
                                                    device=(2, 0), owner=keep)
    # cupy.from_dlpack takes it where it can (a device, a type it knows), else the error says
    # which type cupy could not take.
    try:
        out = interop_core.to(v, "cupy")
    except BufferError as exc:
        assert f"cupy cannot take this view ({v.dlpack_dtype} on device 2)" in str(exc)
    else:
        assert out.data.ptr == keep.ctypes.data


def test_to_cupy_by_type_uses_the_cupy_exporter():
    a = host_cupy(np.arange(6, dtype=np.int32))
    assert type(interop_core.to(a, cupy.ndarray)) is cupy.ndarray


# --- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_validation_locates_cupys_fields_on_device_arrays_too():
    interop_core.view(cupy.arange(4))
    result = validation_result(CUPY)
    assert result.validated, result.reason
    assert result.canaries >= 21        # the metadata-only canaries and the device arrays
    assert interop_core.plugins.reader_for(cupy.ndarray).reader is (
        readers().fields_reader_capsule())


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", list(DLPACK))
def test_gpu_view_matches_cupys_interface(reader_mode, dtype, layout):
    a = LAYOUTS[layout](cupy.zeros((4, 6), dtype=dtype))
    v = view_by_the_installed_reader_alone(a)
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
    assert validation_result(CUPY).details["stream_reader"] == "c_api"
    assert readers()._stream_reader() == "c_api"


@pytest.mark.gpu
def test_gpu_the_attributes_reader_reports_cupys_current_stream_too(force_validation):
    validation_result(CUPY)                     # checks cupy's stream function
    force_validation(CUPY, False, "simulated by the test")
    a = cupy.arange(8)
    with cupy.cuda.Stream(non_blocking=True) as s:
        assert interop_core.view(a).producer_stream == s.ptr


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


@pytest.mark.gpu
def test_gpu_a_structured_array_is_read_whole_as_its_interface_describes_it():
    # cupy's structured arrays have no DLPack type: the readers decline them and the CUDA Array
    # Interface at the end of the chain reads its typestr, "|V16", as 16 opaque bytes each.
    from interop_core.registry import _registry

    record = np.dtype([("a", np.float64), ("b", np.int64)])
    y = cupy.empty(3, dtype=record)
    for v in (interop_core.view(y), interop_core.StridedMemoryView.from_cuda_array_interface(y)):
        assert (v.ptr, v.shape, v.dlpack_dtype) == (y.data.ptr, (3,), (3, 8, 16))
        assert v.dtype == np.dtype("V16")
    reference = _registry.read_with(_registry.new_entry("cuda_array_interface"), y)
    assert reference.dlpack_dtype == (3, 8, 16)
