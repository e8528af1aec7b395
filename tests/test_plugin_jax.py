"""The jax plugin: its compiled reader, readiness, fallback, errors and the "jax" exporter."""

from __future__ import annotations

import pathlib
import re
import sys
import warnings

import pytest
from conftest import validation_result

import interop_core
from interop_core.testing import Expected, PluginConformance

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
np = pytest.importorskip("numpy")

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _jax_on_the_cpu(request):
    """Host tests make their arrays on jax's CPU device (a GPU machine defaults to the GPU)."""
    if "gpu" in request.keywords:
        yield
        return
    with jax.default_device(jax.devices("cpu")[0]):
        yield

DTYPES = ["bool", "int8", "int16", "int32", "uint8", "float16", "bfloat16", "float32",
          "complex64"]
LAYOUTS = ["contiguous", "sliced", "transposed", "reversed", "zero_size", "zero_d",
           "many_dims"]


def _make(layout, dtype):
    base = jnp.arange(24).astype(dtype).reshape(4, 6)
    return {
        "contiguous": lambda: base,
        "sliced": lambda: base[1:, ::2],
        "transposed": lambda: base.T,
        "reversed": lambda: base[::-1],
        "zero_size": lambda: base[:0],
        "zero_d": lambda: base[2, 3],
        "many_dims": lambda: jnp.ones((2, 1, 3, 1, 2, 1, 2), dtype),
    }[layout]()


def _dense_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _dlpack_dtype(dtype):
    return interop_core.StridedMemoryView.from_pointer(0, (0,), dtype=np.dtype(dtype)).dlpack_dtype


def _type_path():
    t = type(jnp.zeros(1))
    return f"{t.__module__}:{t.__qualname__}"


@pytest.fixture(params=[True, False], ids=["direct", "fallback"])
def reader_mode(request, force_validation):
    assert validation_result(_type_path()).validated
    if not request.param:
        force_validation(_type_path(), False, "simulated by the test")
    return request.param


def test_reader_validates_on_this_jax():
    result = validation_result(_type_path())
    assert result.validated, result.reason
    assert result.canaries >= 10
    assert result.details["shared_reads_checked"] >= 10


def test_array_type_uses_this_plugins_compiled_reader_through_the_public_abi():
    from interop_jax import _read, _reader

    entry = interop_core.plugins.reader_for(type(jnp.zeros(1)))
    assert entry.plugin == "jax"
    assert type(entry.reader).__name__ == "PyCapsule"
    assert entry.fallback.reader is _read.read_with_dlpack is _reader.read_with_dlpack
    assert entry.readonly and entry.fallback.readonly


# The plugin is a template a third party can copy: each compiled module is a .pyx with its .pxd
# and .pyi, and reaches the core only through the public C ABI (interop_core.abi) and its public
# Python API.  The .pxd and .pyi files are installed beside the modules (a wheel holds them too);
# the .pyx sources are in the source tree only.
JAX_PLUGIN_MODULES = {"_handles", "_devices", "_hold", "_read", "_validation", "_shards_read",
                      "_reader"}


def _compiled_jax_plugin_modules():
    """The folder of the imported interop_jax and the names of its modules compiled for this
    Python."""
    import interop_jax

    folder = pathlib.Path(interop_jax.__file__).parent
    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    return folder, sorted(so.name.split(".")[0] for so in folder.glob(f"_*.{tag}*.so"))


def _core_cimports(source: str) -> set[str]:
    cimported = set(re.findall(r"^\s*(?:from\s+(\S+)\s+)?cimport\s+(\S+)", source, re.M))
    return {m or n for m, n in cimported if (m or n).startswith("interop_core")}


def test_the_compiled_modules_keep_their_stubs_and_declarations_and_cimport_only_the_abi():
    folder, modules = _compiled_jax_plugin_modules()
    assert JAX_PLUGIN_MODULES <= set(modules), modules
    for stem in modules:
        assert (folder / f"{stem}.pyi").is_file(), f"{stem}.pyi"
        core = _core_cimports((folder / f"{stem}.pxd").read_text())
        assert core <= {"interop_core.abi"}, (f"{stem}.pxd", core)


def test_the_sources_keep_their_stubs_and_cimport_nothing_of_the_core_but_the_abi():
    sources = ROOT / "plugins" / "interop_jax"
    if not sources.is_dir():
        pytest.skip("needs the source tree (this run tests an installed wheel, which holds no "
                    ".pyx sources)")
    modules = sorted(pyx.stem for pyx in sources.glob("_*.pyx"))
    assert JAX_PLUGIN_MODULES <= set(modules), modules
    for stem in modules:
        assert (sources / f"{stem}.pyi").is_file(), f"{stem}.pyi"
        for suffix in (".pyx", ".pxd"):
            core = _core_cimports((sources / (stem + suffix)).read_text())
            assert core <= {"interop_core.abi"}, (stem + suffix, core)


