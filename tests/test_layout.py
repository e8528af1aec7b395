"""StridedLayout: construction, properties and every derived layout, checked against numpy."""

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from interop_core import StridedLayout
from interop_core.core._layout import AxisError

ITEM = 8  # the int64 arange behind every reference array


# --- helpers -----------------------------------------------------------------------------------


def bounds(shape, strides):
    """(lo, hi) element offsets reached, by brute force; (0, -1) when empty."""
    if 0 in shape:
        return 0, -1
    lo = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
    return lo, hi


def reference(shape, strides):
    """A numpy array with these shape/strides (elements) whose values are element offsets."""
    lo, hi = bounds(shape, strides)
    base = np.arange(lo, hi + 1, dtype=np.int64)
    return as_strided(base[-lo:], shape=shape, strides=[s * ITEM for s in strides])


def layout_of(arr, origin=None):
    """The StridedLayout of a numpy array; slice_offset counted from `origin`'s data pointer."""
    assert all(s % arr.itemsize == 0 for s in arr.strides)
    offset = 0
    if origin is not None:
        offset = (arr.ctypes.data - origin.ctypes.data) // arr.itemsize
    return StridedLayout(arr.shape, [s // arr.itemsize for s in arr.strides], arr.itemsize, offset)


def offsets(layout):
    """Every element's offset from the base pointer, as an array of layout.shape."""
    out = np.full(layout.shape, layout.slice_offset, dtype=np.int64)
    for d, s in enumerate(layout.strides):
        shape = [1] * layout.ndim
        shape[d] = layout.shape[d]
        out = out + np.arange(layout.shape[d], dtype=np.int64).reshape(shape) * s
    return out


def same_elements(layout, arr):
    """layout addresses exactly the elements (offsets) arr holds, in the same positions."""
    assert layout.shape == arr.shape
    np.testing.assert_array_equal(offsets(layout), np.asarray(arr))


def nonunit_strides(shape, strides):
    return [s for n, s in zip(shape, strides, strict=True) if n != 1]


# --- hypothesis strategies ---------------------------------------------------------------------

extent = st.integers(0, 5)
stride = st.integers(-7, 7)


@st.composite
def layouts(draw, max_ndim=4, min_extent=0):
    ndim = draw(st.integers(0, max_ndim))
    shape = tuple(draw(st.lists(st.integers(min_extent, 5), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(stride, min_size=ndim, max_size=ndim)))
    return shape, strides


index_item = st.one_of(
    st.integers(-7, 7),
    st.builds(
        slice,
        st.one_of(st.none(), st.integers(-8, 8)),
        st.one_of(st.none(), st.integers(-8, 8)),
        st.one_of(st.none(), st.integers(-4, 4).filter(bool)),
    ),
    st.none(),
    st.just(Ellipsis),
)


@st.composite
def keys(draw):
    items = draw(st.lists(index_item, max_size=5))
    if items.count(Ellipsis) > 1:
        first = items.index(Ellipsis)
        items = items[: first + 1] + [i for i in items[first + 1 :] if i is not Ellipsis]
    if len(items) == 1 and draw(st.booleans()):
        return items[0]  # a bare key, not a tuple
    return tuple(items)


@st.composite
def reshape_targets(draw, volume):
    """A shape of the given volume: its prime factors (and some 1s) regrouped at random."""
    if volume == 0:
        n = draw(st.integers(1, 3))
        shape = [draw(st.integers(0, 4)) for _ in range(n)]
        shape[draw(st.integers(0, n - 1))] = 0
        return tuple(shape)
    factors, v, p = [], volume, 2
    while v > 1:
        while v % p == 0:
            factors.append(p)
            v //= p
        p += 1
    factors += [1] * draw(st.integers(0, 2))
    factors = draw(st.permutations(factors))
    cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    shape, prev = [], 0
    for c in cuts + [len(factors)]:
        shape.append(int(np.prod(factors[prev:c], dtype=np.int64)))
        prev = c
    return tuple(shape)


# --- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape", [(), (0,), (5,), (2, 3), (3, 1, 4), (2, 0, 3), (1, 1), (2, 3, 4, 5, 6, 7, 2)]
)
@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.complex128])
def test_default_strides_are_c_contiguous_like_numpy(shape, dtype):
    arr = np.empty(shape, dtype)
    layout = StridedLayout(shape, itemsize=arr.itemsize)
    assert layout.shape == arr.shape
    if arr.size:
        assert layout.strides_in_bytes == arr.strides
        assert layout.strides == tuple(s // arr.itemsize for s in arr.strides)
    else:
        # numpy 2 zeroes the strides of empty arrays; we keep the dense strides an extent of
        # 1 would give (as torch does), which stay meaningful after a reshape.
        ones = tuple(max(n, 1) for n in shape)
        assert layout.strides == StridedLayout(ones).strides
    assert layout.itemsize == arr.itemsize
    assert layout.slice_offset == 0
    assert layout.ndim == arr.ndim
    assert layout.volume == arr.size
    assert layout.is_contiguous_c


def test_constructor_accepts_an_int_shape_lists_and_numpy_integers():
    assert StridedLayout(5).shape == (5,)
    assert StridedLayout(np.int16(5)).shape == (5,)
    assert StridedLayout(np.array([2, 3]), np.array([1, 2])).strides == (1, 2)
    assert StridedLayout((2, 3)).permuted(np.array([1, 0])).shape == (3, 2)
    assert StridedLayout((2, 3)).unsqueezed(np.array([0, -1])).shape == (1, 2, 3, 1)
    assert StridedLayout((1, 3)).squeezed(np.int8(0)).shape == (3,)
    layout = StridedLayout([np.int64(2), 3], [np.int32(3), 1], itemsize=np.uint8(4))
    assert layout == StridedLayout((2, 3), (3, 1), 4)
    assert type(layout.shape[0]) is int


@pytest.mark.parametrize(
    "order_name, perm", [("C", None), ("F", "reversed"), ((1, 0, 2), None), ((2, 0, 1), None)]
)
@pytest.mark.parametrize("shape", [(2, 3, 4), (5, 1, 2), (3, 0, 2)])
def test_dense_order_matches_numpy(order_name, perm, shape):
    # A permutation lists the dims from slowest to fastest varying: numpy builds the same
    # memory as an array of the permuted shape, transposed back.
    ndim = len(shape)
    if order_name == "C":
        order = tuple(range(ndim))
    elif order_name == "F":
        order = tuple(reversed(range(ndim)))
    else:
        order = order_name
    ref = np.empty([shape[p] for p in order], np.float32).transpose(np.argsort(order))
    layout = StridedLayout.dense(shape, 4, order_name)
    assert layout.shape == ref.shape
    if ref.size == 0:
        return  # numpy zeroes the strides of empty arrays
    assert layout.strides_in_bytes == ref.strides
    if order_name in ("C", "F"):
        assert layout.strides_in_bytes == np.empty(shape, np.float32, order=order_name).strides


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (2, 0, 1), (1, 0, 2)])
def test_stride_order_inverts_dense(perm):
    layout = StridedLayout.dense((2, 3, 4), 2, perm)
    assert layout.stride_order == perm
    assert StridedLayout.dense(layout.shape, 2, layout.stride_order) == layout
    assert layout.is_contiguous_any and layout.is_unique


