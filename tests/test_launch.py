"""``interop_core.launch_args``: key, pointer arrays, stream and views of a kernel's arguments."""

from __future__ import annotations

import ctypes
import gc
import pickle
import weakref

import numpy as np
import pytest
from cuda_probe import cuda_device_count

import interop_core
from interop_core import LaunchArgs, LaunchKey, StridedMemoryView, launch_args, view
from interop_core.launch import SCALAR_TYPES

try:
    import torch
except ImportError:         # torch's cases skip; launch_args over the rest is tested all the same
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _host(framework, array):
    """``array`` (numpy) as ``framework``'s host object over the same memory."""
    if framework == "numpy":
        return array
    if framework == "torch":
        return torch.from_numpy(array)
    if framework == "view":
        return view(array)
    if framework == "buffer":
        return memoryview(array)
    raise ValueError(framework)


FRAMEWORKS = ["numpy", "torch", "view", "buffer"]
FRAMEWORK_PARAMS = [pytest.param(fw, marks=needs_torch) if fw == "torch" else fw
                    for fw in FRAMEWORKS]


def _slots(address, n):
    return list((ctypes.c_void_p * n).from_address(address))


# -- the pointer arrays -------------------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORK_PARAMS)
def test_pointers_hold_data_pointers_and_the_addresses_of_scalar_values(framework):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.zeros((2, 3), dtype=np.float32)
    record = launch_args([_host(framework, out), _host(framework, x), 2.5, -7, True, None])
    ptrs = _slots(record.address, 6)
    assert ptrs[0] == out.ctypes.data and ptrs[1] == x.ctypes.data
    assert ctypes.c_double.from_address(ptrs[2]).value == 2.5
    assert ctypes.c_int64.from_address(ptrs[3]).value == -7
    assert ctypes.c_bool.from_address(ptrs[4]).value is True
    assert ptrs[5] is None
    assert list(record.pointers) == [p or 0 for p in ptrs]
    assert record.pointers.format == "P" and record.pointers.readonly
    assert len(record) == 6


@pytest.mark.parametrize("framework", FRAMEWORK_PARAMS)
def test_kernel_params_point_at_each_arguments_value_as_cuLaunchKernel_wants(framework):
    x = np.arange(4, dtype=np.float32)
    record = launch_args([_host(framework, x), 3.0, 11, None])
    params = _slots(record.kernel_params_address, 4)
    # A tensor's entry points at a slot that holds its data pointer, not at the data.
    assert ctypes.c_void_p.from_address(params[0]).value == x.ctypes.data
    assert ctypes.c_double.from_address(params[1]).value == 3.0
    assert ctypes.c_int64.from_address(params[2]).value == 11
    assert ctypes.c_void_p.from_address(params[3]).value is None
    # Scalars: both arrays point at the same stored value.
    assert _slots(record.address, 4)[1:3] == params[1:3]
    assert list(record.kernel_params) == params


@pytest.mark.parametrize(("value", "ctype", "c_type", "name"), [
    (1.5, "float32", ctypes.c_float, "float32"),
    (1.5, "float16", None, "float16"),
    (3, "float64", ctypes.c_double, "float64"),
    (-5, "int32", ctypes.c_int32, "int32"),
    (200, "uint8", ctypes.c_uint8, "uint8"),
    (2**63 + 5, "uint64", ctypes.c_uint64, "uint64"),
    (True, "int32", ctypes.c_int32, "int32"),
])
def test_scalars_are_stored_as_the_c_type_asked_for(value, ctype, c_type, name):
    record = launch_args([value], scalar_types=(ctype,))
    assert record.scalar_type(0) == name
    address = _slots(record.address, 1)[0]
    if c_type is not None:
        assert c_type.from_address(address).value == value
    else:
        assert np.frombuffer(ctypes.string_at(address, 2), np.float16)[0] == value
    # The rest of the 8-byte slot is zero, so a wider read of an int sees the same value.
    assert ctypes.string_at(address, 8)[ctypes.sizeof(c_type or ctypes.c_uint16):] == bytes(
        8 - ctypes.sizeof(c_type or ctypes.c_uint16))


def test_default_scalar_storage_is_documented_per_python_type():
    record = launch_args([True, 7, 2**63, 0.5])
    assert [record.scalar_type(i) for i in range(4)] == ["bool", "int64", "uint64", "float64"]
    assert ctypes.c_uint64.from_address(_slots(record.address, 4)[2]).value == 2**63
    assert set(SCALAR_TYPES) >= {"bool", "int32", "int64", "float32", "float64"}


