"""The numba plugin: compiled reader (validated once, with a fallback), simulator, exporter.

CPU: the reader runs on stand-ins for DeviceNDArray (same public attributes, registered by hand),
and numba's CUDA simulator runs in a subprocess (``NUMBA_ENABLE_CUDASIM`` must be set before numba
is imported, which would change numba for every other test in this process).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import interop_core
from interop_core import _numba_reader
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

    def __init__(self, array, stream=0, cai_ptr_shift=0):
        self._array = array
        self.shape, self.strides, self.dtype = array.shape, array.strides, array.dtype
        self.gpu_data = _Pointer(array.ctypes.data) if array.size else None
        self.stream = stream
        self._shift = cai_ptr_shift

    @property
    def __cuda_array_interface__(self):
        ptr = self._array.ctypes.data if self._array.size else 0
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
                "data": (ptr + self._shift, False), "version": 3,
                "stream": int(self.stream) if self.stream != 0 else None}


class _StandInPlugin:
    @interop_core.hookimpl
    def interop_core_register(self, registry):
        registry.add_type(StandIn, reader="numba")


@pytest.fixture
def stand_in_registered():
    import interop_numba  # noqa: F401  (the compiled readers are registered by name on import)

    from interop_core import _numba_reader as reader  # noqa: F401

    previous = _numba_reader.mode()
    name = interop_core.register_plugin(_StandInPlugin(), name="numba-stand-in")
    yield
    interop_core.unregister_plugin(name)
    _numba_reader.set_mode(previous)


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
def test_attribute_reader_matches_the_interface(stand_in_registered, dtype, layout):
    array = LAYOUTS[layout](np.zeros((4, 6), dtype=dtype))
    obj = StandIn(array)
    assert _numba_reader.validate(obj) == "attributes", _numba_reader.failure()
    v = interop_core.view(obj)
    assert v.owner is obj
    assert v.shape == array.shape
    assert v.dlpack_dtype == DLPACK[dtype]
    assert (v.device_type, v.device_id) == (2, 0)
    assert v.producer_stream is None
    if array.size:
        assert v.ptr == array.ctypes.data
        assert v.strides_in_bytes == array.strides


def test_a_disagreeing_interface_makes_the_reader_fall_back(stand_in_registered):
    array = np.zeros(8, np.float32)
    obj = StandIn(array, cai_ptr_shift=4)
    assert _numba_reader.validate(obj) == "cuda_array_interface"
    assert "ptr" in _numba_reader.failure()
    assert interop_core.view(obj).ptr == array.ctypes.data + 4  # what the interface says


def test_forced_fallback_reads_through_the_interface(stand_in_registered):
    _numba_reader.set_mode("cuda_array_interface")
    obj = StandIn(np.zeros(3), stream=99)
    v = interop_core.view(obj)
    assert v.producer_stream == 99 and _numba_reader.mode() == "cuda_array_interface"


@pytest.mark.parametrize(("stream", "expected"), [(0, None), (77, 77)])
def test_producer_stream_is_the_interfaces_stream_field(stand_in_registered, stream, expected):
    obj = StandIn(np.zeros(4, np.int32), stream=stream)
    assert _numba_reader.validate(obj) == "attributes"
    assert interop_core.view(obj).producer_stream == expected
    assert _numba_reader.producer_stream(obj) == expected


def test_a_stride_that_is_not_a_whole_number_of_elements_is_a_buffer_error(stand_in_registered):
    obj = StandIn(np.zeros(4, np.int32))
    _numba_reader.set_mode("attributes")
    obj.strides = (6,)
    with pytest.raises(BufferError, match="not a multiple of its itemsize"):
        interop_core.view(obj)


def test_set_mode_rejects_unknown_modes():
    with pytest.raises(ValueError, match="mode must be one of"):
        _numba_reader.set_mode("fast")


# --- the CUDA simulator, in a subprocess --------------------------------------------------------

SIMULATOR_SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import interop_core
    from numba import cuda
    import interop_numba
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
    assert out["file"].startswith(str(ROOT))
    assert out["entry"] == ["numba", "numba_simulator"]
    for key, (shape_ok, ptr_ok, strides_ok, dtype, device, owner_ok) in out["cases"].items():
        assert shape_ok and ptr_ok and strides_ok and owner_ok, key
        assert tuple(dtype) == DLPACK[key.split("-")[0]], key
        assert device == [1, 0], key  # simulator memory is host memory, reported as such
    assert out["export"] == ["FakeCUDAArray", True, True]


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
    assert _numba_reader.mode() == "attributes", _numba_reader.failure()
    reference = interop_core.StridedMemoryView.from_cuda_array_interface(obj)
    assert (v.shape, v.dlpack_dtype, v.device_type, v.device_id) == (
        reference.shape, reference.dlpack_dtype, reference.device_type, reference.device_id)
    if v.size:
        assert v.ptr == reference.ptr and v.strides == reference.strides
    entry = interop_core.plugins.reader_for(type(obj))
    assert (entry.plugin, entry.reader) == ("numba", "numba")


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