def test_stride_order_sorts_by_magnitude_then_extent_then_index():
    assert StridedLayout((2, 2, 2), (-1, 8, -4)).stride_order == (1, 2, 0)
    assert StridedLayout((3, 3, 3), (0, 0, 0)).stride_order == (0, 1, 2)
    assert StridedLayout((1, 4, 1), (4, 1, 4)).stride_order == (0, 2, 1)
    assert StridedLayout((1, 4, 3), (0, 0, 0)).stride_order == (1, 2, 0)
    assert StridedLayout(()).stride_order == ()


@pytest.mark.parametrize("shape", [(3, 1, 4), (1, 5), (5, 1), (1, 1, 2), (2, 1, 1), (3, 0, 2)])
def test_stride_order_of_c_and_f_layouts_is_c_and_f_order_with_extents_of_1(shape):
    # Equal strides only come with extents of 1 (or 0): the larger extent counts as slower.
    ndim = len(shape)
    assert StridedLayout.dense(shape, 4, "C").stride_order == tuple(range(ndim))
    neighbouring_ones = any(a == b == 1 for a, b in zip(shape[:-1], shape[1:], strict=True))
    if 0 not in shape and not neighbouring_ones:
        assert StridedLayout.dense(shape, 4, "F").stride_order == tuple(reversed(range(ndim)))
    if neighbouring_ones:  # a tie no rule can break the F way without breaking the C way
        assert StridedLayout.dense(shape, 4, "F").stride_order != tuple(reversed(range(ndim)))
    f = StridedLayout.dense(shape, 4, "F")
    assert StridedLayout.dense_like(f) == f  # "K" keeps the order, extents of 1 included


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a,
        lambda a: a.transpose(2, 0, 1),
        lambda a: a.transpose(1, 2, 0)[:, ::2],
        lambda a: a[::2, :, 1:],
        lambda a: np.asfortranarray(a),
    ],
)
def test_dense_like_keeps_stride_order_like_numpy_empty_like(make):
    arr = make(np.empty((4, 6, 5), np.float64))
    layout = layout_of(arr)
    dense = StridedLayout.dense_like(layout)
    assert dense.strides_in_bytes == np.empty_like(arr, order="K").strides
    assert dense.slice_offset == 0 and dense.itemsize == 8
    assert StridedLayout.dense_like(layout, "C").strides_in_bytes == np.empty(arr.shape).strides
    assert (
        StridedLayout.dense_like(layout, "F").strides_in_bytes
        == np.empty(arr.shape, order="F").strides
    )
    assert layout.to_dense("K") == dense
    assert layout.to_dense() == StridedLayout(arr.shape, itemsize=8)


def test_dense_like_of_a_dense_layout_is_itself():
    layout = StridedLayout.dense((3, 4, 5), 4, (1, 2, 0))
    assert StridedLayout.dense_like(layout) == layout


# --- properties --------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_contiguity_flags_match_numpy(spec):
    shape, strides = spec
    ref = reference(shape, strides)
    layout = StridedLayout(shape, strides, ITEM)
    assert layout.is_contiguous_c == ref.flags.c_contiguous
    assert layout.is_contiguous_f == ref.flags.f_contiguous


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_offsets_uniqueness_and_density_match_brute_force(spec):
    shape, strides = spec
    layout = StridedLayout(shape, strides, 2, slice_offset=7)
    offs = offsets(layout).ravel().tolist()
    if offs:
        assert layout.min_offset == min(offs)
        assert layout.max_offset == max(offs)
        assert layout.required_size_in_bytes == (max(offs) + 1) * 2
    else:
        assert (layout.min_offset, layout.max_offset) == (7, 6)
        assert layout.required_size_in_bytes == 0
    unique = len(set(offs)) == len(offs)
    assert layout.is_unique == unique
    positive = all(s > 0 for n, s in zip(shape, strides, strict=True) if n > 1)
    dense = not offs or (unique and positive and max(offs) - min(offs) + 1 == len(offs))
    assert layout.is_contiguous_any == dense
    assert layout.volume == len(offs) == int(np.prod(shape))


@pytest.mark.parametrize(
    "shape, strides, unique",
    [
        ((2, 3), (3, 2), True),  # passes the quick nesting test
        ((3, 2), (2, 3), True),  # fails the quick test, but offsets 0,2,4,3,5,7 never collide
        ((3, 2), (1, 2), False),  # 2 is reached twice
        ((4,), (0,), False),
        ((1, 4), (0, 1), True),
        ((0, 4), (0, 0), True),
        ((5, 5, 5), (25, 5, 1), True),
        ((3, 3, 3), (4, 3, 1), False),
        ((7, 11), (11, 7), True),  # 11*di == 7*dj needs |di| >= 7
        ((8, 12), (11, 7), False),  # 11*7 == 7*11
    ],
)
def test_is_unique_is_exact(shape, strides, unique):
    assert StridedLayout(shape, strides).is_unique is unique


