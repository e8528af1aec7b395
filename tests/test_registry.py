"""interop_core.view(), plugin registration, override order, subclasses, C readers, threads."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
import threading
import types
import warnings
import weakref

import numpy as np
import pytest
from conftest import make_plugin

import interop_core
from interop_core import StridedMemoryView, plugins, view


class Tensorish:
    """A framework type of our own: memory in a numpy array, no exchange protocol at all."""

    def __init__(self, array):
        self.array = array


def read_tensorish(obj, stream):
    a = obj.array
    return StridedMemoryView.from_pointer(
        a.ctypes.data, a.shape, tuple(s // a.itemsize for s in a.strides), a.dtype,
        readonly=not a.flags.writeable, owner=obj)


# --- the generic path -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda: np.arange(6.0).reshape(2, 3),
    lambda: bytearray(b"abc"),
    lambda: memoryview(b"xyz"),
], ids=["numpy", "bytearray", "memoryview"])
def test_view_reads_objects_no_plugin_knows_through_the_generic_protocols(make):
    obj = make()
    v = view(obj)
    assert isinstance(v, StridedMemoryView) and v.owner is obj
    assert view(make()).shape == v.shape  # second call: the cached decision


def test_view_of_a_view_is_the_view_itself():
    v = view(np.zeros(3))
    assert view(v) is v


def test_view_names_the_type_when_nothing_can_read_it():
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"Opaque: no plugin registers it.*buffer protocol"):
        view(Opaque())


def test_view_validates_the_stream_argument():
    with pytest.raises(TypeError, match="stream"):
        view(np.zeros(2), stream=object())


class SlottedStream:
    __slots__ = ("handle",)     # no __weakref__: cannot be referenced weakly

    def __init__(self, handle):
        self.handle = handle


class FakeStreamProtocol:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


# --- registration -------------------------------------------------------------------------------


def test_a_registered_python_reader_is_used_for_its_exact_type(registered):
    calls = []

    def reader(obj, stream):
        calls.append(stream)
        return read_tensorish(obj, stream)

    registered(lambda r: r.add_type(Tensorish, reader), "tensorish")
    obj = Tensorish(np.arange(4, dtype=np.int32))
    v = view(obj)
    assert v.ptr == obj.array.ctypes.data and v.shape == (4,) and v.owner is obj
    assert plugins.reader_for(Tensorish).plugin == "tensorish"
    assert len(calls) == 1


@pytest.mark.parametrize(("stream", "reader_sees"), [
    (None, None), (-1, None), (0, 0), (0x7F00_1234, 0x7F00_1234), (FakeStreamProtocol(0x9000), 0x9000),
])
def test_readers_receive_the_stream_resolved_to_none_or_its_handle(registered, stream,
                                                                   reader_sees):
    calls = []

    def reader(obj, stream):
        calls.append(stream)
        return read_tensorish(obj, stream)

    registered(lambda r: r.add_type(Tensorish, reader), "tensorish")
    view(Tensorish(np.arange(4, dtype=np.int32)), stream=stream)
    assert calls == [reader_sees]


def test_types_declared_by_name_resolve_once_their_module_is_imported(registered):
    registered(lambda r: r.add_type("ic_fake_framework.core:Thing", read_tensorish), "fake")
    module = types.ModuleType("ic_fake_framework.core")

    class Thing(Tensorish):
        pass

    Thing.__module__ = "ic_fake_framework.core"
    module.Thing = Thing
    sys.modules["ic_fake_framework.core"] = module
    try:
        v = view(Thing(np.ones((2, 2))))
        assert v.shape == (2, 2)
        assert plugins.reader_for(Thing).plugin == "fake"
    finally:
        del sys.modules["ic_fake_framework.core"]


def test_a_type_name_whose_lookup_raises_stays_unresolved_for_that_plugin_alone(registered):
    # A framework with lazy attributes (PEP 562) whose __getattr__ raises ImportError: the
    # declaration never resolves, and every other plugin and type is unaffected.
    lazy = types.ModuleType("ic_lazy_framework")

    def lazy_attribute(name):
        raise ImportError(f"ic_lazy_framework.{name} needs an optional dependency")

    lazy.__getattr__ = lazy_attribute
    sys.modules["ic_lazy_framework"] = lazy
    try:
        registered(lambda r: r.add_type("ic_lazy_framework:Tensor", reader="dlpack"), "lazy")
        registered(lambda r: r.add_type(Tensorish, read_tensorish), "after-the-lazy-one")
        assert view(Tensorish(np.ones(3))).shape == (3,)
        assert view(np.arange(3.0)).shape == (3,)
        assert plugins.reader_for(np.ndarray).plugin == "numpy"
        assert {"lazy", "after-the-lazy-one"} <= {p.name for p in interop_core.plugin_status()}
    finally:
        del sys.modules["ic_lazy_framework"]


def test_a_type_declared_in_a_script_counts_as_installed(registered):
    class Pixels(Tensorish):
        pass

    Pixels.__module__ = "__main__"
    main = sys.modules["__main__"]
    had, before = hasattr(main, "Pixels"), getattr(main, "Pixels", None)
    main.Pixels = Pixels
    try:
        registered(lambda r: r.add_type("__main__:Pixels", read_tensorish), "pixels")
        status = {p.name: p for p in interop_core.plugin_status()}["pixels"]
        assert status.status == "loaded", status
    finally:
        if had:
            main.Pixels = before
        else:
            del main.Pixels


@pytest.mark.parametrize(("name", "error", "match"), [
    (123, TypeError, "name must be a str, got 123"), ("", ValueError, "must not be empty")])
def test_a_plugin_name_that_is_no_name_is_refused(name, error, match):
    with pytest.raises(error, match=match):
        interop_core.register_plugin(make_plugin(lambda r: None), name=name)
    interop_core.plugin_status()        # the registry is untouched


def test_a_plugin_registered_by_hand_overrides_entry_points_discovered_after_it():
    # Discovery is lazy (the first miss of any type): a hand registration made before it must
    # still win, whenever it runs.
    code = textwrap.dedent("""
        import numpy as np
        import interop_core
        from interop_core import StridedMemoryView

        class Mine:
            @interop_core.hookimpl
            def interop_core_register(self, registry):
                registry.add_type("numpy:ndarray", reader=lambda obj, stream:
                                  StridedMemoryView.from_array_interface(obj)[None])

        interop_core.register_plugin(Mine(), name="mine")
        first = interop_core.view(np.arange(3)).shape
        interop_core.view(bytearray(b"x"))          # a miss: entry points are discovered now
        print(first, interop_core.view(np.arange(3)).shape,
              interop_core.plugins.reader_for(np.ndarray).plugin)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "3)", "(1,", "3)", "mine"]


