"""``StridedMemoryView.from_*`` read through a plugin's reader where the plugin declared it
equivalent to the protocol (``add_type(..., equivalent_to=...)``), through the protocol otherwise,
and give exactly what the protocol gives."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fake_driver import build, compiler, run

import interop_core
from interop_core import StridedMemoryView
from interop_core.registry import _registry

CONSTRUCTORS = {"dlpack": StridedMemoryView.from_dlpack,
                "cuda_array_interface": StridedMemoryView.from_cuda_array_interface,
                "array_interface": StridedMemoryView.from_array_interface,
                "buffer_protocol": StridedMemoryView.from_buffer_protocol}


def _record(v):
    # What the memory description means: strides along extents of 1, and the pointer and
    # strides of an empty array, address nothing (numpy's array interface says None, "C order",
    # where the array's own strides are other numbers), as the core's reader validation holds.
    empty = v.size == 0
    strides = None if empty else tuple(
        s if n > 1 else None for n, s in zip(v.shape, v.strides, strict=True))
    return {"ptr": None if empty else v.ptr, "shape": v.shape, "strides": strides,
            "dtype": v.dlpack_dtype, "device": (v.device_type, v.device_id),
            # A type declared immutable (jax) reads read-only through from_* either way.
            "readonly": v.readonly or _registry._declared_readonly(type(v.owner))}


def _outcome(constructor, *args):
    # The record a constructor gives, or the error it raises (type and message): a protocol
    # that refuses an object (torch's CUDA Array Interface of a CPU tensor) must refuse it
    # through the fast path in the same words.
    try:
        return _record(constructor(*args))
    except Exception as e:
        return (type(e), str(e))


def _by_protocol(protocol, obj):
    # The protocol's own reader, run directly (what from_* gave before the fast path).
    return _registry.read_with(_registry.new_entry(protocol), obj)


def _numpy_samples():
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    frozen = np.arange(6, dtype=np.int16)
    frozen.flags.writeable = False
    return {"contiguous": grid, "sliced": grid[1:, ::2], "transposed": grid.T,
            "reversed": np.arange(10.0)[::-3], "zero_size": np.zeros((0, 3), np.int8),
            "zero_d": np.array(3.0), "readonly": frozen, "bool": np.ones(5, bool),
            "complex64": np.ones((2, 2), np.complex64), "float16": np.ones(3, np.float16)}


def _torch_samples():
    torch = pytest.importorskip("torch")
    grid = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {"contiguous": grid, "sliced": grid[1:, ::2], "transposed": grid.T,
            "zero_size": torch.zeros((0, 3), dtype=torch.int8), "zero_d": torch.tensor(3.0),
            "bfloat16": torch.ones(3, dtype=torch.bfloat16),
            "requires_grad": torch.ones(3, requires_grad=True),
            "parameter": torch.nn.Parameter(torch.ones(2, 2))}


def _jax_samples():
    jnp = pytest.importorskip("jax.numpy")
    grid = jnp.arange(24, dtype=jnp.float32).reshape(4, 6)
    held = jnp.arange(5, dtype=jnp.int32)
    _HELD_VIEWS.append(interop_core.view(held))
    assert _HELD_VIEWS[-1].ptr                  # a live hold: the read shares it
    deleted = jnp.ones(3)
    deleted.delete()
    return {"contiguous": grid, "sliced": grid[1:, ::2], "transposed": grid.T,
            "zero_size": jnp.zeros((0, 3), jnp.int8), "zero_d": jnp.asarray(3.0),
            "bool": jnp.ones(5, bool), "bfloat16": jnp.ones(3, jnp.bfloat16),
            "complex64": jnp.ones((2, 2), jnp.complex64), "held": held, "deleted": deleted}


_HELD_VIEWS = []

FRAMEWORKS = {"numpy": (_numpy_samples, ("dlpack", "array_interface", "buffer_protocol")),
              "torch": (_torch_samples, ("dlpack", "cuda_array_interface")),
              "jax": (_jax_samples, ("dlpack", "cuda_array_interface"))}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_first_party_readers_declare_the_protocols_they_reproduce(framework):
    make, protocols = FRAMEWORKS[framework]
    for obj in make().values():
        entry = interop_core.plugins.reader_for(type(obj))
        assert entry.plugin == framework
        assert entry.equivalent_to == protocols


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_every_from_constructor_gives_what_its_protocol_gives(framework):
    make, protocols = FRAMEWORKS[framework]
    for name, obj in make().items():
        for protocol in protocols:
            fast = _outcome(CONSTRUCTORS[protocol], obj)
            want = _outcome(_by_protocol, protocol, obj)
            assert fast == want, (framework, name, protocol)
            if not isinstance(fast, tuple):
                assert CONSTRUCTORS[protocol](obj).owner is obj
        assert (_outcome(StridedMemoryView.from_any, obj)
                == _outcome(_by_protocol, "dlpack", obj)), (framework, name)


def test_numpy_dtypes_no_reader_takes_get_the_protocols_own_answer():
    # The struct reader refuses a field of a structured array (stride 12, itemsize 8), and so
    # does each protocol: each constructor answers in the protocol's own words.
    field = np.zeros(3, dtype=[("a", "i4"), ("b", "f8")])["b"]
    for protocol in ("dlpack", "array_interface", "buffer_protocol"):
        with pytest.raises(BufferError) as fast:
            CONSTRUCTORS[protocol](field)
        with pytest.raises(BufferError) as slow:
            _by_protocol(protocol, field)
        assert str(fast.value) == str(slow.value)


# --- a plugin of the test's own: which reader ran ----------------------------------------------

class Carrier:
    """A host array offering DLPack and the array interface (through the numpy array it holds)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    @property
    def __array_interface__(self):
        return self.array.__array_interface__


