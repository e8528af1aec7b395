"""Malformed interface dicts and buffer exporters raise clean, named errors (never crash)."""

import ctypes

import numpy as np
import pytest
from conftest import InterfaceThatRaises
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interop_core
from interop_core import StridedMemoryView

# A real allocation so that well-formed dicts drawn by the fuzzer describe memory that exists.
BACKING = np.zeros(4096, dtype=np.uint8)
PTR = BACKING.__array_interface__["data"][0]


class FakeCAI:
    def __init__(self, d):
        self.__cuda_array_interface__ = d


class FakeAI:
    def __init__(self, d):
        self.__array_interface__ = d
        self.keep = BACKING


def _good(**changes):
    d = {"shape": (2, 3), "typestr": "<f4", "data": (PTR, False), "version": 3}
    for key, value in changes.items():
        if value is _DELETE:
            d.pop(key, None)
        else:
            d[key] = value
    return d


_DELETE = object()

CAI = ("cai", lambda d: StridedMemoryView.from_cuda_array_interface(FakeCAI(d)))
AI = ("ai", lambda d: StridedMemoryView.from_array_interface(FakeAI(d)))
BOTH = [CAI, AI]

# (changes to a good dict, exception, message fragment).  Every one applies to both readers.
MALFORMED = [
    ({"shape": _DELETE}, ValueError, "missing the required key 'shape'"),
    ({"typestr": _DELETE}, ValueError, "missing the required key 'typestr'"),
    ({"version": _DELETE}, ValueError, "missing the required key 'version'"),
    ({"shape": 6}, TypeError, r"\['shape'\] must be a tuple"),
    ({"shape": "23"}, TypeError, r"\['shape'\] must be a tuple"),
    ({"shape": (2, "3")}, TypeError, r"\['shape'\]\[1\] must be an int"),
    ({"shape": (2, 3.0)}, TypeError, r"\['shape'\]\[1\] must be an int"),
    ({"shape": (None,)}, TypeError, r"\['shape'\]\[0\] must be an int"),
    ({"shape": (True, 3)}, TypeError, r"\['shape'\]\[0\] must be an int"),
    ({"shape": (2, -3)}, ValueError, r"\['shape'\]\[1\] is negative"),
    ({"shape": (2**63,)}, ValueError, "too large"),
    ({"shape": (2**64 + 5,)}, ValueError, "too large"),
    ({"shape": (2**40, 2**40)}, ValueError, "more bytes than fit"),
    ({"shape": (2**61,)}, ValueError, "more bytes than fit"),
    ({"shape": (1,) * 65}, ValueError, "at most 64"),
    ({"strides": (4,)}, ValueError, "has 1 entries but shape has 2"),
    ({"strides": (12, 4, 4)}, ValueError, "has 3 entries"),
    ({"strides": 4}, TypeError, r"\['strides'\] must be None or a tuple"),
    ({"strides": (12, "4")}, TypeError, r"\['strides'\]\[1\] must be an int"),
    ({"strides": (12, 2**64)}, ValueError, "out of range"),
    ({"strides": (12, 2)}, BufferError, "not a multiple of the itemsize"),
    ({"strides": (13, 4)}, BufferError, "not a multiple of the itemsize"),
    # Each stride fits int64, yet the offsets they reach do not.
    ({"shape": (2**40, 1), "strides": (2**30, 4)}, ValueError, "outside the int64 range"),
    ({"shape": (3, 1), "strides": (2**62, 4)}, ValueError, "outside the int64 range"),
    ({"shape": (3, 1), "strides": (-(2**62) - 4, 4)}, ValueError, "outside the int64 range"),
    ({"typestr": "<x4"}, ValueError, "unknown kind"),
    ({"typestr": "float32"}, ValueError, "malformed typestr"),
    ({"typestr": ""}, ValueError, "malformed typestr"),
    ({"typestr": "<f3"}, ValueError, "no DLPack type"),
    ({"typestr": "<f16"}, ValueError, "no DLPack type"),
    ({"typestr": ">f4"}, ValueError, "native byte order"),
    ({"typestr": ">i4"}, ValueError, "native byte order"),
    ({"typestr": "<M8"}, ValueError, "datetime"),
    ({"typestr": "|O8"}, ValueError, "object"),
    ({"typestr": "|V0"}, ValueError, "void elements of 0 bytes"),
    ({"typestr": "|S4"}, ValueError, "string"),
    ({"typestr": 4}, TypeError, "typestr must be a str"),
    ({"typestr": None}, TypeError, "typestr must be a str"),
    ({"data": (float(PTR), False)}, TypeError, r"\['data'\]\[0\] must be an int"),
    ({"data": ("0x1000", False)}, TypeError, r"\['data'\]\[0\] must be an int"),
    ({"data": (None, False)}, TypeError, r"\['data'\]\[0\] must be an int"),
    ({"data": (-8, False)}, ValueError, "not a valid address"),
    ({"data": (2**64, False)}, ValueError, "not a valid address"),
    ({"data": (PTR, "no")}, TypeError, "readonly"),
    ({"data": (PTR, False, 1)}, TypeError, r"\(ptr, readonly\) tuple"),
    ({"data": (0, False)}, ValueError, "null pointer"),
    ({"mask": (PTR, False)}, BufferError, "mask"),
    ({"descr": [("a", "<f4"), ("b", "<f4")]}, ValueError, "structured"),
    ({"descr": "<f4"}, TypeError, "descr"),
    ({"version": "3"}, TypeError, r"\['version'\] must be an int"),
    ({"version": 99}, ValueError, r"\['version'\] is 99"),
    ({"version": -1}, ValueError, r"\['version'\] is -1"),
]