def test_a_later_registration_overrides_and_unregistering_restores(registered):
    def reader_returning(tag):
        def reader(obj, stream):
            v = read_tensorish(obj, stream)
            seen.append(tag)
            return v
        return reader

    seen: list[str] = []
    registered(lambda r: r.add_type(Tensorish, reader_returning("first")), "first")
    registered(lambda r: r.add_type(Tensorish, reader_returning("second")), "second")
    view(Tensorish(np.zeros(1)))
    interop_core.unregister_plugin("second")
    view(Tensorish(np.zeros(1)))
    assert seen == ["second", "first"]


def test_a_core_reader_can_be_registered_by_name(registered):
    class WithInterface:
        def __init__(self):
            self.array = np.arange(3.0)
            self.__array_interface__ = self.array.__array_interface__

    registered(lambda r: r.add_type(WithInterface, "array_interface"), "by-name")
    obj = WithInterface()
    assert view(obj).ptr == obj.array.ctypes.data
    assert plugins.reader_for(WithInterface).reader == "array_interface"


@pytest.mark.parametrize(("reader", "error", "match"), [
    ("no_such_reader", ValueError, "unknown core reader"),
    (42, TypeError, "reader must be"),
])
def test_bad_readers_are_rejected_at_registration(reader, error, match):
    with pytest.raises(RuntimeError, match=match):
        interop_core.register_plugin(make_plugin(lambda r: r.add_type(Tensorish, reader)), "bad")
    assert all(info.name != "bad" for info in interop_core.plugin_status())


def test_a_bad_type_name_is_rejected():
    with pytest.raises(RuntimeError, match="module:QualName"):
        interop_core.register_plugin(make_plugin(lambda r: r.add_type("torch.Tensor", "dlpack")),
                                     "bad-name")


def test_a_python_reader_must_return_a_view(registered):
    registered(lambda r: r.add_type(Tensorish, lambda obj, stream: obj.array), "wrong")
    with pytest.raises(TypeError, match="returned ndarray, not a StridedMemoryView"):
        view(Tensorish(np.zeros(1)))


def test_registering_the_same_name_twice_is_an_error(registered):
    registered(lambda r: None, "twice")
    with pytest.raises(ValueError, match="already registered"):
        interop_core.register_plugin(make_plugin(lambda r: None), name="twice")


def test_unregistering_an_unknown_plugin_is_a_key_error():
    with pytest.raises(KeyError, match="no interop-core plugin"):
        interop_core.unregister_plugin("never-registered")


def test_registrar_methods_outside_a_hook_are_refused():
    with pytest.raises(RuntimeError, match="only be called from an interop_core_register hook"):
        plugins.PluginRegistrar().add_type(Tensorish, "dlpack")


# --- subclasses ---------------------------------------------------------------------------------


class SubTensorish(Tensorish):
    pass


def test_subclasses_do_not_take_a_base_reader_unless_allowed(registered):
    registered(lambda r: r.add_type(Tensorish, read_tensorish), "strict")
    with pytest.raises(TypeError, match="SubTensorish"):
        view(SubTensorish(np.zeros(2)))


def test_subclasses_use_the_base_reader_when_the_plugin_allows_it(registered):
    registered(lambda r: r.add_type(Tensorish, read_tensorish, subclasses=True), "lenient")
    obj = SubTensorish(np.arange(5.0))
    assert view(obj).ptr == obj.array.ctypes.data


# --- a C reader behind a capsule (the header's ABI, built with ctypes) ----------------------------


class TensorInfo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("dtype_code", ctypes.c_uint8), ("dtype_bits", ctypes.c_uint8),
                ("dtype_lanes", ctypes.c_uint16), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("readonly", ctypes.c_int32),
                ("has_producer_stream", ctypes.c_int32), ("producer_stream", ctypes.c_ssize_t),
                ("keepalive", ctypes.c_void_p), ("strides_in_bytes", ctypes.c_int32),
                ("batch", ctypes.c_uint64), ("uses_memory", ctypes.c_uint32),
                ("protocol", ctypes.c_int32)]


READER_V1 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.py_object,
                             ctypes.POINTER(TensorInfo))


def _capsule_new():
    # A private function object: ctypes.pythonapi.X is shared by every module of the process.
    new = ctypes.pythonapi["PyCapsule_New"]
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new


def _capsule(function, name=b"interop_core.reader_v1") -> object:
    return _capsule_new()(ctypes.cast(function, ctypes.c_void_p), name, None)


def _v2(function) -> object:
    return _capsule(function, b"interop_core.reader_v2")


def _fill_from_array(out, a, *, byte_strides=False):
    info = out.contents
    info.data = a.ctypes.data
    info.ndim = a.ndim
    info.shape = _kept(a.ctypes.shape_as(ctypes.c_int64))
    if byte_strides:
        info.strides = _kept(a.ctypes.strides_as(ctypes.c_int64))
        info.strides_in_bytes = 1
    else:
        info.strides = _kept((ctypes.c_int64 * a.ndim)(*(s // a.itemsize for s in a.strides)))
    info.dtype_code, info.dtype_bits, info.dtype_lanes = 2, 8 * a.itemsize, 1
    info.device_type, info.device_id = 1, 0
    info.readonly = 0 if a.flags.writeable else 1
    return 0


_keep = []   # shape and stride arrays a ctypes reader hands out must outlive its call


def _kept(array):
    # The core reads `shape` and `strides` after the reader returns, when the ctypes objects
    # of the call that referenced the arrays are gone (AddressSanitizer saw them freed).
    _keep.append(array)
    return array


def test_a_c_reader_in_a_capsule_fills_the_view(registered):
    extents = (ctypes.c_int64 * 2)(3, 2)

    @READER_V1
    def reader(obj, stream, out):
        info = out.contents
        info.data = obj.array.ctypes.data
        info.ndim = 2
        info.shape = extents
        info.strides = None  # C-contiguous
        info.dtype_code, info.dtype_bits, info.dtype_lanes = 2, 32, 1
        info.device_type, info.device_id = 1, 0
        info.readonly = 1
        return 0

    registered(lambda r: r.add_type(Tensorish, _capsule(reader)), "c-reader")
    obj = Tensorish(np.arange(6, dtype=np.float32).reshape(3, 2))
    v = view(obj)
    assert (v.ptr, v.shape, v.strides, v.readonly) == (obj.array.ctypes.data, (3, 2), (2, 1), True)
    np.testing.assert_array_equal(np.asarray(v), obj.array)
    assert v.owner is obj


def test_a_c_reader_finds_every_optional_output_at_its_default_on_each_call(registered):
    # The first read sets every optional output; the second sets only the required ones and
    # must get the documented defaults, not the first call's values.
    seen = []

    @READER_V1
    def reader(obj, stream, out):
        info = out.contents
        seen.append((info.data, info.ndim, bool(info.strides), info.device_id, info.readonly,
                     info.has_producer_stream, info.producer_stream, info.keepalive,
                     info.strides_in_bytes))
        a = obj.array
        info.data = a.ctypes.data
        info.ndim = 1
        info.shape = _kept(a.ctypes.shape_as(ctypes.c_int64))
        info.dtype_code, info.dtype_bits, info.dtype_lanes = 2, 32, 1
        info.device_type = 1
        if len(seen) == 1:
            info.strides = _kept(a.ctypes.strides_as(ctypes.c_int64))
            info.strides_in_bytes = 1
            info.readonly = 1
            info.has_producer_stream, info.producer_stream = 1, 7
        return 0

    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "defaults-reader")
    obj = Tensorish(np.zeros(4, np.float32))
    first, second = view(obj), view(obj)
    assert seen[1] == (None, 0, False, 0, 0, 0, 0, None, 0)
    assert (first.readonly, second.readonly) == (True, False)
    assert second.strides == (1,) and second.owner is obj


def _reader_recording(seen, field):
    """A C reader of Tensorish that appends the core's input `field` of each call to `seen`."""
    @READER_V1
    def reader(obj, stream, out):
        seen.append(getattr(out.contents, field))
        return _fill_from_array(out, obj.array)

    return reader


def test_launch_args_hands_readers_one_batch_number_per_call_and_view_none(registered):
    seen = []
    reader = _reader_recording(seen, "batch")
    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "batch-reader")
    objs = [Tensorish(np.zeros(3, np.float32)) for _ in range(3)]
    interop_core.launch_args(objs)
    interop_core.launch_args(objs)
    view(objs[0])
    first, second, lone = seen[:3], seen[3:6], seen[6]
    assert len(set(first)) == 1 and len(set(second)) == 1
    assert 0 not in first + second and first[0] != second[0]
    assert lone == 0


def test_readers_are_told_whether_the_caller_uses_the_memory_at_once(registered):
    seen = []
    reader = _reader_recording(seen, "uses_memory")
    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "uses-memory-reader")
    obj = Tensorish(np.zeros(3, np.float32))
    view(obj)                                   # may be used for its metadata only
    interop_core.launch_args([obj])
    interop_core.to(obj, "numpy")
    assert seen == [0, 1, 1]