def _carrier_plugin(registered, reader, **options):
    registered(lambda r: r.add_type(Carrier, reader=reader, **options), "carrier")


def _counting_reader(calls):
    def read(obj, stream):
        calls.append(obj)
        a = obj.array
        return StridedMemoryView.from_pointer(
            a.ctypes.data, a.shape, tuple(s // a.itemsize for s in a.strides), dtype=a.dtype.str,
            readonly=not a.flags.writeable, owner=obj)
    return read


def test_a_reader_declared_equivalent_reads_for_that_protocols_constructor(registered):
    calls = []
    _carrier_plugin(registered, _counting_reader(calls), equivalent_to=("dlpack",))
    c = Carrier(np.arange(6.0).reshape(2, 3)[:, ::2])
    v = StridedMemoryView.from_dlpack(c)
    assert calls == [c]
    assert _record(v) == _record(_by_protocol("dlpack", c)) and v.owner is c
    StridedMemoryView.from_any(c)           # from_any chooses DLPack for this type
    assert len(calls) == 2


def test_a_protocol_not_declared_is_read_by_the_protocol(registered):
    calls = []
    _carrier_plugin(registered, _counting_reader(calls), equivalent_to=("dlpack",))
    c = Carrier(np.arange(6.0))
    v = StridedMemoryView.from_array_interface(c)
    assert calls == []
    assert _record(v) == _record(_by_protocol("array_interface", c))
    interop_core.view(c)                     # view() always uses the registered reader
    assert calls == [c]


def test_without_a_declaration_no_from_constructor_uses_the_reader(registered):
    calls = []
    _carrier_plugin(registered, _counting_reader(calls))
    c = Carrier(np.arange(6.0))
    for v in (StridedMemoryView.from_dlpack(c), StridedMemoryView.from_array_interface(c),
              StridedMemoryView.from_any(c)):
        assert v.ptr == c.array.ctypes.data
    assert calls == []


def test_an_object_the_reader_refuses_is_never_viewed_through_the_protocol(registered):
    # The protocol would describe it (the Carrier's numpy array), but the reader refuses it: a
    # view the plugin refuses is never made (torch's conjugate tensors, whose DLPack export
    # drops the bit that says what the memory holds).
    def refuse(obj, stream):
        raise BufferError("this reader refuses every Carrier")

    _carrier_plugin(registered, refuse, equivalent_to=("dlpack", "array_interface"))
    c = Carrier(np.arange(4, dtype=np.int32))
    for constructor in (StridedMemoryView.from_dlpack, StridedMemoryView.from_array_interface,
                        StridedMemoryView.from_any, interop_core.view):
        with pytest.raises(BufferError, match="refuses every Carrier"):
            constructor(c)


def test_an_object_the_reader_and_the_protocol_refuse_gets_the_protocols_words(registered):
    def refuse(obj, stream):
        raise BufferError("this reader refuses every Carrier")

    _carrier_plugin(registered, refuse, equivalent_to=("dlpack",))
    c = Carrier(np.zeros(3, dtype=">i4"))          # numpy's DLPack export refuses it
    with pytest.raises(BufferError) as fast:
        StridedMemoryView.from_dlpack(c)
    with pytest.raises(BufferError) as slow:
        _by_protocol("dlpack", c)
    assert str(fast.value) == str(slow.value) != "this reader refuses every Carrier"


def test_an_object_every_reader_declines_is_read_by_the_protocol(registered):
    # Declining (NotImplemented) is not refusing: the protocol itself then decides.
    _carrier_plugin(registered, lambda obj, stream: NotImplemented,
                    equivalent_to=("dlpack", "array_interface"))
    c = Carrier(np.arange(4, dtype=np.int32))
    assert _record(StridedMemoryView.from_dlpack(c)) == _record(_by_protocol("dlpack", c))
    assert StridedMemoryView.from_array_interface(c).ptr == c.array.ctypes.data
    with pytest.raises(BufferError, match="declined this object"):
        interop_core.view(c)


def test_a_reader_that_reads_through_the_protocol_itself_gets_the_protocol(registered):
    # A fallback that calls from_dlpack (as torch's and jax's do) must not reach its own type's
    # fast path again.
    calls = []

    def through_dlpack(obj, stream):
        calls.append(obj)
        return StridedMemoryView.from_dlpack(obj, stream)

    _carrier_plugin(registered, through_dlpack, equivalent_to=("dlpack",))
    c = Carrier(np.arange(5.0))
    v = StridedMemoryView.from_dlpack(c)
    assert calls == [c] and v.ptr == c.array.ctypes.data


def test_a_type_declared_immutable_reads_read_only_through_the_fast_path(registered):
    calls = []
    _carrier_plugin(registered, _counting_reader(calls), equivalent_to=("dlpack",),
                    readonly=True)
    c = Carrier(np.arange(3.0))
    assert StridedMemoryView.from_dlpack(c).readonly and calls == [c]


def test_fallbacks_inherit_the_declaration_and_core_readers_are_their_own_protocol():
    entry = _registry.new_entry(lambda o, s: None, fallback=("array_interface", "dlpack"),
                                equivalent_to=("dlpack", "array_interface"))
    chain = [entry, entry.fallback, entry.fallback.fallback]
    assert [e.equivalent_to for e in chain] == [("dlpack", "array_interface")] * 3
    assert _registry.new_entry("buffer_protocol").equivalent_to == ("buffer_protocol",)
    assert _registry.new_entry("dunder_dlpack").equivalent_to == ("dlpack",)
    assert _registry.new_entry(lambda o, s: None).equivalent_to == ()


@pytest.mark.parametrize("names", [("dlpak",), ("dlpack", 3), "cai"])
def test_an_unknown_protocol_name_is_refused_naming_it(names):
    with pytest.raises(ValueError, match="equivalent_to: unknown protocol"):
        _registry.new_entry(lambda o, s: None, equivalent_to=names)


def test_a_plugin_declaring_an_unknown_protocol_fails_to_register_naming_it(registered):
    with pytest.raises(RuntimeError, match="unknown protocol 'dlpak'"):
        _carrier_plugin(registered, _counting_reader([]), equivalent_to=("dlpak",))


# --- equivalence_check: exact for most objects of a type, not all -------------------------------

def test_an_equivalence_check_that_says_no_sends_that_object_to_the_protocol(registered):
    calls, asked = [], []

    def check(obj, protocol, view):
        asked.append((protocol, view.shape))
        return view.size > 2                # the small ones: "the protocol says otherwise"

    _carrier_plugin(registered, _counting_reader(calls), equivalent_to=("dlpack",),
                    equivalence_check={"dlpack": check})
    big, small = Carrier(np.arange(6.0)), Carrier(np.arange(2.0))
    assert StridedMemoryView.from_dlpack(big).ptr == big.array.ctypes.data
    assert StridedMemoryView.from_dlpack(small).ptr == small.array.ctypes.data
    assert asked == [("dlpack", (6,)), ("dlpack", (2,))]
    assert calls == [big, small]            # read by the reader, then by the protocol
    interop_core.view(small)                # view() never asks: it is not a protocol's view
    assert len(asked) == 2


def test_an_equivalence_check_is_asked_only_for_the_protocols_it_names(registered):
    asked = []
    _carrier_plugin(registered, _counting_reader([]),
                    equivalent_to=("dlpack", "array_interface"),
                    equivalence_check={"array_interface": lambda o, p, v: asked.append(p)})
    c = Carrier(np.arange(3.0))
    StridedMemoryView.from_dlpack(c)
    assert asked == []
    StridedMemoryView.from_array_interface(c)
    assert asked == ["array_interface"]


def test_an_equivalence_check_that_raises_raises_from_the_constructor(registered):
    def check(obj, protocol, view):
        raise ValueError("the check itself failed")

    _carrier_plugin(registered, _counting_reader([]), equivalent_to=("dlpack",),
                    equivalence_check={"dlpack": check})
    with pytest.raises(ValueError, match="the check itself failed"):
        StridedMemoryView.from_dlpack(Carrier(np.arange(3.0)))


@pytest.mark.parametrize("checks, error, message", [
    ({"array_interface": lambda o, p, v: True}, ValueError, "does not declare"),
    ({"dlpak": lambda o, p, v: True}, ValueError, "unknown protocol 'dlpak'"),
    ({"dlpack": 3}, TypeError, "must be a PyCapsule or a callable"),
    (lambda o, p, v: True, TypeError, "must be a dict"),
])
def test_a_malformed_equivalence_check_is_refused_naming_it(checks, error, message):
    with pytest.raises(error, match=message):
        _registry.new_entry(lambda o, s: None, equivalent_to=("dlpack",),
                            equivalence_check=checks)


def test_an_equivalence_check_capsule_of_another_name_is_refused():
    import ctypes
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p),
                          b"interop_core.reader_v2", None)
    with pytest.raises(ValueError, match="must be named 'interop_core.equivalence_check_v1'"):
        _registry.new_entry(lambda o, s: None, equivalent_to=("dlpack",),
                            equivalence_check={"dlpack": capsule})