@pytest.mark.parametrize("reader", BOTH, ids=lambda r: r[0])
@pytest.mark.parametrize(
    "changes, exc, message", MALFORMED,
    ids=[f"{'-'.join(c)}-{i}" for i, (c, _, _) in enumerate(MALFORMED)],
)
def test_malformed_dicts_raise_named_errors(reader, changes, exc, message):
    with pytest.raises(exc, match=message):
        reader[1](_good(**changes))


@pytest.mark.parametrize(
    "changes, exc, message",
    [
        ({"data": _DELETE}, ValueError, "missing the required key 'data'"),
        ({"data": bytearray(24)}, TypeError, r"\(ptr, readonly\) tuple"),
        ({"stream": 0}, ValueError, "forbids"),
        ({"stream": -5}, ValueError, "not a valid stream"),
        ({"stream": 2**64}, ValueError, "not a valid stream"),
        ({"stream": "default"}, TypeError, r"\['stream'\] must be an int"),
        ({"stream": 1.0}, TypeError, r"\['stream'\] must be an int"),
        ({"version": 4}, ValueError, "versions 0 to 3"),
    ],
)
def test_malformed_cai_specific(changes, exc, message):
    with pytest.raises(exc, match=message):
        CAI[1](_good(**changes))


@pytest.mark.parametrize(
    "changes, exc, message",
    [
        ({"version": 2}, ValueError, "versions 3 to 3"),
        ({"data": 1234}, TypeError, "buffer object"),
        ({"data": object()}, TypeError, "bytes-like|buffer"),
        ({"data": bytearray(8)}, ValueError, "its data buffer has 8 bytes"),
        ({"data": bytearray(24), "offset": 4}, ValueError, "data buffer has 24 bytes"),
        ({"data": bytearray(24), "offset": -1}, ValueError, "outside the 24-byte buffer"),
        ({"data": bytearray(24), "offset": 25}, ValueError, "outside the 24-byte buffer"),
        ({"data": bytearray(24), "offset": "0"}, TypeError, r"\['offset'\] must be an int"),
        ({"data": bytearray(24), "strides": (-12, 4)}, ValueError, "describes bytes"),
    ],
)
def test_malformed_array_interface_specific(changes, exc, message):
    with pytest.raises(exc, match=message):
        AI[1](_good(**changes))