def test_the_triton_wrapper_tells_readers_nothing_of_the_read_outlives_its_call(registered):
    pytest.importorskip("triton", reason="needs Triton (pip install triton)")
    from interop_core.bench._triton_kernels import add4

    seen = []
    reader = _reader_recording(seen, "uses_memory")
    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "in-call-reader")
    obj = Tensorish(np.zeros(64, np.float32))
    interop_core.triton_kernel(add4).key(obj, obj, obj, 64, BLOCK=64)
    assert seen == [2, 2, 2]        # INTEROP_CORE_USES_MEMORY_IN_CALL


def test_readers_are_told_which_protocol_a_from_call_stands_them_in_for(registered):
    seen = []
    reader = _reader_recording(seen, "protocol")
    registered(lambda r: r.add_type(Tensorish, _v2(reader),
                                    equivalent_to=("dlpack", "array_interface")),
               "protocol-reader")
    obj = Tensorish(np.zeros(3, np.float32))
    view(obj)
    StridedMemoryView.from_dlpack(obj)
    StridedMemoryView.from_array_interface(obj)
    interop_core.launch_args([obj])
    assert seen == [0, 2, 4, 0]     # INTEROP_CORE_PROTOCOL_DLPACK, _ARRAY_INTERFACE; 0: none


def test_a_c_reader_failing_without_an_exception_gives_a_buffer_error(registered):
    @READER_V1
    def reader(obj, stream, out):
        return -1

    registered(lambda r: r.add_type(Tensorish, _capsule(reader)), "c-failing")
    with pytest.raises(BufferError, match="failed without setting an exception"):
        view(Tensorish(np.zeros(1)))


def test_a_v2_reader_reports_byte_strides_and_the_core_divides_them(registered):
    @READER_V1
    def reader(obj, stream, out):
        return _fill_from_array(out, obj.array, byte_strides=True)

    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "c-v2")
    obj = Tensorish(np.arange(24, dtype=np.float32).reshape(4, 6)[::-1, ::2])
    v = view(obj)
    assert (v.ptr, v.shape, v.strides) == (obj.array.ctypes.data, (4, 3), (-6, 2))
    np.testing.assert_array_equal(np.asarray(v), obj.array)


def test_a_c_readers_dtype_is_taken_afresh_on_every_view(registered):
    @READER_V1
    def reader(obj, stream, out):
        _fill_from_array(out, obj.array)
        out.contents.dtype_code, out.contents.dtype_bits = obj.triple[:2]
        return 0

    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "c-dtypes")
    cases = [(np.zeros(4, np.float32), (2, 32, 1)), (np.zeros(4, np.int16), (0, 16, 1)),
             (np.zeros(4, np.float32), (2, 32, 1)), (np.zeros(4, np.complex128), (5, 128, 1))]
    for a, triple in cases + cases[::-1]:
        obj = Tensorish(a)
        obj.triple = triple
        v = view(obj)
        assert (v.dlpack_dtype, v.itemsize) == (triple, a.itemsize)
    # An unknown type code is refused every time, and leaves the next view unaffected.
    for _ in range(2):
        bad = Tensorish(np.zeros(4, np.float32))
        bad.triple = (99, 32, 1)
        with pytest.raises(BufferError, match="unknown DLPack type code 99"):
            view(bad)
    obj = Tensorish(np.zeros(4, np.int16))
    obj.triple = (0, 16, 1)
    assert view(obj).dlpack_dtype == (0, 16, 1)


def test_byte_strides_that_are_not_a_multiple_of_the_itemsize_are_a_buffer_error(registered):
    raw = np.zeros(64, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw.view(np.float32), (3,), (6,))

    @READER_V1
    def reader(obj, stream, out):
        return _fill_from_array(out, obj.array, byte_strides=True)

    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "c-odd")
    with pytest.raises(BufferError, match="stride of 6 bytes"):
        view(Tensorish(odd))


def test_a_declined_object_goes_to_the_fallback_reader(registered):
    seen = []

    @READER_V1
    def reader(obj, stream, out):
        if obj.array.ndim > 1:
            return 1            # declined: not a case this fast path handles
        return _fill_from_array(out, obj.array)

    def fallback(obj, stream):
        seen.append(obj)
        return read_tensorish(obj, stream)

    registered(lambda r: r.add_type(Tensorish, _v2(reader), fallback=fallback), "c-decline")
    flat, square = Tensorish(np.zeros(4)), Tensorish(np.zeros((2, 2)))
    assert view(flat).shape == (4,) and seen == []
    assert view(square).shape == (2, 2) and seen == [square]


def test_a_declined_object_without_a_fallback_is_a_buffer_error(registered):
    @READER_V1
    def reader(obj, stream, out):
        return 1

    registered(lambda r: r.add_type(Tensorish, _v2(reader)), "c-decline-only")
    with pytest.raises(BufferError, match="declined this object"):
        view(Tensorish(np.zeros(2)))


