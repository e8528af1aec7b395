"""CUDA Array Interface, __array_interface__ and the buffer protocol: reading and exporting."""

import array
import ctypes
import gc
import mmap
import weakref

import numpy as np
import pytest

import interop_core.registry._registry
from interop_core import StridedMemoryView
from interop_core.dtypes import DLDataTypeCode, dtype_name, to_numpy_dtype

READERS = {
    "array_interface": StridedMemoryView.from_array_interface,
    "buffer_protocol": StridedMemoryView.from_buffer_protocol,
}

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "bool"]


def _base(dtype="float32"):
    return (np.arange(60) % 7).astype(dtype).reshape(3, 4, 5)


LAYOUTS = {
    "contiguous": lambda a: a,
    "sliced": lambda a: a[1:, ::2, 1:4],
    "transposed": lambda a: a.transpose(2, 0, 1),
    "fortran": lambda a: np.asfortranarray(a),
    "negative": lambda a: a[::-1, :, ::-2],
    "zero_size": lambda a: a[:, 2:2],
    "zero_d": lambda a: a[1, 2, 3, ...],
    "broadcast": lambda a: np.broadcast_to(a[0, 0], (4, 5)),
    "one_d": lambda a: a.ravel(),
}


def _ptr(a):
    return a.__array_interface__["data"][0]


