"""StridedLayout against numpy, by property: random layouts, every operation, numpy as the oracle.

Each layout drawn here (random extents with 0s and 1s, random strides with negative and zero
ones, dense layouts in random orders, permuted and sliced) is also built as a numpy array over a
real byte buffer with ``as_strided``.  Every operation is then done both ways and the results
compared: shape, strides in bytes and the byte offset of element 0 from the buffer.

Strides of dims of extent 1, and all strides of a layout with no elements, address nothing:
numpy and we choose them differently (numpy 2 zeroes an empty array's strides; we keep the
strides a dense layout would have), so they are not compared.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.array_utils import byte_bounds
from numpy.lib.stride_tricks import as_strided

from interop_core import StridedLayout
from interop_core.core._layout import AxisError

# Bounded for CI: the whole file runs in well under 30 s on two cores.
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ITEMSIZES = [1, 2, 3, 4, 8, 12, 16]
# 0 and 1 are the extents with special rules; draw them often.
EXTENTS = [0, 1, 1, 2, 2, 3, 4, 5]


# --- building a layout and its numpy twin ------------------------------------------------------


@st.composite
def slice_keys(draw, ndim):
    """One slice (any step, empty ones included) or an int per leading dim."""
    key = []
    for _ in range(draw(st.integers(0, ndim))):
        if draw(st.integers(0, 4)) == 0:
            key.append(draw(st.integers(-1, 0)))  # valid for any extent > 0
        else:
            start = draw(st.one_of(st.none(), st.integers(-6, 6)))
            stop = draw(st.one_of(st.none(), st.integers(-6, 6)))
            step = draw(st.one_of(st.none(), st.sampled_from([-3, -2, -1, 1, 2, 3])))
            key.append(slice(start, stop, step))
    return tuple(key)


@st.composite
def layouts(draw, min_ndim=0, max_ndim=5, shape=None, itemsize=None):
    """A layout whose lowest reached element is at or after the base pointer; with `shape`
    given, one of exactly that shape (not permuted or sliced)."""
    fixed = shape is not None
    if not fixed:
        ndim = draw(st.integers(min_ndim, max_ndim))
        shape = tuple(draw(st.sampled_from(EXTENTS)) for _ in range(ndim))
    ndim = len(shape)
    if itemsize is None:
        itemsize = draw(st.sampled_from(ITEMSIZES))
    if draw(st.booleans()):
        layout = StridedLayout.dense(shape, itemsize, draw(st.permutations(range(ndim))))
    else:
        strides = [draw(st.integers(-6, 6)) for _ in range(ndim)]
        layout = StridedLayout(shape, strides, itemsize)
    if not fixed and draw(st.booleans()):
        layout = layout.permuted(draw(st.permutations(range(ndim))))
    if not fixed and draw(st.booleans()):
        key = draw(slice_keys(ndim))
        ints = sum(not isinstance(k, slice) for k in key)
        if ndim - ints >= min_ndim and all(
            isinstance(k, slice) or layout.shape[d] > 0 for d, k in enumerate(key)
        ):
            layout = layout[key]
    # Move element 0 so that nothing lies before the base pointer, plus a little slack.
    slack = draw(st.integers(0, 3))
    lo, _ = layout.offset_bounds
    if layout.volume:
        offset = layout.slice_offset - lo + slack
    else:
        offset = abs(layout.slice_offset) + slack
    return StridedLayout(layout.shape, layout.strides, itemsize, offset)


def twin(layout):
    """(buffer, array): a numpy array with the layout's shape and strides over a byte buffer,
    its element 0 at ``slice_offset_in_bytes`` from the buffer's start."""
    lo, hi = layout.offset_bounds
    assert lo >= 0
    nbytes = (max(hi, layout.slice_offset) + 1) * layout.itemsize
    buffer = np.zeros(nbytes, np.uint8)
    first = np.frombuffer(
        buffer, np.dtype(f"V{layout.itemsize}"), count=1, offset=layout.slice_offset_in_bytes
    )
    return buffer, as_strided(first, layout.shape, layout.strides_in_bytes, writeable=False)


def address(arr):
    return arr.__array_interface__["data"][0]