def test_a_python_reader_declines_with_not_implemented(registered):
    registered(lambda r: r.add_type(Tensorish, lambda obj, stream: NotImplemented,
                                    fallback=read_tensorish), "py-decline")
    assert view(Tensorish(np.arange(3.0))).shape == (3,)


def _declining(name, seen):
    def reader(obj, stream):
        seen.append(name)
        return NotImplemented

    return reader


def test_a_fallback_chain_reads_what_each_reader_before_it_declines(registered):
    seen = []
    registered(lambda r: r.add_type(Tensorish, _declining("fast", seen),
                                    fallback=(_declining("middle", seen), read_tensorish)),
               "chain")
    assert view(Tensorish(np.arange(3.0))).shape == (3,)
    assert seen == ["fast", "middle"]
    last = plugins.reader_for(Tensorish).fallback.fallback
    assert (last.reader, last.plugin, last.fallback) == (read_tensorish, "chain", None)


def test_a_failed_validation_installs_the_head_of_the_fallback_chain(registered):
    seen = []
    middle = _declining("middle", seen)
    registered(lambda r: r.add_type(Tensorish, read_tensorish, fallback=(middle, read_tensorish),
                                    prepare=lambda: "the struct moved"), "chain-fails")
    entry = plugins.reader_for(Tensorish)
    assert (entry.reader, entry.fallback.reader) == (middle, read_tensorish)
    assert view(Tensorish(np.zeros(2))).shape == (2,) and seen == ["middle"]


def test_a_fallback_installed_by_a_failed_validation_keeps_a_declared_read_only_type(registered):
    registered(lambda r: r.add_type(Tensorish, read_tensorish, fallback=(read_tensorish,),
                                    prepare=lambda: "the struct moved", readonly=True),
               "readonly-fails")
    assert plugins.reader_for(Tensorish).readonly
    assert view(Tensorish(np.zeros(2))).readonly


def test_an_empty_fallback_chain_is_rejected():
    with pytest.raises(RuntimeError, match="empty tuple"):
        interop_core.register_plugin(make_plugin(
            lambda r: r.add_type(Tensorish, read_tensorish, fallback=())), "empty-chain")


# --- validate once, else fall back (the one mechanism for readers of undocumented layouts) ------


def _validated(registered, reader, name, **checks):
    calls = []

    def fallback(obj, stream):
        calls.append("fallback")
        return read_tensorish(obj, stream)

    registered(lambda r: r.add_type(Tensorish, reader, fallback=fallback, **checks), name)
    return calls


def test_a_reader_whose_canaries_read_as_the_fallback_is_installed(registered):
    calls = _validated(registered, read_tensorish, "valid",
                       canaries=lambda: [Tensorish(np.arange(6.0).reshape(2, 3)[:, ::2])])
    view(Tensorish(np.zeros(3)))
    assert calls == ["fallback"]     # only the canary comparison used the fallback
    result = plugins.reader_for(Tensorish)
    assert result.reader is read_tensorish


def test_a_reader_that_misreads_a_canary_is_replaced_by_its_fallback_and_says_why(registered):
    from interop_core.registry import _validation

    def wrong(obj, stream):
        a = obj.array
        return StridedMemoryView.from_pointer(a.ctypes.data, a.shape[::-1], owner=obj)

    calls = _validated(registered, wrong, "misreads",
                       canaries=lambda: [Tensorish(np.zeros((2, 3)))])
    obj = Tensorish(np.zeros((2, 3)))
    assert view(obj).shape == (2, 3)
    assert calls[-1] == "fallback"
    result = next(r for r in _validation.results() if r.plugin == "misreads")
    assert not result.validated and "shape[0] 3 != 2" in result.reason


def _exits():
    sys.exit("the framework is missing")


@pytest.mark.parametrize("prepare, reason", [
    (lambda: "the struct moved", "the struct moved"),
    (lambda: 1 / 0, "ZeroDivisionError"),
    (_exits, "SystemExit"),
])
def test_a_prepare_that_refuses_or_raises_installs_the_fallback(registered, prepare, reason):
    from interop_core.registry import _validation

    _validated(registered, read_tensorish, f"prepare-{reason}", prepare=prepare)
    assert plugins.reader_for(Tensorish).reader is not read_tensorish
    result = next(r for r in _validation.results() if r.plugin == f"prepare-{reason}")
    assert not result.validated and reason in result.reason


def test_an_interrupted_hook_leaves_nothing_of_its_plugin_registered():
    class Interrupted:
        @interop_core.hookimpl
        def interop_core_register(self, registry):
            registry.add_type(Tensorish, read_tensorish)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interop_core.register_plugin(Interrupted(), name="interrupted")
    try:
        assert "interrupted" not in {p.name for p in interop_core.plugin_status()}
        assert plugins.reader_for(Tensorish) is None or \
            plugins.reader_for(Tensorish).reader is not read_tensorish
        # The name is free again.
        interop_core.register_plugin(types.SimpleNamespace(), name="interrupted")
    finally:
        if "interrupted" in {p.name for p in interop_core.plugin_status()}:
            interop_core.unregister_plugin("interrupted")


def test_import_limits_repr_names_every_callable_given():
    text = repr(interop_core.ImportLimits(resolve_device=len, source_device=abs))
    assert "resolve_device=<built-in function len>" in text
    assert "source_device=<built-in function abs>" in text


def test_validation_runs_once_per_process_for_the_same_checks(registered):
    runs = []

    def prepare():
        runs.append(1)
        return {"mode": "fast"}

    _validated(registered, read_tensorish, "once", prepare=prepare)
    for _ in range(3):
        view(Tensorish(np.zeros(2)))
        plugins._reinstall()
    assert runs == [1]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_a_subclass_validated_after_discovery_keeps_its_fast_reader():
    # Plugins discovered first (a numpy view), torch imported later: validating Parameter's
    # reader reads canaries, whose view() misses the table and recomputes every entry, which
    # asks for Parameter's entry again.  That nested request must not recurse into a second
    # validation (it did, until RecursionError installed the fallback for the process).
    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        from interop_core import view
        from interop_core.registry import _validation
        view(np.zeros(3))
        assert "torch" not in sys.modules
        import torch
        v = view(torch.nn.Parameter(torch.zeros(2)))
        assert v.shape == (2,)
        print(json.dumps({r.type_path: [r.validated, r.reason] for r in _validation.results()}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout.strip().splitlines()[-1])
    validated, reason = results["torch.nn.parameter:Parameter"]
    assert validated, reason
    assert results["torch:Tensor"][0], results["torch:Tensor"][1]


def test_a_validated_reader_needs_a_fallback():
    with pytest.raises(RuntimeError, match="needs a fallback"):
        interop_core.register_plugin(make_plugin(
            lambda r: r.add_type(Tensorish, read_tensorish, canaries=list)), "no-fallback")


# --- the core's helper table for compiled readers (interop_core._C_API) -------------------------


class CoreApi(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("dtype_of", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,  # holds the GIL
                                              ctypes.POINTER(ctypes.c_uint8),
                                              ctypes.POINTER(ctypes.c_uint8),
                                              ctypes.POINTER(ctypes.c_uint16))),
                ("pointer_device", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                                    ctypes.POINTER(ctypes.c_int32),
                                                    ctypes.POINTER(ctypes.c_int32))),
                ("describe_dlpack", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                                      ctypes.POINTER(TensorInfo))),
                ("legacy_capsule_for_immutable_consumer",
                 ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)),
                ("view_from_info", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object,
                                                     ctypes.POINTER(TensorInfo))),
                ("describe_view", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                                    ctypes.POINTER(TensorInfo))),
                ("deferred_keepalive", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p,
                                                         ctypes.py_object))]