def _check_view_matches(v, a):
    assert v.ptr == _ptr(a)
    assert v.shape == a.shape
    if a.size:  # numpy reports zero-size arrays as contiguous, whatever their strides
        assert v.strides_in_bytes == a.strides
        assert v.strides == tuple(s // a.itemsize for s in a.strides)
    assert v.itemsize == a.itemsize
    assert v.dtype == a.dtype
    assert v.readonly == (not a.flags.writeable)
    assert v.device_type == 1 and v.device_id == 0
    assert v.is_host_accessible and not v.is_device_accessible
    assert v.producer_stream is None
    assert v.owner is a


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_views_of_numpy_layouts(reader, layout):
    a = LAYOUTS[layout](_base())
    _check_view_matches(READERS[reader](a), a)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_of_numpy_dtypes(reader, dtype):
    a = _base(dtype)[:, 1::2]
    v = READERS[reader](a)
    _check_view_matches(v, a)
    assert v.dlpack_dtype[2] == 1


@pytest.mark.parametrize("reader", READERS)
def test_readonly_numpy_array_gives_readonly_view(reader):
    a = _base()
    a.flags.writeable = False
    v = READERS[reader](a)
    assert v.readonly
    assert not np.asarray(v).flags.writeable
    assert memoryview(v).readonly
    with pytest.raises(BufferError, match="read-only"):
        _get_buffer(v, PyBUF_WRITABLE)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_round_trip_shares_memory(reader, layout):
    a = LAYOUTS[layout](_base().copy())
    v = READERS[reader](a)
    b = np.asarray(v)
    assert b.shape == a.shape and b.dtype == a.dtype
    if a.size:
        assert b.strides == a.strides
    np.testing.assert_array_equal(b, a)
    if a.size:
        assert _ptr(b) == _ptr(a)
    if a.size and layout != "broadcast":
        b[...] = -1
        assert (a == -1).all()


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_memoryview_of_view_matches_numpy(reader, layout):
    a = LAYOUTS[layout](_base("int16"))
    m = memoryview(READERS[reader](a))
    expected = memoryview(a)
    assert (m.format, m.itemsize, m.shape) == ("h", 2, expected.shape)
    if a.size:
        assert m.strides == expected.strides
    assert m.tolist() == a.tolist()


@pytest.mark.parametrize("dtype", DTYPES)
def test_frombuffer_of_contiguous_view(dtype):
    a = _base(dtype).ravel()
    v = StridedMemoryView.from_array_interface(a)
    b = np.frombuffer(v, dtype=dtype)
    assert _ptr(b) == _ptr(a)
    np.testing.assert_array_equal(b, a)


def test_array_interface_export_is_v3_and_numpy_reads_it():
    a = _base()[:, ::2]
    v = StridedMemoryView.from_buffer_protocol(a)
    d = v.__array_interface__
    assert d["version"] == 3
    assert d["typestr"] == a.dtype.str and d["shape"] == a.shape
    assert d["strides"] == a.strides
    assert d["data"] == (_ptr(a), False)

    class Holder:
        __array_interface__ = d

    np.testing.assert_array_equal(np.asarray(Holder()), a)


def test_contiguous_export_may_omit_strides():
    a = _base()
    d = StridedMemoryView.from_array_interface(a).__array_interface__
    assert d["strides"] in (None, a.strides)


def test_host_view_has_no_cuda_array_interface():
    v = StridedMemoryView.from_array_interface(_base())
    assert not hasattr(v, "__cuda_array_interface__")


# --- buffer protocol sources ---------------------------------------------------------------------

def _mmap(n):
    m = mmap.mmap(-1, n)
    m.write(bytes(range(n)))
    return m


@pytest.mark.parametrize(
    "make, triple, shape, readonly",
    [
        (lambda: b"abcdef", (1, 8, 1), (6,), True),
        (lambda: bytearray(b"abcdef"), (1, 8, 1), (6,), False),
        (lambda: array.array("d", [1.0, 2.0]), (2, 64, 1), (2,), False),
        (lambda: array.array("i", [1, 2, 3]), (0, 32, 1), (3,), False),
        (lambda: array.array("H", [1, 2, 3]), (1, 16, 1), (3,), False),
        (lambda: array.array("q", [1]), (0, 64, 1), (1,), False),
        (lambda: _mmap(16), (1, 8, 1), (16,), False),
        (lambda: (ctypes.c_long * 4)(), (0, 64, 1), (4,), False),
        (lambda: (ctypes.c_float * 2 * 3)(), (2, 32, 1), (3, 2), False),
        (lambda: (ctypes.c_bool * 3)(), (6, 8, 1), (3,), False),
        (lambda: (ctypes.c_uint16 * 3)(), (1, 16, 1), (3,), False),
        (lambda: (ctypes.c_double * 1)(), (2, 64, 1), (1,), False),
        (lambda: memoryview(b"abcdefgh").cast("I"), (1, 32, 1), (2,), True),
        (lambda: memoryview(bytearray(24)).cast("d", (3, 1)), (2, 64, 1), (3, 1), False),
    ],
)
def test_buffer_protocol_sources(make, triple, shape, readonly):
    obj = make()
    v = StridedMemoryView.from_buffer_protocol(obj)
    assert v.dlpack_dtype == triple
    assert v.shape == shape
    assert v.readonly == readonly
    m = memoryview(obj)
    assert m.tobytes() == memoryview(v).tobytes()
    with memoryview(obj) as mm:
        # Same address: compare through numpy, which reads the buffer without copying.
        assert _ptr(np.asarray(mm)) == v.ptr


def test_buffer_view_of_mutable_source_sees_writes():
    buf = bytearray(8)
    v = StridedMemoryView.from_buffer_protocol(buf)
    buf[3] = 42
    assert np.asarray(v)[3] == 42
    np.asarray(v)[5] = 7
    assert buf[5] == 7


def test_buffer_is_held_while_view_lives():
    buf = bytearray(8)
    v = StridedMemoryView.from_buffer_protocol(buf)
    with pytest.raises(BufferError):
        buf.extend(b"x")  # resizing is refused while an export is held
    del v
    gc.collect()
    buf.extend(b"x")
    assert len(buf) == 9


def test_owner_stays_alive_while_view_lives():
    class Arr(np.ndarray):
        pass

    a = np.zeros(5).view(Arr)
    ref = weakref.ref(a)
    v = StridedMemoryView.from_array_interface(a)
    del a
    gc.collect()
    assert ref() is not None
    del v
    gc.collect()
    assert ref() is None


def test_export_keeps_view_alive():
    v = StridedMemoryView.from_array_interface(np.arange(4.0))
    ref = weakref.ref(v)
    m = memoryview(v)
    del v
    gc.collect()
    assert ref() is not None
    assert m.tolist() == [0.0, 1.0, 2.0, 3.0]
    m.release()
    gc.collect()
    assert ref() is None


def test_noncontiguous_view_refuses_simple_buffer():
    v = StridedMemoryView.from_array_interface(_base()[:, ::2])
    with pytest.raises(BufferError, match="not C-contiguous"):
        np.frombuffer(v, dtype=np.float32)


# --- buffer export flags, through the C API ----------------------------------------------------

PyBUF_SIMPLE = 0
PyBUF_WRITABLE = 0x0001
PyBUF_FORMAT = 0x0004
PyBUF_ND = 0x0008
PyBUF_STRIDES = 0x0010 | PyBUF_ND
PyBUF_C_CONTIGUOUS = 0x0020 | PyBUF_STRIDES
PyBUF_F_CONTIGUOUS = 0x0040 | PyBUF_STRIDES
PyBUF_ANY_CONTIGUOUS = 0x0080 | PyBUF_STRIDES


class Py_buffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)), ("internal", ctypes.c_void_p),
    ]