@pytest.mark.parametrize(
    "data, message",
    [
        (_DELETE, r"\['data'\] is missing, so the .*FakeAI itself must export a buffer"),
        (None, r"\['data'\] is None, so the .*FakeAI itself must export a buffer"),
        ([PTR, False], r"\['data'\] must be a \(ptr, readonly\) tuple or a buffer object, "
                       r"got list \[\d+, False\]"),
        ({"ptr": 1}, r"\['data'\] must be .* got dict \{'ptr': 1\}"),
    ],
    ids=["missing", "None", "list", "dict"],
)
def test_array_interface_data_that_is_no_buffer_is_named_with_its_value(data, message):
    # Python's own "a bytes-like object is required" names neither the field nor the value.
    with pytest.raises(TypeError, match=message) as caught:
        AI[1](_good(data=data))
    assert isinstance(caught.value.__cause__, TypeError)


@pytest.mark.parametrize(
    "error, exc",
    [(RuntimeError("device lost"), BufferError), (KeyError("x"), BufferError),
     (ZeroDivisionError(), BufferError), (ValueError("bad"), ValueError),
     (TypeError("bad"), TypeError), (AttributeError("gone"), TypeError)],
)
@pytest.mark.parametrize("which", ["cai", "ai"])
@pytest.mark.parametrize("entry", ["constructor", "view", "from_any", "to"])
def test_properties_that_raise_give_clean_errors(error, exc, which, entry):
    ctor = {"constructor": (StridedMemoryView.from_cuda_array_interface if which == "cai"
                            else StridedMemoryView.from_array_interface),
            "view": interop_core.view, "from_any": StridedMemoryView.from_any,
            "to": lambda obj: interop_core.to(obj, "numpy")}[entry]
    holder = type("Holder", (), {("__cuda_array_interface__" if which == "cai"
                                  else "__array_interface__"): InterfaceThatRaises.__dict__[
                                      "__cuda_array_interface__"]})
    obj = holder()
    obj.error = error
    with pytest.raises(exc) as raised:
        ctor(obj)
    if exc is BufferError:
        assert "Holder" in str(raised.value) and raised.value.__cause__ is error


@pytest.mark.parametrize("which", ["cai", "ai"])
@pytest.mark.parametrize("value", [None, [("shape", (1,))], (1, 2), "dict", 3])
def test_interface_that_is_not_a_dict(which, value):
    cls = FakeCAI if which == "cai" else FakeAI
    ctor = (StridedMemoryView.from_cuda_array_interface if which == "cai"
            else StridedMemoryView.from_array_interface)
    with pytest.raises(TypeError, match="must be a dict"):
        ctor(cls(value))


@pytest.mark.parametrize("which", ["cai", "ai"])
def test_missing_interface_is_a_type_error(which):
    ctor = (StridedMemoryView.from_cuda_array_interface if which == "cai"
            else StridedMemoryView.from_array_interface)
    with pytest.raises(TypeError, match="has no usable"):
        ctor(object())


@pytest.mark.parametrize("obj", [object(), 3, "text", None, [1, 2]])
def test_buffer_protocol_on_non_buffers(obj):
    with pytest.raises(TypeError):
        StridedMemoryView.from_buffer_protocol(obj)


def test_buffer_protocol_structured_format():
    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]

    with pytest.raises(ValueError, match="unsupported buffer format"):
        StridedMemoryView.from_buffer_protocol((Pair * 2)())


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros(3, dtype=">i4"), "native byte order"),
        (np.zeros(3, dtype=np.longdouble), "unsupported buffer format|does not fit"),
        (np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]), "unsupported buffer format"),
        (np.zeros(2, dtype="U3"), "unsupported buffer format"),
    ],
)
def test_buffer_protocol_unviewable_formats(array, message):
    with pytest.raises(ValueError, match=message):
        StridedMemoryView.from_buffer_protocol(array)


def test_buffer_protocol_odd_byte_strides():
    # A record array field: element stride 12 bytes is not a multiple of the 8-byte itemsize.
    rec = np.zeros(4, dtype=[("a", "<f4"), ("b", "<f8")])
    field = rec["b"]
    assert field.strides == (12,)
    with pytest.raises(BufferError, match="not a multiple of its itemsize"):
        StridedMemoryView.from_buffer_protocol(field)
    with pytest.raises(BufferError, match="not a multiple of the itemsize"):
        StridedMemoryView.from_array_interface(field)


