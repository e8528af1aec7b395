"""Copies: copy plans, host copies against numpy's own, bad input, DLPack copy= / dl_device=,
to(copy=, device=), allocations; on a GPU every direction, layouts, peers and stream ordering.

GPU tests are marked `gpu` and skip cleanly without a CUDA device (the peer test also without a
second one).  Ordering is proven like the other ordering tests: a long producer kernel is still
running when the copy is enqueued on another stream, and the copy reads final values anyway.
"""

from __future__ import annotations

import gc
import itertools
import time

import numpy as np
import pytest
from cuda_probe import cuda_device_count
from dlpack_ctypes import DLManagedTensorVersioned, capsule_pointer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interop_core
from interop_core import StridedLayout, StridedMemoryView, view
from interop_core.copies._coalesce import coalesce_copy

# One numpy dtype per element size the issue names: 1, 2, 4, 8, 16 bytes.
DTYPES = [np.uint8, np.float16, np.int32, np.float64, np.complex128]


# --- copy plans (the one pure function every path runs on) --------------------------------------


def _byte_pairs(shape, dst_strides, src_strides, width, dst_offset=0, src_offset=0):
    """Every (destination byte, source byte) pair a copy of this description moves."""
    pairs = set()
    for index in itertools.product(*(range(n) for n in shape)):
        d = dst_offset + sum(i * s for i, s in zip(index, dst_strides, strict=True))
        s = src_offset + sum(i * t for i, t in zip(index, src_strides, strict=True))
        pairs.update((d + b, s + b) for b in range(width))
    return pairs


@st.composite
def _copy_descriptions(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim)))
    itemsize = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    # Dense destination in a random order, maybe reversed along some dims; any source strides.
    order = draw(st.permutations(range(ndim)))
    dst = [0] * ndim
    step = itemsize * draw(st.sampled_from([1, 1, 2]))
    for d in reversed(order):
        dst[d] = step * draw(st.sampled_from([1, -1]))
        step *= max(shape[d], 1)
    src = [itemsize * draw(st.integers(-6, 6)) for _ in range(ndim)]
    pointers = (draw(st.sampled_from([0, 8, 16, 4096])), draw(st.sampled_from([0, 4, 16, 4096])))
    return shape, tuple(dst), tuple(src), itemsize, pointers


@settings(max_examples=300, deadline=None)
@given(_copy_descriptions())
def test_a_copy_plan_moves_exactly_the_bytes_of_the_copy_it_describes(description):
    shape, dst, src, itemsize, (dst_ptr, src_ptr) = description
    plan = coalesce_copy(shape, dst, src, itemsize, dst_ptr, src_ptr)
    if 0 in shape:
        assert plan["empty"]
        return
    assert not plan["empty"]
    assert len(plan["shape"]) <= max(len([n for n in shape if n > 1]) + 1, 0)
    assert all(s > 0 for s in plan["dst_strides"])
    assert list(plan["dst_strides"]) == sorted(plan["dst_strides"], reverse=True)
    assert (dst_ptr + plan["dst_offset"]) % plan["width"] == 0
    full = _byte_pairs(shape, dst, src, itemsize)
    planned = _byte_pairs(plan["shape"], plan["dst_strides"], plan["src_strides"],
                          plan["width"], plan["dst_offset"], plan["src_offset"])
    assert planned == full


