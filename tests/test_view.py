"""StridedMemoryView and Buffer: construction, metadata, derived views, from_any dispatch."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from interop_core import Buffer, StridedLayout, StridedMemoryView


class Owner:
    """A weak-referenceable stand-in for an allocation's owner."""

    def __init__(self, nbytes: int):
        self.array = np.arange(nbytes, dtype=np.uint8)

    @property
    def ptr(self) -> int:
        return self.array.ctypes.data


# --- Buffer -----------------------------------------------------------------------------------


def test_buffer_from_handle_records_address_size_device_owner():
    owner = Owner(64)
    buf = Buffer.from_handle(owner.ptr, 64, owner=owner, device="cuda:1")
    assert (buf.ptr, buf.size, buf.device_type, buf.device_id) == (owner.ptr, 64, 2, 1)
    assert buf.owner is owner
    assert "size=64" in repr(buf) and "cuda:1" in repr(buf)


@pytest.mark.parametrize(
    ("device", "expected"),
    [(None, (1, 0)), ("cpu", (1, 0)), ("cuda", (2, 0)), ("cuda:3", (2, 3)),
     ("cuda_host", (3, 0)), ("cuda_managed:1", (13, 1)), ((2, 5), (2, 5))],
)
def test_buffer_device_argument_forms(device, expected):
    buf = Buffer.from_handle(4096, 8, device=device)
    assert (buf.device_type, buf.device_id) == expected


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"ptr": "0x10", "size": 8}, TypeError, "ptr must be an int"),
        ({"ptr": 1.5, "size": 8}, TypeError, "ptr must be an int"),
        ({"ptr": -1, "size": 8}, ValueError, "not a valid address"),
        ({"ptr": 2**64, "size": 8}, ValueError, "not a valid address"),
        ({"ptr": 16, "size": -1}, ValueError, "size must be >= 0"),
        ({"ptr": 16, "size": 8.0}, TypeError, "size must be an int"),
        ({"ptr": 16, "size": 8, "device": "tpu"}, ValueError, "unknown device"),
        ({"ptr": 16, "size": 8, "device": "cuda:x"}, ValueError, "not a non-negative integer"),
        ({"ptr": 16, "size": 8, "device": "cuda:"}, ValueError, "not a non-negative integer"),
        ({"ptr": 16, "size": 8, "device": "cuda:01"}, ValueError, "not a non-negative integer"),
        ({"ptr": 16, "size": 8, "device": "cuda:+1"}, ValueError, "not a non-negative integer"),
        ({"ptr": 16, "size": 8, "device": "cuda: 1"}, ValueError, "not a non-negative integer"),
        ({"ptr": 16, "size": 8, "device": (2, -1)}, ValueError, "ordinal must be >= 0"),
        ({"ptr": 16, "size": 8, "device": 3.0}, TypeError, "device must be"),
    ],
)
def test_buffer_from_handle_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Buffer.from_handle(**kwargs)


def test_buffer_and_view_cannot_be_constructed_directly():
    with pytest.raises(TypeError, match="from_handle"):
        Buffer()
    with pytest.raises(TypeError, match="from_any"):
        StridedMemoryView()


# --- from_buffer ------------------------------------------------------------------------------


def test_from_buffer_views_memory_with_layout_and_dtype():
    owner = Owner(48)
    buf = Buffer.from_handle(owner.ptr, 48, owner=owner)
    view = StridedMemoryView.from_buffer(buf, StridedLayout.dense((3, 4), 4, "F"), np.float32)
    assert view.ptr == owner.ptr
    assert view.shape == (3, 4) and view.strides == (1, 3) and view.strides_in_bytes == (4, 12)
    assert view.dtype == np.float32 and view.itemsize == 4 and view.nbytes == 48
    assert view.owner is owner and not view.readonly
    assert view.is_host_accessible and not view.is_device_accessible


