"""Every export checks its target's import limits: the right result, or a clear error.

``to(x, target, copy=...)`` against what each target framework can import (its
``ImportLimits``): negative, zero and overlapping strides, non-compact layouts, unaligned host
memory, every element size, ``copy=None / True / False``; ``device=`` with the array API's
``from_dlpack`` meaning; tensors that require grad; the view's own ``__dlpack__(copy=,
dl_device=)``; and the registration API plugins declare limits and rules with.

Anything that could abort the interpreter (torch's DLPack import throws through a noexcept
boundary on negative strides) runs in a subprocess, one per target, which reports each case as
a JSON line: an abort fails the test naming the case it was running.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import interop_core
from interop_core import ImportLimits, StridedMemoryView, view

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"),
                                         env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _installed(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def run_isolated(code, *args, **env):
    """Run ``code`` (with ``args``) in a fresh interpreter; its stdout.  An abort fails, with
    the interpreter's stderr (the worker below names the case it was running there)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=_env(**env), timeout=600)
    assert proc.returncode == 0, (f"exit status {proc.returncode}\n"
                                  f"{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


# --- the matrix: layouts x element sizes x copy=, per target, in a subprocess -------------------

LAYOUTS = ("contiguous", "transposed", "reversed_rows", "reversed_cols", "strided", "broadcast",
           "overlapping", "unaligned", "empty", "zero_d")
DTYPES = ("int8", "float16", "float32", "int64", "complex128")
COPIES = (None, True, False)

# Element offset of each layout's element 0 from a 64-byte aligned base (see the worker).
FIRST_ELEMENT = {"reversed_rows": 18, "reversed_cols": 5, "unaligned": 1, "zero_d": 8}
ITEMSIZE = {"int8": 1, "float16": 2, "float32": 4, "int64": 8, "complex128": 16}


def _needs_copy(target, layout, dtype):
    """Whether ``target`` cannot import the layout as it is (what its ImportLimits declare)."""
    if layout == "empty":
        return False                    # nothing is read: every target takes it
    if target in ("torch", "numba"):
        return layout in ("reversed_rows", "reversed_cols")
    if target == "jax":
        unaligned = FIRST_ELEMENT.get(layout, 0) * ITEMSIZE[dtype] % 64 != 0
        return unaligned or layout in ("reversed_rows", "reversed_cols", "strided",
                                       "broadcast", "overlapping")
    return False

MATRIX_WORKER = r"""
import json, sys, warnings
import numpy as np
from numpy.lib.stride_tricks import as_strided
import interop_core
from interop_core import view

from interop_core.plugins import ReadOnlyHandoffWarning

warnings.simplefilter("error")          # no warning may be issued by these handoffs, but ...
warnings.simplefilter("ignore", ReadOnlyHandoffWarning)   # ... read-only sources to torch
target, sources = sys.argv[1], sys.argv[2].split(",")
LAYOUTS = __LAYOUTS__
DTYPES = __DTYPES__


def aligned(n, dtype):
    raw = np.zeros(n * np.dtype(dtype).itemsize + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    out = raw[offset:offset + n * np.dtype(dtype).itemsize].view(dtype)
    out[...] = (np.arange(n) % 100).astype(dtype)
    return out


def make(layout, dtype):
    flat = aligned(64, dtype)
    base = flat[:24].reshape(4, 6)
    return {
        "contiguous": lambda: base,
        "transposed": lambda: base.T,
        "reversed_rows": lambda: base[::-1],
        "reversed_cols": lambda: base[:, ::-1],
        "strided": lambda: base[:, ::2],
        "broadcast": lambda: np.broadcast_to(base[0], (3, 6)),
        "overlapping": lambda: as_strided(flat, (3, 4), (2 * flat.itemsize, flat.itemsize),
                                          writeable=False),
        "unaligned": lambda: flat[1:13],
        "empty": lambda: base[:0],
        "zero_d": lambda: base[1:2, 2:3].reshape(()),
    }[layout]()


def host_values(result):
    if target == "torch":
        return result.numpy()
    if target == "numba":
        return result.copy_to_host()
    return np.asarray(result)


def pointer(obj):
    return view(obj).ptr


for source_kind in sources:
    for layout in LAYOUTS:
        for dtype in DTYPES:
            for copy in (None, True, False):
                case = f"{source_kind}/{layout}/{dtype}/copy={copy}"
                print("running", case, file=sys.stderr, flush=True)
                array = make(layout, dtype)
                source = array if source_kind == "numpy" else view(array)
                try:
                    result = interop_core.to(source, target, copy=copy)
                except Exception as exc:
                    print(json.dumps({"case": case, "error": type(exc).__name__,
                                      "message": str(exc)}), flush=True)
                    continue
                values = host_values(result)
                record = {"case": case, "equal": bool(np.array_equal(values, array)
                                                      and values.shape == array.shape
                                                      and values.dtype == array.dtype)}
                if array.size:
                    record["shares"] = pointer(result) == array.__array_interface__["data"][0]
                    record["aligned"] = pointer(result) % 64 == 0
                print(json.dumps(record), flush=True)
""".replace("__LAYOUTS__", repr(LAYOUTS)).replace("__DTYPES__", repr(DTYPES))

_matrix_cache: dict = {}


def _matrix(target):
    """{case: record} of every layout x dtype x copy for ``target``, run once per session."""
    if target not in _matrix_cache:
        env = {"NUMBA_ENABLE_CUDASIM": "1"} if target == "numba" else {}
        out = run_isolated(MATRIX_WORKER, target, "numpy,view", **env)
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        _matrix_cache[target] = {r["case"]: r for r in records}
    return _matrix_cache[target]


def _target_or_skip(target):
    module = {"numba": "numba", "torch": "torch", "jax": "jax", "numpy": "numpy"}[target]
    if not _installed(module):
        pytest.skip(f"{module} is not installed")


@pytest.mark.parametrize("copy", COPIES, ids=lambda c: f"copy={c}")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("target", ["numpy", "torch", "jax", "numba"])
def test_every_layout_and_element_size_gives_numpy_equal_results_or_a_clear_error(
        target, layout, copy):
    _target_or_skip(target)
    results = _matrix(target)
    for source_kind in ("numpy", "view"):
        for dtype in DTYPES:
            case = f"{source_kind}/{layout}/{dtype}/copy={copy}"
            assert case in results, f"{case} did not run (the worker stopped before it)"
            record = results[case]
            x64_refused = target == "jax" and dtype in ("int64", "complex128")
            needs_copy = _needs_copy(target, layout, dtype)
            if x64_refused:
                # jax without jax_enable_x64 would narrow the type: refused whatever copy says.
                assert record.get("error") == "BufferError", (case, record)
                assert "jax_enable_x64" in record["message"], (case, record)
                continue
            if needs_copy and copy is False:
                assert record.get("error") == "BufferError", (case, record)
                message = record["message"]
                assert "copy=False" in message and "copy=None" in message, (case, message)
                assert f"'{target}'" in message, (case, message)
                continue
            assert "error" not in record, (case, record)
            assert record["equal"], (case, record)
            if "shares" in record:
                assert record["shares"] == (not needs_copy and copy is not True), (case, record)
                if not record["shares"]:
                    assert record["aligned"], (case, record)   # copies start on 64 bytes


# --- the reproducers of the abort ---------------------------------------------------------------

@pytest.mark.parametrize("make", ["np.arange(6.0).reshape(3, 2)[::-1]",
                                  "interop_core.view(torch.arange(6.0))[::-1]",
                                  "interop_core.view(torch.arange(6.0).reshape(3, 2))[:, ::-1]"])
def test_negative_strides_reach_torch_as_a_copy_never_an_abort(make):
    pytest.importorskip("torch")
    out = run_isolated(f"""
        import numpy as np, torch, interop_core
        source = {make}
        t = interop_core.to(source, "torch")
        expected = np.asarray(source) if not isinstance(source, torch.Tensor) else source.numpy()
        print(np.array_equal(t.numpy(), expected), t.data_ptr() != interop_core.view(source).ptr)
        try:
            interop_core.to(source, "torch", copy=False)
            print("no error")
        except BufferError as exc:
            print("BufferError", exc)
    """)
    first, second = out.splitlines()[:2]
    assert first == "True True"
    assert second.startswith("BufferError") and "negative strides" in second
    assert "copy=None" in second


def test_a_layout_beyond_int64_bytes_is_refused_before_torch_sees_it():
    pytest.importorskip("torch")
    out = run_isolated("""
        import numpy as np, interop_core
        from interop_core import StridedMemoryView
        keep = np.zeros(8)
        for shape, strides in [((2**62,), (1,)), ((4,), (2**61,)), ((2**40, 2**20), (1, 2**40))]:
            try:
                v = StridedMemoryView.from_pointer(keep.ctypes.data, shape, strides,
                                                   dtype="float64", owner=keep)
            except ValueError as exc:
                print("int64" in str(exc))      # no such view is ever made
                continue
            for copy in (None, True, False):
                try:
                    interop_core.to(v, "torch", copy=copy)
                    print("no error")
                except BufferError as exc:
                    print("2**63 bytes" in str(exc))
    """)
    assert out.split() == ["True"] * 3


def test_torch_exporter_called_on_its_own_refuses_negative_strides():
    pytest.importorskip("torch")
    out = run_isolated("""
        import numpy as np, interop_core
        exporter = interop_core.plugins.exporter_for("torch")[0]
        try:
            exporter(interop_core.view(np.arange(4.0)[::-1]), None)
            print("no error")
        except BufferError as exc:
            print("negative strides" in str(exc))
    """)
    assert out.split() == ["True"]


@pytest.mark.parametrize(("dtype", "message"), [
    ((0, 4, 1), "Unsupported kInt bits 4"), ((2, 32, 2), "lanes"), ((7, 8, 1), "code 7")])
def test_element_types_torch_lacks_are_buffer_errors(dtype, message):
    pytest.importorskip("torch")
    out = run_isolated(f"""
        import numpy as np, interop_core
        from interop_core import StridedMemoryView
        keep = np.zeros(64, np.uint8)
        v = StridedMemoryView.from_pointer(keep.ctypes.data, (4,), dtype={dtype!r}, owner=keep)
        try:
            interop_core.to(v, "torch")
            print("no error")
        except BufferError as exc:
            print(str(exc).replace("\\n", " "))
    """)
    assert "torch cannot import this view" in out and message in out
    assert "Exception raised from" not in out        # torch's C++ trace is not handed on


def test_a_handoff_torch_refuses_frees_what_it_made():
    # torch's import fails without running the DLPack tensor's deleter: to() runs it, so the
    # tensor, the view it held and the source's references are all let go (copy=True: the copy
    # too).
    pytest.importorskip("torch")
    out = run_isolated("""
        import gc, sys
        import numpy as np, interop_core
        from interop_core import StridedMemoryView
        keep = np.zeros(64, np.uint8)
        v = StridedMemoryView.from_pointer(keep.ctypes.data, (4,), dtype=(0, 4, 1), owner=keep)

        def fail(n):
            for _ in range(n):
                for copy in (None, True):
                    try:
                        interop_core.to(v, "torch", copy=copy)
                    except BufferError:
                        pass
            gc.collect()

        fail(5)
        before = (sys.getrefcount(keep), sys.getrefcount(v),
                  sum(type(o) is StridedMemoryView for o in gc.get_objects()))
        fail(50)
        after = (sys.getrefcount(keep), sys.getrefcount(v),
                 sum(type(o) is StridedMemoryView for o in gc.get_objects()))
        print(before == after, before, after)
    """)
    assert out.split()[0] == "True", out


def test_pinned_host_memory_becomes_a_cpu_tensor_over_the_same_memory():
    torch = pytest.importorskip("torch")
    keep = np.arange(8.0)
    pinned = StridedMemoryView.from_pointer(keep.ctypes.data, (8,), dtype="float64", owner=keep,
                                            device=(3, 0))
    t = interop_core.to(pinned, "torch")
    assert t.device == torch.device("cpu") and t.data_ptr() == keep.ctypes.data
    assert t.tolist() == keep.tolist()


# --- jax: alignment, x64, copy=, device= --------------------------------------------------------

@pytest.fixture
def jax_x64_off():
    jax = pytest.importorskip("jax")
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    yield jax
    jax.config.update("jax_enable_x64", before)


def _aligned(n, dtype, offset=0):
    raw = np.zeros(n * np.dtype(dtype).itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start:start + n * np.dtype(dtype).itemsize].view(dtype)
    out[...] = np.arange(n).astype(dtype)
    return out


def test_jax_with_copy_false_refuses_unaligned_host_memory_instead_of_copying(jax_x64_off):
    a = _aligned(16, np.float32, offset=4)
    with pytest.raises(BufferError) as info:
        interop_core.to(a, "jax", copy=False)
    message = str(info.value)
    assert "aligned to 64 bytes" in message and hex(a.ctypes.data) in message
    assert "copy=None" in message


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
def test_jax_gets_an_aligned_copy_of_unaligned_empty_memory_too(jax_x64_off, shape):
    # jax refuses unaligned host memory even when it holds no element.
    a = _aligned(16, np.float32, offset=4)[:0].reshape(shape)
    out = interop_core.to(a, "jax")
    assert out.shape == shape and out.unsafe_buffer_pointer() % 64 == 0
    with pytest.raises(BufferError, match="aligned to 64 bytes"):
        interop_core.to(a, "jax", copy=False)


@pytest.mark.parametrize("copy", [None, True])
def test_jax_gets_an_aligned_copy_without_a_warning(jax_x64_off, copy):
    a = _aligned(16, np.float32, offset=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = interop_core.to(a, "jax", copy=copy)
    assert out.unsafe_buffer_pointer() != a.ctypes.data
    assert out.unsafe_buffer_pointer() % 64 == 0
    np.testing.assert_array_equal(np.asarray(out), a)


def test_jax_copy_true_of_aligned_memory_is_independent_and_silent(jax_x64_off):
    a = _aligned(16, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shared = interop_core.to(a, "jax")
        copied = interop_core.to(a, "jax", copy=True)
    assert shared.unsafe_buffer_pointer() == a.ctypes.data
    assert copied.unsafe_buffer_pointer() != a.ctypes.data
    a[0] = 99
    assert float(copied[0]) == 0.0 and float(shared[0]) == 99.0


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("dtype", ["float64", "int64", "uint64", "complex128"])
def test_jax_without_x64_refuses_64_bit_types_rather_than_narrowing_them(jax_x64_off, dtype,
                                                                         copy):
    a = _aligned(4, dtype)
    with pytest.raises(BufferError, match=r"jax_enable_x64.*jax\.config\.update"):
        interop_core.to(a, "jax", copy=copy)


def test_jax_with_x64_takes_64_bit_types_without_a_copy(jax_x64_off):
    jax = jax_x64_off
    jax.config.update("jax_enable_x64", True)
    a = _aligned(4, np.float64)
    out = interop_core.to(a, "jax", copy=False)
    assert out.dtype == np.float64 and out.unsafe_buffer_pointer() == a.ctypes.data


def test_jax_exporter_called_on_its_own_never_copies(jax_x64_off):
    import interop_jax

    with pytest.raises(BufferError, match="aligned to 64 bytes"):
        interop_jax.export_jax(view(_aligned(16, np.float32, offset=4)))
    with pytest.raises(BufferError, match="jax_enable_x64"):
        interop_jax.export_jax(view(_aligned(4, np.float64)))


@pytest.mark.parametrize("spelling", ["device object", "cpu:3", "dlpack pair", "sharding"])
def test_jax_device_places_the_result_on_that_host_device_without_a_copy(jax_x64_off, spelling):
    jax = jax_x64_off
    devices = jax.devices("cpu")
    if len(devices) < 4:
        pytest.skip("needs four jax CPU devices (XLA_FLAGS set before jax started)")
    device = {"device object": devices[3], "cpu:3": "cpu:3", "dlpack pair": (1, 3),
              "sharding": jax.sharding.SingleDeviceSharding(devices[3])}[spelling]
    a = _aligned(8, np.float32)
    out = interop_core.to(a, "jax", device=device, copy=False)
    assert out.devices() == {devices[3]}
    assert out.unsafe_buffer_pointer() == a.ctypes.data
    np.testing.assert_array_equal(np.asarray(out), a)
    # A copy lands there too.
    copied = interop_core.to(a[::-1], "jax", device=device)
    assert copied.devices() == {devices[3]}
    np.testing.assert_array_equal(np.asarray(copied), a[::-1])


def test_a_jax_array_on_another_host_device_handed_to_jax_stays_on_it(jax_x64_off):
    jax = jax_x64_off
    devices = jax.devices("cpu")
    if len(devices) < 4:
        pytest.skip("needs four jax CPU devices (XLA_FLAGS set before jax started)")
    x = jax.device_put(np.arange(8, dtype=np.float32), devices[3])
    for source in (x, view(x)):
        out = interop_core.to(source, "jax")
        assert out.devices() == {devices[3]}
        assert out.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
        np.testing.assert_array_equal(np.asarray(x + out), 2 * np.arange(8))
        # A copy lands beside its source too.
        copied = interop_core.to(source, "jax", copy=True)
        assert copied.devices() == {devices[3]}
        assert copied.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
        np.testing.assert_array_equal(np.asarray(x + copied), 2 * np.arange(8))


def test_import_limits_source_device_places_copies_made_without_device(registered):
    # A target with several devices of one DLPack device names where a copy of a view goes.
    calls = []

    def export(v, stream, device=None):
        calls.append(device)
        return v

    def source_device(v):
        return ("beside", v.ptr)      # asked with the source, before the copy

    a = np.arange(6.0)
    limits = ImportLimits(layout="c_contiguous", source_device=source_device)
    registered(lambda r: r.add_exporter("placed-copy", export, limits=limits), "placed-copy")
    interop_core.to(a, "placed-copy")                       # no copy: the exporter decides
    interop_core.to(a[::2], "placed-copy")                  # a copy: placed beside the source
    interop_core.to(a, "placed-copy", copy=True)
    assert calls == [None, ("beside", a.ctypes.data), ("beside", a.ctypes.data)]
    with pytest.raises(TypeError, match="source_device must be callable"):
        ImportLimits(source_device=5)


@pytest.mark.parametrize(("device", "message"), [
    ("cpu:99", "CPU device"), ((1, 99), "CPU device"), ("cuda:0", "no gpu backend"),
    ("tpu:0", "unknown device"), ((4, 0), "DLPack device types")])
def test_jax_device_it_does_not_have_is_a_value_error(jax_x64_off, device, message):
    if device == "cuda:0" and any(d.platform != "cpu" for d in jax_x64_off.devices()):
        pytest.skip("jax has a GPU here")
    with pytest.raises(ValueError, match=message):
        interop_core.to(_aligned(8, np.float32), "jax", device=device)


# --- device= elsewhere: one host device ---------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu:3", (1, 3), "cuda_host:1"])
@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_host_device_other_than_0_is_a_value_error_for_single_host_targets(target, device):
    _target_or_skip(target)
    with pytest.raises(ValueError) as info:
        interop_core.to(np.arange(4.0), target, device=device)
    message = str(info.value)
    assert f"to(ndarray, '{target}', device={device!r})" in message
    assert "host memory is one device" in message


@pytest.mark.parametrize("device", ["cpu", "cpu:0", (1, 0)])
def test_the_host_device_itself_needs_no_copy(device):
    a = np.arange(4.0)
    out = interop_core.to(a, "numpy", device=device, copy=False)
    assert out.ctypes.data == a.ctypes.data


@pytest.mark.parametrize("device", ["cpu:1", (1, 1)])
def test_empty_like_refuses_a_host_device_that_does_not_exist(device):
    with pytest.raises(ValueError, match="host memory is one device"):
        StridedMemoryView.empty_like(view(np.zeros(4)), device=device)


def test_copies_for_exports_start_on_64_bytes():
    for n in (1, 3, 17, 1000):
        v = StridedMemoryView.empty_like(view(np.zeros(n, np.int8)))
        assert v.ptr % 64 == 0


def test_device_memory_a_target_does_not_import_names_device_cpu():
    keep = np.zeros(4)
    on_gpu = StridedMemoryView.from_pointer(keep.ctypes.data, (4,), dtype="float64", owner=keep,
                                            device=(2, 0))
    with pytest.raises(BufferError, match=r"device types \(1, 3, 11, 13\).*device='cpu'"):
        interop_core.to(on_gpu, "numpy")
    with pytest.raises(BufferError, match="device='cpu'"):
        interop_core.to(on_gpu, "numpy", copy=True)


# --- autograd: to() follows torch's export rule -------------------------------------------------

@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _tensor_subclass(torch):
    class MyTensor(torch.Tensor):
        pass

    return MyTensor


def _requiring_grad(torch):
    leaf = torch.arange(6.0, requires_grad=True)
    return {"leaf": leaf, "slice": leaf[1:], "result": leaf * 2,
            "parameter": torch.nn.Parameter(torch.ones(3)),
            "made by torch.tensor": torch.tensor([1.0, 2.0], requires_grad=True),
            "subclass": torch.ones(3, requires_grad=True).as_subclass(_tensor_subclass(torch))}


@pytest.mark.parametrize("target", ["numpy", "torch", "jax"])
def test_tensors_that_require_grad_are_refused_naming_detach(torch, target):
    _target_or_skip(target)
    for name, t in _requiring_grad(torch).items():
        for copy in (None, True, False):
            with pytest.raises(BufferError, match=r"requires grad.*\.detach\(\)") as info:
                interop_core.to(t, target, copy=copy)
            assert type(t).__name__ in str(info.value), name


def test_tensors_that_do_not_require_grad_are_handed_over(torch):
    leaf = torch.arange(6.0, requires_grad=True)
    off = torch.arange(3.0, requires_grad=True)
    off.requires_grad_(False)                 # autograd metadata, no longer requiring grad
    for t in [leaf.detach(), leaf.detach()[::2], torch.tensor([1.0, 2.0]), off,
              torch.nn.Parameter(torch.ones(2), requires_grad=False), torch.ones(2, 2).t(),
              torch.ones(3).as_subclass(_tensor_subclass(torch))]:
        out = interop_core.to(t, "numpy")
        assert out.ctypes.data == t.data_ptr()
        np.testing.assert_array_equal(out, t.detach().numpy())


def test_view_and_launch_args_read_tensors_that_require_grad(torch):
    t = torch.arange(4.0, requires_grad=True)
    assert view(t).ptr == t.data_ptr()
    record = interop_core.launch_args([t])
    assert record.pointers[0] == t.data_ptr()
    # A view made so is the caller's: to() of it hands the memory on.
    assert interop_core.to(view(t), "numpy").ctypes.data == t.data_ptr()


def test_the_export_rule_reads_torchs_own_answer(torch):
    import interop_torch._reader as reader

    interop_core.to(torch.ones(2), "numpy")
    status = reader.export_rule_status()
    assert status["getter"] is True
    # Where TensorImpl's autograd metadata sits was found (0 would mean: asked every time).
    assert status["autograd_meta_offset"] > 0


# --- the view's own exports ---------------------------------------------------------------------

def test_dlpack_copy_true_hands_over_new_aligned_memory():
    a = np.arange(10, dtype=np.int8)[1:]
    b = np.from_dlpack(view(a), copy=True)
    assert b.ctypes.data != a.ctypes.data and b.ctypes.data % 64 == 0
    np.testing.assert_array_equal(b, a)


def test_dlpack_copy_false_never_copies():
    a = np.arange(6.0).reshape(2, 3)[:, ::-1]
    b = np.from_dlpack(view(a), copy=False)
    assert b.ctypes.data == a.ctypes.data and b.strides == a.strides


@pytest.mark.parametrize(("kwargs", "exc", "message"), [
    ({"dl_device": (1, 1)}, BufferError, "no CPU device 1"),
    ({"dl_device": "cpu"}, TypeError, "dl_device must be a"),
    ({"dl_device": (1.5, 0)}, TypeError, "dl_device must be a"),
    ({"copy": "yes"}, TypeError, "copy must be None, True or False"),
    ({"copy": False, "dl_device": (2, 0)}, BufferError, "copy=False"),
    ({"stream": 0x5000}, BufferError, "stream must be None or -1"),
    ({"stream": 0x5000, "copy": True}, BufferError, "stream must be None or -1"),
    ({"stream": 0, "copy": True}, BufferError, "stream must be None or -1"),
    ({"stream": 0x5000, "dl_device": (1, 0), "copy": True}, BufferError, "stream must be None or -1"),
])
def test_dlpack_arguments_it_cannot_honour_are_named(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        view(np.arange(3.0)).__dlpack__(**kwargs)


# --- declaring limits and rules (the plugin API) ------------------------------------------------

class _Recorder:
    """An exporter that records every view it is handed."""

    def __init__(self):
        self.seen = []

    def __call__(self, v, stream=None, **kwargs):
        self.seen.append((v.shape, v.strides, v.ptr % 64, kwargs))
        return v


@pytest.mark.parametrize(("limits", "layout", "needs_copy"), [
    (ImportLimits(negative_strides=False), "reversed", True),
    (ImportLimits(negative_strides=False), "broadcast", False),
    (ImportLimits(zero_strides=False), "broadcast", True),
    (ImportLimits(overlapping=False), "overlapping", True),
    (ImportLimits(overlapping=False), "transposed", False),
    (ImportLimits(layout="compact"), "transposed", False),
    (ImportLimits(layout="compact"), "strided", True),
    (ImportLimits(layout="c_contiguous"), "transposed", True),
    (ImportLimits(host_alignment=64), "unaligned", True),
    (ImportLimits(), "reversed", False),
])
def test_a_declared_limit_gives_the_exporter_only_views_it_takes(registered, limits, layout,
                                                                 needs_copy):
    from numpy.lib.stride_tricks import as_strided

    base = _aligned(24, np.float32)
    source = {"reversed": base[::-1], "broadcast": np.broadcast_to(base[:6], (4, 6)),
              "overlapping": as_strided(base, (3, 4), (8, 4)), "transposed":
              base.reshape(4, 6).T, "strided": base[::2], "unaligned": base[1:]}[layout]
    recorder = _Recorder()
    registered(lambda r: r.add_exporter("recorded", recorder, limits=limits,
                                        preserves_readonly=True), "limits-test")
    out = interop_core.to(source, "recorded")
    np.testing.assert_array_equal(np.asarray(out), source)
    assert (out.ptr != source.__array_interface__["data"][0]) == needs_copy
    assert limits.problem(out) is None
    if needs_copy:
        assert limits.problem(view(source)) is not None
        with pytest.raises(BufferError, match="copy=False"):
            interop_core.to(source, "recorded", copy=False)
        assert len(recorder.seen) == 1          # the refused call never reached the exporter


def test_a_compiled_exporter_gets_the_copy_too(registered):
    # numpy's compiled exporter, registered again under another name with a limit numpy does
    # not have: to() must leave the record path and hand it a copy.
    from interop_numpy import _export

    limits = ImportLimits(negative_strides=False)
    registered(lambda r: r.add_exporter("c-limited", _export.exporter_capsule(), limits=limits),
               "c-limits-test")
    a = np.arange(6.0)[::-1]
    out = interop_core.to(a, "c-limited")
    assert out.strides == (8,) and out.tolist() == a.tolist()
    with pytest.raises(BufferError, match="negative strides"):
        interop_core.to(a, "c-limited", copy=False)


def test_check_is_asked_only_about_its_dtypes_and_refuses_whatever_copy_says(registered):
    asked = []

    def check(v):
        asked.append(v.dlpack_dtype)
        return "half floats are not welcome here"

    limits = ImportLimits(check=check, check_dtypes=[(2, 16, 1)])
    registered(lambda r: r.add_exporter("checked", _Recorder(), limits=limits), "check-test")
    interop_core.to(np.zeros(3, np.float32), "checked")
    assert asked == []
    for copy in (None, True, False):
        with pytest.raises(BufferError, match="half floats are not welcome"):
            interop_core.to(np.zeros(3, np.float16), "checked", copy=copy)
    assert asked == [(2, 16, 1)] * 3


def test_resolve_device_hands_the_exporter_its_handle(registered):
    recorder = _Recorder()
    limits = ImportLimits(resolve_device=lambda d: (1, 0, f"handle for {d}"))
    registered(lambda r: r.add_exporter("placed", recorder, limits=limits), "device-test")
    interop_core.to(np.zeros(3), "placed", device="anywhere:7")
    assert recorder.seen[-1][3] == {"device": "handle for anywhere:7"}
    interop_core.to(np.zeros(3), "placed")
    assert recorder.seen[-1][3] == {}


class Guarded:
    """Three host floats, and whether an export rule lets them go (`ok`)."""

    def __init__(self, ok=True):
        self.ok = ok
        self.keep = np.zeros(3)
        self.__array_interface__ = self.keep.__array_interface__


def test_a_python_export_rule_refuses_what_it_raises_for(registered):
    def rule(obj):
        if not obj.ok:
            raise BufferError("this one stays home")

    registered(lambda r: (r.add_type(Guarded, reader="array_interface"),
                          r.add_export_rule(Guarded, rule)), "rule-test")
    interop_core.to(Guarded(True), "numpy")
    with pytest.raises(BufferError, match="stays home"):
        interop_core.to(Guarded(False), "numpy")
    assert view(Guarded(False)).shape == (3,)         # view() does not apply export rules


def test_an_export_rule_for_subclasses_refuses_them_unless_they_have_their_own(registered):
    class Child(Guarded):
        pass

    class Trusted(Guarded):
        pass

    def rule(obj):
        if not obj.ok:
            raise BufferError(f"{type(obj).__name__} stays home")

    registered(lambda r: (r.add_type(Guarded, reader="array_interface", subclasses=True),
                          r.add_export_rule(Guarded, rule, subclasses=True),
                          r.add_export_rule(Trusted, lambda obj: None)), "subclass-rule-test")
    for copy in (None, True, False):
        with pytest.raises(BufferError, match="Child stays home"):
            interop_core.to(Child(False), "numpy", copy=copy)
    assert interop_core.to(Child(True), "numpy").shape == (3,)
    # A subclass's exact rule is its own: the base's does not apply to it.
    assert interop_core.to(Trusted(False), "numpy").shape == (3,)


def test_an_export_rule_applies_to_exactly_its_type_by_default(registered):
    class Child(Guarded):
        pass

    def rule(obj):
        raise BufferError("stays home")

    registered(lambda r: (r.add_type(Guarded, reader="array_interface", subclasses=True),
                          r.add_export_rule(Guarded, rule)), "exact-rule-test")
    with pytest.raises(BufferError, match="stays home"):
        interop_core.to(Guarded(), "numpy")
    assert interop_core.to(Child(), "numpy").shape == (3,)


@pytest.mark.parametrize(("kwargs", "exc", "message"), [
    ({"layout": "fortran"}, ValueError, "layout must be one of"),
    ({"host_alignment": 0}, ValueError, "between 1 and"),
    ({"host_alignment": 1.5}, TypeError, "host_alignment must be an int"),
    ({"host_alignment": True}, TypeError, "host_alignment must be an int"),
    ({"device_types": (1, 99)}, ValueError, "device_types"),
    ({"check": 3}, TypeError, "check must be callable"),
    ({"check_dtypes": [(2, 16, 1)]}, ValueError, "check=, which is missing"),
    ({"check": print, "check_dtypes": [(2, 16)]}, ValueError, "triples"),
    ({"resolve_device": "cpu"}, TypeError, "resolve_device must be callable"),
])
def test_import_limits_arguments_are_checked(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        ImportLimits(**kwargs)


def test_registration_refuses_malformed_limits_and_rules(registered):
    with pytest.raises(RuntimeError, match="limits must be an interop_core.ImportLimits"):
        registered(lambda r: r.add_exporter("bad", _Recorder(), limits={"layout": "compact"}),
                   "bad-limits")
    capsule = ctypes.pythonapi.PyCapsule_New
    capsule.restype = ctypes.py_object
    capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    wrong = capsule(ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value,
                    b"not.an.export_rule", None)
    with pytest.raises(RuntimeError, match="export rule capsule must be named"):
        registered(lambda r: r.add_export_rule(np.ndarray, wrong), "bad-rule")
    with pytest.raises(RuntimeError, match="callable or a PyCapsule"):
        registered(lambda r: r.add_export_rule(np.ndarray, 42), "bad-rule-2")


def test_first_party_targets_declare_their_limits():
    expected = {"numpy": "device_types=(1, 3, 11, 13)", "torch": "negative_strides=False",
                "jax": "layout='compact'", "numba": "negative_strides=False",
                "cupy": "device_types=(2, 3, 13)"}
    for name, fragment in expected.items():
        try:
            limits = interop_core.plugins.exporter_for(name)[3]
        except ValueError:
            continue                            # its plugin is not loaded here
        assert fragment in repr(limits), (name, limits)


# --- on a GPU -----------------------------------------------------------------------------------

@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("copy", [None, True, False])
def test_device_memory_with_negative_strides_reaches_torch_as_a_copy_on_its_device(torch_cuda,
                                                                                   copy):
    torch = torch_cuda
    base = torch.arange(24.0, device="cuda").reshape(4, 6)
    source = view(base)[::-1]
    stream = torch.cuda.Stream()
    if copy is False:
        with pytest.raises(BufferError, match="negative strides"):
            interop_core.to(source, "torch", stream, copy=False)
        return
    out = interop_core.to(source, "torch", stream, copy=copy)
    stream.synchronize()
    assert out.device == base.device and out.data_ptr() != base.data_ptr()
    assert torch.equal(out, base.flip(0))


@pytest.mark.gpu
def test_cupy_takes_negative_strides_as_they_are_and_torch_gets_a_copy(torch_cuda):
    cupy = pytest.importorskip("cupy")
    a = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)[::-1]
    t = interop_core.to(a, "torch")
    assert t.data_ptr() != a.data.ptr and t.cpu().tolist() == a.get().tolist()
    back = interop_core.to(view(t)[:, ::-1], "cupy", copy=False)
    assert back.data.ptr == view(t)[:, ::-1].ptr
    assert back.get().tolist() == t.cpu().numpy()[:, ::-1].tolist()


@pytest.mark.gpu
def test_host_memory_to_cupy_names_device_cuda_and_device_copies_it():
    cupy = pytest.importorskip("cupy")
    a = np.arange(6.0)
    with pytest.raises(BufferError, match="device='cuda:N'"):
        interop_core.to(a, "cupy")
    out = interop_core.to(a, "cupy", device="cuda:0")
    assert isinstance(out, cupy.ndarray) and out.get().tolist() == a.tolist()


@pytest.mark.gpu
def test_pinned_and_managed_memory_become_cpu_and_cuda_tensors(torch_cuda):
    torch = torch_cuda
    like = view(np.arange(8.0))
    pinned = StridedMemoryView.empty_like(like, device="cuda_host")
    pinned.copy_from(like)
    t = interop_core.to(pinned, "torch")
    assert t.device.type == "cpu" and t.data_ptr() == pinned.ptr and t.tolist() == list(range(8))
    managed = StridedMemoryView.empty_like(like, device="cuda_managed")
    managed.copy_from(like)
    m = interop_core.to(managed, "torch")
    assert m.device == torch.device("cuda", 0) and m.data_ptr() == managed.ptr
    assert m.cpu().tolist() == list(range(8))


@pytest.mark.gpu
def test_jax_on_a_gpu_gets_a_copy_of_a_strided_cuda_view_on_its_device(torch_cuda):
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    torch = torch_cuda
    base = torch.arange(24.0, device="cuda").reshape(4, 6)
    with pytest.raises(BufferError, match="compact"):
        interop_core.to(base[:, ::2], "jax", copy=False)
    out = interop_core.to(base[:, ::2], "jax")
    assert out.devices() == {gpu}
    np.testing.assert_array_equal(np.asarray(out), base[:, ::2].cpu().numpy())
    placed = interop_core.to(base, "jax", device=gpu, copy=False)
    assert placed.unsafe_buffer_pointer() == base.data_ptr()


@pytest.mark.gpu
def test_numba_gets_a_copy_of_device_memory_with_negative_strides(torch_cuda):
    pytest.importorskip("numba")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("numba's CUDA simulator is on")
    torch = torch_cuda
    base = torch.arange(12.0, device="cuda")
    out = interop_core.to(view(base)[::-1], "numba")
    assert out.copy_to_host().tolist() == base.flip(0).cpu().tolist()
    with pytest.raises(BufferError, match="negative strides"):
        interop_core.to(view(base)[::-1], "numba", copy=False)


@pytest.mark.gpu
def test_jax_on_a_gpu_takes_device_memory_at_any_element_offset(torch_cuda):
    # jaxlib copies only host memory it cannot alias; device memory at an offset of one
    # element (a slice of a tensor) must be imported as it is, or the limits need a device
    # alignment too.
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    torch = torch_cuda
    base = torch.arange(9.0, device="cuda")
    out = interop_core.to(base[1:], "jax", copy=False)
    assert out.unsafe_buffer_pointer() == base[1:].data_ptr()
    np.testing.assert_array_equal(np.asarray(out), base[1:].cpu().numpy())