# --- fuzzing -------------------------------------------------------------------------------------

_ints = st.one_of(
    st.integers(-4, 64), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 2**63 - 1, 2**64]))
_junk = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=4), st.binary(max_size=8),
    st.just(object()), st.lists(st.integers(0, 4), max_size=3),
)
_typestrs = st.one_of(
    st.sampled_from(["<f4", "<f8", "|u1", "|b1", "<c8", "<i2", ">i4", "<M8", "|O8", "|V4",
                     "<f2", "<u8", "|i1", "<f16", "=f4"]),
    st.text(max_size=5), _junk,
)
_shapes = st.one_of(
    st.lists(st.integers(0, 8), max_size=4).map(tuple),
    st.lists(st.one_of(_ints, _junk), max_size=5).map(tuple),
    st.lists(st.integers(0, 3), min_size=60, max_size=70).map(tuple),
    _junk,
)
_strides = st.one_of(
    st.none(), st.lists(st.integers(-64, 64), max_size=4).map(tuple),
    st.lists(st.one_of(_ints, _junk), max_size=5).map(tuple), _junk,
)
_data = st.one_of(
    st.tuples(st.just(PTR), st.booleans()),
    st.tuples(st.one_of(_ints, _junk), st.one_of(st.booleans(), _junk)),
    st.tuples(st.just(PTR)),
    st.binary(max_size=64), st.builds(bytearray, st.binary(max_size=64)),
    _junk,
)
_valid = {
    "shape": st.lists(st.integers(0, 6), max_size=4).map(tuple),
    "typestr": st.sampled_from(["<f4", "<f8", "|u1", "|b1", "<c8", "<i2", "<u8", "=f4"]),
    "data": st.tuples(st.just(PTR), st.booleans()),
    "version": st.sampled_from([2, 3]),
    "strides": st.one_of(st.none(), st.lists(st.integers(-4, 4).map(lambda k: 8 * k),
                                             max_size=4).map(tuple)),
    "stream": st.one_of(st.none(), st.integers(1, 2**64 - 1)),
}
_wild = {
    "shape": _shapes, "typestr": _typestrs, "data": _data, "strides": _strides,
    "version": st.one_of(st.integers(-1, 5), _junk), "stream": st.one_of(_ints, _junk),
    "mask": st.one_of(st.none(), _junk), "offset": st.one_of(_ints, _junk),
    "descr": st.one_of(st.none(), st.just([("", "<f4")]), st.just([("a", "<f4")]), _junk),
}


@st.composite
def _dicts(draw):
    """Mostly well-formed dicts with a few keys replaced by wild values or removed."""
    d = {}
    for key in ("shape", "typestr", "data", "version"):
        d[key] = draw(_valid[key])
    for key in ("strides", "stream"):
        if draw(st.booleans()):
            d[key] = draw(_valid[key])
    for key in draw(st.sets(st.sampled_from(sorted(_wild)), max_size=3)):
        d[key] = draw(_wild[key])
    for key in draw(st.sets(st.sampled_from(sorted(d)), max_size=1)):
        del d[key]
    return d


_CLEAN = (TypeError, ValueError, BufferError)


def _exercise(v):
    # Metadata and exports only; the memory is never dereferenced (a fuzzed pointer may be wild).
    repr(v)
    assert len(v.shape) == v.ndim == len(v.strides)
    assert v.itemsize > 0
    if v.is_device_accessible:
        v.__cuda_array_interface__  # noqa: B018
    else:
        v.__array_interface__  # noqa: B018


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=_dicts())
def test_fuzz_cuda_array_interface(d):
    try:
        v = StridedMemoryView.from_cuda_array_interface(FakeCAI(d))
    except _CLEAN:
        return
    _exercise(v)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=_dicts())
def test_fuzz_array_interface(d):
    try:
        v = StridedMemoryView.from_array_interface(FakeAI(d))
    except _CLEAN:
        return
    _exercise(v)