def addressed_strides(shape, strides):
    """The strides that address something: those of dims of extent > 1, if any element."""
    if 0 in shape:
        return ()
    return tuple(s for n, s in zip(shape, strides, strict=True) if n != 1)


def assert_same(layout, arr, buffer):
    assert layout.shape == arr.shape
    assert layout.itemsize == arr.itemsize
    assert layout.slice_offset_in_bytes == address(arr) - address(buffer)
    assert addressed_strides(layout.shape, layout.strides_in_bytes) == addressed_strides(
        arr.shape, arr.strides
    )


def numpy_raises(call):
    try:
        call()
    except (ValueError, IndexError, TypeError) as exc:
        return type(exc)
    return None


# --- properties --------------------------------------------------------------------------------


@EXAMPLES
@given(layouts())
def test_queries_match_numpy_flags_and_byte_bounds(layout):
    buffer, arr = twin(layout)
    assert layout.volume == arr.size
    assert layout.ndim == arr.ndim
    assert layout.is_contiguous_c == arr.flags.c_contiguous
    assert layout.is_contiguous_f == arr.flags.f_contiguous
    lo, hi = layout.offset_bounds
    assert (lo, hi) == (layout.min_offset, layout.max_offset)
    if arr.size:
        low, high = byte_bounds(arr)
        assert lo * layout.itemsize == low - address(buffer)
        assert (hi + 1) * layout.itemsize == high - address(buffer)
        assert layout.required_size_in_bytes == high - address(buffer)
    else:
        assert (lo, hi) == (layout.slice_offset, layout.slice_offset - 1)
        assert layout.required_size_in_bytes == 0
    # stride_order: |stride| descending, then extent descending, then index.
    order = layout.stride_order
    keys = [(-abs(layout.strides[d]), -layout.shape[d], d) for d in order]
    assert sorted(order) == list(range(layout.ndim)) and keys == sorted(keys)
    # Contiguous in some order <=> numpy calls it C-contiguous once put in that order.
    assert layout.is_contiguous_any == arr.transpose(order).flags.c_contiguous
    assert layout.is_dense == (layout.is_contiguous_any and layout.slice_offset == 0)
    element_offsets = np.zeros(layout.shape, np.int64)
    for d, (n, s) in enumerate(zip(layout.shape, layout.strides, strict=True)):
        element_offsets = element_offsets + (np.arange(n) * s).reshape(
            (n,) + (1,) * (layout.ndim - d - 1)
        )
    flat = element_offsets.ravel()
    assert layout.is_unique == (len(np.unique(flat)) == flat.size)


index_items = st.one_of(
    st.integers(-6, 6),
    st.builds(
        slice,
        st.one_of(st.none(), st.integers(-7, 7)),
        st.one_of(st.none(), st.integers(-7, 7)),
        st.one_of(st.none(), st.integers(-3, 3)),  # 0 included: both must refuse it
    ),
    st.none(),
    st.just(Ellipsis),
)


@EXAMPLES
@given(layouts(), st.lists(index_items, max_size=6))
def test_getitem_matches_numpy_indexing(layout, items):
    buffer, arr = twin(layout)
    if items.count(Ellipsis) > 1:
        items = [i for i in items if i is not Ellipsis] + [Ellipsis]
    # A trailing Ellipsis makes numpy give a 0-d array rather than a scalar; it changes nothing.
    key = tuple(items) + (() if Ellipsis in items else (Ellipsis,))
    error = numpy_raises(lambda: arr[key])
    if error:
        with pytest.raises(error):
            layout[key]
        return
    got = layout[key]
    assert got == layout.sliced(key)
    assert_same(got, arr[key], buffer)


@st.composite
def reshape_targets(draw, shape):
    """A shape of the same volume: the prime factors of the extents (and some 1s) regrouped,
    sometimes with one extent given as -1."""
    volume = math.prod(shape)
    if volume == 0:
        target = [draw(st.sampled_from([0, 1, 2, 3])) for _ in range(draw(st.integers(1, 3)))]
        target[draw(st.integers(0, len(target) - 1))] = 0
        return tuple(target)
    factors, rest, p = [], volume, 2
    while rest > 1:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    factors = draw(st.permutations(factors + [1] * draw(st.integers(0, 2))))
    cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=4)))
    target, prev = [], 0
    for cut in cuts + [len(factors)]:
        target.append(math.prod(factors[prev:cut]))
        prev = cut
    if draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    return tuple(target)