def test_offsets_with_negative_strides_and_slice_offset():
    layout = StridedLayout((3, 4), (-4, 1), itemsize=4, slice_offset=8)
    assert (layout.min_offset, layout.max_offset) == (0, 11)
    assert layout.required_size_in_bytes == 48
    assert layout.strides_in_bytes == (-16, 4)
    assert not layout.is_contiguous_any


def test_offsets_in_bytes_bounds_and_density():
    layout = StridedLayout.dense((4, 6), 8)[1:, ::-2]
    assert layout.slice_offset == 11 and layout.slice_offset_in_bytes == 88
    assert layout.offset_bounds == (layout.min_offset, layout.max_offset) == (7, 23)
    assert not layout.is_dense
    assert StridedLayout.dense((4, 6), 8, "F").is_dense
    assert StridedLayout.dense((4, 6), 8).permuted((1, 0)).is_dense
    assert not StridedLayout.dense((4, 6), 8)[1:].is_dense  # contiguous, but after offset 0
    assert StridedLayout.dense((4, 6), 8)[1:].is_contiguous_any
    empty = StridedLayout((2, 0), itemsize=4, slice_offset=3)
    assert empty.offset_bounds == (3, 2) and not empty.is_dense
    assert StridedLayout((2, 0), itemsize=4).is_dense


def test_zero_d_layout():
    layout = StridedLayout((), itemsize=16, slice_offset=3)
    assert layout.shape == () and layout.strides == () and layout.ndim == 0
    assert layout.volume == 1
    assert (layout.min_offset, layout.max_offset) == (3, 3)
    assert layout.required_size_in_bytes == 64
    assert layout.is_contiguous_c and layout.is_contiguous_f and layout.is_unique
    assert layout.flattened() == StridedLayout((1,), itemsize=16, slice_offset=3)


# --- slicing -----------------------------------------------------------------------------------


@settings(max_examples=1000, deadline=None)
@given(layouts(), keys())
def test_sliced_matches_numpy_indexing(spec, key):
    shape, strides = spec
    ref = reference(shape, strides)
    layout = StridedLayout(shape, strides, ITEM)
    # A trailing Ellipsis changes nothing but makes numpy return a 0-d array, not a scalar.
    full = key if isinstance(key, tuple) else (key,)
    if Ellipsis not in full:
        full = full + (Ellipsis,)
    try:
        expected = ref[full]
    except IndexError:
        with pytest.raises(IndexError):
            layout.sliced(key)
        return
    got = layout[key]
    assert got == layout.sliced(key)
    assert got.shape == expected.shape
    assert got.strides_in_bytes == expected.strides
    assert got.slice_offset == (expected.ctypes.data - ref.ctypes.data) // ITEM
    assert got.itemsize == ITEM
    same_elements(got, expected)


@pytest.mark.parametrize(
    "key",
    [
        0,
        -1,
        slice(None),
        slice(None, None, -1),
        slice(5, 1, -2),
        slice(100, None),
        slice(-100, 2),
        (Ellipsis, 1),
        (1, Ellipsis),
        (None, 1, None, slice(None, None, 3), Ellipsis, None),
        (),
        Ellipsis,
        None,
        (np.int64(2), np.int8(-1)),
        (slice(np.int64(1), None, np.int32(2)),),
        (slice(2, 2),),
        (slice(None, None, 2**62),),
    ],
)
def test_sliced_examples_match_numpy(key):
    base = np.arange(6 * 7 * 5, dtype=np.int64).reshape(6, 7, 5)
    arr = base[1:, ::-1, 1::2]
    layout = layout_of(arr, origin=base)
    expected = arr[key]
    got = layout[key]
    assert got.shape == expected.shape
    assert nonunit_strides(got.shape, got.strides_in_bytes) == nonunit_strides(
        expected.shape, expected.strides
    )
    assert got.slice_offset == (expected.ctypes.data - base.ctypes.data) // ITEM
    same_elements(got, expected)


def test_slice_offsets_accumulate_over_repeated_slicing():
    base = np.arange(1000, dtype=np.int64).reshape(10, 10, 10)
    layout = layout_of(base)
    arr = base
    for key in [(slice(2, None), 3), (slice(None, None, -2),), (slice(1, 4), None)]:
        arr = arr[key]
        layout = layout[key]
        assert layout.slice_offset == (arr.ctypes.data - base.ctypes.data) // ITEM
        same_elements(layout, arr)


@pytest.mark.parametrize(
    "key, exc",
    [
        (3, IndexError),
        (-4, IndexError),
        (2**70, IndexError),
        ((0, 0, 0, 0), IndexError),
        ((Ellipsis, 0, Ellipsis), IndexError),
        (1.0, TypeError),
        ("a", TypeError),
        ([0, 1], TypeError),
        (True, TypeError),
        ((0, np.bool_(False)), TypeError),
        (np.array([0, 1]), TypeError),
        (slice(None, None, 0), ValueError),
        (slice(0.5, None), TypeError),
    ],
)
def test_bad_indices_raise_the_documented_errors(key, exc):
    layout = StridedLayout((3, 4, 5))
    with pytest.raises(exc):
        layout[key]
    with pytest.raises(exc):
        layout.sliced(key)


@pytest.mark.parametrize("key", [1.0, "a"])
def test_an_index_of_a_kind_not_taken_is_a_type_error_where_numpy_raises_index_error(key):
    with pytest.raises(IndexError):
        np.zeros((3, 4, 5))[key]
    with pytest.raises(TypeError) as info:
        StridedLayout((3, 4, 5))[key]
    assert not isinstance(info.value, IndexError)