def test_the_record_keeps_every_owner_alive():
    array = np.arange(8, dtype=np.float64)
    alive = weakref.ref(array)
    record = launch_args([array])
    del array
    gc.collect()
    assert alive() is not None
    assert ctypes.c_double.from_address(_slots(record.address, 1)[0] + 8).value == 1.0
    del record
    gc.collect()
    assert alive() is None


def test_memory_read_through_dlpack_stays_alive_with_the_record():
    jax = pytest.importorskip("jax")
    # Host memory (read below through ctypes), wherever jax would put an array by default.
    x = jax.device_put(jax.numpy.arange(5, dtype="float32"), jax.devices("cpu")[0])
    record = launch_args([x])
    del x
    gc.collect()
    data = (ctypes.c_float * 5).from_address(_slots(record.address, 1)[0])
    assert list(data) == [0.0, 1.0, 2.0, 3.0, 4.0]


# -- a C function called through ctypes (examples/axpy.c, built by the c_library fixture) ----


@pytest.mark.parametrize("framework", ["numpy", pytest.param("torch", marks=needs_torch)])
@pytest.mark.parametrize("form", ["pointers", "kernel_params"])
def test_a_c_function_computes_axpy_over_the_pointer_array(c_library, framework, form):
    n = 37
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 0.5, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    args = [_host(framework, out), _host(framework, x), _host(framework, y), 2.0, n]
    record = launch_args(args, writable=(0,), scalar_types=(None, None, None, "float32", None))
    if form == "pointers":
        c_library.axpy_pointers(record.address)
    else:
        c_library.axpy_params(record.kernel_params_address)
    np.testing.assert_array_equal(out, 2.0 * x + 0.5)


# -- keys ---------------------------------------------------------------------------------------


@needs_torch
def test_keys_are_equal_across_frameworks_for_the_same_specialization():
    a = np.zeros((4, 3), dtype=np.float32)
    keys = {launch_args([_host(fw, a), 1.0]).key for fw in FRAMEWORKS}
    assert len(keys) == 1
    key = keys.pop()
    assert isinstance(key, LaunchKey) and key.policy == "static"
    assert view(a).key == launch_args([a]).key == view(torch.zeros(4, 3)).key


@pytest.mark.parametrize("other", [
    lambda: np.zeros((4, 3), dtype=np.float64),              # dtype
    lambda: np.zeros((3, 4), dtype=np.float32),              # shape
    lambda: np.zeros((3, 4), dtype=np.float32).T,            # strides
    lambda: StridedMemoryView.from_pointer(0x1000, (4, 3), dtype="float32", device="cuda:0"),
    lambda: StridedMemoryView.from_pointer(0x1000, (4, 3), dtype="float32", readonly=True),
    lambda: 1.0,                                              # a scalar instead
    lambda: None,
], ids=["dtype", "shape", "strides", "device", "readonly", "scalar", "none"])
def test_static_keys_differ_when_any_specialised_property_differs(other):
    base = launch_args([np.zeros((4, 3), dtype=np.float32)]).key
    assert launch_args([other()]).key != base


def test_static_keys_ignore_data_pointers_and_scalar_values_but_not_scalar_types():
    a, b = np.zeros(5, np.float32), np.ones(5, np.float32)
    assert launch_args([a, 1.0, 2]).key == launch_args([b, 7.5, -3]).key
    assert launch_args([a, 1.0]).key != launch_args([a, 1]).key
    assert launch_args([a, 1.0]).key != launch_args([a, True]).key
    assert (launch_args([a, 1.0]).key
            != launch_args([a, 1.0], scalar_types=(None, "float32")).key)


def test_keys_work_as_dict_keys_and_pickle():
    cache = {}
    for _ in range(3):
        key = launch_args([np.zeros((2, 2), np.float32), 3], key="dynamic").key
        cache.setdefault(key, []).append(1)
    assert list(map(len, cache.values())) == [3]
    key = launch_args([np.zeros((2, 2), np.float32)]).key
    again = pickle.loads(pickle.dumps(key))
    assert again == key and hash(again) == hash(key) and again is not key
    assert key != "not a key" and len(key.words) == 1 + 2 + 2 * 2


def test_keys_of_nearby_specializations_hash_apart():
    # A launcher's kernel cache is a dict: keys that differ in one extent or stride (the common
    # case: the same kernel over many sizes) must not share hashes, nor their low bits (the
    # dict's slot).
    keys = [launch_args([np.zeros((rows, cols), np.float32)]).key
            for rows in range(1, 41) for cols in range(1, 41)]
    keys += [launch_args([np.zeros((64, 64), np.float32)[:, ::step]]).key
             for step in range(1, 65)]
    assert len(set(map(hash, keys))) == len(keys)
    assert len({hash(k) & 0xFFF for k in keys}) > 0.6 * min(len(keys), 4096)