def test_fallbacks_inherit_the_equivalence_check():
    checks = {"dlpack": lambda o, p, v: True}
    entry = _registry.new_entry(lambda o, s: None, fallback="dlpack", equivalent_to=("dlpack",),
                                equivalence_check=checks)
    assert entry.equivalence_check == checks == entry.fallback.equivalence_check


def test_host_memory_is_never_the_cuda_array_interfaces(registered):
    # A reader declared equivalent to the CUDA Array Interface that reads host memory (torch
    # reads CPU tensors too): the interface itself answers for that object.
    calls = []
    _carrier_plugin(registered, _counting_reader(calls),
                    equivalent_to=("dlpack", "cuda_array_interface"))
    c = Carrier(np.arange(3.0))
    with pytest.raises(TypeError, match="Carrier"):
        StridedMemoryView.from_cuda_array_interface(c)   # Carrier has no such interface
    assert calls == [c]


def test_torch_cpu_tensors_go_to_torchs_own_cuda_array_interface():
    torch = pytest.importorskip("torch")
    t = torch.ones(3)
    assert "cuda_array_interface" in interop_core.plugins.reader_for(type(t)).equivalent_to
    with pytest.raises(Exception) as fast:
        StridedMemoryView.from_cuda_array_interface(t)
    with pytest.raises(Exception) as slow:
        _by_protocol("cuda_array_interface", t)
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)