def _core_api():
    get = ctypes.pythonapi["PyCapsule_GetPointer"]
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.cast(get(interop_core._C_API, b"interop_core._C_API"),
                       ctypes.POINTER(CoreApi)).contents


def test_the_core_api_table_is_version_6_and_converts_dtypes():
    api = _core_api()
    assert api.abi_version == 6 and api.size == ctypes.sizeof(CoreApi)
    code, bits, lanes = ctypes.c_uint8(), ctypes.c_uint8(), ctypes.c_uint16()
    assert api.dtype_of(np.dtype("complex64"), code, bits, lanes) == 0
    assert (code.value, bits.value, lanes.value) == (5, 64, 1)
    device, ordinal = ctypes.c_int32(-1), ctypes.c_int32(-1)
    host = np.zeros(4)
    assert api.pointer_device(host.ctypes.data, device, ordinal) == 0   # plain host memory
    assert (device.value, ordinal.value) == (-1, -1)


def test_the_core_api_describes_an_unconsumed_dlpack_capsule_without_taking_it():
    api = _core_api()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    capsule = a.__dlpack__()
    info = TensorInfo()
    assert api.describe_dlpack(capsule, ctypes.byref(info)) == 0
    assert (info.data, info.ndim, info.device_type) == (a.ctypes.data, 2, 1)
    assert [info.shape[i] for i in range(2)] == [3, 3]
    assert [info.strides[i] for i in range(2)] == [4, 1]
    assert (info.dtype_code, info.dtype_bits, info.dtype_lanes) == (2, 32, 1)
    np.testing.assert_array_equal(np.from_dlpack(_Holder(capsule)), a)   # still unconsumed
    with pytest.raises(BufferError, match="unconsumed DLPack capsule"):
        api.describe_dlpack(object(), ctypes.byref(info))


def test_the_core_api_exports_a_read_only_view_to_an_immutable_consumer():
    api = _core_api()
    a = np.arange(6.0)
    a.flags.writeable = False
    v = view(a)
    capsule = api.legacy_capsule_for_immutable_consumer(v)
    info = TensorInfo()
    assert api.describe_dlpack(capsule, ctypes.byref(info)) == 0
    assert (info.data, info.ndim, info.shape[0]) == (a.ctypes.data, 1, 6)
    with pytest.raises(TypeError):
        api.legacy_capsule_for_immutable_consumer(a)


def test_the_core_api_describes_a_view_for_a_compiled_exporter():
    api = _core_api()
    a = np.arange(24, dtype=np.int16).reshape(4, 6)
    a.flags.writeable = False
    v = view(a)[1:, ::-2]
    info = TensorInfo()
    assert api.describe_view(v, ctypes.byref(info)) == 0
    assert (info.data, info.ndim, info.device_type, info.readonly) == (v.ptr, 2, 1, 1)
    assert [info.shape[i] for i in range(2)] == list(v.shape)
    assert [info.strides[i] for i in range(2)] == list(v.strides)       # in elements
    assert (info.dtype_code, info.dtype_bits, info.dtype_lanes, info.strides_in_bytes) == (
        0, 16, 1, 0)
    assert info.keepalive is None
    with pytest.raises(TypeError, match="describe_view needs a StridedMemoryView, got ndarray"):
        api.describe_view(a, ctypes.byref(info))


def _info_over(a, strides=None, keepalive=None):
    """A TensorInfo describing numpy array `a` (and the ctypes arrays it points at)."""
    shape = (ctypes.c_int64 * a.ndim)(*a.shape)
    info = TensorInfo(data=a.ctypes.data, ndim=a.ndim, shape=shape, dtype_code=2,
                      dtype_bits=8 * a.itemsize, dtype_lanes=1, device_type=1, readonly=1)
    held = [shape]
    if strides is not None:
        held.append((ctypes.c_int64 * a.ndim)(*strides))
        info.strides = held[-1]
        info.strides_in_bytes = 1
    if keepalive is not None:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(keepalive))   # the new reference it hands over
        info.keepalive = id(keepalive)
    return info, held


class _Anchor:
    """An object a view may be asked to keep alive."""


def test_the_core_api_makes_the_view_a_reader_fill_describes():
    api = _core_api()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    info, held = _info_over(a)
    v = api.view_from_info(a, ctypes.byref(info))
    assert type(v) is interop_core.StridedMemoryView
    assert (v.ptr, v.shape, v.strides, v.dtype, v.readonly) == (
        a.ctypes.data, (3, 4), (4, 1), np.float32, True)
    assert v.owner is a and v.device_type == 1
    np.testing.assert_array_equal(np.from_dlpack(v), a)
    # Byte strides are taken as a version 2 reader's are: the columns, every other one.
    info, held = _info_over(a[:, ::2], strides=(16, 8))
    assert api.view_from_info(a, ctypes.byref(info)).strides == (4, 2)


def test_the_core_api_view_takes_over_the_keepalive_even_when_it_refuses():
    api = _core_api()
    a = np.arange(4, dtype=np.float32)
    anchor = _Anchor()
    alive = weakref.ref(anchor)
    info, held = _info_over(a, keepalive=anchor)
    v = api.view_from_info(a, ctypes.byref(info))
    del anchor
    gc.collect()
    assert alive() is not None and v.owner is a
    del v
    gc.collect()
    assert alive() is None
    anchor = _Anchor()
    alive = weakref.ref(anchor)
    info, held = _info_over(a, keepalive=anchor)
    held[0][0] = -1                          # a negative extent: refused
    with pytest.raises(BufferError, match="negative extent"):
        api.view_from_info(a, ctypes.byref(info))
    del anchor
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize(("shape", "strides"), [
    ((4,), (2**63 - 4,)),                   # a stride in bytes at the edge: offsets beyond int64
    ((4,), (-(2**63) + 4,)),
    ((2**40,), (2**30,)),                   # each fits; the last element's offset does not
    ((2**33, 2**33, 2**33), None),          # C-contiguous strides that would wrap
])
def test_a_reader_fill_whose_offsets_leave_int64_is_refused(shape, strides):
    # A C reader's fill goes through the same code: every export would hand on wrapped byte
    # strides (numpy then read out of bounds, torch aborted).
    api = _core_api()
    a = np.zeros(4, dtype=np.float32)
    info, held = _info_over(a, strides=strides)
    held[0] = (ctypes.c_int64 * len(shape))(*shape)
    info.shape = held[0]
    info.ndim = len(shape)
    with pytest.raises(BufferError, match="cannot be addressed.*int64"):
        api.view_from_info(a, ctypes.byref(info))


