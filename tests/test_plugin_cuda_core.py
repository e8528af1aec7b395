"""The cuda.core plugin: views of cuda.core's StridedMemoryView and Buffer through its compiled
readers, the ``"cuda.core"`` exporter, and the plugin conformance kit.

cuda.core (``pip install cuda-core cuda-bindings``) builds its views of host memory without a
GPU, so everything here but the ``gpu``-marked tests runs on a CPU machine.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import interop_core
from interop_core import StridedMemoryView, to, view
from interop_core.testing import Expected, PluginConformance

cuda_core = pytest.importorskip(
    "cuda.core", reason="cuda.core is not installed (pip install cuda-core cuda-bindings)")
from cuda.core.utils import StridedMemoryView as CoreView  # noqa: E402

DLPACK = {"bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
          "int64": (0, 64, 1), "uint8": (1, 8, 1), "uint16": (1, 16, 1), "float16": (2, 16, 1),
          "float32": (2, 32, 1), "float64": (2, 64, 1), "complex64": (5, 64, 1),
          "complex128": (5, 128, 1)}


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded():
    # Installed, the plugin comes through its entry point; from a checkout whose installed
    # metadata predates it, it is registered by hand, as a third party without one would.
    interop_core.plugins.discover()
    if not any(i.name == "cuda.core" for i in interop_core.plugin_status()):
        import interop_cuda_core

        interop_core.register_plugin(interop_cuda_core, name="cuda.core")
    yield


def _core_view(array):
    return CoreView.from_dlpack(array, -1)


def _c_strides(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


class TestCudaCorePlugin(PluginConformance):
    plugin_name = "cuda.core"
    framework_modules = ("cuda.core", "cuda.bindings")
    exporter_target = "cuda.core"
    plugin_module = "interop_cuda_core"

    def make_samples(self):
        grid = np.arange(24, dtype=np.float32).reshape(4, 6)
        frozen = np.arange(6, dtype=np.int16)
        frozen.flags.writeable = False
        return {
            "contiguous": _core_view(grid),
            "sliced": _core_view(grid[1:, ::2]),
            "transposed": _core_view(grid.T),
            "zero_size": _core_view(np.zeros((0, 3), np.int8)),
            "zero_d": _core_view(np.array(2.5)),
            "reversed": _core_view(np.arange(10.0)[::-3]),
            "readonly": _core_view(frozen),
            "complex": _core_view(np.ones((2, 3), np.complex64)[:, 1:]),
        }

    def expected(self, obj):
        shape = tuple(obj.shape)
        strides = obj.strides if obj.strides is not None else _c_strides(shape)
        device = (1, 0) if obj.device_id == -1 else tuple(obj.__dlpack_device__())
        return Expected(ptr=obj.ptr, shape=shape, strides=tuple(strides),
                        dtype=DLPACK[obj.dtype.name], device=device, readonly=obj.readonly)


# --- views of cuda.core views ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", sorted(DLPACK))
def test_every_dtype_reads_as_cuda_core_describes_it(dtype):
    a = np.ones((3, 4), dtype=dtype)[:, ::2]
    v = view(_core_view(a))
    assert v.dlpack_dtype == DLPACK[dtype] and v.dtype == a.dtype
    assert (v.ptr, v.shape, v.strides_in_bytes) == (a.ctypes.data, a.shape, a.strides)


def test_a_view_holds_the_cuda_core_view_and_what_it_views():
    a = np.arange(8.0)
    array_ref = weakref.ref(a)
    smv = _core_view(a)
    smv_ref = weakref.ref(smv) if type(smv).__weakrefoffset__ else None
    v = view(smv)
    assert v.owner is smv
    del a, smv
    gc.collect()
    assert array_ref() is not None
    np.testing.assert_array_equal(np.from_dlpack(v), np.arange(8.0))
    del v
    gc.collect()
    assert array_ref() is None
    if smv_ref is not None:
        assert smv_ref() is None


class _Layout:
    def __init__(self, itemsize):
        self.itemsize = itemsize


class UntypedStandIn:
    """The public attributes of a cuda.core view made by from_buffer(..., itemsize=n) without a
    dtype (cuda.core needs a CUDA driver to make one)."""

    def __init__(self, array, itemsize):
        self.array = array
        self.ptr, self.shape, self.strides = array.ctypes.data, array.shape, None
        self.dtype, self._layout = None, _Layout(itemsize)
        self.device_id, self.readonly = -1, False


@pytest.mark.parametrize("itemsize, dtype", [(1, (1, 8, 1)), (4, (1, 32, 1)), (8, (1, 64, 1))])
def test_a_view_without_a_dtype_reads_as_unsigned_integers_of_its_itemsize(registered,
                                                                           itemsize, dtype):
    from interop_cuda_core import _reader

    registered(lambda r: r.add_type(UntypedStandIn, reader=_reader.view_reader_capsule(),
                                    fallback=_reader.read_untyped_view), "untyped stand-in")
    a = np.zeros(24, np.uint8).view(f"u{itemsize}")
    obj = UntypedStandIn(a, itemsize)
    v = view(obj)        # the compiled reader declines (no dtype); the fallback reads
    assert (v.dlpack_dtype, v.shape, v.ptr, v.owner) == (dtype, a.shape, a.ctypes.data, obj)


def test_a_view_without_a_dtype_of_an_odd_itemsize_is_refused_naming_it():
    from interop_cuda_core import _reader

    with pytest.raises(BufferError, match="itemsize is 12 bytes"):
        _reader.read_untyped_view(UntypedStandIn(np.zeros(12, np.uint8), 12))


@pytest.mark.gpu
def test_an_untyped_cuda_core_view_of_device_memory_reads_as_unsigned_integers():
    dev = cuda_core.Device()
    dev.set_current()
    buffer = dev.memory_resource.allocate(64, stream=dev.default_stream)
    v = view(CoreView.from_buffer(buffer, (16,), itemsize=4))
    assert (v.dlpack_dtype, v.shape, v.ptr, v.device_type) == ((1, 32, 1), (16,),
                                                                 int(buffer.handle), 2)


def test_the_plugins_reader_replaces_the_generic_dlpack_path():
    entry = interop_core.plugins.reader_for(CoreView)
    assert entry.plugin == "cuda.core" and entry.kind == 3


# --- views of cuda.core buffers ---------------------------------------------------------------------

def test_a_buffer_of_host_memory_is_a_byte_view_that_holds_it():
    a = np.arange(16, dtype=np.uint8)
    array_ref = weakref.ref(a)
    buffer = cuda_core.Buffer.from_handle(a.ctypes.data, a.nbytes, owner=a)
    v = view(buffer)
    assert (v.ptr, v.shape, v.strides, v.dlpack_dtype) == (a.ctypes.data, (16,), (1,),
                                                           (1, 8, 1))
    assert (v.device_type, v.device_id, v.readonly, v.owner) == (1, 0, False, buffer)
    del a, buffer
    gc.collect()
    assert array_ref() is not None
    assert np.from_dlpack(v)[5] == 5
    entry = interop_core.plugins.reader_for(cuda_core.Buffer)
    assert entry.plugin == "cuda.core"


def test_an_empty_buffer_is_an_empty_view():
    buffer = cuda_core.Buffer.from_handle(0, 0)
    v = view(buffer)
    assert v.shape == (0,) and v.size == 0


# --- the exporter ---------------------------------------------------------------------------------

def test_to_cuda_core_gives_a_cuda_core_view_over_the_same_memory():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[:, 1::2]
    out = to(a, "cuda.core")
    assert type(out) is CoreView
    assert (out.ptr, out.shape, out.dtype) == (a.ctypes.data, a.shape, a.dtype)
    assert tuple(out.strides) == tuple(s // 8 for s in a.strides)
    assert out.device_id == -1 and out.readonly is False
    assert type(to(a, CoreView)) is CoreView       # the type names the target too


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_a_cuda_core_view_of_a_type_cuda_core_cannot_name_reads_as_its_source(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.zeros((3, 4), dtype=getattr(ml_dtypes, name))[:, ::2]
    out = to(a, "cuda.core")
    v = view(out)
    source = view(a)
    assert (v.ptr, v.shape, v.strides, v.dlpack_dtype) == (
        source.ptr, source.shape, source.strides, source.dlpack_dtype)
    assert v.owner is out


def test_a_cuda_core_view_of_an_unnamed_type_not_made_by_us_is_refused_naming_it():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from interop_cuda_core import _reader

    class Unnamed:
        # What a cuda.core view of a type cuda.core cannot name answers.
        ptr, shape, strides, readonly, device_id = 4096, (2,), None, False, -1
        exporting_obj = np.zeros(2, dtype=ml_dtypes.float8_e4m3fn)

        @property
        def dtype(self):
            raise TypeError("Unsupported dtype. dtype code: 10")

    with pytest.raises(BufferError, match=r"cannot name its element type \(Unsupported dtype"):
        _reader.read_untyped_view(Unnamed())


def test_to_cuda_core_keeps_the_source_alive_and_read_only_memory_read_only():
    a = np.arange(5.0)
    a.flags.writeable = False
    ref = weakref.ref(a)
    out = to(a, "cuda.core")
    assert out.readonly
    del a
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(np.from_dlpack(out), np.arange(5.0))
    del out
    gc.collect()
    assert ref() is None


def test_torch_tensors_hand_over_to_cuda_core():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).T
    out = to(t, "cuda.core")
    assert (out.ptr, out.shape, out.strides) == (t.data_ptr(), (4, 3), (1, 4))


def test_a_cuda_core_streams_handle_is_its_custream_as_an_int():
    from interop_cuda_core import stream_handle

    class HandleLike:
        def __int__(self):
            return 0x1234

    class StandIn:
        handle = HandleLike()      # cuda.core's handle is a cuda.bindings CUstream

    assert stream_handle(StandIn()) == 0x1234


# --- loading ----------------------------------------------------------------------------------------

def test_loading_the_plugin_imports_no_cuda_core():
    code = textwrap.dedent("""
        import sys, interop_core, interop_cuda_core
        interop_core.register_plugin(interop_cuda_core, name="cuda.core test")
        info = {i.name: i for i in interop_core.plugin_status()}["cuda.core test"]
        print(info.status, "|", sorted(m for m in sys.modules if m.startswith("cuda")), "|",
              info.exporters)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    status, imported, exporters = (part.strip() for part in out.stdout.split("|"))
    assert status == "loaded" and imported == "[]" and exporters == "('cuda.core',)"