@EXAMPLES
@given(st.data())
def test_reshaped_matches_numpy_reshape_without_copy(data):
    layout = data.draw(layouts())
    target = data.draw(reshape_targets(layout.shape))
    buffer, arr = twin(layout)
    error = numpy_raises(lambda: arr.reshape(target, copy=False))
    if error:
        with pytest.raises(error):
            layout.reshaped(target)
        return
    assert_same(layout.reshaped(target), arr.reshape(target, copy=False), buffer)


@EXAMPLES
@given(st.data())
def test_permuted_matches_numpy_transpose(data):
    layout = data.draw(layouts())
    axes = data.draw(st.permutations(range(layout.ndim)))
    axes = [a - layout.ndim if data.draw(st.booleans()) else a for a in axes]
    buffer, arr = twin(layout)
    assert_same(layout.permuted(axes), arr.transpose(axes), buffer)


@st.composite
def broadcast_targets(draw, shape):
    """Mostly shapes `shape` broadcasts to; sometimes one it does not."""
    lead = [draw(st.sampled_from([0, 1, 2, 3])) for _ in range(draw(st.integers(0, 2)))]
    tail = [draw(st.sampled_from([0, 2, 3])) if n == 1 else n for n in shape]
    target = lead + tail
    if target and draw(st.integers(0, 4)) == 0:
        target[draw(st.integers(0, len(target) - 1))] = draw(st.integers(0, 6))
    return tuple(target)


@EXAMPLES
@given(st.data())
def test_broadcast_to_matches_numpy_broadcast_to(data):
    layout = data.draw(layouts())
    target = data.draw(broadcast_targets(layout.shape))
    buffer, arr = twin(layout)
    error = numpy_raises(lambda: np.broadcast_to(arr, target))
    if error:
        with pytest.raises(error, match="cannot broadcast shape"):
            layout.broadcast_to(target)
        return
    got = layout.broadcast_to(target)
    assert_same(got, np.broadcast_to(arr, target), buffer)
    # A stretched dim repeats elements: numpy's broadcast views are read-only for this reason.
    assert got.is_unique == (got.volume == 0 or (layout.is_unique and got.volume == layout.volume))


@EXAMPLES
@given(st.data())
def test_squeezed_matches_numpy_squeeze(data):
    layout = data.draw(layouts())
    axes = None
    if data.draw(st.booleans()):
        axes = tuple(data.draw(st.lists(st.integers(0, max(layout.ndim - 1, 0)), unique=True)))
        axes = axes if layout.ndim else ()
    buffer, arr = twin(layout)
    error = numpy_raises(lambda: np.squeeze(arr, axes))
    if error:
        with pytest.raises(error):
            layout.squeezed(axes)
        return
    assert_same(layout.squeezed(axes), np.squeeze(arr, axes), buffer)


@EXAMPLES
@given(st.data())
def test_unsqueezed_matches_numpy_expand_dims(data):
    layout = data.draw(layouts(max_ndim=4))
    count = data.draw(st.integers(1, 3))
    axes = tuple(
        a - (layout.ndim + count) if data.draw(st.booleans()) else a
        for a in data.draw(st.permutations(range(layout.ndim + count)))[:count]
    )
    buffer, arr = twin(layout)
    assert_same(layout.unsqueezed(axes), np.expand_dims(arr, axes), buffer)


def merge_numpy(arr, allowed):
    """The shape a left-to-right greedy merge reaches when numpy decides each merge: dim i joins
    the group before it when bit i of `allowed` is set and numpy can reshape without a copy."""
    if arr.ndim == 0:
        return (1,)
    groups = [arr.shape[0]]
    for i in range(1, arr.ndim):
        trial = tuple(groups[:-1]) + (groups[-1] * arr.shape[i],) + arr.shape[i + 1 :]
        if allowed >> i & 1 and numpy_raises(lambda t=trial: arr.reshape(t, copy=False)) is None:
            groups[-1] *= arr.shape[i]
        else:
            groups.append(arr.shape[i])
    return tuple(groups)