@pytest.mark.parametrize("key", [True, np.bool_(True), 1.0, "a", [0], 0])
def test_indices_are_counted_before_their_kinds_are_checked(key):
    # on a 0-d layout any index but ... and None is one too many, a bool included
    layout = StridedLayout(())
    with pytest.raises(IndexError, match="too many indices"):
        layout[key]
    with pytest.raises(IndexError, match="too many indices"):
        layout.sliced(key)
    assert layout[...].shape == () and layout[None].shape == (1,)


def test_indexing_beyond_64_dims_is_a_clear_error():
    layout = StridedLayout((1,) * 60)
    assert layout[(None,) * 4].ndim == 64
    with pytest.raises(ValueError, match="64"):
        layout[(None,) * 5]


# --- reshape / permute / broadcast / squeeze / unsqueeze / flatten ----------------------------


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_reshaped_matches_numpy_no_copy_reshape(data):
    shape, strides = data.draw(layouts())
    layout = StridedLayout(shape, strides, ITEM)
    target = data.draw(reshape_targets(layout.volume))
    ref = reference(shape, strides)
    try:
        expected = ref.reshape(target, copy=False)
    except ValueError:
        with pytest.raises(ValueError):
            layout.reshaped(target)
        return
    got = layout.reshaped(target)
    assert got.shape == expected.shape
    if expected.size:
        same_elements(got, expected)
        assert nonunit_strides(got.shape, got.strides_in_bytes) == nonunit_strides(
            expected.shape, expected.strides
        )


@pytest.mark.parametrize(
    "arr_key, target",
    [
        ((slice(None),), (-1,)),
        ((slice(None),), (4, -1)),
        ((slice(None),), (-1, 5, 1)),
        ((slice(None, None, -1),), (2, 2, 3, 5)),
        ((Ellipsis, slice(None, None, 2)), (12, -1)),
        ((slice(None), 1), (-1,)),
    ],
)
def test_reshaped_with_inferred_extent_matches_numpy(arr_key, target):
    base = np.arange(60, dtype=np.int64).reshape(4, 3, 5)
    arr = base[arr_key]
    layout = layout_of(arr, origin=base)
    try:
        expected = arr.reshape(target, copy=False)
    except ValueError:
        with pytest.raises(ValueError, match="without copying"):
            layout.reshaped(target)
        return
    got = layout.reshaped(target)
    assert got.shape == expected.shape
    same_elements(got, expected)


@pytest.mark.parametrize(
    "target, exc, match",
    [
        ((7,), ValueError, r"shape \(4, 3\) \(volume 12\) into \(7,\) \(volume 7\)"),
        ((-1, -1), ValueError, r"into \(-1, -1\): only one extent may be -1"),
        ((5, -2), ValueError, r"into \(5, -2\): extents must be >= 0"),
        ((0, -1), ValueError, "the -1 is ambiguous"),
        ((7, -1), ValueError, "12 is not a multiple of 7"),
        ((2**62, 2**62), ValueError, "overflows int64"),
        (("4", 3), TypeError, "str"),
        (None, TypeError, "NoneType"),
    ],
)
def test_reshaped_rejects_bad_shapes_naming_both_shapes(target, exc, match):
    with pytest.raises(exc, match=match):
        StridedLayout((4, 3)).reshaped(target)


def test_reshaped_refuses_a_copy_with_a_clear_message():
    layout = StridedLayout((4, 6)).permuted((1, 0))
    with pytest.raises(ValueError, match="without copying"):
        layout.reshaped((24,))


@pytest.mark.parametrize("axes", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (-1, 0, 1)])
def test_permuted_matches_numpy_transpose(axes):
    root = np.arange(60, dtype=np.int64).reshape(3, 4, 5)
    base = root[:, ::-2]
    layout = layout_of(base, origin=root)
    expected = base.transpose(axes)
    got = layout.permuted(axes)
    assert got.shape == expected.shape
    assert got.strides_in_bytes == expected.strides
    same_elements(got, expected)


@pytest.mark.parametrize(
    "axes, exc, match",
    [
        ((0, 1), ValueError, r"shape \(2, 3, 4\) with axes \(0, 1\): 2 axes for 3 dims"),
        ((0, 0, 1), ValueError, "axis 0 appears twice"),
        ((2, -3, 0), ValueError, "axis 0 appears twice"),
        ((0, 1, 3), AxisError, "axis 3 is out of range for 3 dims"),
        ((1, -2000, 0), AxisError, "axis -2000"),
        ("abc", TypeError, "str"),
        (5, ValueError, "1 axes for 3 dims"),
        ((0, 1.0, 2), TypeError, "float"),
    ],
)
def test_permuted_rejects_non_permutations_naming_shape_and_axes(axes, exc, match):
    with pytest.raises(exc, match=match):
        StridedLayout((2, 3, 4)).permuted(axes)


@pytest.mark.parametrize(
    "shape, strides, target",
    [
        ((3,), (1,), (4, 3)),
        ((1, 3), (3, 1), (5, 3)),
        ((4, 1), (-2, 9), (2, 4, 6)),
        ((2, 1), (1, 1), (2, 0)),
        ((), (), (2, 3)),
        ((2, 3), (3, 1), (2, 3)),
    ],
)
def test_broadcast_to_matches_numpy(shape, strides, target):
    ref = reference(shape, strides)
    expected = np.broadcast_to(ref, target)
    got = StridedLayout(shape, strides, ITEM).broadcast_to(target)
    assert got.shape == expected.shape
    assert got.strides_in_bytes == expected.strides
    if expected.size:
        same_elements(got, expected)
    assert got.is_unique == (len(set(expected.ravel().tolist())) == expected.size)