@pytest.mark.parametrize(("shape", "dst", "src", "itemsize", "expected"), [
    # contiguous on both sides: one run of wide elements
    ((4, 8), (32, 4), (32, 4), 4, ((8,), (16,), (16,), 16)),
    # a transpose stays two-dimensional, ordered by the destination
    ((3, 5), (20, 4), (4, 12), 4, ((3, 5), (20, 4), (4, 12), 4)),
    # extents of 1 vanish; a broadcast source (stride 0) merges with nothing
    ((1, 6, 1), (24, 4, 4), (0, 0, 0), 4, ((6,), (4,), (0,), 4)),
    # a reversed destination is walked forwards, the source backwards
    ((5,), (-8,), (8,), 8, ((5,), (8,), (-8,), 8)),
    # [:, ::2] of a (4, 6) array: rows continue each other, one strided run
    ((4, 3), (12, 4), (24, 8), 4, ((12,), (4,), (8,), 4)),
    # [:, :6:2] of a (4, 8) array: rows are not merged, elements keep their width
    ((4, 3), (12, 4), (32, 8), 4, ((4, 3), (12, 4), (32, 8), 4)),
], ids=["contiguous", "transpose", "size-1-and-broadcast", "reversed-dst", "step-2-merged",
        "step-2-rows"])
def test_copy_plans_of_common_layouts(shape, dst, src, itemsize, expected):
    plan = coalesce_copy(shape, dst, src, itemsize)
    assert (plan["shape"], plan["dst_strides"], plan["src_strides"], plan["width"]) == expected


def test_misaligned_pointers_narrow_the_plans_element():
    assert coalesce_copy((8,), (4,), (4,), 4, 0, 0)["width"] == 16
    assert coalesce_copy((8,), (4,), (4,), 4, 0, 4)["width"] == 4
    assert coalesce_copy((8,), (4,), (4,), 4, 2, 0)["width"] == 2


# --- host copies against numpy ------------------------------------------------------------------


def _shaped(array, perm, steps, shape):
    """``array`` transposed by ``perm`` and sliced with ``steps`` to exactly ``shape``."""
    out = array.transpose(perm)
    index = []
    for n, step, length in zip(shape, steps, out.shape, strict=True):
        start = 0 if step > 0 else length - 1
        stop = start + step * n
        index.append(slice(start, stop if stop >= 0 else None, step))
    out = out[tuple(index)] if index else out[...]     # a 0-d array stays an array
    assert out.shape == tuple(shape)
    return out


def _strided(draw, dtype, shape, fill):
    """A view of `shape` inside a bigger buffer: random order, steps (negative included)."""
    ndim = len(shape)
    perm = draw(st.permutations(range(ndim)))
    steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in range(ndim)]
    base_shape = [0] * ndim
    for i, d in enumerate(perm):
        base_shape[d] = shape[i] * abs(steps[i]) + draw(st.integers(0, 1))
    size = int(np.prod(base_shape)) * dtype.itemsize
    raw = fill(size)
    return raw, (lambda buffer: _shaped(buffer.view(dtype).reshape(base_shape), perm, steps,
                                        shape))


@st.composite
def _host_copies(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    ndim = draw(st.integers(0, 6))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    # The source broadcasts to `shape`: fewer leading dims, extents of 1.
    src_shape = list(shape[draw(st.integers(0, ndim)):])
    for i in range(len(src_shape)):
        if draw(st.integers(0, 3)) == 0:
            src_shape[i] = 1
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    src_raw, src_of = _strided(draw, dtype, src_shape,
                               lambda n: rng.integers(0, 256, n, dtype=np.uint8))
    dst_raw, dst_of = _strided(draw, dtype, shape, lambda n: np.full(n, 0xAB, np.uint8))
    return src_of(src_raw), dst_raw, dst_of


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_host_copies())
def test_host_copies_match_numpys_for_any_layout_and_dtype_size(case):
    src, dst_raw, dst_of = case
    reference_raw = dst_raw.copy()
    np.copyto(dst_of(reference_raw), src)            # numpy's own copy
    dst = dst_of(dst_raw)
    result = view(dst).copy_from(view(src))
    assert result.ptr == view(dst).ptr
    # Same bytes everywhere: the copied elements, and every byte around them untouched.
    assert dst_raw.tobytes() == reference_raw.tobytes()