def range_bits(ndim, start, end):
    """Bits start+1..end: dims start..end may merge with each other."""
    return sum(1 << i for i in range(start + 1, end + 1))


@EXAMPLES
@given(st.data())
def test_merged_makes_every_merge_numpy_can_make_within_range_and_mask(data):
    layout = data.draw(layouts())
    ndim = layout.ndim
    start = data.draw(st.integers(0, max(ndim - 1, 0)))
    end = data.draw(st.integers(start, max(ndim - 1, 0)))
    mask = data.draw(st.one_of(st.none(), st.integers(0, (1 << ndim) - 1)))
    buffer, arr = twin(layout)
    allowed = range_bits(ndim, start, end) & (-1 if mask is None else mask)
    expected_shape = merge_numpy(arr, allowed)
    args = (start, end - ndim) if ndim and data.draw(st.booleans()) else (start, end)
    got = layout.merged(*args, mask=mask) if ndim else layout.merged(mask=mask)
    assert got.shape == expected_shape
    assert_same(got, arr.reshape(expected_shape, copy=False), buffer)
    # All or nothing: flattened gives the same layout when the whole range merged.
    if ndim and got.ndim == ndim - (end - start) and mask is None:
        assert layout.flattened(start, end) == got
    elif ndim and mask is None:
        with pytest.raises(ValueError, match="without copying"):
            layout.flattened(start, end)


@EXAMPLES
@given(layouts())
def test_merge_mask_bit_i_says_whether_numpy_merges_dim_i_into_the_dims_before(layout):
    buffer, arr = twin(layout)
    shape = layout.shape
    expected = 0
    for i in range(1, layout.ndim):
        # Dim i joins the nearest earlier dim of extent != 1 (the 1s between cost nothing).
        j = max([d for d in range(i) if shape[d] != 1], default=i - 1)
        merged = shape[:j] + (math.prod(shape[j : i + 1]),) + shape[i + 1 :]
        if numpy_raises(lambda m=merged: arr.reshape(m, copy=False)) is None:
            expected |= 1 << i
    assert layout.merge_mask == expected
    # Every allowed bit is a merge made: a mask from merge_mask merges exactly its bits.
    assert layout.merged(mask=layout.merge_mask).ndim == max(
        layout.ndim - bin(expected).count("1"), 1
    )


@EXAMPLES
@given(st.data())
def test_merge_masks_anded_merge_two_layouts_into_the_same_shape(data):
    first = data.draw(layouts(min_ndim=1))
    second = data.draw(layouts(shape=first.shape))
    mask = first.merge_mask & second.merge_mask
    merged = [first.merged(mask=mask), second.merged(mask=mask)]
    assert merged[0].shape == merged[1].shape
    for layout, got in zip((first, second), merged, strict=True):
        buffer, arr = twin(layout)
        assert got.shape == merge_numpy(arr, mask)
        assert_same(got, arr.reshape(got.shape, copy=False), buffer)


def numpy_repack(arr, new_itemsize, axis):
    """numpy's view of `arr` with elements of `new_itemsize` bytes cut along `axis`.

    numpy re-cuts only the last axis, so `axis` is moved there and back; and it goes through
    1-byte elements because numpy's own rule, unlike ours, wants a divisor of the itemsize when
    the new elements are smaller.
    """
    moved = np.moveaxis(arr, axis, -1)
    viewed = moved.view(np.dtype("V1")).view(np.dtype(f"V{new_itemsize}"))
    return np.moveaxis(viewed, -1, axis)


def representable(arr, buffer, new_itemsize, data_ptr):
    """Whether our element-count layouts can say what numpy's byte strides say."""
    byte_offset = address(arr) - address(buffer)
    strides = addressed_strides(arr.shape, arr.strides)
    return (
        byte_offset % new_itemsize == 0
        and data_ptr % new_itemsize == 0
        and all(s % new_itemsize == 0 for s in strides)
    )