@pytest.mark.parametrize(
    "shape, target, match",
    [
        ((3,), (4,), r"\(3,\) to \(4,\): dim 0 has extent 3 where the target has 4"),
        ((2, 3), (3,), r"\(2, 3\) to \(3,\): the target has fewer dimensions \(1\)"),
        ((0,), (1,), r"\(0,\) to \(1,\): dim 0 has extent 0 where the target has 1"),
        ((3,), (3, 2), r"\(3,\) to \(3, 2\): dim 0 has extent 3 where the target has 2"),
    ],
)
def test_broadcast_to_rejects_incompatible_shapes_like_numpy(shape, target, match):
    with pytest.raises(ValueError):
        np.broadcast_to(np.empty(shape), target)
    with pytest.raises(ValueError, match="cannot broadcast shape " + match):
        StridedLayout(shape).broadcast_to(target)


@pytest.mark.parametrize("axes", [None, 0, -1, (0, 2), (2, -1), ()])
def test_squeezed_matches_numpy(axes):
    root = np.arange(12, dtype=np.int64).reshape(1, 4, 1, 3, 1)
    arr = root[:, ::-1, :, ::2]
    layout = layout_of(arr, origin=root)
    expected = np.squeeze(arr, axis=axes)
    got = layout.squeezed(axes)
    assert got.shape == expected.shape
    assert got.strides_in_bytes == expected.strides
    same_elements(got, expected)


@pytest.mark.parametrize("axes, exc", [(1, ValueError), ((0, 0), ValueError), (7, IndexError)])
def test_squeezed_rejects_bad_axes(axes, exc):
    layout = StridedLayout((1, 4, 1))
    with pytest.raises(exc):
        layout.squeezed(axes)


def test_out_of_range_axes_raise_axis_error_that_is_both_value_and_index_error():
    assert issubclass(AxisError, ValueError) and issubclass(AxisError, IndexError)
    with pytest.raises(AxisError):
        StridedLayout((1, 4)).squeezed(-3)


@pytest.mark.parametrize("axes", [0, -1, 1, (0, 1), (0, -1), (1, 3, 4)])
def test_unsqueezed_matches_numpy_expand_dims(axes):
    root = np.arange(24, dtype=np.int64).reshape(4, 6)
    arr = root[::-1, ::3]
    layout = layout_of(arr, origin=root)
    expected = np.expand_dims(arr, axes)
    got = layout.unsqueezed(axes)
    assert got.shape == expected.shape
    assert nonunit_strides(got.shape, got.strides_in_bytes) == nonunit_strides(
        expected.shape, expected.strides
    )
    same_elements(got, expected)


def test_unsqueezed_keeps_c_contiguous_layouts_c_contiguous():
    layout = StridedLayout((3, 4)).unsqueezed((0, 2, 4))
    assert layout.shape == (1, 3, 1, 4, 1)
    assert layout.is_contiguous_c
    assert layout == StridedLayout((1, 3, 1, 4, 1))


@pytest.mark.parametrize("axes", [(0, 0), 3, -4, "x"])
def test_unsqueezed_rejects_bad_axes(axes):
    with pytest.raises((ValueError, TypeError)):
        StridedLayout((2, 3)).unsqueezed(axes)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_flattened_matches_numpy_reshape_of_the_merged_dims(data):
    shape, strides = data.draw(layouts(min_extent=0))
    assume(len(shape) >= 1)
    start = data.draw(st.integers(0, len(shape) - 1))
    end = data.draw(st.integers(start, len(shape) - 1))
    ref = reference(shape, strides)
    merged = shape[:start] + (int(np.prod(shape[start : end + 1])),) + shape[end + 1 :]
    layout = StridedLayout(shape, strides, ITEM)
    try:
        expected = ref.reshape(merged, copy=False)
    except ValueError:
        with pytest.raises(ValueError, match="without copying"):
            layout.flattened(start, end)
        return
    got = layout.flattened(start, end - len(shape))  # negative end counts from the end
    assert got.shape == expected.shape
    if expected.size:
        same_elements(got, expected)


def test_merged_merges_what_can_be_merged_and_flattened_refuses_the_rest():
    layout = StridedLayout.dense((5, 1, 2, 4, 3), 4)[..., ::-2]
    assert layout.merge_mask == 0b01110  # dims 1, 2, 3 join the dim before; 4 (stride -2) not
    assert layout.merged() == StridedLayout((40, 2), (3, -2), 4, slice_offset=2)
    assert layout.merged(0, 2).shape == (10, 4, 2)
    assert layout.merged(1, 2).shape == (5, 2, 4, 2)
    assert layout.merged(1, -2).shape == (5, 8, 2)
    assert layout.merged(mask=0b01000).shape == (5, 1, 8, 2)
    assert layout.merged(1, 3, mask=0b00110).shape == (5, 2, 4, 2)
    with pytest.raises(ValueError, match=r"shape \(5, 1, 2, 4, 2\).*merged\(\)"):
        layout.flattened()
    assert layout.flattened(0, 3) == layout.merged(0, 3)


def test_merged_returns_the_layout_itself_when_nothing_merges():
    layout = StridedLayout((3, 4), (1, 3))
    assert layout.merge_mask == 0
    assert layout.merged() is layout
    assert layout.flattened(1, 1) is layout
    assert StridedLayout(()).merged() == StridedLayout((1,))


def test_merged_lets_extent_1_dims_and_empty_layouts_merge_whatever_their_strides():
    assert StridedLayout((4, 1, 3), (3, 99, 1)).merged() == StridedLayout((12,))
    assert StridedLayout((1, 4), (7, 1)).merged() == StridedLayout((4,))
    empty = StridedLayout((2, 0, 3), (5, 7, -9), itemsize=4, slice_offset=2)
    assert empty.merge_mask == 0b110
    assert empty.merged().shape == (0,) and empty.merged().slice_offset == 2