@pytest.mark.parametrize(("name", "make"), [
    ("shift right", lambda x: (x[1:], x[:-1])),
    ("shift left", lambda x: (x[:-1], x[1:])),
    ("reverse in place", lambda x: (x, x[::-1])),
    ("onto itself", lambda x: (x, x)),
    ("interleaved", lambda x: (x[::2], x[1::2])),
])
def test_overlapping_source_and_destination_copy_like_numpy(name, make):
    x = np.arange(12, dtype=np.int32)
    expected = x.copy()
    d, s = make(expected)
    np.copyto(d, s.copy())
    d, s = make(x)
    view(d).copy_from(view(s))
    np.testing.assert_array_equal(x, expected)


def test_a_square_matrix_transposed_onto_itself():
    a = np.arange(16.0).reshape(4, 4)
    expected = a.T.copy()
    view(a).copy_from(view(a.T))
    np.testing.assert_array_equal(a, expected)


def test_copy_to_and_copy_from_accept_framework_objects_and_return_the_destination():
    torch = pytest.importorskip("torch")
    t = torch.zeros(3, 4)
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = view(a.T).copy_to(t)
    assert out.ptr == t.data_ptr()
    assert t.tolist() == a.T.tolist()
    v = view(np.zeros((4, 3), np.float32))
    assert v.copy_from(torch.arange(12.0).reshape(4, 3)) is v


def test_copies_of_every_element_size_and_of_zero_dimensions():
    for dtype in DTYPES:
        src = np.array(7, dtype=dtype)
        dst = np.zeros((), dtype=dtype)
        view(dst).copy_from(view(src))
        assert dst == src
    empty = np.zeros((0, 3), np.float32)
    view(empty).copy_from(view(np.zeros((1, 3), np.float32)))


def test_views_of_more_than_sixteen_dimensions_copy():
    a = np.arange(2 ** 17, dtype=np.uint16).reshape((2,) * 17)
    src = a.transpose(list(range(16, -1, -1)))
    dst = np.zeros_like(src)
    view(dst).copy_from(view(src))
    np.testing.assert_array_equal(dst, src)


# --- bad input: clear errors, nothing written ----------------------------------------------------


def _untouched(dst, before):
    np.testing.assert_array_equal(dst, before)


@pytest.mark.parametrize(("src", "error", "match"), [
    (np.ones((3, 5), np.float32), ValueError, r"shape \(3, 5\) does not broadcast"),
    (np.ones((2, 3, 4), np.float32), ValueError, "more dimensions"),
    (np.ones((3, 4), np.float64), ValueError, "dtype float64 differs .* float32"),
], ids=["shape", "ndim", "dtype"])
def test_mismatched_copies_raise_and_write_nothing(src, error, match):
    dst = np.zeros((3, 4), np.float32)
    with pytest.raises(error, match=match):
        view(dst).copy_from(view(src))
    _untouched(dst, np.zeros((3, 4)))


def test_a_read_only_destination_is_refused():
    dst = np.zeros(4, np.float32)
    dst.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        view(np.ones(4, np.float32)).copy_to(view(dst))
    _untouched(dst, np.zeros(4))


def test_a_destination_with_overlapping_elements_is_refused():
    buf = np.zeros(4, np.float32)
    v = StridedMemoryView.from_pointer(buf.ctypes.data, (4, 4), (0, 1), dtype="float32",
                                       owner=buf)
    with pytest.raises(ValueError, match="overlapping elements"):
        v.copy_from(view(np.ones((4, 4), np.float32)))
    _untouched(buf, np.zeros(4))


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the driver-less behaviour")
@pytest.mark.parametrize("device", ["cuda", "cuda_host"])
def test_cuda_memory_without_a_driver_is_a_clear_error(device):
    buf = np.zeros(4, np.float32)
    fake = StridedMemoryView.from_pointer(buf.ctypes.data, (4,), dtype="float32",
                                          device=device, owner=buf)
    with pytest.raises(BufferError, match="no CUDA driver"):
        fake.copy_from(view(np.ones(4, np.float32)))
    _untouched(buf, np.zeros(4))