def test_a_reader_that_fails_validation_hands_over_to_the_fallback(force_validation):
    from interop_jax import _read

    force_validation(_type_path(), False, "simulated by the test")
    x = jnp.arange(4.0)
    entry = interop_core.plugins.reader_for(type(x))
    assert entry.reader is _read.read_with_dlpack
    v = interop_core.view(x)
    assert v.readonly and v.ptr == x.unsafe_buffer_pointer()


def test_prepare_refuses_a_sample_whose_export_describes_another_shape():
    from interop_jax import _validation

    class Impostor:
        """Accessors of one array, shape of another: what a changed jax could look like."""

        def __init__(self, array, shape):
            self._array, self.shape = array, shape

        def __getattr__(self, name):
            return getattr(self._array, name)

    why = _validation.prepare([Impostor(jnp.arange(6.0), (2, 3))])
    assert isinstance(why, str) and "shape" in why


def test_every_spelling_of_the_array_type_is_declared():
    t = type(jnp.zeros(1))
    info = {i.name: i for i in interop_core.plugin_status()}["jax"]
    assert f"{t.__module__}:{t.__qualname__}" in info.claims


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_view_matches_jax_metadata_and_is_read_only(reader_mode, layout, dtype):
    x = _make(layout, dtype)
    v = interop_core.view(x)
    assert v.ptr == x.unsafe_buffer_pointer()
    assert v.shape == x.shape
    if x.size > 1:
        assert v.strides == _dense_strides(x.shape)
    assert v.dlpack_dtype == _dlpack_dtype(x.dtype)
    assert (v.device_type, v.device_id) == (1, 0)
    assert v.readonly
    assert v.owner is x
    assert interop_core.to(v, "numpy").tobytes() == np.asarray(x).tobytes()


def test_view_of_a_column_major_device_layout_reports_its_strides(reader_mode):
    from jax.experimental.layout import Format, Layout

    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    y = jax.device_put(x, Format(Layout(major_to_minor=(1, 0)), x.sharding))
    v = interop_core.view(y)
    assert v.strides == (1, 3)
    assert np.asarray(v).tolist() == np.asarray(x).tolist()
    # and a row-major array of the same rank still reads as row-major afterwards
    assert interop_core.view(x).strides == (4, 1)


@jax.jit
def _slow(a):
    """Hundreds of ms of CPU work (jax dispatches it asynchronously)."""
    for _ in range(24):
        a = jnp.tanh(a @ a)
    return a


def _pending_on_the_cpu():
    """(array still being computed by jax's CPU thread pool, its final values)."""
    a = jnp.full((700, 700), 0.001, jnp.float32)
    expected = np.asarray(_slow(a))
    return _slow(a), expected


@pytest.mark.parametrize("stream", [None, -1, 0])
@pytest.mark.parametrize("entry_point", ["view", "to numpy", "from_dlpack of the view"])
def test_host_memory_is_handed_over_after_jaxs_cpu_work_with_or_without_a_stream(
        reader_mode, entry_point, stream):
    # jax's CPU work is not stream-ordered and a host consumer reads as soon as it has the
    # pointer: the read waits for jax (as jax's own DLPack export does), a stream or not.
    # Validated first (reader_mode): its canaries would queue behind the work.
    x, expected = _pending_on_the_cpu()
    if entry_point == "view":
        v = interop_core.view(x, stream=stream)
        assert v.ptr == x.unsafe_buffer_pointer() and v.owner is x and v.readonly
        assert x.is_ready(), "view() handed over host memory jax was still computing"
        out = np.asarray(v)
    elif entry_point == "to numpy":
        out = interop_core.to(x, "numpy", stream=stream)
        assert x.is_ready(), "to(x, 'numpy') handed over host memory jax was still computing"
        assert out.ctypes.data == x.unsafe_buffer_pointer()
    else:
        out = np.from_dlpack(interop_core.view(x, stream=stream))
        assert x.is_ready(), "a view's DLPack export handed over memory still being computed"
    assert np.array_equal(out, expected)


def test_an_array_handed_over_again_and_again_stays_right():
    # Only computed arrays get a cache entry: a hit has nothing left to wait for.
    x, expected = _pending_on_the_cpu()
    for _ in range(4):
        out = interop_core.to(x, "numpy")
        assert np.array_equal(out, expected)


