"""The numba plugin: compiled reader (validated once, with a fallback), simulator, exporter.

CPU: the reader runs on stand-ins for DeviceNDArray (same public attributes, registered by hand),
and numba's CUDA simulator runs in a subprocess (``NUMBA_ENABLE_CUDASIM`` must be set before numba
is imported, which would change numba for every other test in this process).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import validation_result

import interop_core
from interop_core.testing import Expected, PluginConformance

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
          "complex64"]
DLPACK = {"bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
          "int64": (0, 64, 1), "uint8": (1, 8, 1), "float16": (2, 16, 1), "float32": (2, 32, 1),
          "float64": (2, 64, 1), "complex64": (5, 64, 1)}


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"),
                                         env.get("PYTHONPATH", "")])
    return env


def test_loading_the_plugin_imports_no_numba():
    code = textwrap.dedent("""
        import sys, interop_core
        interop_core.plugins.discover()
        info = {i.name: i for i in interop_core.plugin_status()}["numba"]
        print(info.status, "|", "numba" in sys.modules, "|", info.claims)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env())
    status, imported, claims = (part.strip() for part in out.stdout.split("|"))
    assert status in ("loaded", "framework not installed")
    assert imported == "False"
    for name in ("DeviceNDArray", "MappedNDArray", "ManagedNDArray", "FakeCUDAArray"):
        assert name in claims


# --- the compiled reader on stand-ins -----------------------------------------------------------

class _Pointer:
    def __init__(self, value):
        self.device_ctypes_pointer = ctypes.c_ulong(value)


class StandIn:
    """The public attributes of a numba DeviceNDArray, over host memory."""

    def __init__(self, array, stream=0, cai_ptr_shift=0, cai_reports_stream=True):
        self._array = array
        self.shape, self.strides, self.dtype = array.shape, array.strides, array.dtype
        self.gpu_data = _Pointer(array.ctypes.data) if array.size else None
        self.stream = stream
        self._shift = cai_ptr_shift
        # False: like numba with NUMBA_CUDA_ARRAY_INTERFACE_SYNC=0, no stream in the interface.
        self._reports_stream = cai_reports_stream

    @property
    def __cuda_array_interface__(self):
        ptr = self._array.ctypes.data if self._array.size else 0
        stream = int(self.stream) if self.stream != 0 and self._reports_stream else None
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
                "data": (ptr + self._shift, False), "version": 3, "stream": stream}


STAND_IN = f"{StandIn.__module__}:{StandIn.__qualname__}"


@pytest.fixture
def register_stand_in(registered):
    """Register StandIn as the plugin registers numba's arrays, with the given canaries."""
    from interop_numba import _reader

    def register(*canaries):
        registered(lambda registry: registry.add_type(
            StandIn, reader=_reader.reader_capsule(), fallback="cuda_array_interface",
            prepare=functools.partial(_reader.prepare, canaries),
            canaries=functools.partial(list, canaries)), "numba-stand-in")
        return validation_result(STAND_IN)

    return register