# Private function objects: ctypes.pythonapi.X is shared by every module of the process.
_get = ctypes.pythonapi["PyObject_GetBuffer"]
_get.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
_get.restype = ctypes.c_int
_release = ctypes.pythonapi["PyBuffer_Release"]
_release.argtypes = [ctypes.POINTER(Py_buffer)]
_release.restype = None


def _get_buffer(obj, flags):
    """Acquire and describe a buffer with exactly `flags`, then release it."""
    b = Py_buffer()
    _get(obj, ctypes.byref(b), flags)
    try:
        n = b.ndim
        return {
            "buf": b.buf, "len": b.len, "itemsize": b.itemsize, "readonly": b.readonly,
            "ndim": n, "format": b.format,
            "shape": None if not b.shape else tuple(b.shape[i] for i in range(n)),
            "strides": None if not b.strides else tuple(b.strides[i] for i in range(n)),
        }
    finally:
        _release(ctypes.byref(b))


@pytest.mark.parametrize(
    "flags", [PyBUF_SIMPLE, PyBUF_ND, PyBUF_STRIDES, PyBUF_C_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS,
              PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE])
def test_buffer_flags_on_c_contiguous_view(flags):
    a = _base("int32")
    info = _get_buffer(StridedMemoryView.from_array_interface(a), flags)
    assert info["buf"] == _ptr(a) and info["len"] == a.nbytes and info["itemsize"] == 4
    assert info["format"] == (b"i" if flags & PyBUF_FORMAT else None)
    assert info["shape"] == (a.shape if flags & PyBUF_ND else None)
    assert info["strides"] == (a.strides if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else None)


@pytest.mark.parametrize(
    "layout, flags, ok",
    [
        ("fortran", PyBUF_F_CONTIGUOUS, True),
        ("fortran", PyBUF_ANY_CONTIGUOUS, True),
        ("fortran", PyBUF_C_CONTIGUOUS, False),
        ("fortran", PyBUF_ND, False),
        ("fortran", PyBUF_SIMPLE, False),
        ("contiguous", PyBUF_F_CONTIGUOUS, False),
        ("sliced", PyBUF_STRIDES, True),
        ("sliced", PyBUF_ANY_CONTIGUOUS, False),
        ("negative", PyBUF_STRIDES, True),
        ("zero_size", PyBUF_C_CONTIGUOUS, True),
        ("zero_d", PyBUF_SIMPLE, True),
    ],
)
def test_buffer_contiguity_requests(layout, flags, ok):
    a = LAYOUTS[layout](_base())
    v = StridedMemoryView.from_array_interface(a)
    if ok:
        info = _get_buffer(v, flags)
        assert info["len"] == a.nbytes
    else:
        with pytest.raises(BufferError, match="contiguous"):
            _get_buffer(v, flags)


def test_zero_d_buffer_has_no_shape():
    a = np.float64(3.5) * np.ones(())
    info = _get_buffer(StridedMemoryView.from_array_interface(a), PyBUF_STRIDES | PyBUF_FORMAT)
    assert info["ndim"] == 0 and info["shape"] is None and info["len"] == 8


def test_high_ndim_round_trip_uses_heap_extents():
    a = np.zeros((1, 2) * 5, dtype=np.uint8)[..., ::-1]
    v = StridedMemoryView.from_buffer_protocol(a)
    assert v.ndim == 10
    m = memoryview(v)
    assert m.shape == a.shape and m.strides == a.strides


# --- types the protocols cannot name ------------------------------------------------------------

def test_bfloat16_view_exports_only_through_dlpack():
    pytest.importorskip("ml_dtypes")
    v = StridedMemoryView.from_array_interface(np.zeros(4, np.uint16)).view(dtype="bfloat16")
    assert v.dlpack_dtype == (4, 16, 1)
    with pytest.raises(BufferError, match="DLPack"):
        memoryview(v)
    with pytest.raises(BufferError, match="DLPack"):
        v.__array_interface__  # noqa: B018
    # Without a format request the bytes themselves can still be taken.
    assert _get_buffer(v, PyBUF_SIMPLE)["len"] == 8