@pytest.mark.parametrize("entry_point", ["sync", "sync later"])
def test_syncing_a_view_of_a_cpu_array_on_a_stream_leaves_it_computed(reader_mode, entry_point):
    # jax's CPU work is not stream-ordered: sync() on host memory orders through the host.
    x, expected = _pending_on_the_cpu()
    if entry_point == "sync":
        out = interop_core.view(x).sync(0)
    else:
        out = interop_core.view(x)
        out.sync(0)
    assert x.is_ready()
    assert np.array_equal(np.asarray(out), expected)


def test_the_producer_strategy_finishes_cpu_work_and_names_no_stream():
    import interop_jax

    x, _ = _pending_on_the_cpu()
    assert interop_jax.producer_stream(x) is None
    assert x.is_ready()


@pytest.mark.parametrize("path", ["view", "from_any", "from_dlpack", "read_with dlpack"])
def test_every_path_that_views_a_jax_array_reports_read_only(path):
    x = jnp.arange(6.0, dtype=jnp.float32)
    if path == "view":
        v = interop_core.view(x)
    elif path == "from_any":
        v = interop_core.StridedMemoryView.from_any(x)
    elif path == "from_dlpack":
        v = interop_core.StridedMemoryView.from_dlpack(x)
    else:
        from interop_core.registry import _registry

        v = _registry.read_with(_registry.new_entry("dlpack", readonly=True), x)
    assert v.ptr == x.unsafe_buffer_pointer()
    assert v.readonly


def test_a_view_of_a_jax_array_is_read_only_through_the_c_exchange_api():
    import ctypes

    from dlpack_ctypes import DLManagedTensorVersioned, exchange_api

    api = exchange_api(interop_core.StridedMemoryView)
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        api.managed_tensor_from_py_object_no_sync)
    out = ctypes.c_void_p()
    assert from_py(interop_core.view(jnp.arange(4.0)), ctypes.byref(out)) == 0
    tensor = DLManagedTensorVersioned.from_address(out.value)
    try:
        assert tensor.flags & 1, "DLPACK_FLAG_BITMASK_READ_ONLY not set"
    finally:
        tensor.deleter(out.value)


def test_multi_device_error_in_a_fresh_interpreter_with_two_cpu_devices():
    import subprocess
    import sys

    code = (
        "import jax, jax.numpy as jnp, numpy as np, interop_core\n"
        "mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ('x',))\n"
        "s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('x'))\n"
        "x = jax.device_put(jnp.arange(8.0), s)\n"
        "one = jax.device_put(jnp.arange(4.0), jax.sharding.NamedSharding(\n"
        "    jax.sharding.Mesh(np.array(jax.devices()[:1]), ('x',)), jax.sharding.PartitionSpec()))\n"
        "assert interop_core.view(one).shape == (4,)\n"
        "try:\n    interop_core.view(x)\nexcept BufferError as e:\n    print('ERR', e)\n")
    env = dict(__import__("os").environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and "interop_core.shards()" in out.stdout


@pytest.mark.parametrize("entry_point", ["view", "to numpy", "to torch"])
@pytest.mark.parametrize("how", ["deleted", "donated"])
@pytest.mark.parametrize("stream", [None, 0])
def test_deleted_or_donated_array_is_a_clear_error(reader_mode, how, stream, entry_point):
    x = jnp.arange(16.0)
    if how == "deleted":
        x.delete()
    else:
        jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    assert x.is_deleted()
    with pytest.raises(BufferError, match="deleted jax array"):
        if entry_point == "view":
            interop_core.view(x, stream=stream)
        elif entry_point == "to numpy":      # the compiled exporter's record path
            interop_core.to(x, "numpy", stream=stream)
        else:
            pytest.importorskip("torch")
            interop_core.to(x, "torch", stream=stream)


def test_to_numpy_of_a_sharded_array_names_shards():
    devices = jax.devices("cpu")
    if len(devices) < 2:
        pytest.skip("needs two jax CPU devices")
    mesh = jax.sharding.Mesh(np.array(devices[:2]), ("x",))
    x = jax.device_put(jnp.arange(8.0), jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec("x")))
    with pytest.raises(BufferError, match="interop_core.shards"):
        interop_core.to(x, "numpy")


_OTHER_PROCESS = """
import sys, jax, numpy as np, interop_core
jax.distributed.initialize(coordinator_address=sys.argv[2], num_processes=2,
                           process_id=int(sys.argv[1]))
other = next(d for d in jax.devices() if d.process_index != jax.process_index())
sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array([other]), ("x",)),
                                      jax.sharding.PartitionSpec())
x = jax.make_array_from_single_device_arrays((4,), sharding, [], dtype=np.float32)
try:
    interop_core.view(x)
except BufferError as exc:
    print("ERR", exc)
jax.distributed.shutdown()
"""