@pytest.mark.gpu
def test_torch_cuda_tensors_read_by_the_interface_as_the_interface_gives_them():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA torch and a GPU")
    grid = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    samples = {"contiguous": grid, "sliced": grid[1:, ::2], "transposed": grid.T,
               "zero_size": torch.zeros((0, 3), dtype=torch.int8, device="cuda"),
               "empty_slice": grid[2:2], "zero_d": torch.tensor(3.0, device="cuda"),
               "extent_1_odd_stride": torch.ones(4, 1, device="cuda").t(),
               "bool": torch.ones(3, dtype=torch.bool, device="cuda"),
               "complex64": torch.ones(2, dtype=torch.complex64, device="cuda"),
               "uint16": torch.ones(2, dtype=torch.uint16, device="cuda"),
               "bfloat16": torch.ones(3, dtype=torch.bfloat16, device="cuda"),
               "detached": torch.ones(3, device="cuda", requires_grad=True).detach()}
    for name, t in samples.items():
        # The same view, or the same refusal (bfloat16's typestr "<V2": two opaque bytes, which
        # the check leaves to the interface).
        fast = _outcome(StridedMemoryView.from_cuda_array_interface, t)
        assert fast == _outcome(_by_protocol, "cuda_array_interface", t), name
        assert not isinstance(fast, tuple), name
        assert (StridedMemoryView.from_cuda_array_interface(t).ptr
                == _by_protocol("cuda_array_interface", t).ptr), name
    for refused in (torch.ones(3, device="cuda", requires_grad=True),
                    torch.nn.Parameter(torch.ones(2, device="cuda"))):
        outcome = _outcome(StridedMemoryView.from_cuda_array_interface, refused)
        assert outcome == _outcome(_by_protocol, "cuda_array_interface", refused)
        assert "requires grad" in outcome[1]


