"""The example third-party plugin (examples/third_party_plugin) passes the conformance kit.

The example package must be installed (``pip install -e examples/third_party_plugin``): these
tests check discovery through its real installed entry point, so they skip when it is not.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import interop_core
from interop_core.testing import REQUIRED_SAMPLES, Expected, PluginConformance

bytetensor = pytest.importorskip(
    "bytetensor", reason="pip install -e examples/third_party_plugin to run the example's tests")

_DLPACK_DTYPES = {"float32": (2, 32, 1), "int16": (0, 16, 1), "uint8": (1, 8, 1),
                  "float64": (2, 64, 1), "bool": (6, 8, 1)}
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "third_party_plugin"


class TestByteTensorPlugin(PluginConformance):
    plugin_name = "bytetensor"
    framework_modules = ("bytetensor",)
    exporter_target = "bytetensor"

    def make_samples(self):
        ByteTensor = bytetensor.ByteTensor
        grid = ByteTensor.arange(24, "float32").reshape(4, 6)
        return {
            "contiguous": grid,
            "sliced": grid[1:, ::2],
            "transposed": grid.T,
            "zero_size": ByteTensor.zeros((0, 3), "int16"),
            "zero_d": grid[2, 3],
            "reversed": ByteTensor.arange(10, "float64")[::-3],
            "readonly": ByteTensor(bytes(range(12)), (3, 4), "uint8"),
            "offset_view_of_bytearray": ByteTensor(bytearray(40), (4,), "float64", offset=8),
        }

    def expected(self, obj):
        return Expected(ptr=obj.data_ptr, shape=obj.shape,
                        strides=tuple(s // obj.itemsize for s in obj.strides),
                        dtype=_DLPACK_DTYPES[obj.dtype], device=(1, 0), readonly=obj.readonly)


# --- the example's compiled reader (C, on the public ABI) ---------------------------------------

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("make, strides", [
    (lambda a: bytetensor.CTensor(a, (4, 6), "float32"), (6, 1)),
    (lambda a: bytetensor.CTensor(a, (6, 4), "float32", strides=(4, 24)), (1, 6)),
    (lambda a: bytetensor.CTensor(a, (3,), "float32", strides=(-8,), offset=88), (-2,)),
    (lambda a: bytetensor.CTensor(a, (0, 2), "float32"), (2, 1)),
])
def test_the_third_party_c_reader_describes_ctensor_exactly(make, strides):
    a = np.arange(24, dtype=np.float32)
    t = make(a)
    v = interop_core.view(t)
    assert (v.ptr, v.shape, v.strides) == (t.address, t.shape, strides)
    assert (v.dlpack_dtype, v.device_type, v.readonly, v.owner) == ((2, 32, 1), 1, False, t)
    offset = (t.address - a.ctypes.data) // 4
    expected = np.lib.stride_tricks.as_strided(a[offset:], t.shape,
                                               tuple(s * 4 for s in strides))
    np.testing.assert_array_equal(np.asarray(v), expected)


def test_the_third_party_c_reader_is_registered_through_the_public_capsule():
    entry = interop_core.plugins.reader_for(bytetensor.CTensor)
    assert entry.plugin == "bytetensor" and entry.kind == 3
    assert "interop_core.reader_v2" in repr(entry.reader)


def test_a_view_through_the_c_reader_keeps_the_ctensor_and_its_buffer_alive():
    a = np.arange(8, dtype=np.float64)
    t = bytetensor.CTensor(memoryview(a), (8,), "float64")
    buffer_ref = weakref.ref(a)      # CTensor holds `a` through its Py_buffer
    v = interop_core.view(t)
    del a, t
    gc.collect()
    assert buffer_ref() is not None
    assert np.asarray(v)[3] == 3.0
    del v
    gc.collect()
    assert buffer_ref() is None


def test_read_only_buffers_give_read_only_views_through_the_c_reader():
    v = interop_core.view(bytetensor.CTensor(bytes(16), (4,), "int32"))
    assert v.readonly and v.dlpack_dtype == (0, 32, 1)


# --- discovery through the installed distribution ---------------------------------------------

def test_example_plugin_is_discovered_through_its_installed_entry_point():
    interop_core.plugins.discover()
    info = {i.name: i for i in interop_core.plugin_status()}
    assert "bytetensor" in info, sorted(info)
    entry = info["bytetensor"]
    assert (entry.distribution, entry.version) == ("interop-bytetensor", "0.1.0")
    assert entry.status == "loaded", entry.reason
    assert "bytetensor:ByteTensor" in entry.claims
    assert "bytetensor" in entry.exporters


def test_view_of_bytetensor_shares_memory_with_it():
    t = bytetensor.ByteTensor.arange(6, "float32").reshape(2, 3)
    v = interop_core.view(t)
    memoryview(v)[1, 2] = 50.0
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 50.0]]
    assert v.owner is t


def test_exporting_device_memory_to_bytetensor_is_a_clear_error():
    host = interop_core.view(bytetensor.ByteTensor.zeros((4,), "float32"))
    # Device memory needs no GPU to be described: a view that claims CUDA device 0.
    on_device = interop_core.StridedMemoryView.from_pointer(
        host.ptr, (4,), dtype="float32", device=(2, 0), owner=host)
    with pytest.raises(BufferError, match="host memory only"):
        interop_core.to(on_device, "bytetensor")


def test_exported_bytetensor_keeps_the_source_alive():
    source = bytetensor.ByteTensor.arange(8, "float32")
    ref = weakref.ref(source)
    out = interop_core.to(interop_core.view(source)[::2], "bytetensor")
    del source
    gc.collect()
    assert ref() is not None
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
    del out
    gc.collect()
    assert ref() is None


def test_loading_the_example_plugin_does_not_import_bytetensor():
    code = ("import sys, interop_core, interop_core.plugins; interop_core.plugins.discover(); "
            "print('bytetensor' in sys.modules, "
            "[i.status for i in interop_core.plugin_status() if i.name == 'bytetensor'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "['loaded']"], out


# --- a broken kit configuration fails clearly ------------------------------------------------

class _Broken(PluginConformance):
    plugin_name = "bytetensor"
    framework_modules = ("bytetensor",)

    def make_samples(self):
        return {"contiguous": bytetensor.ByteTensor.zeros((2,), "float32")}

    def expected(self, obj):
        return Expected(obj.data_ptr, obj.shape, (1,), (2, 32, 1))


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({}, "lacks the required sample(s) 'sliced', 'transposed', 'zero_size', 'zero_d'"),
        ({"plugin_name": None}, "must set plugin_name"),
        ({"framework_modules": "bytetensor"}, "missing a trailing comma"),
        ({"exporter_target": 3}, "exporter_target must be an exporter name"),
        ({"expected": lambda self, obj: (obj.data_ptr, obj.shape)}, "must return "
         "interop_core.testing.Expected, got tuple"),
    ],
    ids=["missing_samples", "no_plugin_name", "framework_modules_str", "bad_target",
         "expected_not_dataclass"],
)
def test_broken_kit_configuration_fails_naming_the_problem(attributes, message):
    broken = type("TestBroken", (_Broken,), attributes)
    if "expected" in attributes:  # samples complete, so the failure is the wrong return type
        broken.make_samples = lambda self: {k: bytetensor.ByteTensor.zeros((1,), "float32")
                                            for k in REQUIRED_SAMPLES}
    with pytest.raises(pytest.fail.Exception) as failure:
        broken().test_samples_cover_required_layouts()
    assert message in str(failure.value)


def test_kit_reports_a_missing_sample_as_a_failed_test_in_a_real_pytest_run(tmp_path):
    (tmp_path / "test_broken_kit.py").write_text(textwrap.dedent("""
        from interop_core.testing import Expected, PluginConformance

        class TestIncomplete(PluginConformance):
            plugin_name = "bytetensor"
            framework_modules = ("bytetensor",)

            def make_samples(self):
                import bytetensor
                return {"contiguous": bytetensor.ByteTensor.zeros((2,), "float32")}

            def expected(self, obj):
                return Expected(obj.data_ptr, obj.shape, (1,), (2, 32, 1))
    """))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
         "-k", "samples_cover or matches_framework", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "lacks the required sample(s) 'sliced', 'transposed', 'zero_size', 'zero_d'" in run.stdout
    # Parametrised over the required names even though make_samples() omits them.
    for name in REQUIRED_SAMPLES:
        assert f"test_view_matches_framework_metadata[{name}]" in run.stdout, run.stdout



def test_pytest_plugin_is_inert_until_a_test_module_uses_the_kit(tmp_path):
    (tmp_path / "test_plain.py").write_text(textwrap.dedent("""
        import sys

        def test_nothing_of_the_kit_or_any_framework_is_imported():
            heavy = ["interop_core.testing._kit", "bytetensor", "numpy", "torch", "jax"]
            assert [m for m in heavy if m in sys.modules] == []
    """))
    # Installed (CI: pip install -e .), pytest loads the plugin through its pytest11 entry point;
    # from a source checkout it is named with -p (naming it twice would register it twice).
    installed = any(ep.name == "interop_core" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "interop_core.testing.pytest_plugin"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *plugin, str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert "conformance kit" not in run.stdout