def test_vector_dtype_view_exports_only_through_dlpack():
    v = StridedMemoryView.from_array_interface(np.zeros(4, np.complex128)).view(dtype=(2, 32, 4))
    assert v.itemsize == 16 and v.dlpack_dtype == (2, 32, 4)
    with pytest.raises(TypeError, match="lanes"):
        v.dtype  # noqa: B018
    with pytest.raises(BufferError, match="DLPack"):
        memoryview(v)


# --- array interface variants -------------------------------------------------------------------

class Iface:
    """A producer that only carries an __array_interface__ dict."""

    def __init__(self, d, keep=None):
        self.__array_interface__ = d
        self.keep = keep


def test_array_interface_data_as_buffer_object_with_offset():
    data = bytearray(np.arange(8, dtype=np.int32).tobytes())
    obj = Iface({"version": 3, "shape": (3,), "typestr": "<i4", "data": data, "offset": 8})
    v = StridedMemoryView.from_array_interface(obj)
    assert np.asarray(v).tolist() == [2, 3, 4]
    assert v.ptr == _ptr(np.frombuffer(data, dtype=np.uint8)) + 8
    assert not v.readonly
    with pytest.raises(BufferError):
        data.extend(b"x")  # the view holds the data buffer
    del v
    gc.collect()
    data.extend(b"x")


def test_array_interface_readonly_buffer_object():
    obj = Iface({"version": 3, "shape": (2,), "typestr": "|u1", "data": b"ab"})
    v = StridedMemoryView.from_array_interface(obj)
    assert v.readonly and bytes(memoryview(v)) == b"ab"


def test_array_interface_data_none_uses_the_objects_own_buffer():
    class Own(bytearray):
        @property
        def __array_interface__(self):
            return {"version": 3, "shape": (2, 2), "typestr": "|u1", "data": None}

    obj = Own(b"abcd")
    v = StridedMemoryView.from_array_interface(obj)
    assert v.shape == (2, 2) and np.asarray(v).tolist() == [[97, 98], [99, 100]]


def test_array_interface_descr_consistent_is_accepted():
    a = _base()
    d = dict(a.__array_interface__)
    assert d["descr"] == [("", "<f4")]
    v = StridedMemoryView.from_array_interface(Iface(d, keep=a))
    assert v.ptr == _ptr(a)


def test_array_interface_explicit_strides_with_tuple_data():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    d = {"version": 3, "shape": (2, 2), "typestr": "<i8", "strides": (64, -8),
         "data": (_ptr(a) + 8 * 3, True)}
    v = StridedMemoryView.from_array_interface(Iface(d, keep=a))
    assert v.strides == (8, -1) and v.readonly
    assert np.asarray(v).tolist() == [[3, 2], [11, 10]]


# --- CUDA Array Interface (fake producers; nothing is dereferenced) -----------------------------

class FakeCAI:
    def __init__(self, d):
        self.__cuda_array_interface__ = d


def _cai(**kw):
    d = {"shape": (2, 3), "typestr": "<f4", "data": (0x7F0000001000, False), "version": 3}
    d.update(kw)
    return d


@pytest.mark.parametrize("version", [2, 3])
def test_cai_contiguous(version):
    obj = FakeCAI(_cai(version=version, strides=None))
    v = StridedMemoryView.from_cuda_array_interface(obj)
    assert v.ptr == 0x7F0000001000 and v.shape == (2, 3) and v.strides == (3, 1)
    assert v.device_type == 2 and v.device_id == 0
    assert v.is_device_accessible and not v.is_host_accessible
    assert v.dlpack_dtype == (2, 32, 1) and not v.readonly and v.owner is obj
    assert v.producer_stream is None


def test_cai_strided_readonly_with_descr():
    d = _cai(shape=(4, 5), strides=(4, 16), typestr="<i8", data=(0x1000, True),
             descr=[("", "<i8")])
    d["strides"] = (8, 32)
    v = StridedMemoryView.from_cuda_array_interface(FakeCAI(d))
    assert v.strides == (1, 4) and v.strides_in_bytes == (8, 32) and v.readonly


@pytest.mark.parametrize("stream", [1, 2, 0xDEADBEEF, 0x7FFF_FFFF_F000])
def test_cai_v3_stream_becomes_producer_stream(stream):
    v = StridedMemoryView.from_cuda_array_interface(FakeCAI(_cai(stream=stream)))
    assert v.producer_stream is not None
    assert v.producer_stream % 2**64 == stream