def test_an_array_on_another_processs_device_is_a_clear_error():
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS, str(i), address],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
        assert "ERR" in out and "not addressable" in out and "belongs to jax process" in out


# --- exporter --------------------------------------------------------------------------------

def _aligned(shape, dtype, align=64):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + align, np.uint8)
    off = (-raw.ctypes.data) % align
    a = raw[off:off + n].view(dtype).reshape(shape)
    a[...] = np.arange(a.size).reshape(shape).astype(dtype)
    return a


@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "uint8", "float16", "float32",
                                   "complex64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "zero_d"])
def test_to_jax_is_zero_copy_for_aligned_memory(layout, dtype):
    a = _aligned((4, 6), dtype)
    src = {"contiguous": a, "transposed": a.T, "zero_d": a[0:1, 0:1].reshape(())}[layout]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = interop_core.to(src, "jax")
    assert out.unsafe_buffer_pointer() == src.__array_interface__["data"][0]
    assert out.shape == src.shape and out.dtype == src.dtype
    assert np.array_equal(np.asarray(out), src)


def test_to_jax_round_trips_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = _aligned((3, 4), ml_dtypes.bfloat16)
    out = interop_core.to(a, jax.Array)
    assert out.dtype == jnp.bfloat16
    assert out.unsafe_buffer_pointer() == a.ctypes.data


def test_to_jax_hands_jax_an_aligned_copy_of_unaligned_memory():
    a = _aligned((17,), np.float32)[1:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # a copy jax made itself would warn
        out = interop_core.to(a, "jax")
    assert out.unsafe_buffer_pointer() != a.ctypes.data
    assert out.unsafe_buffer_pointer() % 64 == 0
    assert np.array_equal(np.asarray(out), a)
    with pytest.raises(BufferError, match="aligned to 64 bytes"):
        interop_core.to(a, "jax", copy=False)


def test_to_jax_of_64_bit_data_is_refused_unless_x64_is_enabled():
    a = _aligned((4,), np.float64)
    if jax.config.jax_enable_x64:
        assert interop_core.to(a, "jax").unsafe_buffer_pointer() == a.ctypes.data
    else:
        with pytest.raises(BufferError, match="jax_enable_x64"):
            interop_core.to(a, "jax")


def test_to_jax_of_a_non_compact_layout_is_a_copy_or_a_clear_error():
    a = _aligned((4, 6), np.float32)
    assert np.array_equal(np.asarray(interop_core.to(a[:, ::2], "jax")), a[:, ::2])
    with pytest.raises(BufferError, match="compact"):
        interop_core.to(a[:, ::2], "jax", copy=False)


def test_jax_to_jax_round_trip_keeps_the_buffer():
    x = jnp.arange(16, dtype=jnp.float32).reshape(4, 4)
    out = interop_core.to(x, "jax")
    assert out.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_to_numpy_of_a_jax_array_is_zero_copy_and_read_only(reader_mode, numpy_export_path,
                                                           layout, dtype):
    x = _make(layout, dtype)
    out = interop_core.to(x, "numpy")
    assert type(out) is np.ndarray
    assert out.shape == x.shape and out.dtype == np.dtype(x.dtype)
    if x.size:
        assert out.ctypes.data == x.unsafe_buffer_pointer()
    assert out.strides == tuple(s * out.itemsize for s in _dense_strides(x.shape))
    assert out.tobytes() == np.asarray(x).tobytes()
    assert not out.flags.writeable
    with pytest.raises(ValueError, match="WRITEABLE"):
        out.flags.writeable = True


def test_to_numpy_of_a_jax_array_keeps_it_alive(reader_mode, numpy_export_path):
    import gc
    import weakref

    x = jnp.arange(1000, dtype=jnp.float32) * 2
    x.block_until_ready()
    alive = weakref.ref(x)
    out = interop_core.to(x, "numpy")
    del x
    gc.collect()
    assert alive() is not None and out[10] == 20.0
    del out
    gc.collect()
    assert alive() is None


def test_to_numpy_of_a_jax_array_is_based_on_the_hold_of_its_buffer():
    # The compiled reader's keep-alive (jax's external reference on the buffer, which holds the
    # array too) goes straight to numpy's C API: no view object between.
    from interop_jax._hold import BufferHold

    assert validation_result(_type_path()).validated
    x = jnp.arange(6.0)
    out = interop_core.to(x, "numpy")
    assert type(out.base) is BufferHold and out.base.array is x


def _jax_gpu():
    """jax's first CUDA device; the test is skipped where jax has no CUDA backend."""
    try:
        return jax.devices("cuda")[0]
    except RuntimeError:
        pytest.skip("jax has no CUDA backend here")


@pytest.mark.gpu
def test_view_of_a_cuda_array():
    gpu = _jax_gpu()
    x = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), gpu)
    v = interop_core.view(x)
    assert v.ptr == x.unsafe_buffer_pointer()
    assert (v.device_type, v.device_id) == (2, gpu.local_hardware_id)
    assert v.shape == (3, 4) and v.strides == (4, 1) and v.readonly
    result = validation_result(_type_path())
    assert result.validated, result.reason


