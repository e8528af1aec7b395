"""interop_core.compat.cuda_core takes the core's own C paths: its constructors call the core's
exact-type fast path and protocol readers directly, its views read the core's accessors through
descriptors made for the compat type, die through the core's deallocator, and cache what their
own conventions add (``strides`` None, a layout's implicit strides) without changing an answer.
"""

from __future__ import annotations

import gc
import sys
import types
import warnings
import weakref

import numpy as np
import pytest

import interop_core
from interop_core.compat import cuda_core as compat
from interop_core.compat.cuda_core import StridedLayout, StridedMemoryView

CORE = interop_core.StridedMemoryView
DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _arrays():
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {"contiguous": grid, "sliced": grid[1:, ::2], "transposed": grid.T,
            "column": grid[:, 2], "zero_size": np.zeros((0, 3), np.int8),
            "zero_d": np.array(3.0), "reversed": np.arange(10.0)[::-2],
            "ones": np.ones((1, 5, 1), np.int16)}


def _inherited_accessors():
    return [name for name, attr in vars(CORE).items()
            if isinstance(attr, DESCRIPTORS) and not name.startswith("__")
            and not isinstance(vars(StridedMemoryView).get(name), property)
            and name not in ("strides", "dtype", "device_id", "layout", "_layout",
                             "exporting_obj")]


def _read(view, name):
    try:
        return ("value", getattr(view, name))
    except Exception as exc:  # an accessor that does not apply (a device-only export)
        return ("raised", type(exc))


def test_the_cores_accessors_are_descriptors_of_the_compat_type():
    names = _inherited_accessors()
    assert {"ptr", "shape", "size", "readonly", "owner", "is_device_accessible"} <= set(names)
    for name in names:
        descriptor = vars(StridedMemoryView)[name]
        assert isinstance(descriptor, DESCRIPTORS), name
        assert descriptor.__objclass__ is StridedMemoryView, name
        assert descriptor.__doc__ == vars(CORE)[name].__doc__, name


@pytest.mark.parametrize("layout", list(_arrays()))
def test_the_cores_accessors_read_the_same_on_a_compat_view(layout):
    array = _arrays()[layout]
    mine = StridedMemoryView.from_any_interface(array, -1)
    core = CORE.from_any(array)
    for name in _inherited_accessors():
        assert _read(mine, name) == _read(core, name), name


def test_the_accessors_still_refuse_objects_that_are_not_views():
    with pytest.raises(TypeError):
        vars(StridedMemoryView)["ptr"].__get__(object())
    with pytest.raises(TypeError):
        vars(StridedMemoryView)["shape"].__get__(CORE.from_any(np.zeros(3)))


@pytest.mark.parametrize("make", ["from_dlpack", "from_any_interface", "from_array_interface",
                                  "constructor", "from_buffer", "view_with_layout",
                                  "of_a_core_view"])