def test_cai_v2_ignores_stream_field():
    v = StridedMemoryView.from_cuda_array_interface(FakeCAI(_cai(version=2, stream=0x5000)))
    assert v.producer_stream is None


def test_cai_zero_size_null_pointer():
    v = StridedMemoryView.from_cuda_array_interface(FakeCAI(_cai(shape=(0, 3), data=(0, False))))
    assert v.size == 0 and v.ptr == 0


def test_cai_export_round_trip():
    src = FakeCAI(_cai(shape=(4, 6), strides=(4, 16), stream=0x7000, data=(0x2000, True)))
    v = StridedMemoryView.from_cuda_array_interface(src)
    d = v.__cuda_array_interface__
    assert d["version"] == 3 and d["typestr"] == "<f4" and d["shape"] == (4, 6)
    assert d["strides"] == (4, 16) and d["data"] == (0x2000, True) and d["stream"] == 0x7000
    w = StridedMemoryView.from_cuda_array_interface(v)
    assert (w.ptr, w.shape, w.strides, w.readonly, w.producer_stream) == (
        v.ptr, v.shape, v.strides, v.readonly, v.producer_stream)


def test_cai_export_contiguous_and_no_stream():
    v = StridedMemoryView.from_cuda_array_interface(FakeCAI(_cai()))
    d = v.__cuda_array_interface__
    assert d["stream"] is None and d["strides"] in (None, (12, 4))


def test_device_view_refuses_host_protocols():
    v = StridedMemoryView.from_cuda_array_interface(FakeCAI(_cai()))
    with pytest.raises(BufferError, match="device memory"):
        memoryview(v)
    assert not hasattr(v, "__array_interface__")


def test_cai_keeps_producer_alive():
    obj = FakeCAI(_cai())
    ref = weakref.ref(obj)
    v = StridedMemoryView.from_cuda_array_interface(obj)
    del obj
    gc.collect()
    assert ref() is not None
    del v
    gc.collect()
    assert ref() is None


# --- void typestrs: opaque elements ---------------------------------------------------------------

STRUCTURED = np.dtype([("array1", np.float64), ("array2", np.int64)])


def test_a_structured_array_is_viewed_whole_as_opaque_elements_of_its_itemsize():
    x = np.array([(1.0, 2), (2.0, 3), (4.5, -1)], dtype=STRUCTURED)
    v = StridedMemoryView.from_array_interface(x)
    assert (v.ptr, v.shape, v.itemsize) == (x.ctypes.data, (3,), 16)
    assert v.dlpack_dtype == (DLDataTypeCode.kDLOpaqueHandle, 8, 16)
    assert v.dtype == np.dtype("V16") and dtype_name(v.dlpack_dtype) == "void128"
    assert v.__array_interface__["typestr"] == "|V16"
    back = np.asarray(v)        # the bytes, shared: the fields come back with .view()
    assert np.shares_memory(back, x) and (back.view(STRUCTURED) == x).all()


def test_a_void_typestr_reads_as_opaque_bytes_through_the_cuda_array_interface():
    holder = np.zeros(8, dtype=np.uint8)
    cai = {"shape": (2,), "typestr": "|V4", "data": (holder.ctypes.data, False), "version": 3,
           "descr": [("a", "<i2"), ("b", "<i2")], "strides": None}
    v = interop_core.registry._registry.read_with(
        interop_core.registry._registry.new_entry("cuda_array_interface"),
        type("Device", (), {"__cuda_array_interface__": cai})())
    assert v.dlpack_dtype == (3, 8, 4) and v.shape == (2,) and v.strides == (1,)


def test_opaque_bytes_convert_to_numpys_void_type_and_back():
    assert to_numpy_dtype((3, 8, 12)) == np.dtype("V12")
    assert StridedMemoryView.from_pointer(0x1000, (3,), dtype="|V12").dlpack_dtype == (3, 8, 12)
    assert StridedMemoryView.from_pointer(0x1000, (3,), dtype="|V12").itemsize == 12


def test_a_structured_descr_with_a_scalar_typestr_is_refused_naming_both():
    x = np.zeros(2, dtype=STRUCTURED)
    interface = dict(x.__array_interface__, typestr="<f8")

    class Lying:
        __array_interface__ = interface

    with pytest.raises(ValueError, match="structured type whose typestr '<f8'"):
        StridedMemoryView.from_array_interface(Lying())