@pytest.mark.gpu
def test_cupy_arrays_read_by_the_interface_as_the_interface_gives_them():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - cupy without a driver or a device
        pytest.skip("needs cupy and a GPU")
    grid = cp.arange(24, dtype=cp.float32).reshape(4, 6)
    samples = {"contiguous": grid, "sliced": grid[1:, ::2], "transposed": grid.T,
               "reversed": cp.arange(10.0)[::-3], "zero_d": cp.asarray(3.0),
               "zero_size": cp.zeros((0, 3), cp.int8), "empty_slice": grid[2:2]}
    for name, x in samples.items():
        fast = StridedMemoryView.from_cuda_array_interface(x)
        reference = _by_protocol("cuda_array_interface", x)
        assert _record(fast) == _record(reference), name
        # The address too, for arrays of no element: cupy's interface gives them address 0.
        assert fast.ptr == reference.ptr, name


@pytest.mark.gpu
def test_jax_gpu_arrays_read_by_the_interface_as_the_interface_gives_them():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    try:
        gpu = jax.devices("cuda")[0]
    except RuntimeError:
        pytest.skip("jax has no CUDA backend here")
    put = lambda a: jax.device_put(a, gpu)  # noqa: E731
    grid = put(jnp.arange(24, dtype=jnp.float32).reshape(4, 6))
    taken = {"contiguous": grid, "transposed": grid.T, "sliced": grid[1:, ::2],
             "zero_d": put(jnp.asarray(3.0)), "bool": put(jnp.ones(5, bool)),
             "float16": put(jnp.ones(3, jnp.float16)), "int8": put(jnp.ones(3, jnp.int8)),
             "uint32": put(jnp.ones(3, jnp.uint32)),
             "complex64": put(jnp.ones((2, 2), jnp.complex64))}
    deleted = put(jnp.ones(3))
    deleted.delete()
    # What jax's interface refuses (element types it does not export, a deleted array) or gives
    # otherwise (address 0 for an empty array) goes to the interface itself.
    left = {"zero_size": put(jnp.zeros((0, 3), jnp.int8)),
            "bfloat16": put(jnp.ones(3, jnp.bfloat16)),
            "float8_e4m3fn": put(jnp.ones(3, jnp.float8_e4m3fn)),
            "int4": put(jnp.ones(4, jnp.int4)), "deleted": deleted}
    try:
        left["pinned_host"] = jax.device_put(
            jnp.ones(4), jax.sharding.SingleDeviceSharding(gpu, memory_kind="pinned_host"))
    except Exception:  # noqa: BLE001 - a jax without that memory kind here
        pass
    for name, x in {**taken, **left}.items():
        fast = _outcome(StridedMemoryView.from_cuda_array_interface, x)
        assert fast == _outcome(_by_protocol, "cuda_array_interface", x), name
    for x in taken.values():
        # The reader's view: its hold deferred, so deleting the array before the memory's first
        # use is reported (the interface's own view would give the freed address).
        copy = jnp.array(x, copy=True)
        v = StridedMemoryView.from_cuda_array_interface(copy)
        copy.delete()
        with pytest.raises(BufferError, match="first used"):
            _ = v.ptr