def test_from_buffer_honours_slice_offset():
    owner = Owner(64)
    buf = Buffer.from_handle(owner.ptr, 64, owner=owner)
    layout = StridedLayout.dense((4, 4), 4)[1:, 1:]
    view = StridedMemoryView.from_buffer(buf, layout, "float32")
    assert view.ptr == owner.ptr + (4 + 1) * 4
    assert view.shape == (3, 3) and view.strides == (4, 1)


def test_from_buffer_defaults_to_unsigned_integers_of_the_itemsize():
    buf = Buffer.from_handle(Owner(16).ptr, 16)
    view = StridedMemoryView.from_buffer(buf, StridedLayout.dense((8,), 2))
    assert view.dlpack_dtype == (1, 16, 1)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        (StridedLayout.dense((5, 4), 4), r"bytes \[0, 80\) but the buffer has 64"),
        (StridedLayout((4,), (-1,), 4), r"bytes \[-12, 4\)"),
        (StridedLayout.dense((4, 4), 4)[3:, 3:].unsqueezed(0), None),
    ],
)
def test_from_buffer_rejects_layouts_that_do_not_fit(layout, match):
    buf = Buffer.from_handle(Owner(64).ptr, 64)
    if match is None:  # fits exactly: the last element is the buffer's last 4 bytes
        assert StridedMemoryView.from_buffer(buf, layout, np.float32).shape == (1, 1, 1)
        return
    with pytest.raises(ValueError, match=match):
        StridedMemoryView.from_buffer(buf, layout, np.float32)


def test_from_buffer_rejects_dtype_whose_itemsize_differs_from_layout():
    buf = Buffer.from_handle(Owner(64).ptr, 64)
    with pytest.raises(ValueError, match="itemsize"):
        StridedMemoryView.from_buffer(buf, StridedLayout.dense((4,), 4), np.float64)


def test_from_buffer_keeps_owner_alive_while_view_lives():
    owner = Owner(16)
    ref = weakref.ref(owner)
    view = StridedMemoryView.from_buffer(
        Buffer.from_handle(owner.ptr, 16, owner=owner), StridedLayout.dense((16,), 1))
    del owner
    gc.collect()
    assert ref() is not None
    sliced = view[4:]
    del view
    gc.collect()
    assert ref() is not None, "a derived view must keep the owner alive too"
    del sliced
    gc.collect()
    assert ref() is None


# --- metadata, slicing, view() -----------------------------------------------------------------

LAYOUT_CASES = {
    "contiguous": lambda a: a,
    "sliced": lambda a: a[1:, ::2],
    "transposed": lambda a: a.T,
    "negative_strides": lambda a: a[::-1, ::-3],
    "zero_size": lambda a: a[:0],
    "zero_d": lambda a: a[1, 2],
}