def test_a_reader_fill_of_a_large_array_is_still_read():
    # Extents and strides past the fast bound (2**24) get the full check, not a refusal.
    api = _core_api()
    a = np.zeros((1, 4), dtype=np.float32)
    info, held = _info_over(a, strides=(2**26, 4))
    held[0] = (ctypes.c_int64 * 2)(2**20, 2**24)
    info.shape = held[0]
    info.ndim = 2
    v = api.view_from_info(a, ctypes.byref(info))
    assert v.shape == (2**20, 2**24) and v.strides == (2**24, 1)


class _Holder:
    """Hands numpy a capsule made elsewhere (np.from_dlpack asks objects for one)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_the_header_is_where_get_include_says():
    import os

    header = os.path.join(interop_core.get_include(), "interop_core.h")
    text = open(header).read()
    assert "#define INTEROP_CORE_ABI_VERSION 6" in text
    assert "interop_core.reader_v2" in text and "interop_core._C_API" in text


def test_a_capsule_of_the_wrong_name_is_rejected():
    wrong = _capsule_new()(ctypes.c_void_p(1), b"something_else", None)
    with pytest.raises(RuntimeError, match="interop_core.reader_v2"):
        interop_core.register_plugin(make_plugin(lambda r: r.add_type(Tensorish, wrong)), "wrong")


# --- stream types and exporters -------------------------------------------------------------------


class FakeStream:
    def __init__(self, handle):
        self.handle = handle


def test_registered_stream_types_resolve_to_their_handle(registered):
    with pytest.raises(TypeError):
        interop_core.resolve_consumer_stream(FakeStream(0x7000))
    registered(lambda r: r.add_stream_type(FakeStream, lambda s: s.handle), "streams")
    assert interop_core.resolve_consumer_stream(FakeStream(0x7000)) == 0x7000


def test_resolving_a_stream_object_keeps_no_reference_to_it(registered):
    registered(lambda r: r.add_stream_type(FakeStream, lambda s: s.handle), "streams")
    stream = FakeStream(0x1000)
    assert interop_core.resolve_consumer_stream(stream) == 0x1000
    assert view(np.zeros(2), stream=stream).ptr != 0
    gone = weakref.ref(stream)
    del stream
    gc.collect()
    assert gone() is None
    # New objects often reuse the freed address: each must resolve to its own handle.
    for handle in range(0x3000, 0x3010):
        assert interop_core.resolve_consumer_stream(FakeStream(handle)) == handle


def test_a_keep_last_stream_type_resolves_a_repeated_object_once_and_keeps_only_it(registered):
    calls = []

    def handle(stream):
        calls.append(stream.handle)
        return stream.handle

    registered(lambda r: r.add_stream_type(FakeStream, handle, keep_last=True), "streams")
    first, second = FakeStream(0x1000), FakeStream(0x2000)
    for _ in range(5):
        assert interop_core.resolve_consumer_stream(first) == 0x1000
    assert calls == [0x1000]
    first_gone = weakref.ref(first)
    assert interop_core.resolve_consumer_stream(second) == 0x2000
    del first
    gc.collect()
    assert first_gone() is None     # replaced: no longer kept
    assert calls == [0x1000, 0x2000]


def test_a_weakly_kept_stream_type_resolves_a_repeated_object_once_and_never_keeps_it(
        registered):
    calls = []

    def handle(stream):
        calls.append(stream.handle)
        return stream.handle

    registered(lambda r: r.add_stream_type(FakeStream, handle, keep_last="weak"), "streams")
    first = FakeStream(0x1000)
    for _ in range(5):
        assert interop_core.resolve_consumer_stream(first) == 0x1000
    assert calls == [0x1000]
    first_gone = weakref.ref(first)
    del first
    gc.collect()
    assert first_gone() is None     # still the last one resolved, yet not kept alive
    # New objects often reuse the freed address: each must resolve to its own handle.
    for handle_value in range(0x3000, 0x3010):
        assert interop_core.resolve_consumer_stream(FakeStream(handle_value)) == handle_value
    assert calls[1:] == list(range(0x3000, 0x3010))


def test_a_weakly_kept_type_without_weak_references_is_resolved_every_time(registered):
    calls = []
    registered(lambda r: r.add_stream_type(
        SlottedStream, lambda s: calls.append(s) or s.handle, keep_last="weak"), "streams")
    stream = SlottedStream(0x1000)
    for _ in range(3):
        assert interop_core.resolve_consumer_stream(stream) == 0x1000
    assert len(calls) == 3


@pytest.mark.parametrize("keep_last", [1, 0, "strong", None])
def test_keep_last_takes_only_false_true_or_weak(registered, keep_last):
    with pytest.raises(RuntimeError, match="ValueError: keep_last must be False, True or 'weak'"):
        registered(lambda r: r.add_stream_type(FakeStream, lambda s: s.handle,
                                               keep_last=keep_last), "streams")


def test_the_kept_stream_is_released_when_its_plugin_is_unregistered(registered):
    registered(lambda r: r.add_stream_type(FakeStream, lambda s: s.handle, keep_last=True),
               "streams")
    stream = FakeStream(0x1000)
    assert interop_core.resolve_consumer_stream(stream) == 0x1000
    gone = weakref.ref(stream)
    del stream
    interop_core.unregister_plugin("streams")
    gc.collect()
    assert gone() is None


def test_an_unregistered_stream_type_is_no_longer_accepted(registered):
    registered(lambda r: r.add_stream_type(FakeStream, lambda s: s.handle), "streams")
    stream = FakeStream(0x1000)
    assert interop_core.resolve_consumer_stream(stream) == 0x1000
    interop_core.unregister_plugin("streams")
    with pytest.raises(TypeError, match="FakeStream"):
        interop_core.resolve_consumer_stream(stream)


def test_to_uses_the_registered_exporter_by_name_and_by_type(registered):
    def export(v, stream):
        return Tensorish(np.asarray(v))

    registered(lambda r: (r.add_type(Tensorish, read_tensorish),
                          r.add_exporter("tensorish", export, types=(Tensorish,))), "exporting")
    array = np.arange(4.0)
    out = interop_core.to(array, "tensorish")
    assert isinstance(out, Tensorish) and out.array.ctypes.data == array.ctypes.data
    assert interop_core.to(array, Tensorish).array.ctypes.data == array.ctypes.data


@pytest.mark.parametrize("types", [Tensorish, f"{Tensorish.__module__}:Tensorish"],
                         ids=["type", "name"])
def test_exporter_types_given_alone_name_one_type(registered, types):
    # A str alone is one "module:QualName", not a sequence of one-letter names.
    registered(lambda r: (r.add_type(Tensorish, read_tensorish),
                          r.add_exporter("tensorish", lambda v, s: Tensorish(np.asarray(v)),
                                         types=types)), "exporting-alone")
    array = np.arange(4.0)
    assert interop_core.to(array, Tensorish).array.ctypes.data == array.ctypes.data


@pytest.mark.parametrize("call", [{}, {"copy": True}, {"device": "cpu"}],
                         ids=["as-is", "copy", "device"])
def test_an_exporter_that_returns_none_is_refused_naming_its_target(registered, call):
    registered(lambda r: r.add_exporter("returns-nothing", lambda v, s, **kw: None), "none")
    with pytest.raises(TypeError, match="'returns-nothing' exporter returned None"):
        interop_core.to(np.arange(4.0), "returns-nothing", **call)


# A C exporter written with ctypes: records what it was handed, returns (owner, ptr, shape,
# strides).  The core calls it with the GIL held, as interop_core.h says.
EXPORTER_V1 = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.POINTER(TensorInfo), ctypes.py_object,
                                ctypes.py_object)


def _recording_exporter():
    def export(info, owner, stream):
        i = info.contents
        shape = tuple(i.shape[d] for d in range(i.ndim))
        strides = tuple(i.strides[d] for d in range(i.ndim))
        return (owner, i.data, shape, strides, bool(i.readonly), stream)

    function = EXPORTER_V1(export)
    return function, _capsule(function, b"interop_core.exporter_v1")


def test_a_compiled_exporter_gets_the_sources_description_without_a_view(registered):
    function, capsule = _recording_exporter()
    registered(lambda r: r.add_exporter("recorded", capsule), "c-exporter")
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    owner, ptr, shape, strides, readonly, stream = interop_core.to(a, "recorded")
    # The numpy reader's keep-alive is the array itself: no view object was made.
    assert owner is a and type(owner) is np.ndarray
    assert (ptr, shape, strides, readonly, stream) == (a.ctypes.data, (4, 3), (6, 2), False, None)


def test_a_compiled_exporter_that_returns_none_is_refused_naming_it(registered):
    function = EXPORTER_V1(lambda info, owner, stream: None)
    capsule = _capsule(function, b"interop_core.exporter_v1")
    registered(lambda r: r.add_exporter("c-none", capsule), "c-none")
    with pytest.raises(TypeError, match="C exporter .* returned None"):
        interop_core.to(np.arange(4.0), "c-none")


def test_a_compiled_exporter_called_on_a_view_is_held_by_the_view(registered):
    function, capsule = _recording_exporter()
    registered(lambda r: r.add_exporter("recorded", capsule), "c-exporter")
    exporter = plugins.exporter_for("recorded")[0]
    assert type(exporter).__name__ == "CExporter" and exporter.capsule is capsule
    v = view(np.arange(5.0))[::2]
    for out in (exporter(v, None), interop_core.to(v, "recorded")):
        assert out[0] is v and out[1:4] == (v.ptr, (3,), (2,))
    with pytest.raises(TypeError, match="needs a StridedMemoryView"):
        exporter(np.arange(3.0), None)


def test_a_compiled_exporter_with_a_stream_gets_an_ordered_view(registered):
    function, capsule = _recording_exporter()
    registered(lambda r: r.add_exporter("recorded", capsule), "c-exporter")
    a = np.arange(3.0)
    owner, ptr, *_, stream = interop_core.to(a, "recorded", stream=0)
    assert type(owner) is interop_core.StridedMemoryView and owner.owner is a
    assert ptr == a.ctypes.data and stream == 0


def test_a_compiled_exporter_of_read_only_memory_warns_unless_it_preserves_it(registered):
    function, capsule = _recording_exporter()
    registered(lambda r: (r.add_exporter("loses", capsule),
                          r.add_exporter("keeps", capsule, preserves_readonly=True)), "c-ro")
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert interop_core.to(frozen, "keeps")[4] is True
        assert interop_core.to(frozen, "loses")[4] is True
    flagged = [w for w in caught if issubclass(w.category, plugins.ReadOnlyHandoffWarning)]
    assert len(flagged) == 1 and "to(ndarray, 'loses')" in str(flagged[0].message)
    assert flagged[0].filename == __file__          # names the caller of to()


def _warning_exporters(r):
    function, capsule = _recording_exporter()
    r.add_exporter("plain-python", lambda v, s: v)
    r.add_exporter("plain-c", capsule)
    _warning_exporters.keep = function       # the ctypes function behind the capsule


@pytest.mark.parametrize("target", ["plain-python", "plain-c"])
def test_a_read_only_warning_the_filters_ignore_comes_back_when_they_change(registered, target):
    registered(_warning_exporters, "ro-filters")
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", plugins.ReadOnlyHandoffWarning)
        interop_core.to(frozen, target)
        assert not caught
        warnings.simplefilter("error", plugins.ReadOnlyHandoffWarning)
        with pytest.raises(plugins.ReadOnlyHandoffWarning, match="read-only"):
            interop_core.to(frozen, target)
        warnings.resetwarnings()
        warnings.simplefilter("always")
        interop_core.to(frozen, target)
        interop_core.to(frozen, target)
        assert len(caught) == 2
    with warnings.catch_warnings():          # a new filter list, then the old one again
        warnings.simplefilter("error", plugins.ReadOnlyHandoffWarning)
        with pytest.raises(plugins.ReadOnlyHandoffWarning):
            interop_core.to(frozen, target)


@pytest.mark.parametrize("ignore, warned", [
    ({"module": "somewhere_else"}, True),              # depends on the caller: warnings decides
    ({"module": __name__}, False),
    ({"lineno": 1}, True),
    ({"message": "to\\(ndarray, 'plain"}, False),        # the message matches
    ({"message": "something else"}, True),
])
def test_a_read_only_warning_is_skipped_only_when_every_caller_would_ignore_it(registered,
                                                                           ignore, warned):
    registered(_warning_exporters, "ro-filters")
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=plugins.ReadOnlyHandoffWarning, **ignore)
        interop_core.to(frozen, "plain-c")
        interop_core.to(frozen, "plain-python")
    assert len(caught) == (2 if warned else 0)


@pytest.mark.parametrize("exporter, error, match", [
    (lambda: _capsule(ctypes.cast(1, ctypes.c_void_p), b"interop_core.reader_v2"), ValueError,
     "an exporter capsule must be named 'interop_core.exporter_v1'"),
    (lambda: 42, TypeError, "exporter must be callable or a PyCapsule, got int"),
])
def test_a_wrong_exporter_is_refused_at_registration(exporter, error, match):
    with pytest.raises(RuntimeError, match=f"{error.__name__}: {match}"):
        interop_core.register_plugin(make_plugin(
            lambda r: r.add_exporter("wrong", exporter())), "wrong-exporter")


def test_to_an_unknown_target_lists_the_known_ones():
    with pytest.raises(ValueError, match="no plugin exports to 'nowhere'; known targets"):
        interop_core.to(np.zeros(1), "nowhere")


def test_to_an_unknown_target_names_apart_the_targets_whose_framework_is_missing(registered):
    registered(lambda r: r.add_exporter("ghost", lambda v, s: None,
                                        types=("no_such_framework_xyz.core:Array",)), "ghost")
    with pytest.raises(ValueError, match="no plugin exports to 'nowhere'") as info:
        interop_core.to(np.zeros(1), "nowhere")
    # "known targets: a, b (installed); c, d (framework not installed here)"
    message = re.search(r"known targets: (.*) \(installed\); "
                        r"(.*) \(framework not installed here\)$", str(info.value))
    assert message, str(info.value)
    usable, absent = (group.split(", ") for group in message.groups())
    assert "numpy" in usable and "ghost" not in usable
    assert "ghost" in absent and "numpy" not in absent


# --- threads ------------------------------------------------------------------------------------


def test_a_read_keeps_its_table_entry_alive_while_the_table_changes_under_it(registered):
    # (Un)registration replaces the table's entries, and the core uses the entry again after
    # the reader returns.  Here the reader unregisters its own plugin (another thread may do
    # the same at any time): the entry, and the fallback only it holds, must outlive the read.
    fallbacks = []

    class Fallback:
        def __init__(self):
            fallbacks.append(weakref.ref(self))

        def __call__(self, obj, stream):
            return read_tensorish(obj, stream)

    alive_during_read = []

    def reader(obj, stream):
        interop_core.unregister_plugin(name)
        gc.collect()
        alive_during_read.append(fallbacks[0]() is not None)
        return read_tensorish(obj, stream)

    name = registered(lambda r: r.add_type(Tensorish, reader, fallback=Fallback(), readonly=True),
                      "unregisters-itself")
    v = view(Tensorish(np.arange(3.0)))
    assert alive_during_read == [True]
    assert v.readonly            # the entry's declaration, read after the reader returned
    gc.collect()
    assert fallbacks[0]() is None  # and released once the read is over



def test_views_from_eight_threads_while_a_ninth_registers_and_unregisters():
    objects = [np.arange(8.0), Tensorish(np.arange(3.0)), bytearray(16)]
    expected = [view(o).ptr if not isinstance(o, Tensorish) else o.array.ctypes.data
                for o in objects]
    stop = threading.Event()
    errors: list[BaseException] = []

    def viewer():
        try:
            while not stop.is_set():
                for obj, ptr in zip(objects, expected, strict=True):
                    try:
                        v = view(obj)
                    except TypeError:
                        assert isinstance(obj, Tensorish)  # unreadable while unregistered
                        continue
                    assert v.ptr == ptr
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def churn():
        try:
            for i in range(200):
                name = interop_core.register_plugin(
                    make_plugin(lambda r: r.add_type(Tensorish, read_tensorish)), f"churn-{i}")
                interop_core.unregister_plugin(name)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            stop.set()

    threads = [threading.Thread(target=viewer) for _ in range(8)] + [threading.Thread(target=churn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]


@pytest.mark.parametrize("preserves", [True, False])
def test_to_warns_when_read_only_memory_goes_where_read_only_cannot_be_expressed(registered,
                                                                               preserves):
    registered(lambda r: r.add_exporter("plain", lambda v, s: v, preserves_readonly=preserves),
               f"plain-{preserves}")
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = interop_core.to(frozen, "plain")
    assert out.ptr == frozen.ctypes.data
    flagged = [w for w in caught if issubclass(w.category, plugins.ReadOnlyHandoffWarning)]
    assert len(flagged) == (0 if preserves else 1)
    if flagged:
        assert "read-only" in str(flagged[0].message)


def test_a_declaration_that_never_resolves_does_not_flush_cached_decisions(registered):
    from interop_core.registry import _registry

    registered(lambda r: r.add_type("ic_fake_pkg.old_name:Gone", read_tensorish), "stale-names")
    module = types.ModuleType("ic_fake_pkg")
    sys.modules["ic_fake_pkg"] = module
    try:
        view(np.zeros(2))
        cached = _registry.entry_for(np.ndarray)
        assert cached is not None

        class Other(bytearray):
            pass

        Other.__module__ = "ic_fake_pkg"
        view(Other(4))                      # a miss in the package with the stale declaration
        assert _registry.entry_for(np.ndarray) is cached
    finally:
        del sys.modules["ic_fake_pkg"]


# --- keep-alives taken at the memory's first use (the table's deferred_keepalive) ------------

# What a plugin's acquire function is, in C: int acquire(PyObject* state, PyObject** held).
ACQUIRE = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))


class _Producer:
    """Stands for a framework whose hold is costly: counts holds, can free its memory."""

    def __init__(self, a):
        self.array, self.holds = a, 0

    def acquire(self, state, held):
        # (A failing acquire sets an exception, which a ctypes callback cannot leave set: the
        # jax plugin's tests cover that side, with arrays deleted before a view's first use.)
        self.holds += 1
        anchor = _Anchor()
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(anchor))    # the new reference handed over
        held[0] = id(anchor)
        return 0


def _deferred_view(producer, state="state"):
    api = _core_api()
    acquire = ACQUIRE(producer.acquire)
    keepalive = api.deferred_keepalive(ctypes.cast(acquire, ctypes.c_void_p), state)
    assert type(keepalive).__name__ == "DeferredKeepalive" and not keepalive.taken
    info, held = _info_over(producer.array, keepalive=keepalive)
    return api.view_from_info(producer.array, ctypes.byref(info)), keepalive, acquire


def test_a_deferred_keepalive_is_taken_once_at_the_first_use_of_the_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    producer = _Producer(a)
    v, keepalive, acquire = _deferred_view(producer)
    # Metadata is not a use of the memory.
    assert (v.shape, v.strides, v.dtype, v.device_type, v.readonly) == (
        (3, 4), (4, 1), np.float32, 1, True)
    column = v[:, 1]
    assert producer.holds == 0 and not keepalive.taken
    assert column.ptr == a.ctypes.data + 4          # a view sliced from it: the same hold
    assert producer.holds == 1 and keepalive.taken
    assert v.ptr == a.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(v), a)
    np.testing.assert_array_equal(interop_core.to(column, "numpy"), a[:, 1])
    assert producer.holds == 1


def test_a_deferred_keepalive_needs_a_function_and_a_state():
    api = _core_api()
    with pytest.raises(TypeError, match="acquire function"):
        api.deferred_keepalive(None, "state")
    with pytest.raises(TypeError, match="made by plugins"):
        type(api.deferred_keepalive(ctypes.cast(ACQUIRE(lambda s, h: 0), ctypes.c_void_p),
                                    "s"))()