@pytest.mark.gpu
def test_cuda_array_round_trips_through_to_jax():
    gpu = _jax_gpu()
    x = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), gpu)
    out = interop_core.to(x, "jax")
    assert out.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    with pytest.raises(BufferError, match="numpy imports memory of DLPack device types .* only|device memory cannot become a numpy array"):
        interop_core.to(x, "numpy")


@pytest.mark.gpu
def test_to_cupy_of_a_cuda_array_is_zero_copy_holds_it_and_warns_read_only():
    import gc
    import weakref

    cupy = pytest.importorskip("cupy")
    gpu = _jax_gpu()
    x = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), gpu)
    x.block_until_ready()
    alive = weakref.ref(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = interop_core.to(x, "cupy")
    assert [w.category for w in caught] == [interop_core.plugins.ReadOnlyHandoffWarning]
    assert type(out) is cupy.ndarray and out.data.ptr == x.unsafe_buffer_pointer()
    assert out.shape == (3, 4) and out.strides == (16, 4)
    del x
    gc.collect()
    assert alive() is not None          # cupy's UnownedMemory keeps the hold, which keeps x
    assert out.sum().item() == 66.0
    del out
    gc.collect()
    assert alive() is None


# --- conformance kit -------------------------------------------------------------------------

class TestJaxPluginConformance(PluginConformance):
    plugin_name = "jax"
    framework_modules = ("jax", "jaxlib")
    exporter_target = "jax"

    def make_samples(self):
        grid = jnp.arange(24, dtype=jnp.float32).reshape(4, 6)
        return {
            "contiguous": grid,
            "sliced": grid[1:, ::2],
            "transposed": grid.T,
            "zero_size": jnp.zeros((0, 3), jnp.int16),
            "zero_d": grid[2, 3],
            "bool": jnp.ones(5, jnp.bool_),
        }

    def expected(self, obj):
        return Expected(ptr=obj.unsafe_buffer_pointer(), shape=obj.shape,
                        strides=_dense_strides(obj.shape), dtype=_dlpack_dtype(obj.dtype),
                        device=(1, 0), readonly=True)


# --- holds: every read keeps jax's external reference on the buffer (a BufferHold); reads of
# an array whose hold lives share it, confirmed by the buffer address and the aval.  A hold must
# never outlive every view and export of it, nor describe another buffer than the array's.

@pytest.mark.parametrize("how", ["deleted", "donated"])
@pytest.mark.parametrize("entry_point", ["view", "to numpy"])
def test_deleted_array_after_shared_reads_is_a_clear_error(how, entry_point):
    x = jnp.arange(16.0).reshape(4, 4)
    read = interop_core.view if entry_point == "view" else (lambda a: interop_core.to(a, "numpy"))
    for _ in range(3):          # the first read takes a hold, the others share it
        got = read(x)
        assert got.shape == (4, 4)
    del got                     # no view left: jax may free (or donate) the buffer
    if how == "deleted":
        x.delete()
    else:
        jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    assert x.is_deleted()
    with pytest.raises(BufferError, match="deleted jax array"):
        read(x)


def test_views_of_one_array_alive_at_once_share_one_hold():
    import sys

    from interop_jax._hold import BufferHold

    assert validation_result(_type_path()).validated
    x = jnp.arange(12.0)
    first = interop_core.to(x, "numpy")
    again = interop_core.to(x, "numpy")
    hold = first.base
    assert type(hold) is BufferHold and hold.array is x
    assert again.base is hold
    users = sys.getrefcount(hold)
    launch = interop_core.launch_args([x])
    view = interop_core.view(x)
    assert sys.getrefcount(hold) == users + 2       # the launch record's slot and the view
    del launch, view
    assert sys.getrefcount(hold) == users
    assert interop_core.to(jnp.arange(12.0), "numpy").base is not hold


def test_a_hold_outlives_replace_with_and_the_next_read_takes_the_new_buffer():
    """jaxlib can swap an array's contents (``_replace_with``, behind jax's mutable arrays):
    a view made before keeps showing the old buffer (held); the next read describes the new
    one, with its own hold."""
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    if not hasattr(x, "_replace_with"):
        pytest.skip("this jaxlib has no _replace_with")
    before = [interop_core.to(x, "numpy") for _ in range(3)]    # one hold, shared
    new = jnp.ones((3, 4), jnp.float32)
    x._replace_with(new)
    del new
    junk = [jnp.full((3, 4), 777.0) for _ in range(20)]         # over anything freed
    after = interop_core.to(x, "numpy")
    assert after.ctypes.data == x.unsafe_buffer_pointer() != before[0].ctypes.data
    assert after.base is not before[0].base and after.base.array is x
    np.testing.assert_array_equal(after, np.ones((3, 4), np.float32))
    for old in before:
        np.testing.assert_array_equal(old, np.arange(12, dtype=np.float32).reshape(3, 4))
    del junk
    # Another shape and dtype: jax up to 0.11 swaps them in too; jax 0.12 refuses (the array
    # then stays as it was, and so do its reads).
    other = jnp.arange(5, dtype=jnp.int8)
    try:
        x._replace_with(other)
    except jax.errors.JaxRuntimeError as exc:
        assert "Unable to replace" in str(exc)
        np.testing.assert_array_equal(interop_core.to(x, "numpy"), np.ones((3, 4), np.float32))
        return
    v = interop_core.view(x)
    assert (v.shape, v.dtype, v.ptr) == ((5,), np.int8, other.unsafe_buffer_pointer())
    np.testing.assert_array_equal(after, np.ones((3, 4), np.float32))   # still held


def test_held_reads_of_many_arrays_and_of_recycled_addresses():
    """More arrays than the table of live holds has entries, read while earlier views live, and
    new arrays at freed arrays' addresses: every read describes its own array's buffer."""
    for _round in range(3):
        arrays = [jnp.full((i % 5 + 1, 3), i % 100, dtype=[jnp.float32, jnp.int8][i % 2])
                  for i in range(300)]
        kept = []
        for _ in range(2):
            for i, a in enumerate(arrays):
                v = interop_core.view(a)
                assert v.shape == (i % 5 + 1, 3) and v.ptr == a.unsafe_buffer_pointer()
                assert v.dtype == a.dtype and v.owner is a
                out = interop_core.to(a, "numpy")
                assert out[0, 0] == i % 100 and out.base.array is a
                kept.append(out)
        del arrays, a, v, out, kept


def test_held_read_of_another_layout():
    """An array with a column-major device layout keeps its strides when read again."""
    try:
        from jax.experimental.layout import Format, Layout
    except ImportError:
        pytest.skip("this jax has no jax.experimental.layout")
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    try:
        x = jax.device_put(base, Format(Layout((1, 0)), jax.sharding.SingleDeviceSharding(
            jax.devices("cpu")[0])))
    except Exception as exc:  # noqa: BLE001 - a backend without custom layouts
        pytest.skip(f"no custom layout here: {exc}")
    first = interop_core.view(x)
    again = interop_core.view(x)            # shares the first view's hold
    assert first.strides == again.strides == (1, 3)
    np.testing.assert_array_equal(interop_core.to(x, "numpy"), base)
    np.testing.assert_array_equal(interop_core.to(x, "numpy"), base)


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_an_array_jax_cannot_export_is_refused_rather_than_viewed_without_a_hold(dtype):
    # jax's DLPack export has no code for these element types, so no external reference can be
    # taken: a view could not keep the memory through delete() or donation.
    x = jnp.zeros(8, getattr(jnp, dtype))
    with pytest.raises(BufferError, match="jax refused that export"):
        interop_core.view(x)
    with pytest.raises(BufferError, match="jax refused that export"):
        interop_core.to(x, "numpy")


def test_a_donation_jax_declined_leaves_every_view_reading_the_original():
    x = jnp.arange(8.0)
    v = interop_core.view(x)
    assert v.ptr            # the memory is used: from here on the view holds the buffer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # jax may say it could not donate
        doubled = jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(doubled), np.arange(8.0) * 2)
    np.testing.assert_array_equal(interop_core.to(v, "numpy"), np.arange(8.0))