def _numpy_strides_in_elements(array: np.ndarray) -> tuple[int, ...]:
    return tuple(s // array.itemsize for s in array.strides)


@pytest.mark.parametrize("case", sorted(LAYOUT_CASES))
def test_view_metadata_matches_numpy(case):
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    array = LAYOUT_CASES[case](base)
    if array.ndim == 0:  # numpy indexing gives a scalar: take a 0-d array of the same element
        array = base[1:2, 2:3].reshape(())
    view = StridedMemoryView.from_any(array)
    assert view.ptr == array.__array_interface__["data"][0]
    assert view.shape == array.shape
    assert view.strides == _numpy_strides_in_elements(array)
    assert view.ndim == array.ndim and view.size == array.size and view.nbytes == array.nbytes
    assert view.dtype == array.dtype and view.dlpack_dtype == (2, 64, 1)
    assert (view.device_type, view.device_id) == (1, 0)
    assert view.producer_stream is None


@pytest.mark.parametrize(
    "key",
    [1, -1, slice(None, None, -1), (slice(1, 3), 2), (Ellipsis, 1), (None, 1, slice(None, None, 2)),
     (slice(None), None), (slice(3, 0, -2), slice(None, None, -1))],
    ids=repr,
)
def test_view_getitem_matches_numpy_slicing(key):
    array = np.arange(24, dtype=np.int32).reshape(4, 6)
    view = StridedMemoryView.from_any(array)
    expected = array[key]
    sliced = view[key]
    assert sliced.shape == expected.shape
    assert sliced.strides == _numpy_strides_in_elements(expected)
    assert sliced.ptr == expected.__array_interface__["data"][0]
    np.testing.assert_array_equal(np.asarray(sliced), expected)


def test_view_getitem_out_of_range_raises_index_error():
    view = StridedMemoryView.from_any(np.zeros((2, 3)))
    with pytest.raises(IndexError):
        view[2]
    with pytest.raises(IndexError):
        view[0, 0, 0]


def test_view_dtype_change_repacks_float32_pairs_as_complex64_and_back():
    array = np.arange(8, dtype=np.float32).reshape(2, 4)
    as_complex = StridedMemoryView.from_any(array).view(dtype=np.complex64)
    assert as_complex.shape == (2, 2) and as_complex.dtype == np.complex64
    assert as_complex.ptr == array.ctypes.data
    np.testing.assert_array_equal(np.asarray(as_complex), array.view(np.complex64))
    again = as_complex.view(dtype="float32")
    assert again.shape == (2, 4)
    np.testing.assert_array_equal(np.asarray(again), array)


def test_view_with_a_new_layout_shares_memory_and_owner():
    array = np.arange(12, dtype=np.int16)
    view = StridedMemoryView.from_any(array)
    reshaped = view.view(layout=StridedLayout.dense((4, 3), 2, "F"))
    assert reshaped.ptr == view.ptr and reshaped.owner is array
    np.testing.assert_array_equal(np.asarray(reshaped), array.reshape(4, 3, order="F"))


def test_view_rejects_a_layout_reaching_outside_its_memory():
    view = StridedMemoryView.from_any(np.arange(12, dtype=np.int16))
    with pytest.raises(ValueError, match="outside the bytes"):
        view.view(layout=StridedLayout.dense((13,), 2))
    with pytest.raises(ValueError, match="itemsize"):
        view.view(layout=StridedLayout.dense((3,), 4))
    with pytest.raises(TypeError, match="StridedLayout"):
        view.view(layout=(12,))


def test_view_layout_property_is_a_strided_layout():
    view = StridedMemoryView.from_any(np.zeros((3, 5), dtype=np.float32)[:, 1:])
    layout = view.layout
    assert isinstance(layout, StridedLayout)
    assert (layout.shape, layout.strides, layout.itemsize) == ((3, 4), (5, 1), 4)
    assert not layout.is_contiguous_c


def test_view_readonly_from_read_only_numpy_array():
    array = np.arange(4.0)
    array.flags.writeable = False
    view = StridedMemoryView.from_any(array)
    assert view.readonly and view[1:].readonly


def test_repr_names_shape_dtype_device_and_owner():
    text = repr(StridedMemoryView.from_any(np.zeros((2, 3), dtype=np.float16)))
    for part in ("shape=(2, 3)", "float16", "cpu:0", "owner=ndarray"):
        assert part in text


# --- from_any dispatch ---------------------------------------------------------------------------


def test_from_any_returns_a_view_unchanged():
    view = StridedMemoryView.from_any(np.zeros(3))
    assert StridedMemoryView.from_any(view) is view


def test_from_any_names_the_type_and_protocols_tried():
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"Opaque.*__dlpack__.*buffer protocol"):
        StridedMemoryView.from_any(Opaque())


def test_from_any_uses_the_buffer_protocol_for_bytes_like_objects():
    data = bytearray(b"abcdef")
    view = StridedMemoryView.from_any(data)
    assert view.shape == (6,) and view.dlpack_dtype == (1, 8, 1) and not view.readonly
    assert StridedMemoryView.from_any(b"xyz").readonly


def test_from_any_rejects_a_bad_stream_argument():
    with pytest.raises(TypeError, match="stream"):
        StridedMemoryView.from_any(np.zeros(3), stream="default")