def test_memory_of_an_unknown_device_type_is_unreachable():
    buf = np.zeros(4, np.float32)
    rocm = StridedMemoryView.from_pointer(buf.ctypes.data, (4,), dtype="float32",
                                          device="rocm", owner=buf)
    with pytest.raises(BufferError, match="DLPack device type 10"):
        rocm.copy_from(view(np.ones(4, np.float32)))
    with pytest.raises(BufferError, match="DLPack device type 10"):
        rocm.copy_to(view(buf))
    _untouched(buf, np.zeros(4))


@pytest.mark.skipif(cuda_device_count() > 8, reason="needs fewer than 9 CUDA devices")
def test_a_cuda_device_that_does_not_exist_is_a_clear_error():
    buf = np.zeros(4, np.float32)
    far = StridedMemoryView.from_pointer(buf.ctypes.data, (4,), dtype="float32",
                                         device="cuda:9", owner=buf)
    error = ValueError if cuda_device_count() else BufferError
    with pytest.raises(error, match="device 9|no CUDA driver"):
        far.copy_to(view(buf))


def test_bad_streams_are_refused_before_anything_is_written():
    dst = np.zeros(4, np.float32)
    with pytest.raises(TypeError):
        view(dst).copy_from(view(np.ones(4, np.float32)), stream="nope")
    _untouched(dst, np.zeros(4))


def test_non_views_that_cannot_be_viewed_are_a_type_error():
    with pytest.raises(TypeError, match="the destination must be"):
        view(np.ones(3)).copy_to(object())


# --- allocation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("layout", "strides"), [
    (None, (1, 3)), ("K", (1, 3)), ("C", (4, 1)), ("F", (1, 3)),
    (StridedLayout((3, 4), (1, 3), itemsize=8), (1, 3)),
    (StridedLayout((3, 4), (-4, -1), itemsize=8), (-4, -1)),
])
def test_empty_like_lays_new_memory_out_as_asked(layout, strides):
    like = view(np.zeros((4, 3)).T)          # strides (1, 3): Fortran order
    v = StridedMemoryView.empty_like(like, layout=layout)
    assert (v.shape, v.strides, v.dtype, v.readonly) == ((3, 4), strides, np.float64, False)
    assert v.device_type == 1 and type(v.owner).__name__ == "Allocation"
    v.copy_from(like)                        # every element is inside the allocation
    assert v.owner.size == 3 * 4 * 8


def test_empty_like_memory_lives_as_long_as_anything_exported_from_it():
    v = StridedMemoryView.empty_like(view(np.zeros(1000)), device="cpu")
    v.copy_from(view(np.arange(1000.0)))
    exported = interop_core.to(v, "numpy")
    del v
    gc.collect()
    np.testing.assert_array_equal(exported, np.arange(1000.0))


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"device": "tpu"}, ValueError, "unknown device"),
    ({"device": (14, 0)}, BufferError, "device type 14"),
    ({"device": "cuda:x"}, ValueError, "not a non-negative integer"),
    ({"layout": "Z"}, ValueError, "order"),
    ({"layout": 3}, TypeError, "layout must be"),
    ({"layout": StridedLayout((2, 2), itemsize=8)}, ValueError, "shape"),
    ({"layout": StridedLayout((3, 4), (0, 1), itemsize=8)}, ValueError, "overlapping"),
])
def test_empty_like_rejects_bad_devices_and_layouts(kwargs, error, match):
    with pytest.raises(error, match=match):
        StridedMemoryView.empty_like(view(np.zeros((3, 4))), **kwargs)


def test_allocations_are_made_only_by_interop_core():
    from interop_core.cuda._memory import Allocation

    with pytest.raises(TypeError, match="made by interop-core"):
        Allocation()


# --- exports: DLPack copy= / dl_device=, to(copy=, device=) --------------------------------------