@needs_torch
def test_dynamic_keys_bucket_extents_and_keep_layout_properties():
    def key(obj):
        return launch_args([obj], key="dynamic").key

    base = key(np.zeros((5, 7), np.float32))
    assert key(np.zeros((9, 3), np.float32)) == base                       # both extents >= 2
    assert key(torch.zeros(9, 3)) == base
    assert key(np.zeros((1, 7), np.float32)) != base                       # extent 1
    assert key(np.zeros((0, 7), np.float32)) != base                       # extent 0
    assert key(np.zeros((7, 5), np.float32).T) != base                     # stride order
    assert key(np.zeros((5, 14), np.float32)[:, ::2]) != base              # not contiguous
    assert key(np.zeros(36, np.float32)[1:].reshape(5, 7)) != base         # misaligned
    assert key(np.zeros((5, 7), np.float64)) != base                       # dtype
    huge = StridedMemoryView.from_pointer(0x1000, (2**31,), dtype="float32")
    small = StridedMemoryView.from_pointer(0x1000, (2**20,), dtype="float32")
    assert key(huge) != key(small)                                          # int32 offsets
    assert key(np.zeros((5, 7), np.float32)) != launch_args(
        [np.zeros((5, 7), np.float32)]).key                                # policies differ
    assert launch_args([np.zeros(3)], key=None).key is None


# -- streams ------------------------------------------------------------------------------------


class DeviceInterface:
    """A CUDA Array Interface producer on a pretend device pointer, with a producer stream."""

    def __init__(self, stream, address=0x7F0000000000):
        self.__cuda_array_interface__ = {
            "shape": (4,), "typestr": "<f4", "data": (address, False), "version": 3,
            "strides": None, "stream": stream}


class CudaStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_the_stream_is_resolved_and_host_memory_needs_no_ordering():
    array = np.arange(4.0)
    assert launch_args([array]).stream is None
    assert launch_args([array], 0).stream == 0
    assert launch_args([array], CudaStream(0x1234)).stream == 0x1234
    assert launch_args([array], -1).stream is None


def test_producers_on_the_consumer_stream_need_no_ordering_and_no_driver():
    args = [DeviceInterface(0x5000), DeviceInterface(0x5000, 0x7F0000001000), 2.0]
    record = launch_args(args, stream=0x5000)
    assert record.stream == 0x5000
    assert [v.producer_stream for v in record.views[:2]] == [0x5000, 0x5000]


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the driver-less behaviour")
def test_ordering_another_producer_without_a_driver_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA driver"):
        launch_args([DeviceInterface(0x5000)], stream=0x6000)


# -- views --------------------------------------------------------------------------------------


@needs_torch
def test_views_are_built_on_demand_over_the_same_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = torch.ones(3)
    given = view(np.zeros(2))
    record = launch_args([a, t, given, 4, None])
    views = record.views
    assert views is record.views
    assert isinstance(views[0], StridedMemoryView) and views[0].owner is a
    assert (views[0].ptr, views[0].shape, views[0].strides) == (a.ctypes.data, (2, 3), (3, 1))
    assert views[1].ptr == t.data_ptr() and views[1].owner is t
    assert views[2] is given
    assert views[3:] == (4, None)
    assert record.args == (a, t, given, 4, None)


def test_view_accessors_return_the_same_tuples_on_every_read():
    v = view(np.zeros((3, 4), np.float32))
    assert v.shape is v.shape and v.strides is v.strides
    assert v.strides_in_bytes is v.strides_in_bytes == (16, 4)
    assert v[1:].shape == (2, 4) and v.shape == (3, 4)