@EXAMPLES
@given(
    layouts(min_ndim=1),
    st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]),
    st.data(),
)
def test_repacked_matches_numpy_view_on_any_axis(layout, new_itemsize, data):
    axis = data.draw(st.integers(-layout.ndim, layout.ndim - 1))
    data_ptr = data.draw(st.sampled_from([0, 0, 4, 8, 16, 48, 0x7F0000000010, 0x7F0000000006]))
    keep_dim = data.draw(st.booleans())
    if new_itemsize == layout.itemsize:
        assert layout.repacked(new_itemsize, data_ptr, axis, keep_dim) is layout
        return
    buffer, arr = twin(layout)
    try:
        expected = numpy_repack(arr, new_itemsize, axis)
    except ValueError:
        expected = None
    if expected is None or not representable(expected, buffer, new_itemsize, data_ptr):
        with pytest.raises(ValueError, match="cannot repack"):
            layout.repacked(new_itemsize, data_ptr=data_ptr, axis=axis, keep_dim=keep_dim)
        return
    got = layout.repacked(new_itemsize, data_ptr=data_ptr, axis=axis, keep_dim=keep_dim)
    if not keep_dim and expected.shape[axis] == 1:
        expected = np.squeeze(expected, axis)
    assert_same(got, expected, buffer)
    assert got.itemsize == new_itemsize


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@EXAMPLES
@given(
    layouts(min_ndim=1),
    st.sampled_from([16, 16, 32, 24, 64]),
    st.sampled_from([0, 0, 8, 4, 0x7F0000000030, 6]),
    st.data(),
)
def test_max_compatible_itemsize_is_the_largest_divisor_numpy_can_view_as(
    layout, max_itemsize, data_ptr, data
):
    axis = data.draw(st.integers(-layout.ndim, layout.ndim - 1))
    if max_itemsize < layout.itemsize:
        with pytest.raises(ValueError, match="max_itemsize"):
            layout.max_compatible_itemsize(max_itemsize, data_ptr, axis)
        return
    buffer, arr = twin(layout)
    got = layout.max_compatible_itemsize(max_itemsize, data_ptr=data_ptr, axis=axis)
    if arr.size == 0 or numpy_raises(lambda: numpy_repack(arr, 1, axis)):
        assert got == layout.itemsize  # nothing to repack
        return
    fits = [
        d
        for d in divisors(max_itemsize)
        if numpy_raises(lambda d=d: numpy_repack(arr, d, axis)) is None
        and representable(numpy_repack(arr, d, axis), buffer, d, data_ptr)
    ]
    assert got == max(fits)
    if got != layout.itemsize:
        assert layout.repacked(got, data_ptr=data_ptr, axis=axis).itemsize == got


@EXAMPLES
@given(layouts(), st.data())
def test_to_dense_matches_numpy_copy(layout, data):
    order = data.draw(
        st.one_of(st.sampled_from(["C", "F", "K"]), st.permutations(range(layout.ndim)))
    )
    buffer, arr = twin(layout)
    got = layout.to_dense(order)
    assert got.is_dense and got.shape == layout.shape and got.itemsize == layout.itemsize
    assert got.required_size_in_bytes == arr.size * arr.itemsize
    if order in ("C", "F"):
        expected = np.empty(arr.shape, arr.dtype, order=order)
    elif order == "K":
        # numpy orders ties its own way; compare only where the order is not a tie.
        moving = [abs(s) for n, s in zip(layout.shape, layout.strides, strict=True) if n != 1]
        if len(set(moving)) != len(moving):
            return
        expected = np.empty_like(arr, order="K")
    else:
        permuted_shape = [arr.shape[d] for d in order]
        expected = np.empty(permuted_shape, arr.dtype).transpose(np.argsort(order))
    assert addressed_strides(got.shape, got.strides_in_bytes) == addressed_strides(
        expected.shape, expected.strides
    )


def test_zero_d_layouts_cannot_be_repacked_or_asked_about_an_axis():
    layout = StridedLayout((), itemsize=4)
    with pytest.raises(ValueError, match="0-d"):
        layout.repacked(8)
    with pytest.raises(AxisError):
        layout.max_compatible_itemsize()
    assert layout.repacked(4) is layout