def test_from_dlpack_with_copy_true_gets_a_copy():
    a = np.arange(6.0).reshape(2, 3)
    b = np.from_dlpack(view(a)[:, ::2], copy=True)
    assert b.ctypes.data != a.ctypes.data
    np.testing.assert_array_equal(b, a[:, ::2])
    assert b.flags.writeable


def test_from_dlpack_with_copy_false_shares_memory():
    a = np.arange(6.0)
    assert np.from_dlpack(view(a), copy=False).ctypes.data == a.ctypes.data


def test_a_copied_export_of_a_read_only_view_is_writable():
    a = np.arange(4.0)
    a.flags.writeable = False
    cap = view(a).__dlpack__(copy=True, max_version=(1, 0))
    flags = DLManagedTensorVersioned.from_address(capsule_pointer(cap)).flags
    assert flags & 2 and not flags & 1      # IS_COPIED, not READ_ONLY


@pytest.mark.parametrize(("kwargs", "shares"), [
    ({}, True), ({"copy": None}, True), ({"copy": False}, True), ({"copy": True}, False),
    ({"device": "cpu"}, True), ({"device": (1, 0)}, True),
    ({"device": "cpu", "copy": True}, False),
])
def test_to_numpy_follows_the_array_api_copy_rules_on_the_host(kwargs, shares):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-2]
    out = interop_core.to(a, "numpy", **kwargs)
    np.testing.assert_array_equal(out, a)
    assert (out.__array_interface__["data"][0] == a.__array_interface__["data"][0]) == shares


def test_to_torch_with_copy_true_does_not_share_memory():
    torch = pytest.importorskip("torch")
    a = np.arange(4, dtype=np.float32)
    t = interop_core.to(a, "torch", copy=True)
    t += 1
    assert a.tolist() == [0, 1, 2, 3] and t.tolist() == [1, 2, 3, 4]
    assert isinstance(t, torch.Tensor)


def test_to_with_copy_false_refuses_another_device():
    with pytest.raises(BufferError, match="copy=False"):
        interop_core.to(np.arange(3.0), "numpy", device="cuda:0", copy=False)


def test_to_rejects_a_non_bool_copy():
    with pytest.raises(TypeError, match="copy must be"):
        interop_core.to(np.arange(3.0), "numpy", copy="yes")


# --- on a GPU ------------------------------------------------------------------------------------

TRIALS = 50
SLEEP_CYCLES = 50_000_000       # ~25-40 ms of GPU time on an H100


@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


# Layouts as functions of a contiguous 4-D array-like (numpy or torch) of shape (6, 5, 4, 8).
LAYOUTS = {
    "contiguous": lambda x: x,
    "transposed": lambda x: x.permute(3, 2, 1, 0) if hasattr(x, "permute")
    else x.transpose(3, 2, 1, 0),
    "step 2": lambda x: x[:, :, :, ::2],
    "rows": lambda x: x[:, 1:4],
    "4-D permute": lambda x: x.permute(0, 2, 3, 1) if hasattr(x, "permute")
    else x.transpose(0, 2, 3, 1),
    "single element": lambda x: x[1, 2, 3, 4],
}


def _numpy_source(layout):
    return LAYOUTS[layout](np.arange(6 * 5 * 4 * 8, dtype=np.float32).reshape(6, 5, 4, 8))


def _torch_values(t):
    return t.detach().cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("direction", ["h2d", "h2d pinned", "d2h", "d2h pinned", "d2d",
                                       "d2d into strided"])