def _pending_on_the_gpu(gpu):
    """(array still being computed on `gpu`, its size): seconds of matrix products."""
    @jax.jit
    def slow(a):
        for _ in range(400):
            a = jnp.tanh(a @ a)
        return a

    a = jax.device_put(jnp.full((4096, 4096), 0.001, jnp.float32), gpu)
    slow(a).block_until_ready()             # compiled, and the GPU warm
    return slow(a)


@pytest.mark.gpu
@pytest.mark.host_timing
@pytest.mark.parametrize("entry_point", ["view", "to jax", "launch_args"])
def test_a_hold_on_a_gpu_array_takes_no_host_wait(entry_point):
    gpu = _jax_gpu()
    x = _pending_on_the_gpu(gpu)
    if entry_point == "view":
        out = interop_core.view(x)
        assert out.ptr      # the hold is taken at the first use of the memory
    elif entry_point == "to jax":
        out = interop_core.to(x, "jax")
    else:
        out = interop_core.launch_args([x])
    assert not x.is_ready(), "taking the hold waited for jax's computation on the host"
    assert out is not None
    x.block_until_ready()


@pytest.mark.gpu
def test_a_gpu_array_held_by_a_view_is_not_donated():
    gpu = _jax_gpu()
    import gc

    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32), gpu)
    v = interop_core.view(x)
    assert v.ptr            # the memory is used: from here on the view holds the buffer
    donate = jax.jit(lambda a: a * 2, donate_argnums=0)
    try:
        donate(x).block_until_ready()
    except Exception as exc:  # noqa: BLE001 - jax refuses with an error or declines with a warning
        assert "external reference" in str(exc)
    assert not x.is_deleted()
    host = np.empty(8, np.float32)
    v.copy_to(host)
    np.testing.assert_array_equal(host, np.arange(8.0))
    del v
    gc.collect()
    donate(x).block_until_ready()
    assert x.is_deleted()


