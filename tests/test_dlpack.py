"""DLPack in and out: capsules, __dlpack__, the C exchange API, round trips with frameworks."""

import ctypes

import numpy as np
import pytest
from dlpack_ctypes import (
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
    capi,
    capsule_name,
    capsule_pointer,
    exchange_api,
    make_capsule,
)

import interop_core
from interop_core import StridedMemoryView
from interop_core.protocols import _dlpack

DLPackTensorHolder = _dlpack.DLPackTensorHolder

# --- shared tables ----------------------------------------------------------------------------

# numpy dtype name -> DLPack (code, bits, lanes)
DTYPES = {
    "bool": (6, 8, 1),
    "int8": (0, 8, 1),
    "int16": (0, 16, 1),
    "int32": (0, 32, 1),
    "int64": (0, 64, 1),
    "uint8": (1, 8, 1),
    "float16": (2, 16, 1),
    "float32": (2, 32, 1),
    "float64": (2, 64, 1),
    "complex64": (5, 64, 1),
}
DTYPES_WITH_BF16 = {**DTYPES, "bfloat16": (4, 16, 1)}

# Layouts made from a (4, 6) base by indexing (works for numpy arrays and torch tensors alike).
LAYOUTS = {
    "contiguous": lambda a: a,
    "sliced_step": lambda a: a[1::2, ::3],
    "transposed": lambda a: a.T,
    "zero_size": lambda a: a[:0],
    "scalar_0d": lambda a: a[1, 2, ...],
    "offset": lambda a: a[1:, 2:],
}
NUMPY_LAYOUTS = {**LAYOUTS, "negative_strides": lambda a: a[::-1, ::-2]}


def np_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


def first(a):
    return (0,) * a.ndim


def assert_view_of_numpy(v, a):
    assert v.ptr == a.ctypes.data
    assert v.shape == a.shape
    if a.size:
        assert v.strides == np_strides(a)
    assert v.itemsize == a.itemsize
    assert v.device_type == 1 and v.device_id == 0


def numpy_base(dtype_name):
    return np.zeros((4, 6), dtype=dtype_name)


# --- numpy as producer and consumer ----------------------------------------------------------