def test_compat_views_die_and_release_what_they_hold(make):
    array = np.arange(12, dtype=np.float32)
    buffer = interop_core.Buffer.from_handle(array.ctypes.data, array.nbytes, owner=array)
    core_view = CORE.from_any(array)
    makers = {
        "from_dlpack": lambda: StridedMemoryView.from_dlpack(array, -1),
        "from_any_interface": lambda: StridedMemoryView.from_any_interface(array, -1),
        "from_array_interface": lambda: StridedMemoryView.from_array_interface(array),
        "constructor": lambda: StridedMemoryView(array, -1),
        "from_buffer": lambda: StridedMemoryView.from_buffer(buffer, (3, 4), dtype=np.float32),
        "view_with_layout": lambda: StridedMemoryView.from_dlpack(array, -1).view(
            StridedLayout((2, 3), None, 4)),
        "of_a_core_view": lambda: StridedMemoryView.from_any_interface(core_view, -1),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        first = makers[make]()
        assert isinstance(first, StridedMemoryView)
        ref = weakref.ref(first)
        del first
        gc.collect()
        assert ref() is None
        held = sys.getrefcount(array), sys.getrefcount(buffer)
        for _ in range(1000):
            v = makers[make]()
            v.shape, v.strides, v.layout, v.dtype  # noqa: B018  (fill the caches)
        del v
        gc.collect()
        assert (sys.getrefcount(array), sys.getrefcount(buffer)) == held


def test_a_view_handed_in_is_copied_not_retyped():
    core_view = CORE.from_any(np.zeros((2, 3)))
    mine = StridedMemoryView.from_any_interface(core_view, -1)
    assert type(core_view) is CORE and type(mine) is StridedMemoryView
    assert mine is not core_view and mine.ptr == core_view.ptr
    again = StridedMemoryView.from_any_interface(mine, -1)
    assert type(again) is StridedMemoryView and again.ptr == mine.ptr


@pytest.mark.parametrize("layout", list(_arrays()))
def test_strides_is_none_exactly_for_c_contiguous_views_and_is_kept(layout):
    array = _arrays()[layout]
    v = StridedMemoryView.from_dlpack(array, -1)
    expected = None if array.flags.c_contiguous else tuple(
        s // array.itemsize for s in array.strides)
    first = v.strides
    assert first is v.strides
    if expected is None:
        assert first is None
    else:
        # Strides along extents of 1 address nothing: numpy's may differ there.
        assert [s for s, n in zip(first, array.shape, strict=True) if n > 1] == \
            [s for s, n in zip(expected, array.shape, strict=True) if n > 1]
    # The core's own accessors are untouched by the compat cache.
    assert v.strides_in_bytes == CORE.from_any(array).strides_in_bytes


@pytest.mark.parametrize("layout", list(_arrays()))
def test_a_views_layout_has_implicit_strides_exactly_when_the_view_does(layout):
    array = _arrays()[layout]
    v = StridedMemoryView.from_dlpack(array, -1)
    implicit = array.flags.c_contiguous     # every array of no element included
    assert (v.strides is None) == implicit
    for read in ("strides", "strides_in_bytes"):
        got = getattr(v.layout, read)
        assert (got is None) == implicit, read
    # Compared, hashed and shown as before (the decision is made on first need).
    assert v.layout == v.layout and hash(v.layout) == hash(v.layout)
    assert ("strides=None" in repr(v.layout)) == implicit
    assert v.layout.shape == array.shape


def test_the_deprecated_constructor_warns_on_every_call_and_views_as_from_any_interface():
    array = np.arange(6.0).reshape(2, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        views = [StridedMemoryView(array, -1) for _ in range(2)]
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    assert all("deprecated" in str(w.message) for w in caught)
    reference = StridedMemoryView.from_any_interface(array, -1)
    for v in views:
        assert (v.ptr, v.shape, v.strides, v.dtype, v.exporting_obj) == (
            reference.ptr, reference.shape, reference.strides, reference.dtype, array)


def test_constructors_read_registered_and_unregistered_types_alike():
    class ArrayInterfaceOnly:
        def __init__(self, array):
            self.__array_interface__ = array.__array_interface__
            self._keep = array

    array = np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:]
    for obj in (array, ArrayInterfaceOnly(array)):
        mine = StridedMemoryView.from_any_interface(obj, -1)
        core = CORE.from_any(obj)
        assert (mine.ptr, mine.shape, mine.strides_in_bytes, mine.dlpack_dtype) == (
            core.ptr, core.shape, core.strides_in_bytes, core.dlpack_dtype)
        assert mine.exporting_obj is obj
    proxy = compat.args_viewable_as_strided_memory((0,))(lambda a: a)(array)
    assert proxy.view(-1).ptr == array.ctypes.data
    with pytest.raises(BufferError, match="does not support any data exchange protocol"):
        StridedMemoryView.from_any_interface(object(), -1)