def _assert_view_keeps_its_values_after_delete(x, v, place):
    """Delete `x` (np.arange(4096) as float32), let jax put decoys in freed memory on `place`,
    and check that `v` still reads `x`'s values."""
    x.delete()
    junk = [jax.device_put(np.full(4096, 777, np.float32), place) for _ in range(20)]
    host = np.empty(4096, np.float32)
    v.copy_to(host)
    np.testing.assert_array_equal(host, np.arange(4096, dtype=np.float32))
    del junk


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["device", "pinned_host"])
def test_a_view_of_a_gpu_array_in_any_memory_kind_holds_its_buffer(kind):
    gpu = _jax_gpu()
    sharding = jax.sharding.SingleDeviceSharding(gpu, memory_kind=kind)
    try:
        x = jax.device_put(np.arange(4096, dtype=np.float32), sharding)
    except Exception as exc:  # noqa: BLE001 - a jax without that memory kind here
        pytest.skip(f"jax cannot place an array in {kind} memory here: {exc}")
    x.block_until_ready()
    v = interop_core.view(x)
    assert (v.device_type, v.ptr) == ((2 if kind == "device" else 3), x.unsafe_buffer_pointer())
    _assert_view_keeps_its_values_after_delete(x, v, sharding)


@pytest.mark.gpu
@pytest.mark.host_timing
@pytest.mark.parametrize("held_before", [False, True])
def test_from_dlpack_of_a_gpu_array_waits_until_it_is_computed_as_jaxs_export_does(held_before):
    # jax's __dlpack__() without a stream makes the host wait; from_dlpack takes the reader
    # (declared equivalent to DLPack) and must do the same, also when a view's first use
    # already holds the buffer (a hold taken on jax's stream, without a wait).
    gpu = _jax_gpu()
    x = _pending_on_the_gpu(gpu)
    if held_before:
        early = interop_core.view(x)
        assert early.ptr
        assert not x.is_ready()
    v = interop_core.StridedMemoryView.from_dlpack(x)
    assert x.is_ready(), "from_dlpack handed over memory jax was still computing"
    assert (v.ptr, v.device_type, v.readonly) == (x.unsafe_buffer_pointer(), 2, True)
    assert v._recorded_producer_stream is None     # as jax's export without a stream names none


@pytest.mark.parametrize("constructor", ["from_dlpack", "from_any"])
def test_from_dlpack_holds_the_buffer_at_once_as_jaxs_export_does(constructor):
    # Unlike view(x), whose hold waits for the first use of the memory, a DLPack capsule holds
    # the buffer as it is made: delete() before any use leaves the memory to the view.
    x = jax.device_put(np.arange(4096, dtype=np.float32))
    v = getattr(interop_core.StridedMemoryView, constructor)(x)
    x.delete()
    junk = [jax.device_put(np.full(4096, 777, np.float32)) for _ in range(20)]
    np.testing.assert_array_equal(np.from_dlpack(v)[:4], [0, 1, 2, 3])
    assert v.owner is x
    del junk


@pytest.mark.gpu
@pytest.mark.host_timing
def test_from_cuda_array_interface_of_a_gpu_array_does_not_wait_as_jaxs_interface_does_not():
    # jax's __cuda_array_interface__ (version 2, no stream) hands out the address of an array
    # still being computed; from_cuda_array_interface takes the reader for it and must not
    # make the host wait either (a consumer stream orders itself through producer_stream).
    gpu = _jax_gpu()
    x = _pending_on_the_gpu(gpu)
    v = interop_core.StridedMemoryView.from_cuda_array_interface(x)
    assert not x.is_ready(), "from_cuda_array_interface waited where jax's interface does not"
    assert (v.ptr, v.device_type, v.readonly) == (x.unsafe_buffer_pointer(), 2, True)
    assert v._recorded_producer_stream is None      # the interface names no stream
    x.block_until_ready()