LAYOUTS = {
    "contiguous": lambda a: a,
    "sliced": lambda a: a[1:, ::2],
    "transposed": lambda a: a.T,
    "negative_strides": lambda a: a[::-1, 1:],
    "zero_size": lambda a: a[2:2],
    "zero_d": lambda a: a[2, 3, ...],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_attribute_reader_matches_the_interface(register_stand_in, dtype, layout):
    array = LAYOUTS[layout](np.zeros((4, 6), dtype=dtype))
    obj = StandIn(array)
    result = register_stand_in(obj, StandIn(np.zeros(5, dtype), stream=0x7000))
    assert result.validated and result.canaries == 2, result.reason
    assert result.details == {"stream_fields_checked": 2}
    assert interop_core.plugins.reader_for(StandIn).kind == 3    # the capsule, not the fallback
    v = interop_core.view(obj)
    assert v.owner is obj
    assert v.shape == array.shape
    assert v.dlpack_dtype == DLPACK[dtype]
    assert (v.device_type, v.device_id) == (2, 0)
    assert v.producer_stream is None
    if array.size:
        assert v.ptr == array.ctypes.data
        assert v.strides_in_bytes == array.strides


def test_a_canary_the_interface_reads_differently_installs_the_interface(register_stand_in):
    array = np.zeros(8, np.float32)
    obj = StandIn(array, cai_ptr_shift=4)
    result = register_stand_in(obj)
    assert not result.validated and "ptr" in result.reason
    entry = interop_core.plugins.reader_for(StandIn)
    assert entry.reader == "cuda_array_interface" and entry.plugin == "numba-stand-in"
    assert interop_core.view(obj).ptr == array.ctypes.data + 4  # what the interface says


def test_a_stream_field_that_disagrees_installs_the_interface(register_stand_in):
    obj = StandIn(np.zeros(4, np.int32), stream=0x7700, cai_reports_stream=False)
    result = register_stand_in(StandIn(np.zeros(3)), obj)
    assert not result.validated and "stream" in result.reason, result.reason
    assert interop_core.plugins.reader_for(StandIn).reader == "cuda_array_interface"
    assert interop_core.view(obj).ptr == obj._array.ctypes.data


def test_forced_fallback_reads_through_the_interface(register_stand_in, force_validation):
    register_stand_in(StandIn(np.zeros(3)))
    force_validation(STAND_IN, False)
    assert interop_core.plugins.reader_for(StandIn).reader == "cuda_array_interface"
    v = interop_core.view(StandIn(np.zeros(3), stream=0x9900))
    assert v.producer_stream == 0x9900


@pytest.mark.parametrize(("stream", "expected"), [(0, None), (0x7700, 0x7700)])
def test_producer_stream_is_the_interfaces_stream_field(register_stand_in, stream, expected):
    import interop_numba

    obj = StandIn(np.zeros(4, np.int32), stream=stream)
    assert register_stand_in(obj).validated
    assert interop_core.view(obj).producer_stream == expected
    assert interop_numba.producer_stream(obj) == expected


def test_a_stride_that_is_not_a_whole_number_of_elements_is_a_buffer_error(register_stand_in):
    obj = StandIn(np.zeros(4, np.int32))
    assert register_stand_in(StandIn(np.zeros(4, np.int32))).validated
    obj.strides = (6,)
    with pytest.raises(BufferError, match="not a multiple of its itemsize"):
        interop_core.view(obj)


@pytest.mark.parametrize(("attribute", "value", "message"), [
    ("shape", [4], "are not tuples"),
    ("strides", (4, 4), "1 extents but 2 strides"),
    ("shape", (1,) * 65, "65 dimensions"),
    ("gpu_data", None, "null pointer but 4 elements"),
])
def test_attributes_that_describe_no_array_are_a_buffer_error(register_stand_in, attribute,
                                                               value, message):
    assert register_stand_in(StandIn(np.zeros(4, np.int32))).validated
    obj = StandIn(np.zeros(4, np.int32))
    setattr(obj, attribute, value)
    if attribute == "shape" and len(value) == 65:
        obj.strides = (4,) * 65
    with pytest.raises(BufferError, match=message):
        interop_core.view(obj)


def test_numba_arrays_take_the_compiled_reader_through_the_public_abi():
    import interop_numba
    from interop_numba import _reader

    cuda = pytest.importorskip("numba.cuda")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator is on")
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    entry = interop_core.plugins.reader_for(DeviceNDArray)
    assert entry.plugin == "numba" and entry.type_path in interop_numba.ARRAY_TYPES
    assert entry.kind == 3                      # a capsule, as a third party registers
    assert entry.fallback.reader == "cuda_array_interface"
    assert entry.prepare is _reader.prepare and entry.canaries is _reader.canaries
    assert entry.producer_stream is None        # the reader reports the stream field itself
    result = validation_result(entry.type_path)
    assert result.validated, result.reason
    # Without a CUDA device no device array can exist, so there is nothing to compare.
    assert result.canaries == (len(_reader.canaries()) if cuda.is_available() else 0)


# --- the CUDA simulator, in a subprocess --------------------------------------------------------

SIMULATOR_SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import interop_core
    from numba import cuda
    import interop_numba, interop_numba._reader
    dtypes, layouts = json.loads(sys.argv[1])
    out = {"file": interop_numba.__file__}
    a = cuda.to_device(np.arange(24, dtype=np.float32).reshape(4, 6))
    entry = interop_core.plugins.reader_for(type(a))
    out["entry"] = [entry.plugin, entry.reader]
    cases = {}
    for dtype in dtypes:
        base = cuda.to_device(np.zeros((4, 6), dtype=dtype))
        for name, (index, transpose) in layouts.items():
            obj = base.T if transpose else base[eval(index)] if index else base
            host = obj._ary
            v = interop_core.view(obj)
            cases[f"{dtype}-{name}"] = [
                v.shape == host.shape, v.ptr == host.ctypes.data or host.size == 0,
                v.strides_in_bytes == host.strides or host.size == 0,
                list(v.dlpack_dtype), [v.device_type, v.device_id], v.owner is obj]
    out["cases"] = cases
    src = np.arange(6, dtype=np.float64)
    exported = interop_core.to(src, "numba")
    out["export"] = [type(exported).__name__, exported._ary.ctypes.data == src.ctypes.data,
                     interop_core.view(exported).ptr == src.ctypes.data]
    # The device-array reader's canaries are never the simulator's host arrays.
    out["canaries"] = len(interop_numba._reader.canaries())
    print(json.dumps(out))
""")


def test_simulator_arrays_are_read_and_exported_through_the_plugin():
    pytest.importorskip("numba")
    layouts = {"contiguous": ("", False), "sliced": ("(slice(1, None), slice(None, None, 2))",
                                                     False),
               "transposed": ("", True), "negative_strides": ("slice(None, None, -1)", False),
               "zero_size": ("slice(2, 2)", False)}
    env = _env()
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    proc = subprocess.run([sys.executable, "-c", SIMULATOR_SCRIPT,
                           json.dumps([DTYPES, layouts])], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The plugin under test, beside the core under test (this tree, or an installed wheel).
    assert out["file"].startswith(str(Path(interop_core.__file__).parent.parent))
    assert out["entry"] == ["numba", "array_interface"]
    for key, (shape_ok, ptr_ok, strides_ok, dtype, device, owner_ok) in out["cases"].items():
        assert shape_ok and ptr_ok and strides_ok and owner_ok, key
        assert tuple(dtype) == DLPACK[key.split("-")[0]], key
        assert device == [1, 0], key  # simulator memory is host memory, reported as such
    assert out["export"] == ["FakeCUDAArray", True, True]
    assert out["canaries"] == 0


def test_exporting_host_memory_to_real_numba_is_a_clear_buffer_error():
    pytest.importorskip("numba")
    code = textwrap.dedent("""
        import numpy as np, interop_core
        try:
            interop_core.to(np.arange(3.0), "numba")
        except BufferError as exc:
            print("BufferError:", exc)
    """)
    env = _env()
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert "BufferError:" in out.stdout and "numba.cuda.to_device" in out.stdout, out.stderr


# --- GPU ----------------------------------------------------------------------------------------

def _cuda():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator is on")
    return pytest.importorskip("numba.cuda")


def _transposed(array):
    """A transposed view of a device array.  (numba's ``.T`` launches a kernel and returns a
    copy, so it is neither a view nor possible where numba cannot compile kernels.)"""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape=array.shape[::-1], strides=array.strides[::-1],
                         dtype=array.dtype, gpu_data=array.gpu_data)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "transposed", "zero_size", "zero_d"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_view_matches_numbas_interface(dtype, layout):
    cuda = _cuda()
    base = cuda.to_device(np.zeros((4, 6), dtype=dtype))
    if layout == "zero_d":
        obj = cuda.device_array((), dtype=dtype)
    elif layout == "transposed":
        obj = _transposed(base)
    else:
        obj = {"contiguous": base, "sliced": base[1:, ::2], "zero_size": base[2:2]}[layout]
    v = interop_core.view(obj)
    entry = interop_core.plugins.reader_for(type(obj))
    assert entry.plugin == "numba"
    assert entry.kind == 3, validation_result(entry.type_path).reason  # the compiled reader
    reference = interop_core.StridedMemoryView.from_cuda_array_interface(obj)
    assert (v.shape, v.dlpack_dtype, v.device_type, v.device_id) == (
        reference.shape, reference.dlpack_dtype, reference.device_type, reference.device_id)
    if v.size:
        assert v.ptr == reference.ptr and v.strides == reference.strides


@pytest.mark.gpu
def test_gpu_reader_validates_on_numbas_own_arrays():
    cuda = _cuda()
    from interop_numba import _reader

    entry = interop_core.plugins.reader_for(type(cuda.device_array(4)))
    result = validation_result(entry.type_path)
    assert result.validated, result.reason
    assert result.canaries >= 9                 # numba's arrays of several dtypes and layouts
    assert result.details["stream_fields_checked"] == result.canaries
    assert any(a.stream != 0 for a in _reader.canaries())   # one is bound to a stream


@pytest.mark.gpu
def test_gpu_failed_validation_reads_through_numbas_interface(force_validation):
    cuda = _cuda()
    s = cuda.stream()
    a = cuda.to_device(np.arange(24, dtype=np.float32).reshape(4, 6), stream=s)[1:, ::2]
    path = interop_core.plugins.reader_for(type(a)).type_path
    force_validation(path, False)
    assert interop_core.plugins.reader_for(type(a)).reader == "cuda_array_interface"
    v = interop_core.view(a)
    cai = a.__cuda_array_interface__
    assert (v.ptr, v.strides_in_bytes, v.producer_stream) == (cai["data"][0], a.strides, int(s))


@pytest.mark.gpu
def test_gpu_mapped_and_managed_arrays_take_the_plugin_reader():
    cuda = _cuda()
    for obj, device_type in ((cuda.mapped_array(8), 3), (cuda.managed_array(8), 13)):
        entry = interop_core.plugins.reader_for(type(obj))
        assert entry.plugin == "numba"
        assert interop_core.view(obj).device_type == device_type


@pytest.mark.gpu
def test_gpu_producer_stream_is_the_bound_stream():
    cuda = _cuda()
    s = cuda.stream()
    a = cuda.device_array(16, dtype=np.float32, stream=s)
    assert interop_core.view(a).producer_stream == int(s)
    assert interop_core.view(cuda.device_array(4)).producer_stream is None
    assert interop_core.cuda._streams.resolve_consumer_stream(s) == int(s)


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["numba", "view of numba", "torch"])
def test_gpu_exporter_builds_arrays_directly_once_checked(source):
    import interop_numba

    cuda = _cuda()
    a = cuda.to_device(np.arange(24, dtype=np.float32).reshape(4, 6))[1:, ::2]
    if source == "torch":
        torch = pytest.importorskip("torch")
        src = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)[1:, ::2]
        expected = src.cpu().numpy()
        ptr = src.data_ptr()
    else:
        src = a if source == "numba" else interop_core.view(a)
        expected = a.copy_to_host()
        ptr = a.__cuda_array_interface__["data"][0]
    consumer = cuda.stream()
    for stream in (None, consumer):
        out = interop_core.to(src, "numba", stream=stream)
        status = interop_numba.direct_export_status()
        assert status is not None and status[0], status
        assert out.__cuda_array_interface__["data"][0] == ptr
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out.copy_to_host(), expected)
        if stream is not None:
            assert int(out.stream) == int(consumer)   # numba's own calls run on the consumer


@pytest.mark.gpu
def test_gpu_exporter_round_trips_zero_copy():
    cuda = _cuda()
    a = cuda.to_device(np.arange(24, dtype=np.float32).reshape(4, 6))[1:, ::2]
    out = interop_core.to(a, "numba")
    assert out.__cuda_array_interface__["data"][0] == a.__cuda_array_interface__["data"][0]
    assert out.shape == a.shape and out.strides == a.strides
    np.testing.assert_array_equal(out.copy_to_host(), a.copy_to_host())


@pytest.mark.gpu
class TestNumbaConformance(PluginConformance):
    plugin_name = "numba"
    framework_modules = ("numba",)
    exporter_target = "numba"

    def make_samples(self):
        cuda = _cuda()
        base = cuda.to_device(np.arange(24, dtype=np.float32).reshape(4, 6))
        return {"contiguous": base, "sliced": base[1:, ::2], "transposed": _transposed(base),
                "zero_size": cuda.device_array((0, 3), dtype=np.int16),
                "zero_d": cuda.device_array((), dtype=np.float64)}

    def expected(self, obj):
        cai = obj.__cuda_array_interface__
        return Expected(ptr=cai["data"][0], shape=obj.shape,
                        strides=tuple(s // obj.dtype.itemsize for s in obj.strides),
                        dtype=DLPACK[obj.dtype.name], device=(2, 0), readonly=False)