# --- stream semantics, with the fake CUDA driver -----------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux") or compiler() is None,
                    reason="needs Linux and a C compiler to build the fake libcuda")
def test_the_fast_path_orders_the_consumer_after_the_producer_as_dlpack_does(tmp_path):
    # A device-memory reader whose plugin reports producer stream 0x5000: from_dlpack(x,
    # stream=0x6000) through it records an event on 0x5000 and makes 0x6000 wait on it, as a
    # DLPack producer asked for stream 0x6000 orders itself; without a stream, nothing.
    folder = build(tmp_path / "driver")
    calls = run(folder, """
import numpy as np
import interop_core
from interop_core import StridedMemoryView

class OnDevice:
    def __init__(self):
        self.a = np.zeros(4, np.float32)
    def __dlpack__(self, **kwargs):
        raise AssertionError("the protocol path was taken")
    def __dlpack_device__(self):
        return (2, 0)

def read(obj, stream):
    return StridedMemoryView.from_pointer(obj.a.ctypes.data, (4,), dtype="float32",
                                          device=(2, 0), owner=obj)

class Plugin:
    @interop_core.hookimpl
    def interop_core_register(self, registry):
        registry.add_type(OnDevice, reader=read, producer_stream=lambda obj: 0x5000,
                          equivalent_to=("dlpack",))

interop_core.register_plugin(Plugin(), name="ondevice")
make_current(0)
x = OnDevice()
StridedMemoryView.from_dlpack(x, stream=0x6000)
take_log()
StridedMemoryView.from_dlpack(x, stream=0x6000)
ordered = [name for name, arg in take_log() if name in ("cuEventRecord", "cuStreamWaitEvent")]
StridedMemoryView.from_dlpack(x)
unordered = [name for name, arg in take_log()]
report([ordered, unordered])
""")
    ordered, unordered = calls
    assert ordered == ["cuEventRecord", "cuStreamWaitEvent"]
    assert unordered == []


# --- the constructors as a caller writes them: looked up on the class at every call -------------

STATIC_CONSTRUCTORS = ["from_dlpack", "from_cuda_array_interface", "from_array_interface",
                       "from_buffer_protocol", "from_any", "from_buffer", "empty_like"]


@pytest.mark.parametrize("cls_name", ["core", "compat"])
def test_static_constructors_are_plain_functions_on_the_class_and_its_instances(cls_name):
    # `StridedMemoryView.from_dlpack(x)` is how cuda.core's users write it.  Kept in the class's
    # dictionary as the plain function (no staticmethod wrapper), the name is found without a
    # descriptor call, a lookup CPython 3.12+ specialises; class and instance still give the
    # same unbound function, and a call through either reads the same memory.
    from interop_core.compat import cuda_core

    if cls_name == "core":
        cls, names, no_order = StridedMemoryView, STATIC_CONSTRUCTORS, ()
    else:
        cls, names = cuda_core.StridedMemoryView, [*STATIC_CONSTRUCTORS, "from_any_interface"]
        no_order = (-1,)        # cuda.core's stream_ptr
    a = np.arange(6.0).reshape(2, 3)
    instance = cls.from_dlpack(a, *no_order)
    for name in names:
        owner = next(base for base in cls.__mro__ if name in base.__dict__)
        assert not isinstance(owner.__dict__[name], staticmethod), f"{owner.__name__}.{name}"
        assert getattr(instance, name) is getattr(cls, name) is owner.__dict__[name]
    again = instance.from_dlpack(a, *no_order)
    assert type(again) is cls and (again.ptr, again.shape) == (instance.ptr, (2, 3))