@pytest.mark.gpu
def test_from_cuda_array_interface_never_hands_over_memory_freed_before_its_first_use():
    # jax's interface holds nothing past the call: an array deleted after it leaves the address
    # of freed memory.  The reader's view holds the buffer from the first use of the memory, as
    # view() does, so a deletion before that use is reported instead.
    gpu = _jax_gpu()
    x = jax.device_put(jnp.arange(4096, dtype=jnp.float32), gpu)
    v = interop_core.StridedMemoryView.from_cuda_array_interface(x)
    assert v.owner is x
    x.delete()
    with pytest.raises(BufferError, match="deleted or donated .* before its memory was first used"):
        _ = v.ptr
    y = jax.device_put(jnp.arange(4096, dtype=jnp.float32), gpu)
    w = interop_core.StridedMemoryView.from_cuda_array_interface(y)
    assert w.ptr == y.unsafe_buffer_pointer()       # used: held from here on
    _assert_view_keeps_its_values_after_delete(y, w, gpu)


def test_from_dlpack_of_host_memory_waits_for_jaxs_cpu_work():
    x, expected = _pending_on_the_cpu()
    v = interop_core.StridedMemoryView.from_dlpack(x)
    assert x.is_ready(), "from_dlpack handed over host memory jax was still computing"
    np.testing.assert_array_equal(np.from_dlpack(v), expected)


# --- holds taken at the memory's first use ----------------------------------------------------


def test_a_view_holds_nothing_until_its_memory_is_used():
    x = jnp.arange(8, dtype=jnp.float32)
    v = interop_core.view(x)
    assert (v.shape, v.dtype, v.readonly) == ((8,), np.float32, True)
    jax.jit(lambda a: a * 2, donate_argnums=0)(x)       # nothing holds the buffer: donated
    assert x.is_deleted()
    with pytest.raises(BufferError, match="deleted or donated .* before its memory was first used"):
        _ = v.ptr
    with pytest.raises(BufferError, match="first used"):
        interop_core.to(v, "numpy")


def test_a_view_used_once_keeps_the_buffer_through_delete():
    x = jax.device_put(np.arange(4096, dtype=np.float32))
    v = interop_core.view(x)
    column = v[1:]
    assert column.ptr == x.unsafe_buffer_pointer() + 4  # a slice's first use holds for both
    x.delete()
    junk = [jax.device_put(np.full(4096, 777, np.float32)) for _ in range(20)]
    np.testing.assert_array_equal(np.from_dlpack(v)[:4], [0, 1, 2, 3])
    del junk


def test_a_view_whose_array_was_replaced_before_first_use_refuses():
    x = jnp.arange(4.0)
    v = interop_core.view(x)
    x._replace_with(jnp.arange(4.0) + 10)    # what jax's mutable arrays do underneath
    with pytest.raises(BufferError, match="replaced"):
        _ = v.ptr
    np.testing.assert_array_equal(interop_core.to(interop_core.view(x), "numpy"), [10, 11, 12, 13])


@pytest.mark.parametrize("use", ["ptr", "__dlpack__", "__array_interface__", "buffer protocol",
                                 "copy_to", "copy_from source", "to numpy", "to torch",
                                 "launch_args", "sync", "a slice's ptr"])
def test_every_use_of_a_view_of_a_deleted_array_refuses_and_writes_nothing(use):
    x = jax.device_put(np.arange(6, dtype=np.float32))
    v = interop_core.view(x)
    destination = np.full(6, -1.0, np.float32)
    uses = {
        "ptr": lambda: v.ptr,
        "__dlpack__": lambda: v.__dlpack__(),
        "__array_interface__": lambda: v.__array_interface__,
        "buffer protocol": lambda: memoryview(v),
        "copy_to": lambda: v.copy_to(destination),
        "copy_from source": lambda: interop_core.view(destination).copy_from(v),
        "to numpy": lambda: interop_core.to(v, "numpy"),
        "to torch": lambda: interop_core.to(v, "torch"),
        "launch_args": lambda: interop_core.launch_args([v]),
        "sync": lambda: v.sync(0),
        "a slice's ptr": lambda: v[2:].ptr,
    }
    if use == "to torch":
        pytest.importorskip("torch")
    x.delete()
    with pytest.raises(BufferError, match="deleted or donated"):
        uses[use]()
    np.testing.assert_array_equal(destination, -1.0)