def test_copies_between_host_and_device_in_every_layout(torch_cuda, direction, layout):
    torch = torch_cuda
    expected = _numpy_source(layout)
    full = torch.arange(6 * 5 * 4 * 8, dtype=torch.float32).reshape(6, 5, 4, 8)
    if direction.startswith("h2d"):
        src = full.pin_memory() if direction.endswith("pinned") else full
        src = LAYOUTS[layout](src)
        dst = torch.zeros(expected.shape, device="cuda")
        if direction.endswith("pinned"):
            sv = view(src)
            src = StridedMemoryView.from_pointer(sv.ptr, sv.shape, sv.strides, dtype="float32",
                                                 device="cuda_host", owner=src)
        view(dst).copy_from(src)
        np.testing.assert_array_equal(_torch_values(dst), expected)
    elif direction.startswith("d2h"):
        src = LAYOUTS[layout](full.cuda())
        if direction.endswith("pinned"):
            dst = StridedMemoryView.empty_like(view(src), device="cuda_host", layout="C")
        else:
            dst = view(np.zeros(expected.shape, np.float32))
        view(src).copy_to(dst)          # stream=None: complete on return
        np.testing.assert_array_equal(np.asarray(dst), expected)
    else:
        src = LAYOUTS[layout](full.cuda())
        if direction == "d2d":
            dst = torch.zeros(expected.shape, device="cuda")
        else:   # a strided destination: every other element of a bigger buffer, reversed
            big = torch.full((2 * expected.size + 2,), -1.0, device="cuda")
            dst = big[1:1 + 2 * expected.size].flip(0)[::2].reshape(expected.shape) \
                if expected.size > 1 else big[1:2].reshape(expected.shape)
        view(dst).copy_from(view(src))
        np.testing.assert_array_equal(_torch_values(dst), expected)
        if direction != "d2d" and expected.size > 1:
            assert float(big[0]) == -1.0 and float(big[-1]) == -1.0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["uint8", "float16", "int32", "float64", "complex128"])
def test_device_copies_of_every_element_size(torch_cuda, dtype):
    torch = torch_cuda
    src = np.arange(3 * 64 * 33).astype(dtype).reshape(3, 64, 33)[:, ::-3]
    on_device = StridedMemoryView.empty_like(view(src), device="cuda")
    on_device.copy_from(view(src))
    strided = StridedMemoryView.empty_like(view(src.transpose(2, 0, 1)), device="cuda")
    strided.copy_from(on_device.view(on_device.layout.permuted((2, 0, 1))))
    back = np.zeros(strided.shape, dtype)
    strided.copy_to(view(back))
    np.testing.assert_array_equal(back, src.transpose(2, 0, 1))
    del torch


@pytest.mark.gpu
def test_broadcast_and_reversed_sources_on_the_device(torch_cuda):
    torch = torch_cuda
    row = torch.arange(16.0, device="cuda")
    dst = torch.zeros(8, 16, device="cuda")
    view(dst).copy_from(view(row.flip(0)))
    assert (dst == row.flip(0)).all()
    view(dst).copy_from(view(dst.flip(1)))        # overlapping: through a temporary
    assert (dst == row).all()


@pytest.mark.gpu
def test_more_than_sixteen_dimensions_on_the_device(torch_cuda):
    torch = torch_cuda
    x = torch.arange(2 ** 17, dtype=torch.int16, device="cuda").reshape((2,) * 17)
    src = x.permute(*range(16, -1, -1))
    dst = torch.empty(src.shape, dtype=torch.int16, device="cuda")
    view(dst).copy_from(view(src))
    assert torch.equal(dst, src.contiguous())


