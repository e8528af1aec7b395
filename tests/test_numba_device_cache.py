"""The numba reader's per-call savings: the CUDA driver's answer (memory kind, device) cached per
pointer object, and the pointer read straight from numba's own pointer classes.

The cache is driven through a test hook with a stand-in for the driver (any object stands in for
a pointer object), the pointer path on numba's real pointer classes built over host memory, and
the whole reader against tests/fake_libcuda.c, which logs the driver's pointer queries.  The
GPU tests compare with the core's CUDA Array Interface reader on numba's own arrays.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import weakref

import numpy as np
import pytest
from fake_driver import build, compiler, run

import interop_core

_reader = pytest.importorskip("interop_numba._reader")


@pytest.fixture(autouse=True)
def empty_cache():
    _reader._device_cache_clear()
    yield
    _reader._device_cache_clear()


class Pointer:
    """A stand-in for a numba pointer object (weak references allowed, as numba's)."""


class Slotted:
    """A pointer object without weak-reference support."""

    __slots__ = ("n",)


def probe(key, ptr, answer):
    return _reader._device_cache_probe(key, ptr, answer)


# --- the device cache ----------------------------------------------------------------------------

def test_a_second_read_of_the_same_pointer_object_does_not_ask_the_driver():
    p = Pointer()
    assert probe(p, 0x1000, (2, 1)) == ((2, 1), True)
    # The driver would now answer otherwise: the cached answer stands, and it is not asked.
    assert probe(p, 0x1000, (13, 0)) == ((2, 1), False)
    assert _reader.device_cache_info()["hits"] == 1
    assert _reader.device_cache_info()["misses"] == 1


def test_the_same_object_with_another_pointer_value_asks_again():
    p = Pointer()
    probe(p, 0x1000, (2, 1))
    assert probe(p, 0x2000, (3, 0)) == ((3, 0), True)


def test_a_new_object_at_a_dead_objects_address_asks_the_driver():
    dead = set()
    for _ in range(64):
        p = Pointer()
        probe(p, 0x1000, (2, 0))
        dead.add(id(p))
        del p
    gc.collect()
    # The allocator hands freed blocks to new objects of their size (CPython's does at once;
    # AddressSanitizer's quarantine never does): take new objects until one sits where a dead
    # one did, or the last one made.  Either way it is asked about afresh, never answered for
    # the dead object cached at its address.
    held = [Pointer()]
    while id(held[-1]) not in dead and len(held) < 4000:
        held.append(Pointer())
    q = held[-1]
    assert probe(q, 0x1000, (13, 1)) == ((13, 1), True)
    assert probe(q, 0x1000, (2, 0)) == ((13, 1), False)


def test_a_dead_object_never_answers_for_another():
    keep = []
    for i in range(64):
        p = Pointer()
        probe(p, 0x1000, (2, i % 4))
        keep.append(id(p))
        del p       # freed here (no cycle), so the next object may take its address
    # Every new object is asked about afresh, whatever address it got.
    for i in range(64):
        q = Pointer()
        assert probe(q, 0x1000, (13, i % 3)) == ((13, i % 3), True)
        del q


def test_objects_without_weak_references_are_answered_but_never_cached():
    s = Slotted()
    assert probe(s, 0x1000, (2, 0)) == ((2, 0), True)
    assert probe(s, 0x1000, (3, 0)) == ((3, 0), True)
    o = object()
    assert probe(o, 0x1000, (2, 0)) == ((2, 0), True)
    assert probe(o, 0x1000, (2, 0)) == ((2, 0), True)


def test_no_answer_from_the_driver_is_not_cached():
    p = Pointer()
    assert probe(p, 0x1000, None) == (None, True)
    assert probe(p, 0x1000, None) == (None, True)
    assert probe(p, 0x1000, (2, 0)) == ((2, 0), True)
    assert probe(p, 0x1000, None) == ((2, 0), False)


def test_the_cache_keeps_no_pointer_object_alive():
    p = Pointer()
    ref = weakref.ref(p)
    before = sys.getrefcount(p)
    probe(p, 0x1000, (2, 0))
    probe(p, 0x1000, (2, 0))
    assert sys.getrefcount(p) == before
    del p
    assert ref() is None


def test_more_objects_than_entries_each_keep_their_own_answer():
    capacity = _reader.device_cache_info()["capacity"]
    objects = [Pointer() for _ in range(4 * capacity)]
    for i, p in enumerate(objects):
        probe(p, 0x1000 + 16 * i, (2, i % 7))
    hits = 0
    for i, p in enumerate(objects):
        # Asked again, the stand-in driver gives no answer: a hit must give this object's own.
        answer, asked = probe(p, 0x1000 + 16 * i, None)
        assert answer == (None if asked else (2, i % 7))
        hits += not asked
    assert hits > 0


def test_recently_used_objects_stay_cached():
    objects = [Pointer() for _ in range(16)]     # a launcher's 16 arguments
    sets = [_reader._device_cache_set_of(p) for p in objects]
    # Each set holds two answers: an object may only miss where more than two share its set.
    crowded = [sets.count(s) > 2 for s in sets]
    for round_ in range(5):
        asked = [probe(p, 0x1000 + i, (2, 0))[1] for i, p in enumerate(objects)]
        if round_:
            assert not any(a and not c for a, c in zip(asked, crowded, strict=True)), (
                asked, sets)


def test_threads_each_get_their_own_answers():
    errors = []

    def work(seed):
        objects = [Pointer() for _ in range(300)]
        for _ in range(20):
            for i, p in enumerate(objects):
                answer, asked = probe(p, 0x1000 + i, (seed, i % 5))
                if answer != (seed, i % 5):
                    errors.append((seed, i, answer, asked))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (2, 3, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --- the pointer, read from numba's own pointer classes -------------------------------------------

def _numba_driver():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator is on")
    pytest.importorskip("numba.cuda")
    from numba.cuda.cudadrv import driver

    return driver


def _value(p):
    v = p.value if hasattr(type(p), "value") else int(p)
    return 0 if v is None else v


def _pointers(driver, host):
    address = host.ctypes.data
    size = host.nbytes
    auto = driver.AutoFreePointer(None, ctypes.c_uint64(address), size)
    managed = driver.ManagedMemory(None, ctypes.c_uint64(address), size)
    foreign = driver.MemoryPointer(None, ctypes.c_uint64(address), size, owner=host)
    return {"MemoryPointer (foreign)": foreign,
            "AutoFreePointer": auto,
            "ManagedMemory": managed,
            "OwnedPointer (device_array)": auto.own(),
            "OwnedPointer (slice)": auto.view(16),
            "ManagedOwnedPointer": managed.own(),
            "MemoryPointer.view (external owner)": foreign.view(8)}, (auto, managed, foreign)


def test_numbas_pointer_classes_give_device_ctypes_pointers_value_directly():
    driver = _numba_driver()
    host = np.zeros(64, np.float32)
    pointers, _keep = _pointers(driver, host)
    for name, p in pointers.items():
        assert _reader._pointer_of(p) == _value(p.device_ctypes_pointer), name
        direct = {"device_pointer", "_view.device_pointer"}
        if "device_ctypes_pointer" in getattr(p, "__dict__", {}):
            direct.add("device_ctypes_pointer")     # numba-cuda 0.21+: held by the object
        assert _reader._pointer_path(p) in direct, name


def test_numba_arrays_over_each_pointer_class_read_as_their_interface_says():
    driver = _numba_driver()
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from interop_core.registry import _registry

    host = np.zeros(64, np.float32)
    pointers, _keep = _pointers(driver, host)
    for name, p in pointers.items():
        array = DeviceNDArray((4, 2), (16, 4), np.float32, gpu_data=p)
        mine = interop_core.view(array)
        theirs = _registry.read_with(_registry.new_entry("cuda_array_interface"), array)
        assert interop_core.plugins.reader_for(DeviceNDArray).kind == 3, name
        assert (mine.ptr, mine.shape, mine.strides, mine.device_type, mine.device_id) == (
            theirs.ptr, theirs.shape, theirs.strides, theirs.device_type, theirs.device_id), name


def test_a_subclass_with_its_own_pointer_property_is_read_through_it():
    driver = _numba_driver()

    class Shifted(driver.MemoryPointer):
        @property
        def device_ctypes_pointer(self):
            return ctypes.c_uint64(self.device_pointer.value + 4)

    p = Shifted(None, ctypes.c_uint64(0x10000), 64)
    assert _reader._pointer_path(p) == "device_ctypes_pointer"
    assert _reader._pointer_of(p) == 0x10004


def test_a_pointer_class_changed_after_its_first_read_is_looked_at_again():
    driver = _numba_driver()

    class Plain(driver.MemoryPointer):
        pass

    p = Plain(None, ctypes.c_uint64(0x10000), 64)
    assert _reader._pointer_of(p) == 0x10000
    assert _reader._pointer_path(p) == "device_pointer"
    Plain.device_ctypes_pointer = property(lambda self: ctypes.c_uint64(0x20000))
    assert _reader._pointer_path(p) == "device_ctypes_pointer"
    assert _reader._pointer_of(p) == 0x20000


def test_a_dead_owner_raises_what_numba_raises():
    driver = _numba_driver()
    auto = driver.AutoFreePointer(None, ctypes.c_uint64(0x10000), 64)
    owned = auto.own()
    assert _reader._pointer_of(owned) == 0x10000
    del auto
    gc.collect()
    with pytest.raises(ReferenceError):
        owned.device_ctypes_pointer  # noqa: B018  (numba's own path)
    with pytest.raises(ReferenceError):
        _reader._pointer_of(owned)


def test_other_pointer_objects_are_read_through_device_ctypes_pointer():
    class Foreign:
        def __init__(self, value):
            self.device_ctypes_pointer = ctypes.c_void_p(value)
            self.device_pointer = ctypes.c_void_p(value + 1)   # never read for these

    assert _reader._pointer_path(Foreign(0x3000)) == "device_ctypes_pointer"
    assert _reader._pointer_of(Foreign(0x3000)) == 0x3000
    assert _reader._pointer_of(Foreign(0)) == 0


# --- the reader against a driver that logs its queries --------------------------------------------

FAKE_DRIVER_CODE = """
import os
os.environ["NUMBA_DISABLE_CUDA"] = "1"      # numba must not load the fake driver itself
import ctypes, gc, weakref
import numpy as np
import interop_core
from interop_numba import _reader
from numba.cuda.cudadrv import driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray

def queries():
    return sum(1 for name, _ in take_log() if name == "cuPointerGetAttributes")

host = np.zeros(64, np.float32)
out = {}
_fake.fake_set_pointer_answer(2, 1, 0)          # device memory of device 1
auto = driver.AutoFreePointer(None, ctypes.c_uint64(host.ctypes.data), host.nbytes)
a = DeviceNDArray((8, 8), (32, 4), np.float32, gpu_data=auto.own())
take_log()
v = interop_core.view(a)
out["first"] = [queries(), v.device_type, v.device_id]
v = interop_core.view(a)
out["again"] = [queries(), v.device_type, v.device_id]
twin = DeviceNDArray((64,), (4,), np.float32, gpu_data=a.gpu_data)
interop_core.view(twin)
out["same pointer object"] = queries()
s = DeviceNDArray((7, 4), (32, 8), np.float32, gpu_data=auto.view(32))
interop_core.view(s)
out["slice"] = queries()
# The allocation is freed and the address comes back as managed memory of device 0.
del a, twin, s, v
gc.collect()
_fake.fake_set_pointer_answer(2, 0, 1)
managed = driver.ManagedMemory(None, ctypes.c_uint64(host.ctypes.data), host.nbytes)
m = DeviceNDArray((8, 8), (32, 4), np.float32, gpu_data=managed.own())
v = interop_core.view(m)
out["new allocation"] = [queries(), v.device_type, v.device_id]
out["entry"] = interop_core.plugins.reader_for(DeviceNDArray).kind
out["info"] = _reader.device_cache_info()
report(out)
"""


def test_the_reader_asks_the_driver_once_per_pointer_object(tmp_path):
    if compiler() is None:
        pytest.skip("no C compiler to build the fake driver")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator is on")
    pytest.importorskip("numba.cuda")
    out = run(build(tmp_path / "fake"), FAKE_DRIVER_CODE)
    assert out["entry"] == 3                    # the plugin's compiled reader
    assert out["first"] == [1, 2, 1]
    assert out["again"] == [0, 2, 1]
    assert out["same pointer object"] == 0
    assert out["slice"] == 1
    assert out["new allocation"] == [1, 13, 0]
    assert out["info"]["hits"] >= 2


# --- GPU --------------------------------------------------------------------------------------------

def _cuda():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator is on")
    return pytest.importorskip("numba.cuda")


def _reference(obj):
    from interop_core.registry import _registry

    return _registry.read_with(_registry.new_entry("cuda_array_interface"), obj)


def _makers(cuda):
    makers = {"device": lambda: cuda.device_array((6, 8), dtype=np.float32)}
    makers["mapped"] = lambda: cuda.mapped_array((6, 8), dtype=np.float32)
    makers["managed"] = lambda: cuda.managed_array((6, 8), dtype=np.float32)
    makers["foreign"] = lambda: _foreign(cuda, cuda.device_array((6, 8), dtype=np.float32))
    return makers


def _foreign(cuda, base):
    # numba's MemoryPointer over another producer's memory, which it keeps alive.
    return cuda.from_cuda_array_interface(base.__cuda_array_interface__, owner=base, sync=False)


def _flush_frees(cuda):
    # numba frees memory later, in batches: free what is pending now (the memory manager's queue,
    # and the context's own for numba versions that keep it there).
    gc.collect()
    context = cuda.current_context()
    for holder in (getattr(context, "memory_manager", None), context):
        pending = getattr(holder, "deallocations", None)
        if pending is not None:
            pending.clear()


def _check(obj):
    v = interop_core.view(obj)
    ref = _reference(obj)
    assert (v.ptr, v.device_type, v.device_id) == (ref.ptr, ref.device_type, ref.device_id)
    return v


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["device", "mapped", "managed"])
def test_gpu_device_and_kind_are_the_interfaces_also_after_frees(kind):
    cuda = _cuda()
    entry = interop_core.plugins.reader_for(type(cuda.device_array(1)))
    assert entry.kind == 3
    make = _makers(cuda)[kind]
    expected = {"device": 2, "mapped": 3, "managed": 13}[kind]
    for _ in range(4):
        a = make()
        # numba's device arrays slice into device arrays; numpy indexing of mapped and managed
        # arrays (numpy subclasses) gives numpy views without numba's attributes (below).
        for obj in ((a, a[1:, ::2], a[2]) if kind == "device" else (a,)):
            assert _check(obj).device_type == expected
            assert _check(obj).device_type == expected         # a hit: the same answer
        # Free the memory now (numba defers frees), then allocate memory of another kind,
        # which may take the same addresses: every new pointer object is asked about afresh.
        del a, obj
        _flush_frees(cuda)
        for name, other in _makers(cuda).items():
            b = other()
            _check(b)
            if name in ("device", "foreign"):
                _check(b[1:])
            else:
                _check(interop_core.view(b)[1:])
            del b
        _flush_frees(cuda)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["mapped", "managed"])