def test_merge_masks_of_two_layouts_merge_both_into_one_shape():
    c = StridedLayout.dense((4, 5, 3), 4)
    other = StridedLayout((4, 5, 3), (1, 12, 4), 4)  # dims 1 and 2 nest, dim 0 is fastest
    assert (c.merged().shape, other.merged().shape) == ((60,), (4, 15))
    mask = c.merge_mask & other.merge_mask
    assert c.merged(mask=mask) == StridedLayout((4, 15), (15, 1), 4)
    assert other.merged(mask=mask) == StridedLayout((4, 15), (1, 4), 4)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"mask": -1}, ValueError, "mask"),
        ({"mask": 0b1000}, ValueError, "bits outside the 3 dims"),
        ({"mask": 1.0}, TypeError, "mask must be an int"),
        ({"mask": True}, TypeError, "mask must be an int"),
        ({"start": 2, "end": 1}, ValueError, "must not come after"),
        ({"end": 3}, AxisError, "end 3"),
    ],
)
def test_merged_rejects_bad_ranges_and_masks(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        StridedLayout((2, 3, 4)).merged(**kwargs)


def test_merged_with_64_dims_takes_a_64_bit_mask():
    layout = StridedLayout.dense((2, 1) * 31 + (1, 4), 1)[..., ::3]  # last dim: stride 3
    assert layout.ndim == 64
    assert layout.merge_mask == (1 << 63) - 2  # every dim merges but the last
    assert layout.merged() == StridedLayout((2**31, 2), (4, 3))
    assert layout.merged(mask=(1 << 64) - 1) == layout.merged()
    assert layout.merged(62, 63, mask=(1 << 64) - 1).shape == (2, 1) * 31 + (2,)  # 1 joins
    assert layout.merged(mask=1 << 62).shape == (2, 1) * 30 + (2, 1, 2)
    with pytest.raises(ValueError, match="bits outside the 64 dims"):
        layout.merged(mask=1 << 64)


def test_flattened_rejects_start_after_end():
    with pytest.raises(ValueError):
        StridedLayout((2, 3, 4)).flattened(2, 1)
    with pytest.raises(IndexError):
        StridedLayout((2, 3, 4)).flattened(0, 3)


# --- repacked ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        (Ellipsis,),
        (slice(None), slice(None, None, 2)),
        (slice(None, None, -1),),
        (1,),
        (slice(None), 1, slice(2, 4)),
        (Ellipsis, slice(0, 0)),
    ],
)
def test_repacked_float32_to_complex64_and_back_matches_numpy_view(key):
    floats = np.arange(3 * 5 * 8, dtype=np.float32).reshape(3, 5, 8)
    arr = floats[key]
    layout = layout_of(arr, origin=floats)
    cplx = arr.view(np.complex64)
    packed = layout.repacked(8)
    assert packed.itemsize == 8
    assert packed.shape == cplx.shape
    assert nonunit_strides(packed.shape, packed.strides_in_bytes) == nonunit_strides(
        cplx.shape, cplx.strides
    )
    assert packed.slice_offset * 8 == cplx.ctypes.data - floats.ctypes.data
    back = packed.repacked(4)
    assert back.shape == layout.shape
    assert nonunit_strides(back.shape, back.strides) == nonunit_strides(
        layout.shape, layout.strides
    )
    assert back.slice_offset == layout.slice_offset
    assert packed.repacked(8) is packed


def test_repacked_to_a_smaller_itemsize_multiplies_the_last_extent():
    layout = StridedLayout((3, 4), (8, 1), itemsize=8, slice_offset=2)
    small = layout.repacked(2)
    assert small == StridedLayout((3, 16), (32, 1), itemsize=2, slice_offset=8)
    assert small.repacked(8) == layout


@pytest.mark.parametrize(
    "layout, new, match",
    [
        (StridedLayout((4, 4), (4, 2), 4), 8, "contiguous"),  # last stride 2
        (StridedLayout((4, 3), (4, 1), 4), 8, "12 bytes"),  # 3 floats are not whole complexes
        (StridedLayout((4, 4), (5, 1), 4), 8, "stride"),  # 20-byte row stride
        (StridedLayout((4, 4), (4, 1), 4, slice_offset=1), 8, "slice_offset"),
        (StridedLayout((), itemsize=4), 8, "0-d"),
        (StridedLayout((), itemsize=8), 4, "0-d"),
        (StridedLayout((4,), itemsize=4), 3, "bytes"),
    ],
)
def test_repacked_refuses_what_it_cannot_see(layout, new, match):
    with pytest.raises(ValueError, match=match):
        layout.repacked(new)


def test_repacked_on_any_axis_and_without_the_packed_dim():
    layout = StridedLayout.dense((5, 4), 4)
    assert layout.repacked(16) == StridedLayout.dense((5, 1), 16)
    assert layout.repacked(16, keep_dim=False) == StridedLayout.dense((5,), 16)
    assert layout.repacked(8, keep_dim=False) == StridedLayout.dense((5, 2), 8)
    f = StridedLayout.dense((6, 3), 2, "F")
    assert f.repacked(4, axis=0) == StridedLayout((3, 3), (1, 3), 4)
    assert f.repacked(4, axis=0).repacked(2, axis=-2) == f
    with pytest.raises(ValueError, match="axis 1 must be contiguous"):
        f.repacked(4)
    with pytest.raises(AxisError):
        f.repacked(4, axis=2)


def test_repacked_takes_sizes_that_are_not_multiples_and_empty_layouts():
    assert StridedLayout((2, 3), itemsize=4).repacked(6) == StridedLayout((2, 2), itemsize=6)
    assert StridedLayout((4,), itemsize=6).repacked(4) == StridedLayout((6,), itemsize=4)
    empty = StridedLayout((0, 3), (7, 2), itemsize=4)  # no element: the strides address nothing
    assert empty.repacked(2).shape == (0, 6)


def test_repacked_checks_the_data_pointer_alignment():
    layout = StridedLayout.dense((5, 4), 4)
    assert layout.repacked(16, data_ptr=0x7F0000000040).itemsize == 16
    with pytest.raises(ValueError, match="data_ptr 0x7f0000000008 is not aligned to 16"):
        layout.repacked(16, data_ptr=0x7F0000000008)
    with pytest.raises(ValueError, match="data_ptr"):
        layout.repacked(2, data_ptr=1)
    with pytest.raises(ValueError, match="64 bits"):
        layout.repacked(8, data_ptr=2**64)
    with pytest.raises(TypeError, match="data_ptr"):
        layout.repacked(8, data_ptr="0")
    assert layout.repacked(4, data_ptr=3) is layout  # nothing to re-cut, nothing to align