@pytest.mark.gpu
@pytest.mark.multi_gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "step 2"])
@pytest.mark.parametrize("on", ["source's device", "destination's device"])
def test_peer_copies_between_two_devices(torch_cuda, layout, on):
    torch = torch_cuda
    expected = _numpy_source(layout)
    src = LAYOUTS[layout](torch.arange(6 * 5 * 4 * 8, dtype=torch.float32,
                                       device="cuda:0").reshape(6, 5, 4, 8))
    dst = torch.zeros(expected.shape, device="cuda:1")
    stream = torch.cuda.Stream(device=0 if on == "source's device" else 1)
    view(dst).copy_from(view(src), stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(_torch_values(dst), expected)


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_a_stream_of_an_unrelated_device_is_refused(torch_cuda):
    torch = torch_cuda
    src = torch.ones(4, device="cuda:0")
    dst = torch.zeros(4, device="cuda:0")
    with pytest.raises(ValueError, match="stream belongs to CUDA device 1"):
        view(dst).copy_from(view(src), stream=torch.cuda.Stream(device=1))
    assert float(dst.sum()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_copy_on_a_stream_is_ordered_after_the_producer(torch_cuda, layout):
    torch = torch_cuda
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(256, 512, device="cuda")
    dst = torch.zeros(512, 256, device="cuda") if layout == "transposed" \
        else torch.zeros(256, 512, device="cuda")
    torch.cuda.synchronize()
    returned_early = 0
    for trial in range(1, TRIALS + 1):
        with torch.cuda.stream(producer):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(float(trial))
            src = view(x.t() if layout == "transposed" else x)   # producer: this stream
        start = time.perf_counter()
        view(dst).copy_from(src, stream=consumer)
        elapsed = time.perf_counter() - start
        consumer.synchronize()
        assert float(dst.min()) == float(trial) == float(dst.max()), f"trial {trial}"
        returned_early += elapsed < 0.005
    assert returned_early >= TRIALS - 2, "the host waited for the producer's kernel"


@pytest.mark.gpu
def test_the_destinations_pending_readers_finish_before_the_copy_overwrites_it(torch_cuda):
    torch = torch_cuda
    reader, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    dst = torch.ones(1 << 20, device="cuda")
    for trial in range(1, 11):
        dst.fill_(1.0)
        torch.cuda.synchronize()
        with torch.cuda.stream(reader):
            torch.cuda._sleep(SLEEP_CYCLES)
            total = dst.sum()              # reads dst long after the copy is enqueued
            target = view(dst)
        target.copy_from(view(torch.zeros(1 << 20, device="cuda")), stream=consumer)
        consumer.synchronize()
        assert float(total) == float(1 << 20), f"trial {trial}"
        assert float(dst.sum()) == 0.0


@pytest.mark.gpu
def test_a_dense_device_copy_without_a_stream_is_complete_on_return(torch_cuda):
    torch = torch_cuda
    producer = torch.cuda.Stream()
    x = torch.zeros(1, device="cuda")
    dst = torch.zeros(1, device="cuda")
    for trial in range(1, 6):
        torch.cuda.synchronize()
        with torch.cuda.stream(producer):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(float(trial))
            src = view(x)                   # producer: the side stream, still sleeping
        view(dst).copy_from(src)            # stream=None: the legacy default stream, waited for
        assert torch.cuda.default_stream().query() and producer.query(), f"trial {trial}"
        assert float(dst) == float(trial)


@pytest.mark.gpu
def test_a_dense_device_copy_orders_only_producers_on_other_streams(torch_cuda):
    from interop_core.cuda import _cuda

    torch = torch_cuda
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(side):
        src, dst = torch.arange(4.0, device="cuda"), torch.zeros(4, device="cuda")
        sv, dv = view(src), view(dst)
    before = _cuda.orderings_enqueued()
    dv.copy_from(sv, stream=side)           # both producers are the copy's stream
    assert _cuda.orderings_enqueued() == before
    with torch.cuda.stream(side):
        dv = view(dst)
    dv.copy_from(sv, stream=other)          # one producer, shared by both sides: ordered once
    assert _cuda.orderings_enqueued() == before + 1
    assert dv.producer_stream == other.cuda_stream
    other.synchronize()
    assert dst.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["C", "F"])
def test_dense_device_copies_of_either_order_and_onto_shifted_memory(torch_cuda, order):
    torch = torch_cuda
    stream = torch.cuda.Stream()
    src = torch.arange(12.0, device="cuda").reshape(3, 4)
    dst = torch.zeros(3, 4, device="cuda")
    if order == "F":
        src, dst = src.t().contiguous().t(), dst.t().contiguous().t()
    view(dst).copy_from(view(src), stream=stream)
    stream.synchronize()
    assert torch.equal(dst, src)
    x = torch.arange(10.0, device="cuda")
    view(x[1:9]).copy_from(view(x[0:8]), stream=stream)     # shared memory: through a temporary
    stream.synchronize()
    assert x.tolist() == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0]