# -- bad input ----------------------------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ([np.zeros(2), Opaque()], {}, TypeError, r"argument 1 \(test_launch.Opaque\) is not a scalar"),
    ([np.zeros(2), 1j], {}, TypeError, r"argument 1 \(complex\) is not a scalar"),
    ([np.zeros(2), 2**64], {}, ValueError, r"argument 1 \(int\) is 18446744073709551616, outside"),
    ([np.zeros(2), -2**63 - 1], {}, ValueError, r"argument 1 \(int\) .* outside"),
    ([np.zeros(2)], {"key": "sometimes"}, ValueError, "key must be 'static', 'dynamic' or None"),
    (42, {}, TypeError, "args must be a sequence"),
    ([1.5], {"scalar_types": ("int32",)}, TypeError, r"argument 0 is a float but scalar_types"),
    ([300], {"scalar_types": ("uint8",)}, ValueError, r"argument 0 \(int\) is 300, outside"),
    ([1e300], {"scalar_types": ("float32",)}, ValueError, "too large for float32"),
    ([2**1024], {"scalar_types": ("float32",)}, ValueError, r"argument 0 \(int\) is .*too large"),
    ([2**1024], {"scalar_types": ("float64",)}, ValueError, r"argument 0 \(int\) is .*too large"),
    ([None], {"scalar_types": ("float32",)}, ValueError, r"argument 0 is None, but scalar_types"),
    ([np.zeros(2)], {"scalar_types": ("float32",)}, ValueError, r"argument 0 \(numpy.ndarray\) is "
                                                                 "not a scalar"),
    ([1.0], {"scalar_types": ("float128",)}, ValueError, r"scalar_types\[0\] must be None or one"),
    ([1.0], {"scalar_types": (None, None)}, ValueError, "2 entries for 1 arguments"),
    ([1.0], {"scalar_types": "f"}, TypeError, "scalar_types must be a sequence"),
    ([np.zeros(2), 1.0], {"writable": (1,)}, TypeError, r"argument 1 \(float\) must be a "
                                                        "writable tensor"),
    ([np.zeros(2)], {"writable": (3,)}, ValueError, "writable names argument 3"),
    ([np.zeros(2)], {"writable": "yes"}, TypeError, "writable must be a bool or a collection"),
    ([np.zeros(2)], {"stream": "default"}, TypeError, "stream must be"),
], ids=["unviewable", "complex", "int-too-big", "int-too-small", "bad-key", "not-a-sequence",
        "float-as-int", "uint8-range", "float32-overflow", "int-beyond-float32",
        "int-beyond-float64", "none-typed-scalar", "tensor-typed-scalar", "unknown-ctype",
        "scalar-types-length", "scalar-types-str", "writable-scalar", "writable-range",
        "writable-str", "bad-stream"])
def test_bad_input_is_a_clear_error_naming_the_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        launch_args(args, **kwargs)


def test_a_read_only_tensor_where_writable_ones_were_asked_for_is_a_buffer_error():
    read_only = np.zeros(3)
    read_only.flags.writeable = False
    launch_args([np.zeros(3), read_only])           # fine when nothing is asked
    with pytest.raises(BufferError, match=r"argument 1 \(numpy.ndarray\) is read-only"):
        launch_args([np.zeros(3), read_only], writable=True)
    launch_args([np.zeros(3), read_only], writable=[0])


def test_tensors_on_different_devices_where_one_was_asked_for_is_a_value_error():
    on_gpu = StridedMemoryView.from_pointer(0x1000, (4,), dtype="float32", device="cuda:1")
    launch_args([np.zeros(4), on_gpu])              # fine when nothing is asked
    with pytest.raises(ValueError, match=r"argument 2 \(interop_core.core._view.StridedMemoryView"
                                         r"\) is on cuda:1 but argument 0 \(numpy.ndarray\) is "
                                         "on cpu:0"):
        launch_args([np.zeros(4), 2.0, on_gpu], same_device=True)


def test_records_and_keys_are_made_only_by_launch_args():
    with pytest.raises(TypeError, match="launch_args"):
        LaunchArgs()
    with pytest.raises(TypeError, match="launch_args"):
        LaunchKey()


def test_records_of_any_size_made_one_after_another_hold_their_own_arguments():
    # Records reuse the arrays of freed ones: a small record in a large record's arrays, a large
    # one beside it, a record of many-dimensional tensors (extents on the heap) in between.
    arrays = {n: [np.full((2, 3), float(n * 100 + i), np.float32) for i in range(n)]
              for n in (1, 2, 5, 16, 40)}
    deep = np.zeros((1,) * 9 + (3,), np.float32)
    for order in ([16, 2, 40, 1, 5], [1, 40, 16, 5, 2]):
        live = []
        for n in order:
            live.append((n, launch_args(arrays[n] + [deep, 7])))
            if n == 40:
                del live[0]
                gc.collect()
        for n, record in live:
            assert len(record) == n + 2
            assert _slots(record.address, n) == [a.ctypes.data for a in arrays[n]]
            assert record.views[n].shape == deep.shape
            assert ctypes.c_int64.from_address(_slots(record.address, n + 2)[n + 1]).value == 7
            assert record.key == launch_args(arrays[n] + [deep, 7]).key


def test_an_empty_argument_list_gives_an_empty_record():
    record = launch_args([])
    assert len(record) == 0 and list(record.pointers) == [] and record.views == ()
    assert record.key == launch_args(()).key


def test_launch_args_is_exported_from_the_package():
    assert interop_core.launch_args is launch_args
    assert {"launch_args", "LaunchArgs", "LaunchKey"} <= set(interop_core.__all__)