def test_gpu_a_numpy_view_of_a_mapped_or_managed_array_is_refused_by_name(kind):
    cuda = _cuda()
    a = _makers(cuda)[kind]()
    with pytest.raises(BufferError, match="has no gpu_data: numpy indexing"):
        interop_core.view(a[1:])
    assert interop_core.view(a)[1:].ptr == interop_core.view(a).ptr + a.strides[0]


@pytest.mark.gpu
def test_gpu_foreign_arrays_read_as_their_interface_says():
    cuda = _cuda()
    base = cuda.device_array((6, 8), dtype=np.float32)
    foreign = _foreign(cuda, base)
    for obj in (foreign, foreign[1:, ::2]):
        v = _check(obj)
        assert (v.device_type, v.ptr) == (2, _reference(obj).ptr)


@pytest.mark.gpu
def test_gpu_arrays_on_every_device_report_their_device():
    cuda = _cuda()
    for device in list(cuda.gpus)[:2]:
        with device:
            for make in _makers(cuda).values():
                a = make()
                v = _check(a)
                assert v.device_id == _reference(a).device_id


@pytest.mark.gpu
def test_gpu_a_second_view_of_an_array_is_served_by_the_cache():
    cuda = _cuda()
    a = cuda.device_array(16, dtype=np.float32)
    interop_core.view(a)
    before = _reader.device_cache_info()
    for _ in range(10):
        interop_core.view(a)
    after = _reader.device_cache_info()
    assert after["misses"] == before["misses"]
    assert after["hits"] >= before["hits"] + 10


# --- the attributes, from the instance dict --------------------------------------------------------

def test_numbas_device_arrays_are_read_from_their_instance_dict_and_others_by_getattr():
    devicearray = pytest.importorskip("numba.cuda.cudadrv.devicearray")

    class WithProperty(devicearray.DeviceNDArray):
        @property
        def stream(self):       # a subclass's descriptor wins over the dict: getattr it is
            return 0

    assert _reader._reads_attributes_from_dict(devicearray.DeviceNDArray)
    assert not _reader._reads_attributes_from_dict(devicearray.MappedNDArray)  # ndarray's
    assert not _reader._reads_attributes_from_dict(WithProperty)
    assert _reader._reads_attributes_from_dict(devicearray.DeviceNDArray)     # cached answer


def test_a_pointer_object_cached_is_recalled_with_its_value_and_no_other_is():
    p, other = Pointer(), Pointer()
    probe(p, 0x1000, (2, 1))
    assert _reader._device_cache_recall(p) == (0x1000, (2, 1))
    assert _reader._device_cache_recall(other) is None
    ref = weakref.ref(p)
    del p
    gc.collect()
    assert ref() is None
    assert all(_reader._device_cache_recall(Pointer()) is None for _ in range(64))