@pytest.mark.gpu
def test_stream_ordered_allocations_belong_to_their_stream(torch_cuda):
    torch = torch_cuda
    stream = torch.cuda.Stream()
    v = StridedMemoryView.empty_like(view(torch.ones(64, device="cuda")), stream=stream)
    assert v.owner.kind in ("device_async", "device")
    if v.owner.kind == "device_async":
        assert v.producer_stream == stream.cuda_stream == v.owner.stream
    v.copy_from(view(torch.arange(64.0, device="cuda")), stream=stream)
    out = torch.from_dlpack(v)
    stream.synchronize()
    assert out.tolist() == list(range(64))
    del v, out
    gc.collect()
    stream.synchronize()                  # the release was enqueued on the stream


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda_managed", "cuda_host"])
def test_managed_and_pinned_allocations_take_strided_copies(torch_cuda, device):
    torch = torch_cuda
    src = torch.arange(64.0, device="cuda").reshape(8, 8).t()
    v = StridedMemoryView.empty_like(view(src), device=device, layout="C")
    v.copy_from(view(src))
    np.testing.assert_array_equal(np.asarray(v), np.arange(64.0).reshape(8, 8).T)


@pytest.mark.gpu
def test_dlpack_export_to_the_cpu_copies_and_flags_it(torch_cuda):
    torch = torch_cuda
    t = torch.arange(12.0, device="cuda").reshape(3, 4)[:, ::2]
    cap = view(t).__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    flags = DLManagedTensorVersioned.from_address(capsule_pointer(cap)).flags
    assert flags & 2
    got = StridedMemoryView.from_dlpack(cap)
    assert got.device_type == 1
    np.testing.assert_array_equal(np.asarray(got), _torch_values(t))
    with pytest.raises(BufferError, match="copy=False"):
        view(t).__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError, match="stream must be None"):
        view(t).__dlpack__(dl_device=(1, 0), stream=torch.cuda.current_stream().cuda_stream)


@pytest.mark.gpu
def test_to_numpy_from_the_device_follows_the_array_api(torch_cuda):
    torch = torch_cuda
    t = torch.arange(6.0, device="cuda").reshape(2, 3)
    with pytest.raises(BufferError, match="device='cpu'"):
        interop_core.to(t, "numpy")
    with pytest.raises(BufferError, match="copy=False"):
        interop_core.to(t, "numpy", device="cpu", copy=False)
    np.testing.assert_array_equal(interop_core.to(t, "numpy", device="cpu"),
                                  np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.from_dlpack(view(t), device="cpu"),
                                  np.arange(6.0).reshape(2, 3))


@pytest.mark.gpu
def test_to_another_device_or_a_copy_on_the_same_one(torch_cuda):
    torch = torch_cuda
    t = torch.arange(6.0, device="cuda").reshape(2, 3).t()
    same = interop_core.to(t, "torch", device="cuda:0")
    assert same.data_ptr() == t.data_ptr()
    copied = interop_core.to(t, "torch", copy=True)
    assert copied.data_ptr() != t.data_ptr() and torch.equal(copied, t)
    on_host = interop_core.to(t, "torch", device="cpu")
    assert on_host.device.type == "cpu" and torch.equal(on_host, t.cpu())
    on_device = interop_core.to(np.arange(4.0), "torch", device=torch.device("cuda:0"))
    assert on_device.is_cuda and on_device.tolist() == [0, 1, 2, 3]