# --- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_device_views_and_buffers_read_their_device():
    dev = cuda_core.Device()
    dev.set_current()
    buffer = dev.memory_resource.allocate(256, stream=dev.default_stream)
    v = view(buffer)
    assert (v.device_type, v.device_id, v.shape) == (2, dev.device_id, (256,))
    smv = CoreView.from_buffer(buffer, (8, 8), dtype=np.dtype(np.float32))
    w = view(smv)
    assert (w.ptr, w.shape, w.strides, w.device_type, w.device_id) == (
        int(buffer.handle), (8, 8), (8, 1), 2, dev.device_id)
    back = to(w[:, ::2], "cuda.core")
    assert back.is_device_accessible and back.device_id == dev.device_id
    assert back.ptr == w.ptr and back.strides == (8, 2)


@pytest.mark.gpu
def test_pinned_memory_reads_as_pinned():
    dev = cuda_core.Device()
    dev.set_current()
    mr = cuda_core.LegacyPinnedMemoryResource()
    buffer = mr.allocate(64)
    v = view(buffer)
    assert (v.device_type, v.is_host_accessible, v.is_device_accessible) == (3, True, True)


@pytest.mark.gpu
def test_a_cuda_core_stream_orders_a_view():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    dev = cuda_core.Device()
    dev.set_current()
    stream = dev.create_stream()
    x = torch.ones(8, device="cuda")
    v = view(x, stream=stream)
    assert v.ptr == x.data_ptr()
    StridedMemoryView.from_dlpack(x, stream=stream)
    stream.sync()