@pytest.mark.parametrize("layout", NUMPY_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_view_has_same_memory_and_layout(dtype, layout):
    a = NUMPY_LAYOUTS[layout](numpy_base(dtype))
    v = StridedMemoryView.from_dlpack(a)
    assert_view_of_numpy(v, a)
    assert v.dlpack_dtype == DTYPES[dtype]
    assert v.readonly is False
    assert v.owner is a


@pytest.mark.parametrize("layout", NUMPY_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip_is_zero_copy_and_writes_are_shared(dtype, layout):
    a = NUMPY_LAYOUTS[layout](numpy_base(dtype))
    b = np.from_dlpack(StridedMemoryView.from_dlpack(a))
    assert b.ctypes.data == a.ctypes.data
    assert b.shape == a.shape and b.dtype == a.dtype
    if a.size:
        assert b.strides == a.strides
        one = a.dtype.type(1)
        b[first(b)] = one
        assert a[first(a)] == one
        a[first(a)] = a.dtype.type(0)
        assert b[first(b)] == a.dtype.type(0)


def test_numpy_readonly_array_gives_readonly_view_and_readonly_export():
    a = np.arange(6.0)
    a.flags.writeable = False
    v = StridedMemoryView.from_dlpack(a)
    assert v.readonly is True
    b = np.from_dlpack(v)
    assert b.ctypes.data == a.ctypes.data
    assert b.flags.writeable is False


def test_readonly_view_exports_read_only_flag_in_versioned_capsule():
    a = np.arange(6.0)
    a.flags.writeable = False
    cap = StridedMemoryView.from_dlpack(a).__dlpack__(max_version=(1, 3))
    mt = DLManagedTensorVersioned.from_address(capsule_pointer(cap))
    assert mt.flags & 1
    w = np.arange(6.0)
    cap = StridedMemoryView.from_dlpack(w).__dlpack__(max_version=(1, 3))
    assert DLManagedTensorVersioned.from_address(capsule_pointer(cap)).flags & 1 == 0


def test_readonly_view_refuses_legacy_capsule():
    a = np.arange(6.0)
    a.flags.writeable = False
    v = StridedMemoryView.from_dlpack(a)
    with pytest.raises(BufferError, match="read-only"):
        v.__dlpack__()


def test_view_of_view_through_own_exchange_api_is_zero_copy_and_keeps_readonly():
    a = np.arange(6.0)
    a.flags.writeable = False
    v = StridedMemoryView.from_dlpack(a)
    w = StridedMemoryView.from_dlpack(v)
    assert (w.ptr, w.shape, w.strides, w.readonly) == (v.ptr, v.shape, v.strides, True)
    assert w.owner is v


# --- export arguments -----------------------------------------------------------------------

@pytest.mark.parametrize(("max_version", "name", "version"), [
    (None, b"dltensor", None),
    ((0, 8), b"dltensor", None),
    ((1, 0), b"dltensor_versioned", (1, 0)),
    ((1, 2), b"dltensor_versioned", (1, 2)),
    ((1, 3), b"dltensor_versioned", (1, 3)),
    ((1, 99), b"dltensor_versioned", (1, 3)),
    ((2, 0), b"dltensor_versioned", (1, 3)),
])
def test_export_capsule_kind_and_version_follow_max_version(max_version, name, version):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    cap = v.__dlpack__(max_version=max_version)
    assert capsule_name(cap) == name
    if version is not None:
        mt = DLManagedTensorVersioned.from_address(capsule_pointer(cap))
        assert (mt.version.major, mt.version.minor) == version


def test_exported_tensor_describes_the_view():
    a = np.zeros((5, 7), dtype=np.int16)[::2, 1::3]
    v = StridedMemoryView.from_dlpack(a)
    mt = DLManagedTensorVersioned.from_address(capsule_pointer(v.__dlpack__(max_version=(1, 3))))
    t = mt.dl_tensor
    assert t.data + t.byte_offset == a.ctypes.data
    assert (t.device.device_type, t.device.device_id) == (1, 0)
    assert [t.shape[i] for i in range(t.ndim)] == list(a.shape)
    assert [t.strides[i] for i in range(t.ndim)] == list(np_strides(a))
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 16, 1)


def test_dlpack_device_reports_cpu():
    assert StridedMemoryView.from_dlpack(np.arange(3)).__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("copy", [None, False])
def test_export_accepts_copy_none_or_false(copy):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    assert capsule_name(v.__dlpack__(copy=copy)) == b"dltensor"


def test_export_with_copy_true_hands_out_a_copy_flagged_is_copied():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = StridedMemoryView.from_dlpack(a)[:, ::-1]
    cap = v.__dlpack__(copy=True, max_version=(1, 0))
    tensor = DLManagedTensorVersioned.from_address(capsule_pointer(cap))
    assert tensor.flags & 2                          # IS_COPIED
    assert tensor.dl_tensor.data not in (None, a.ctypes.data)
    got = StridedMemoryView.from_dlpack(cap)
    np.testing.assert_array_equal(np.asarray(got), a[:, ::-1])
    a[:] = -1                                        # the copy does not follow its source
    np.testing.assert_array_equal(np.asarray(got), [[2, 1, 0], [5, 4, 3]])


def test_export_rejects_non_bool_copy():
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(TypeError, match="copy"):
        v.__dlpack__(copy="yes")


@pytest.mark.parametrize("dl_device", [(1, 0), (np.int32(1), 0)])
def test_export_accepts_own_device(dl_device):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    assert capsule_name(v.__dlpack__(dl_device=dl_device, max_version=(1, 0))) \
        == b"dltensor_versioned"


@pytest.mark.parametrize(("dl_device", "match"), [((1, 1), "no CPU device 1"),
                                                  ((14, 0), "device type 14")])
def test_export_refuses_devices_it_cannot_copy_to(dl_device, match):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(BufferError, match=match):
        v.__dlpack__(dl_device=dl_device)


def test_export_with_copy_false_refuses_another_device():
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(BufferError, match="copy=False"):
        v.__dlpack__(dl_device=(2, 0), copy=False)


@pytest.mark.parametrize("dl_device", ["cpu", (1,), 3])
def test_export_rejects_malformed_dl_device(dl_device):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(TypeError, match="dl_device"):
        v.__dlpack__(dl_device=dl_device)


@pytest.mark.parametrize("max_version", ["1.0", (1,), (1, 0, 0), (1.0, 0)])
def test_export_rejects_malformed_max_version(max_version):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(TypeError, match="max_version"):
        v.__dlpack__(max_version=max_version)


@pytest.mark.parametrize("stream", [None, -1])
def test_export_of_host_view_accepts_no_sync_streams(stream):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    assert capsule_name(v.__dlpack__(stream=stream)) == b"dltensor"


@pytest.mark.parametrize("stream", [0, 1, 2, 12345])
def test_export_of_host_view_refuses_a_stream(stream):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(BufferError, match="stream"):
        v.__dlpack__(stream=stream)


@pytest.mark.parametrize("stream", ["0", 1.5, object()])
def test_export_rejects_malformed_stream(stream):
    v = StridedMemoryView.from_dlpack(np.arange(3))
    with pytest.raises(TypeError, match="stream"):
        v.__dlpack__(stream=stream)


def test_exported_capsule_can_be_consumed_once():
    v = StridedMemoryView.from_dlpack(np.arange(3))
    cap = v.__dlpack__(max_version=(1, 3))
    w = StridedMemoryView.from_dlpack(cap)
    assert w.ptr == v.ptr
    assert capsule_name(cap) == b"used_dltensor_versioned"
    with pytest.raises(BufferError, match="already consumed"):
        StridedMemoryView.from_dlpack(cap)


# --- hand-made producers: legacy / versioned capsules, flags, versions ----------------------

class CapsuleProducer:
    """Returns a fresh capsule on each __dlpack__ call; records the arguments it got."""

    def __init__(self, array, *, versioned, accepts_max_version=True, **kwargs):
        self.array = array
        self.versioned = versioned
        self.accepts_max_version = accepts_max_version
        self.kwargs = kwargs
        self.calls = []
        self.fakes = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if "max_version" in kwargs and not self.accepts_max_version:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        cap, fake = make_capsule(self.array, versioned=self.versioned, **self.kwargs)
        self.fakes.append(fake)
        return cap

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_hand_made_capsule_producer_is_read_and_deleted_once(versioned):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = CapsuleProducer(a, versioned=versioned)
    v = StridedMemoryView.from_dlpack(p)
    assert_view_of_numpy(v, a)
    assert p.calls == [{"stream": None, "max_version": (1, 3)}]
    fake = p.fakes[0]
    assert fake.deleted == 0
    del v
    assert fake.deleted == 1


def test_producer_without_max_version_gets_one_retry_without_it():
    a = np.arange(5, dtype=np.int32)
    p = CapsuleProducer(a, versioned=False, accepts_max_version=False)
    v = StridedMemoryView.from_dlpack(p)
    assert v.ptr == a.ctypes.data
    assert p.calls == [{"stream": None, "max_version": (1, 3)}, {}]


class RaisingProducer:
    def __init__(self, exc):
        self.exc = exc
        self.calls = 0

    def __dlpack__(self, **kwargs):
        self.calls += 1
        raise self.exc

    def __dlpack_device__(self):
        return (1, 0)


def test_producer_errors_other_than_type_error_are_not_retried():
    p = RaisingProducer(BufferError("cannot export"))
    with pytest.raises(BufferError, match="cannot export"):
        StridedMemoryView.from_dlpack(p)
    assert p.calls == 1


@pytest.mark.parametrize("error", [AttributeError("'Inner' object has no attribute 'x'"),
                                   RuntimeError("Can't export tensors that require gradient"),
                                   KeyError("float8")])
@pytest.mark.parametrize("entry", [interop_core.view, StridedMemoryView.from_dlpack,
                                   StridedMemoryView.from_any])
def test_other_producer_errors_are_a_buffer_error_naming_the_producer(entry, error):
    with pytest.raises(BufferError, match=rf"RaisingProducer.__dlpack__ raised "
                       rf"{type(error).__name__}") as info:
        entry(RaisingProducer(error))
    assert info.value.__cause__ is error


@pytest.mark.parametrize("error", [MemoryError(), RecursionError("deep")])
def test_running_out_of_memory_or_stack_in_a_producer_passes_as_it_is(error):
    with pytest.raises(type(error)):
        StridedMemoryView.from_dlpack(RaisingProducer(error))


def test_producer_type_error_on_retry_propagates():
    p = RaisingProducer(TypeError("nope"))
    with pytest.raises(TypeError, match="nope"):
        StridedMemoryView.from_dlpack(p)
    assert p.calls == 2


def test_producer_returning_a_non_capsule_is_a_type_error():
    class Bad:
        def __dlpack__(self, **kwargs):
            return 42

    with pytest.raises(TypeError, match="not a capsule"):
        StridedMemoryView.from_dlpack(Bad())


class RenamesNumpysCapsule:
    """A broken producer: hands out numpy's own capsule under a name DLPack does not have.

    numpy's capsule destructor, asked to release it, raises an error of its own and reports it
    as unraisable, which once erased the consumer's refusal (``SystemError: returned NULL
    without setting an exception``)."""

    def __init__(self):
        self.source = np.arange(4.0)
        self.name = ctypes.create_string_buffer(b"not_a_tensor")  # the capsule keeps a pointer

    def __dlpack__(self, **kwargs):
        capsule = self.source.__dlpack__()
        set_name = ctypes.pythonapi.PyCapsule_SetName
        set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
        set_name(capsule, self.name)
        return capsule

    def __dlpack_device__(self):
        return self.source.__dlpack_device__()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # numpy's own
@pytest.mark.parametrize("entry", [interop_core.view, StridedMemoryView.from_dlpack,
                                   StridedMemoryView.from_any])
def test_a_capsule_with_a_wrong_name_is_a_type_error_naming_it(entry):
    with pytest.raises(TypeError, match="got one named 'not_a_tensor'"):
        entry(RenamesNumpysCapsule())


def test_object_without_dlpack_is_a_type_error():
    with pytest.raises(TypeError, match="__dlpack__"):
        StridedMemoryView.from_dlpack(object())


def test_byte_offset_is_added_to_the_pointer():
    buf = np.arange(10, dtype=np.int64)
    cap, fake = make_capsule(buf, shape=(4,), strides=(2,), byte_offset=16)
    v = StridedMemoryView.from_dlpack(cap)
    assert v.ptr == buf.ctypes.data + 16
    assert (v.shape, v.strides) == ((4,), (2,))
    del v
    assert fake.deleted == 1


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), (), (0, 3)])
def test_null_strides_mean_c_contiguous(shape):
    buf = np.zeros(shape, dtype=np.float64)
    cap, _ = make_capsule(buf, strides=None, versioned=False)
    v = StridedMemoryView.from_dlpack(cap)
    assert v.shape == shape
    assert v.strides == tuple(s // 8 for s in np.zeros(shape).strides) or buf.size == 0


@pytest.mark.parametrize(("flags", "readonly"), [(0, False), (1, True), (2, False), (3, True)])
def test_versioned_flags_set_readonly_and_accept_is_copied(flags, readonly):
    buf = np.arange(4, dtype=np.uint8)
    cap, fake = make_capsule(buf, flags=flags)
    v = StridedMemoryView.from_dlpack(cap)
    assert v.readonly is readonly
    assert v.ptr == buf.ctypes.data
    del v
    assert fake.deleted == 1


def test_newer_minor_version_is_accepted():
    buf = np.arange(4, dtype=np.uint8)
    cap, _ = make_capsule(buf, version=(1, 99))
    assert StridedMemoryView.from_dlpack(cap).ptr == buf.ctypes.data


@pytest.mark.parametrize("version", [(2, 0), (0, 9)])
def test_unsupported_major_version_is_refused_and_capsule_left_to_producer(version):
    buf = np.arange(4, dtype=np.uint8)
    cap, fake = make_capsule(buf, version=version)
    with pytest.raises(BufferError, match=f"version {version[0]}.{version[1]}"):
        StridedMemoryView.from_dlpack(cap)
    # Not consumed: the producer's capsule destructor still owns the tensor.
    assert capsule_name(cap) == b"dltensor_versioned"
    assert fake.deleted == 0
    del cap
    assert fake.deleted == 1


@pytest.mark.parametrize("name", [b"not_a_tensor", b"dlpack_exchange_api"])
def test_foreign_capsule_is_a_type_error(name):
    buf = np.arange(4, dtype=np.uint8)
    _, fake = make_capsule(buf)
    cap = fake.capsule(name)     # held so it is not destroyed while the error propagates
    with pytest.raises(TypeError, match="named"):
        StridedMemoryView.from_dlpack(cap)


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_used_capsule_is_a_buffer_error(versioned):
    buf = np.arange(4, dtype=np.uint8)
    cap, fake = make_capsule(buf, versioned=versioned)
    v = StridedMemoryView.from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed"):
        StridedMemoryView.from_dlpack(cap)
    del v
    assert fake.deleted == 1


@pytest.mark.parametrize("ndim", [-1, 65])
def test_bad_ndim_is_refused(ndim):
    buf = np.arange(4, dtype=np.uint8)
    cap, fake = make_capsule(buf)
    fake.managed.dl_tensor.ndim = ndim
    with pytest.raises(BufferError, match="ndim"):
        StridedMemoryView.from_dlpack(cap)


def test_64_dimensions_are_accepted():
    buf = np.zeros((1,) * 64, dtype=np.uint8)
    v = StridedMemoryView.from_dlpack(make_capsule(buf)[0])
    assert v.shape == (1,) * 64


def test_negative_extent_is_refused():
    buf = np.arange(4, dtype=np.uint8)
    cap, _ = make_capsule(buf, shape=(-4,), strides=(1,))
    with pytest.raises(BufferError, match="negative extent"):
        StridedMemoryView.from_dlpack(cap)


class _CapsuleProducer:
    """Hands out one prepared capsule through __dlpack__ (kept alive here)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def _describe_dlpack(capsule):
    # The core's capsule description for compiled plugins (interop_core._C_API).
    from test_registry import TensorInfo, _core_api

    return _core_api().describe_dlpack(capsule, ctypes.byref(TensorInfo()))


CAPSULE_ENTRIES = {
    "from_dlpack(capsule)": lambda capsule: StridedMemoryView.from_dlpack(capsule),
    "from_dlpack(producer)": lambda capsule: StridedMemoryView.from_dlpack(
        _CapsuleProducer(capsule)),
    "from_any(producer)": lambda capsule: StridedMemoryView.from_any(_CapsuleProducer(capsule)),
    "view(producer)": lambda capsule: interop_core.view(_CapsuleProducer(capsule)),
    "describe_dlpack": _describe_dlpack,
}

_TOP = 2**64


@pytest.mark.parametrize("entry", sorted(CAPSULE_ENTRIES))
@pytest.mark.parametrize(("fields", "message"), [
    ({"byte_offset": _TOP - 1}, r"data pointer plus byte_offset wraps"),
    ({"data": _TOP - 8}, r"elements fall outside the address space.*data=0xfffffffffffffff8"),
    ({"data": _TOP - 16, "byte_offset": 8}, r"outside the address space.*byte_offset=8"),
    ({"data": 8, "strides": (-3, 1)}, r"outside the address space.*strides=\(-3, 1\)"),
    ({"shape": (2**62, 5)}, r"shape holds more than 2\*\*63-1 bytes.*shape=\(4611686018427387904, 5\)"),
    ({"shape": (2**31, 2**31)}, r"shape holds more than 2\*\*63-1 bytes"),
    ({"strides": (2**63 - 1, 1)}, r"strides reach more than 2\*\*63-1 bytes"),
    ({"strides": (-(2**63), 1)}, r"strides reach more than 2\*\*63-1 bytes"),
    ({"strides": (2**61, 2**61)}, r"strides reach more than 2\*\*63-1 bytes"),
    ({"shape": (-1, 3)}, r"negative extent -1 in dimension 0"),
], ids=["offset-wraps", "data-near-top", "data-plus-offset-near-top", "below-zero",
        "shape-2**62x5", "shape-2**31x2**31", "stride-max", "stride-min", "strides-sum",
        "negative-extent"])
def test_capsules_whose_arithmetic_overflows_are_refused_and_left_unconsumed(entry, fields,
                                                                              message):
    spec = {"shape": (2, 3), "strides": (3, 1), **fields}
    capsule, fake = make_capsule(np.zeros(6, np.float32), **spec)
    with pytest.raises(BufferError, match=message):
        CAPSULE_ENTRIES[entry](capsule)
    assert capsule_name(capsule) == b"dltensor_versioned" and fake.deleted == 0
    del capsule
    assert fake.deleted == 1           # its producer's destructor still owns the tensor


@pytest.mark.parametrize("entry", sorted(set(CAPSULE_ENTRIES) - {"describe_dlpack"}))
@pytest.mark.parametrize(("fields", "ptr"), [
    ({"data": _TOP - 24}, _TOP - 24),                        # the last element ends at 2**64
    ({"data": 20, "strides": (-3, -1)}, 20),                 # the last element starts at 0
    ({"data": 64, "byte_offset": _TOP - 128}, _TOP - 64),
    ({"shape": (0, 2**63 - 1), "strides": (2**63 - 1, -(2**63))}, None),   # no elements
    ({"shape": (2**30, 2**30), "strides": (0, 0)}, None),   # 2**62 bytes, all in one element
], ids=["ends-at-top", "starts-at-zero", "offset-near-top", "empty", "broadcast"])
def test_capsules_at_the_edges_of_the_address_space_are_read_as_they_are(entry, fields, ptr):
    buffer = np.zeros(6, np.float32)
    spec = {"shape": (2, 3), "strides": (3, 1), **fields}
    capsule, fake = make_capsule(buffer, **spec)
    v = CAPSULE_ENTRIES[entry](capsule)
    assert (v.shape, v.strides) == (spec["shape"], spec["strides"])
    assert v.ptr == (buffer.ctypes.data if ptr is None else ptr)
    del v
    assert fake.deleted == 1


def test_null_shape_is_refused():
    buf = np.arange(4, dtype=np.uint8)
    cap, fake = make_capsule(buf)
    fake.managed.dl_tensor.shape = None
    with pytest.raises(BufferError, match="NULL shape"):
        StridedMemoryView.from_dlpack(cap)


def test_non_capsule_non_producer_argument_is_a_type_error():
    with pytest.raises(TypeError):
        StridedMemoryView.from_dlpack(3)


def test_holder_cannot_be_made_by_users():
    with pytest.raises(TypeError):
        DLPackTensorHolder()


# --- stream mapping when calling __dlpack__ -------------------------------------------------

class DeviceProducer(CapsuleProducer):
    """Claims to live on `device` (the capsule itself describes host memory)."""

    def __init__(self, array, device):
        super().__init__(array, versioned=True)
        self.device = device

    def __dlpack_device__(self):
        return self.device


class CudaStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.parametrize(("device", "stream", "expected"), [
    ((1, 0), None, None),
    ((1, 0), -1, None),
    ((1, 0), 0x7000, None),
    ((2, 0), None, -1),
    ((2, 0), -1, -1),
    ((2, 0), 0, 1),
    ((2, 0), 1, 1),
    ((2, 0), 2, 2),
    ((2, 0), 0xABC0, 0xABC0),
    ((2, 0), CudaStream(0xDEF0), 0xDEF0),
    ((10, 0), None, -1),
    ((10, 0), 0, 0),
    ((3, 0), 0x5000, None),
])
def test_stream_passed_to_producer_follows_dlpack_rules(device, stream, expected):
    p = DeviceProducer(np.arange(3), device)
    StridedMemoryView.from_dlpack(p, stream=stream)
    assert p.calls[0]["stream"] == expected


@pytest.mark.parametrize("stream", ["x", 1.0, True])
def test_malformed_consumer_stream_is_refused(stream):
    with pytest.raises(TypeError):
        StridedMemoryView.from_dlpack(np.arange(3), stream=stream)


# --- exchange API: consumer side --------------------------------------------------------------

class BadExchangeApi:
    """Publishes an unusable exchange API but a working __dlpack__."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("attr", ["not a capsule", "wrong_name_capsule", "major_2"])
def test_unusable_exchange_api_falls_back_to_dlpack(attr):
    table = DLPackExchangeAPI()
    table.header.version.major = 2
    keep = [table]
    if attr == "wrong_name_capsule":
        value = make_capsule(np.arange(1))[1].capsule(b"not_a_tensor")
    elif attr == "major_2":
        from dlpack_ctypes import _NAMES, _api
        value = _api.PyCapsule_New(ctypes.addressof(table), _NAMES[b"dlpack_exchange_api"], None)
    else:
        value = attr
    cls = type("Bad_" + attr, (BadExchangeApi,), {"__dlpack_c_exchange_api__": value,
                                                 "_keep": keep})
    a = np.arange(4.0)
    v = StridedMemoryView.from_dlpack(cls(a))
    assert v.ptr == a.ctypes.data


# --- framework tables for torch / jax ---------------------------------------------------------

def torch_dtype(torch, name):
    return getattr(torch, name)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def torch_base(torch, dtype):
    return torch.zeros((4, 6), dtype=torch_dtype(torch, dtype))


def torch_strides(t):
    return tuple(t.stride())


class DunderOnly:
    """Hides torch's exchange API so that only __dlpack__ is available."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@pytest.mark.parametrize("path", ["exchange_api", "dunder"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES_WITH_BF16)
def test_torch_view_has_same_memory_and_layout(torch, dtype, layout, path):
    t = LAYOUTS[layout](torch_base(torch, dtype))
    src = t if path == "exchange_api" else DunderOnly(t)
    v = StridedMemoryView.from_dlpack(src)
    assert v.ptr == t.data_ptr()
    assert v.shape == tuple(t.shape)
    if t.numel():
        assert v.strides == torch_strides(t)
    assert v.dlpack_dtype == DTYPES_WITH_BF16[dtype]
    assert v.itemsize == t.element_size()
    assert v.readonly is False


def test_torch_tensor_is_read_through_exchange_api_without_calling_dunder(torch, monkeypatch):
    calls = []
    original = torch.Tensor.__dlpack__

    def spy(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", spy)
    t = torch.arange(6)
    StridedMemoryView.from_dlpack(t)
    assert calls == []
    StridedMemoryView.from_dlpack(DunderOnly(t))
    assert calls == [{"stream": None, "max_version": (1, 3)}]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES_WITH_BF16)
def test_torch_round_trip_is_zero_copy_and_writes_are_shared(torch, dtype, layout):
    t = LAYOUTS[layout](torch_base(torch, dtype))
    u = torch.from_dlpack(StridedMemoryView.from_dlpack(t))
    assert u.data_ptr() == t.data_ptr()
    assert u.shape == t.shape and u.dtype == t.dtype
    if t.numel():
        assert u.stride() == t.stride()
        idx = (0,) * t.dim()
        u[idx] = 1
        assert t[idx].item() == 1
        t[idx] = 0
        assert u[idx].item() == 0


def test_torch_consumes_view_of_numpy_zero_copy(torch):
    a = np.zeros((3, 4), dtype=np.float32)[:, ::2]
    u = torch.from_dlpack(StridedMemoryView.from_dlpack(a))
    assert u.data_ptr() == a.ctypes.data
    assert u.stride() == np_strides(a)
    u[1, 1] = 5
    assert a[1, 1] == 5


def test_torch_storage_offset_is_reflected_in_pointer(torch):
    base = torch.arange(20, dtype=torch.int32)
    t = base[3:].view(-1)
    assert t.storage_offset() == 3
    v = StridedMemoryView.from_dlpack(t)
    assert v.ptr == base.data_ptr() + 12


# --- exchange API called from C (through ctypes), torch as the other side --------------------

FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
FROM_PY_NOGIL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
CURRENT_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                                  ctypes.POINTER(ctypes.c_void_p))
SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
ALLOCATOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_void_p, SET_ERROR)


_decref = capi("Py_DecRef", None, ctypes.c_void_p)


def steal(out):
    """The object behind a new reference returned through a PyObject** (reference taken over)."""
    obj = ctypes.cast(out, ctypes.py_object).value
    _decref(out)
    return obj


def view_api():
    return exchange_api(StridedMemoryView)


def test_view_type_publishes_exchange_api_capsule():
    cap = StridedMemoryView.__dlpack_c_exchange_api__
    assert capsule_name(cap) == b"dlpack_exchange_api"
    api = view_api()
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert api.header.prev_api is None
    for field in ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
                  "managed_tensor_to_py_object_no_sync", "dltensor_from_py_object_no_sync",
                  "current_work_stream"):
        assert getattr(api, field), field


@pytest.mark.parametrize("proto", [FROM_PY, FROM_PY_NOGIL], ids=["with_gil", "without_gil"])
def test_view_to_torch_through_c_exchange_apis(torch, proto):
    a = np.zeros((3, 4), dtype=np.float32)[:, 1::2]
    v = StridedMemoryView.from_dlpack(a)
    out = ctypes.c_void_p()
    assert proto(view_api().managed_tensor_from_py_object_no_sync)(v, ctypes.byref(out)) == 0
    tensor_out = ctypes.c_void_p()
    torch_to_py = TO_PY(exchange_api(torch.Tensor).managed_tensor_to_py_object_no_sync)
    assert torch_to_py(out, ctypes.byref(tensor_out)) == 0
    u = steal(tensor_out)
    assert u.data_ptr() == a.ctypes.data
    assert u.stride() == np_strides(a)
    u[2, 1] = 9
    assert a[2, 1] == 9


def test_torch_to_view_through_c_exchange_apis(torch):
    t = torch.arange(12, dtype=torch.int16).reshape(3, 4).t()
    out = ctypes.c_void_p()
    torch_from_py = FROM_PY(exchange_api(torch.Tensor).managed_tensor_from_py_object_no_sync)
    assert torch_from_py(t, ctypes.byref(out)) == 0
    view_out = ctypes.c_void_p()
    assert TO_PY(view_api().managed_tensor_to_py_object_no_sync)(out, ctypes.byref(view_out)) == 0
    v = steal(view_out)
    assert isinstance(v, StridedMemoryView)
    assert isinstance(v.owner, DLPackTensorHolder)
    assert v.owner.version[0] == 1
    assert (v.ptr, v.shape, v.strides) == (t.data_ptr(), (4, 3), (1, 4))
    assert v.dlpack_dtype == (0, 16, 1)


def test_exchange_api_from_py_object_rejects_non_views():
    with pytest.raises(TypeError, match="StridedMemoryView"):
        FROM_PY(view_api().managed_tensor_from_py_object_no_sync)([1, 2], ctypes.byref(
            ctypes.c_void_p()))


def test_exchange_api_to_py_object_rejects_bad_version_and_deletes_tensor():
    buf = np.arange(4, dtype=np.uint8)
    _, fake = make_capsule(buf, version=(2, 0))
    with pytest.raises(BufferError, match="version 2.0"):
        TO_PY(view_api().managed_tensor_to_py_object_no_sync)(
            ctypes.addressof(fake.managed), ctypes.byref(ctypes.c_void_p()))
    assert fake.deleted == 1     # ownership was passed to us, so we released it


def test_exchange_api_to_py_object_takes_ownership():
    buf = np.arange(6, dtype=np.int32)
    _, fake = make_capsule(buf, flags=1)
    out = ctypes.c_void_p()
    assert TO_PY(view_api().managed_tensor_to_py_object_no_sync)(
        ctypes.addressof(fake.managed), ctypes.byref(out)) == 0
    v = steal(out)
    assert (v.ptr, v.shape, v.readonly) == (buf.ctypes.data, (6,), True)
    assert fake.deleted == 0
    del v
    assert fake.deleted == 1


def test_exchange_api_dltensor_borrows_view_description():
    a = np.zeros((2, 5), dtype=np.float64)[:, ::2]
    v = StridedMemoryView.from_dlpack(a)
    t = DLTensor()
    assert DLTENSOR_FROM_PY(view_api().dltensor_from_py_object_no_sync)(v, ctypes.byref(t)) == 0
    assert t.data + t.byte_offset == a.ctypes.data
    assert [t.shape[i] for i in range(t.ndim)] == [2, 3]
    assert [t.strides[i] for i in range(t.ndim)] == list(np_strides(a))
    assert (t.dtype.code, t.dtype.bits) == (2, 64)


@pytest.mark.parametrize("device_type", [1, 2])
def test_exchange_api_current_work_stream_is_default_stream(device_type):
    out = ctypes.c_void_p(1234)
    assert CURRENT_STREAM(view_api().current_work_stream)(device_type, 0, ctypes.byref(out)) == 0
    assert out.value is None


def test_exchange_api_allocator_reports_error_through_callback():
    errors = []
    cb = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    out = ctypes.c_void_p(1)
    rc = ALLOCATOR(view_api().managed_tensor_allocator)(ctypes.byref(DLTensor()),
                                                         ctypes.byref(out), None, cb)
    assert rc == -1
    assert out.value is None
    assert errors and errors[0][0] == b"NotImplementedError"


def test_torch_subclass_with_chained_newer_table_uses_the_older_one(torch):
    torch_api = exchange_api(torch.Tensor)
    newer = DLPackExchangeAPI()
    newer.header.version.major = 2
    newer.header.prev_api = ctypes.addressof(torch_api)
    from dlpack_ctypes import _NAMES, _api
    cap = _api.PyCapsule_New(ctypes.addressof(newer), _NAMES[b"dlpack_exchange_api"], None)

    class Chained(torch.Tensor):
        __dlpack_c_exchange_api__ = cap
        _keep = newer

    t = torch.arange(5.0).as_subclass(Chained)
    calls = []
    Chained.__dlpack__ = lambda self, **kw: calls.append(kw)   # must not be used
    # The DLPack protocol's own reader (torch's plugin reads Tensor subclasses itself).
    from interop_core.registry import _registry

    v = _registry.read_with(_registry.new_entry("dlpack"), t)
    assert v.ptr == t.data_ptr()
    assert calls == []


# --- jax --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


JAX_SHAPES = {"matrix": (4, 6), "zero_size": (0, 3), "scalar_0d": ()}


@pytest.mark.parametrize("shape", JAX_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES_WITH_BF16)
def test_jax_view_has_same_memory_and_layout(jax, dtype, shape):
    x = jax.numpy.zeros(JAX_SHAPES[shape], dtype=dtype)
    v = StridedMemoryView.from_dlpack(x)
    assert v.shape == x.shape
    assert v.dlpack_dtype == DTYPES_WITH_BF16[dtype]
    if x.size:
        assert v.ptr == x.unsafe_buffer_pointer()
        assert v.strides == np_strides(np.empty(x.shape, dtype=np.uint8))


def aligned_zeros(shape, dtype, align=64):
    """Zeros at a 64-byte aligned address (XLA copies less aligned buffers)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.zeros(max(count, 1) * dtype.itemsize + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + max(count, 1) * dtype.itemsize].view(dtype)[:count].reshape(shape)


JAX_CONSUMER_LAYOUTS = {
    "contiguous": lambda dt: aligned_zeros((4, 6), dt),
    "transposed": lambda dt: aligned_zeros((4, 6), dt).T,
    "zero_size": lambda dt: aligned_zeros((0, 3), dt),
    "scalar_0d": lambda dt: aligned_zeros((), dt),
}


@pytest.mark.parametrize("layout", JAX_CONSUMER_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_consumes_view_zero_copy(jax, dtype, layout):
    a = JAX_CONSUMER_LAYOUTS[layout](dtype)
    x = jax.dlpack.from_dlpack(StridedMemoryView.from_dlpack(a))
    assert x.shape == a.shape and x.dtype == a.dtype
    if a.size:
        assert x.unsafe_buffer_pointer() == a.ctypes.data
        a[first(a)] = a.dtype.type(1)
        assert x[first(a)] == a.dtype.type(1)


class _RecordsWhatJaxAsks:
    """Hands jax a view's DLPack export, noting the max_version jax asked for and whether the
    versioned capsule it got says READ_ONLY."""

    def __init__(self, view):
        self.view, self.asked, self.readonly_flag = view, None, None

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.asked = kwargs.get("max_version")
        capsule = self.view.__dlpack__(**kwargs)
        if capsule_name(capsule) == b"dltensor_versioned":
            tensor = DLManagedTensorVersioned.from_address(capsule_pointer(capsule))
            self.readonly_flag = bool(tensor.flags & 1)
        return capsule


def _jax_takes_read_only(jax, view):
    """jax.dlpack.from_dlpack(view) of a read-only view: a legacy capsule (what jax asked for up
    to 0.11) cannot say read-only, so the view refuses it (None); a versioned one (jax 0.12)
    goes with its READ_ONLY flag set (the array jax made over the same memory)."""
    probe = _RecordsWhatJaxAsks(view)
    try:
        made = jax.dlpack.from_dlpack(probe)
    except BufferError as exc:
        assert "read-only" in str(exc) and probe.asked is None, (probe.asked, exc)
        return None
    assert probe.asked is not None and probe.readonly_flag is True
    return made


def test_jax_cannot_take_a_readonly_view_through_a_legacy_capsule(jax):
    a = aligned_zeros((4,), np.float64)
    a.flags.writeable = False
    made = _jax_takes_read_only(jax, StridedMemoryView.from_dlpack(a))
    if made is not None:
        assert made.unsafe_buffer_pointer() == a.ctypes.data


def test_jax_round_trip_through_view(jax):
    import interop_core

    x = jax.numpy.arange(12.0).reshape(3, 4)
    v = StridedMemoryView.from_dlpack(x)
    assert v.readonly                      # jax arrays are immutable, whichever path views them
    # jax's own import takes the read-only view only through a capsule that says read-only ...
    made = _jax_takes_read_only(jax, v)
    if made is not None:
        assert made.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    # ... and to(view, "jax") hands it over anyway (jax never writes into what it imports).
    y = interop_core.to(v, "jax")
    assert y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    assert (np.asarray(y) == np.asarray(x)).all()


# --- sub-byte element types (need the real dtype table in interop_core.core._dtypes) --------------

FLOAT4 = (17, 4, 1)


def test_padded_sub_byte_capsule_gives_one_byte_elements_and_exports_the_flag():
    buf = np.zeros(6, dtype=np.uint8)
    cap, _ = make_capsule(buf, dtype=FLOAT4, flags=4)
    v = StridedMemoryView.from_dlpack(cap)
    assert (v.dlpack_dtype, v.itemsize, v.shape) == (FLOAT4, 1, (6,))
    out = v.__dlpack__(max_version=(1, 3))
    assert DLManagedTensorVersioned.from_address(capsule_pointer(out)).flags & 4
    with pytest.raises(BufferError, match="sub-byte"):
        v.__dlpack__()


def test_packed_sub_byte_capsule_is_refused():
    buf = np.zeros(3, dtype=np.uint8)
    cap, fake = make_capsule(buf, dtype=FLOAT4, shape=(6,), strides=(1,))
    with pytest.raises(BufferError):
        StridedMemoryView.from_dlpack(cap)
    assert fake.deleted == 0       # left to the producer