@pytest.mark.parametrize(
    "layout, kwargs, expected",
    [
        (StridedLayout.dense((16, 6), 2), {}, 4),  # 6 halves: 12 bytes per row
        (StridedLayout.dense((16, 8), 2), {}, 16),
        (StridedLayout.dense((16, 8), 2), {"max_itemsize": 64}, 16),  # rows are 16 bytes
        (StridedLayout.dense((16, 8), 2), {"max_itemsize": 8}, 8),
        (StridedLayout.dense((16, 8), 2), {"data_ptr": 0x7F0000000004}, 4),
        (StridedLayout.dense((16, 8), 2), {"data_ptr": 0x7F0000000002}, 2),
        (StridedLayout.dense((16, 8), 2), {"axis": 0}, 2),  # dim 0 has stride 8
        (StridedLayout.dense((16, 8), 2, "F"), {"axis": 0}, 16),
        (StridedLayout.dense((16, 8), 2)[:, 2:], {}, 4),  # element 0 at byte 4
        (StridedLayout.dense((4, 3), 4), {}, 4),  # 12 bytes: 16, 8 do not divide it
        (StridedLayout.dense((4, 3), 4), {"max_itemsize": 12}, 12),
        (StridedLayout((4, 1), (1, 9), 4), {}, 4),  # extent 1: stride does not matter
        (StridedLayout((4, 4), (5, 2), 4), {}, 4),  # dim 1 not contiguous: nothing to repack
        (StridedLayout((0, 4), itemsize=4), {}, 4),  # nothing to repack
        (StridedLayout((3,), itemsize=12), {}, 4),  # itemsize need not divide max_itemsize
    ],
)
def test_max_compatible_itemsize_is_the_widest_repack_that_divides_the_maximum(
    layout, kwargs, expected
):
    assert layout.max_compatible_itemsize(**kwargs) == expected
    axis = kwargs.get("axis", -1)
    assert layout.repacked(expected, kwargs.get("data_ptr", 0), axis).itemsize == expected


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"max_itemsize": 0}, ValueError, "max_itemsize must be > 0"),
        ({"max_itemsize": 2}, ValueError, "less than the layout's itemsize 4"),
        ({"axis": 2}, AxisError, "axis 2"),
        ({"max_itemsize": "16"}, TypeError, "max_itemsize"),
    ],
)
def test_max_compatible_itemsize_rejects_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        StridedLayout.dense((5, 4), 4).max_compatible_itemsize(**kwargs)


@pytest.mark.parametrize("new", [0, -8])
def test_repacked_rejects_non_positive_itemsize(new):
    with pytest.raises(ValueError, match="new_itemsize"):
        StridedLayout((4,), itemsize=4).repacked(new)


def test_repacked_agrees_with_numpy_where_numpy_can_view():
    arr = np.zeros((6, 4), np.int16)[:, :]
    for dtype in (np.int8, np.int32, np.int64, np.dtype("V6")):
        try:
            expected = arr.view(dtype)
        except ValueError:
            with pytest.raises(ValueError):
                layout_of(arr).repacked(np.dtype(dtype).itemsize)
            continue
        got = layout_of(arr).repacked(expected.itemsize)
        assert got.shape == expected.shape
        assert got.strides_in_bytes == expected.strides


# --- value semantics, immutability, limits -----------------------------------------------------


def test_equality_and_hash_cover_shape_strides_itemsize_and_offset():
    a = StridedLayout((2, 3), (3, 1), 4)
    assert a == StridedLayout((2, 3), None, 4)
    assert hash(a) == hash(StridedLayout([2, 3], [3, 1], 4))
    assert a != StridedLayout((2, 3), (3, 1), 8)
    assert a != StridedLayout((2, 3), (1, 2), 4)
    assert a != StridedLayout((3, 2), (3, 1), 4)
    assert a != StridedLayout((2, 3), (3, 1), 4, slice_offset=1)
    assert a != ((2, 3), (3, 1), 4)
    assert len({a, StridedLayout((2, 3), itemsize=4), a[1:]}) == 2


def test_repr_is_readable_and_round_trips():
    a = StridedLayout((2, 3), (-3, 1), 4, slice_offset=3)
    text = repr(a)
    assert text == "StridedLayout(shape=(2, 3), strides=(-3, 1), itemsize=4, slice_offset=3)"
    assert eval(text, {"StridedLayout": StridedLayout}) == a
    assert repr(StridedLayout(())) == "StridedLayout(shape=(), strides=(), itemsize=1)"