@settings(max_examples=200, deadline=None)
@given(d=_dicts(), data=st.one_of(st.binary(max_size=64), st.builds(bytearray, st.binary(max_size=64))))
def test_fuzz_array_interface_buffer_data_stays_in_bounds(d, data):
    d["data"] = data
    try:
        v = StridedMemoryView.from_array_interface(FakeAI(d))
    except _CLEAN:
        return
    # Data came from a real buffer and passed the bounds check, so reading it must be safe.
    if v.size and v.dlpack_dtype[0] != 6:
        np.asarray(v).sum()


# --- __dlpack_device__ that does not return a DLPack device ------------------------------------

class _DlpackWithDevice:
    """A DLPack producer over a numpy array whose __dlpack_device__ returns ``device``."""

    def __init__(self, device):
        self.array = np.arange(3.0)
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


@pytest.mark.parametrize(("device", "exc"), [
    ("cpu", TypeError), ((1,), TypeError), ((1.5, 0), TypeError), ((True, 0), TypeError),
    ((1, "0"), TypeError), (None, TypeError), ((2**70, 0), ValueError)])
def test_a_malformed_dlpack_device_names_the_object_the_method_and_the_value(device, exc):
    producer = _DlpackWithDevice(device)
    with pytest.raises(exc) as info:
        StridedMemoryView.from_dlpack(producer)
    message = str(info.value)
    assert "_DlpackWithDevice.__dlpack_device__()" in message
    assert repr(device) in message


def test_a_dlpack_device_enum_is_an_int():
    import enum

    class Kind(enum.IntEnum):
        CPU = 1

    assert StridedMemoryView.from_dlpack(_DlpackWithDevice((Kind.CPU, 0))).shape == (3,)


# --- Shards.from_pieces: ids and extents that do not fit ---------------------------------------

@pytest.mark.parametrize(("replica", "exc", "message"), [
    (2**70, ValueError, "shard 0: replica id 1180591620717411303424 is larger than 2\\*\\*62"),
    (-1, ValueError, "shard 0: replica id -1 is negative"),
    (1.0, TypeError, r"shard 0: its replica id must be an int, got float \(1.0\)"),
    (True, TypeError, "shard 0: its replica id must be an int, got True"),
])
def test_shards_refuse_replica_ids_that_are_not_small_ints(replica, exc, message):
    from interop_core import Shards

    piece = np.zeros((2, 3))
    with pytest.raises(exc, match=message):
        Shards.from_pieces((2, 3), [(piece, (slice(0, 2), slice(0, 3)), replica)])


@pytest.mark.parametrize("shape", [(2.0, 3), (2.5, 3), ("2", 3), (2, None)])
def test_shards_refuse_extents_that_are_not_ints_instead_of_truncating(shape):
    from interop_core import Shards

    with pytest.raises(TypeError, match=r"shape .*: extent \d is .*not an int"):
        Shards.from_pieces(shape, [(np.zeros((2, 3)), (slice(0, 2), slice(0, 3)))])


@pytest.mark.parametrize("shape", [(2**40, 2**40), (2**31, 2**31, 4), (2**63,)])
def test_shards_refuse_a_global_shape_whose_volume_overflows_int64(shape):
    from interop_core import Shards

    piece = np.zeros((0,) * len(shape))
    index = tuple(slice(0, 0) for _ in shape)
    with pytest.raises(ValueError, match="more elements than fit in int64"):
        Shards.from_pieces(shape, [(piece, index)])


def test_shards_take_numpy_integer_extents_and_an_empty_huge_shape():
    from interop_core import Shards

    found = Shards.from_pieces((np.int64(2), np.int32(3)),
                               [(np.zeros((2, 3)), (slice(0, 2), slice(0, 3)))])
    assert found.shape == (2, 3)
    empty = Shards.from_pieces((2**40, 2**40, 0), [(np.zeros((0, 0, 0)),
                                                    (slice(0, 0),) * 3)])
    assert empty.shape == (2**40, 2**40, 0)