@pytest.mark.parametrize("ndim", [0, 3, 6, 7, 64])
def test_pickle_and_copy_preserve_the_layout(ndim):
    a = StridedLayout((2, 1) * (ndim // 2) + (3,) * (ndim % 2), itemsize=2, slice_offset=5)
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.copy(a) is a and copy.deepcopy(a) is a


@pytest.mark.parametrize(
    "attr", ["shape", "strides", "itemsize", "slice_offset", "ndim", "volume", "new_attribute"]
)
def test_layout_is_immutable(attr):
    a = StridedLayout((2, 3))
    with pytest.raises(AttributeError):
        setattr(a, attr, 1)
    with pytest.raises((AttributeError, TypeError)):
        delattr(a, attr)
    assert a == StridedLayout((2, 3))


def test_layout_cannot_be_reinitialised_or_subclassed():
    a = StridedLayout((2, 3))
    with pytest.raises(TypeError, match="immutable"):
        a.__init__((4,))
    assert a.shape == (2, 3)
    with pytest.raises(TypeError):
        type("Sub", (StridedLayout,), {})


def test_64_dimensions_are_supported_and_65_are_not():
    shape = tuple([2, 1] * 32)
    a = StridedLayout(shape, itemsize=1)
    assert a.ndim == 64 and a.volume == 2**32 and a.is_contiguous_c
    ref = np.empty(shape, np.int8)
    key = (slice(None, None, -1), 0) * 16 + (Ellipsis,)
    expected = ref[key]
    got = a[key]
    assert got.shape == expected.shape and got.strides == expected.strides
    assert got.slice_offset == expected.ctypes.data - ref.ctypes.data
    assert a.permuted(tuple(reversed(range(64)))).is_contiguous_f
    with pytest.raises(ValueError, match="64"):
        StridedLayout((1,) * 65)
    with pytest.raises(ValueError, match="64"):
        StridedLayout.dense((1,) * 65, 1)
    with pytest.raises(ValueError, match="64"):
        a.unsqueezed(0)


@pytest.mark.parametrize("ndim", [5, 6, 7, 12])
def test_heap_and_inline_extents_behave_the_same(ndim):
    # ndim > 6 lives on the heap: the same operations must give the same answers as numpy.
    shape = tuple(range(2, 2 + ndim)) if ndim <= 7 else (2,) * ndim
    ref = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    layout = layout_of(ref)
    key = (slice(None, None, -1), Ellipsis, 1)
    same_elements(layout[key], ref[key])
    perm = tuple(reversed(range(ndim)))
    same_elements(layout.permuted(perm), ref.transpose(perm))
    same_elements(layout.reshaped(-1), ref.reshape(-1))


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (((2, -1),), {}, ValueError, ">= 0"),
        (((2, 3), (1,)), {}, ValueError, "1 entries"),
        (((2, 3), (1, 2, 3)), {}, ValueError, "3 entries"),
        (((2, 3.0),), {}, TypeError, "float"),
        ((("2", 3),), {}, TypeError, "str"),
        (("23",), {}, TypeError, "str"),
        (((2, None),), {}, TypeError, "NoneType"),
        (((2, 3), (1, 1.5)), {}, TypeError, "float"),
        (((True, 3),), {}, TypeError, "bool"),
        ((object(),), {}, TypeError, "object"),
        (((2,),), {"itemsize": 0}, ValueError, "itemsize"),
        (((2,),), {"itemsize": -4}, ValueError, "itemsize"),
        (((2,),), {"itemsize": 2.0}, TypeError, "itemsize"),
        (((2**40, 2**40),), {}, ValueError, "overflow"),
        (((2**63,),), {}, ValueError, "int64"),
        (((2,), (2**62,)), {"itemsize": 8}, ValueError, "int64 range"),
        (((3,), (2**62,)), {}, ValueError, "int64 range"),
        (((2,), (1,)), {"slice_offset": 2**62, "itemsize": 4}, ValueError, "int64 range"),
        (((2,) * 65,), {}, ValueError, "64"),
    ],
)
def test_bad_constructor_input_raises_clear_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        StridedLayout(*args, **kwargs)


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda: StridedLayout.dense((2, 3), 4, "X"), ValueError),
        (lambda: StridedLayout.dense((2, 3), 4, "K"), ValueError),  # K needs a layout
        (lambda: StridedLayout.dense((2, 3), 4, (0, 0)), ValueError),
        (lambda: StridedLayout.dense((2, 3), 4, (0, 2)), ValueError),
        (lambda: StridedLayout.dense((2, 3), 4, (0,)), ValueError),
        (lambda: StridedLayout.dense((2, 3), 0), ValueError),
        (lambda: StridedLayout.dense((2, -3), 4), ValueError),
        (lambda: StridedLayout.dense((2**40, 2**40), 4), ValueError),
        (lambda: StridedLayout.dense_like((2, 3)), TypeError),
        (lambda: StridedLayout((2, 3)).to_dense("Z"), ValueError),
        (lambda: StridedLayout((2, 3)).broadcast_to((2**40, 2**40, 2, 3)), ValueError),
    ],
)
def test_bad_arguments_to_constructors_and_methods_raise(call, exc):
    with pytest.raises(exc):
        call()


def test_zero_extent_layouts_are_contiguous_unique_and_need_no_bytes():
    a = StridedLayout((3, 0, 2), (5, 7, -9), itemsize=4, slice_offset=2)
    assert a.volume == 0
    assert a.is_contiguous_c and a.is_contiguous_f and a.is_contiguous_any and a.is_unique
    assert (a.min_offset, a.max_offset, a.required_size_in_bytes) == (2, 1, 0)
    assert a.reshaped((0, 7)).shape == (0, 7)
    assert a.flattened().shape == (0,)


def test_docstring_examples_run():
    import doctest

    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner()
    documented = [StridedLayout] + [getattr(StridedLayout, name) for name in dir(StridedLayout)]
    blocks = [obj.__doc__ for obj in documented if ">>>" in (getattr(obj, "__doc__", "") or "")]
    assert len(blocks) >= 5
    for number, doc in enumerate(blocks):
        runner.run(parser.get_doctest(doc, {"StridedLayout": StridedLayout}, str(number), None, 0))
    assert runner.summarize(verbose=False).failed == 0


# --- import hygiene ----------------------------------------------------------------------------


def test_import_and_layout_use_do_not_import_numpy():
    code = (
        "import sys\n"
        "import interop_core\n"
        "from interop_core import StridedLayout\n"
        "a = StridedLayout.dense((4, 6, 8), 4, (2, 0, 1))\n"
        "b = a[1:, :, None].permuted((0, 2, 3, 1)).repacked(8)\n"
        "b.is_unique, b.stride_order, b.required_size_in_bytes, hash(b), repr(b)\n"
        "b.merged(), b.merge_mask, b.max_compatible_itemsize(32), b.repacked(2, 16, -1)\n"
        "leaked = sorted(m for m in ('numpy', 'torch', 'jax', 'cupy', 'numba') if m in sys.modules)\n"
        "assert not leaked, leaked\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
