"""Fuzzed exchange-protocol input: clear errors that name the field, never a crash or a leak.

Hypothesis draws a well-formed ``__array_interface__`` / ``__cuda_array_interface__`` dict,
DLPack capsule (built with ctypes, tests/dlpack_ctypes.py) or ``__dlpack_device__`` answer and
breaks exactly one field of it (a wrong type, a missing key, huge or negative extents, strides
that are no tuple, garbage typestrs, data tuples of the wrong shape, versions, masks, descrs,
streams, byte offsets that overflow the pointer, NULL shapes, unknown dtype codes, ...).  Each
case goes through every entry point (``StridedMemoryView.from_*``, ``from_any``, ``view()``)
and must end in one of two ways:

- a view that says exactly what the input said (shape, strides, pointer, read-only flag, device,
  dtype), where the input is in fact well formed; or
- a ``TypeError``, ``ValueError`` or ``BufferError`` whose message names the broken field (the
  project's bad-input rule), with the producer's capsule left unconsumed.

Nothing may leak: the reference counts of the interface object, its dict and the broken value,
or of the capsule and its producer, are what they were before the call once the view is gone;
a consumed capsule's deleter runs exactly once.  Cases run in worker processes
(tests/_subprocess_pool.py), so a reader that crashes fails the case instead of the run; no
case dereferences the memory a fuzzed dict or capsule points to.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys

import numpy as np
import pytest
from _subprocess_pool import SubprocessPool, TaskError, WorkerDied, WorkerTimeout
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interop_core import StridedMemoryView, view

CLEAR_ERRORS = (TypeError, ValueError, BufferError)
FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Backing:
    """Stands for the address of a real 4 KiB block in the worker (addresses differ per process)."""

    def __repr__(self):
        return "BACKING"


class Opaque:
    """A value of no protocol type at all (picklable, unlike ``object()``)."""

    def __repr__(self):
        return "Opaque()"


_BACKING = np.zeros(4096, np.uint8)


def _backing_address():
    return _BACKING.__array_interface__["data"][0]


def _resolve(value):
    """The value with every Backing replaced by the real address (containers rebuilt)."""
    if isinstance(value, Backing):
        return _backing_address()
    if isinstance(value, tuple):
        return tuple(_resolve(v) for v in value)
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def _refcounts(*objects):
    return [sys.getrefcount(o) for o in objects]


# --- interface dicts ----------------------------------------------------------------------------

class ArrayInterfaceHolder:
    """Exposes a dict as ``__array_interface__`` and nothing else."""

    def __init__(self, interface):
        self.__array_interface__ = interface
        self.keep = _BACKING          # the memory the dict points at outlives every view


class CudaArrayInterfaceHolder:
    """Exposes a dict as ``__cuda_array_interface__`` and nothing else."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


PROTOCOLS = {
    "array_interface": (ArrayInterfaceHolder, StridedMemoryView.from_array_interface),
    "cuda_array_interface": (CudaArrayInterfaceHolder,
                             StridedMemoryView.from_cuda_array_interface),
}

# A broken field may make a neighbour's check the one that fails: the message may then name
# either (descr against typestr, strides against shape, a buffer against its offset).
_ALSO_NAMED = {"descr": ("typestr",), "typestr": ("descr",), "strides": ("shape",),
               "shape": ("strides",), "offset": ("data",), "data": ("offset",)}


def _good_interface():
    return {"shape": (2, 3), "typestr": "<f4", "data": (Backing(), False), "version": 3}


def _describes(v, interface):
    """What a successful view gets wrong about a dict it accepted ('' when nothing)."""
    problems = []
    shape = interface["shape"]
    if v.shape != tuple(shape):
        problems.append(f"shape {v.shape} for {shape!r}")
    data = interface.get("data")
    if isinstance(data, (tuple, list)) and len(data) == 2:
        if v.ptr != data[0]:
            problems.append(f"ptr {v.ptr:#x} for data {data!r}")
        if v.readonly != bool(data[1]):
            problems.append(f"readonly {v.readonly} for data {data!r}")
    return "; ".join(problems)


def interface_case(protocol, field, value, well_formed=False):
    """Feed a dict with ``field`` set to ``value`` (or removed) to every entry point.

    Runs in a worker process; returns the list of problems found (empty: right).
    """
    holder_type, from_protocol = PROTOCOLS[protocol]
    entries = {"from_" + protocol: from_protocol, "from_any": StridedMemoryView.from_any,
               "view": view}
    problems = []
    for entry_name, entry in entries.items():
        interface = _good_interface()
        if value is _REMOVE:
            del interface[field]
        else:
            interface[field] = _resolve(value)
        interface["data"] = _resolve(interface.get("data", _REMOVE))
        if interface["data"] is _REMOVE:
            del interface["data"]
        holder = holder_type(interface)
        # (Shared objects, such as the empty tuple, are counted by the whole interpreter.)
        watched = [holder, interface] + [v for v in interface.values()
                                         if isinstance(v, Opaque)
                                         or (isinstance(v, (tuple, list, bytearray)) and v)]
        before = _refcounts(*watched)
        try:
            v = entry(holder)
        except CLEAR_ERRORS as exc:
            message = str(exc)
            names = (field, *_ALSO_NAMED.get(field, ()))
            if well_formed:
                problems.append(f"{entry_name} refused a well-formed dict: {message}")
            elif not any(name in message for name in names):
                problems.append(f"{entry_name}: {type(exc).__name__} does not name "
                                f"{field!r}: {message}")
        except BaseException as exc:  # noqa: BLE001  (every other kind of failure is the finding)
            problems.append(f"{entry_name}: {type(exc).__name__}: {exc}")
        else:
            wrong = _describes(v, interface)
            if wrong:
                problems.append(f"{entry_name} accepted it but got {wrong}")
            repr(v)
            del v
        gc.collect()
        after = _refcounts(*watched)
        if after != before:
            problems.append(f"{entry_name}: reference counts of (holder, dict, values) went "
                            f"from {before} to {after}")
    return problems


class _Remove:
    def __repr__(self):
        return "<removed>"

    def __reduce__(self):
        return "_REMOVE"          # the same object after pickling (a module-level name)


_REMOVE = _Remove()

_junk = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, width=32),
                  st.text(max_size=3), st.binary(max_size=4), st.builds(Opaque),
                  st.builds(dict))
_wild_ints = st.sampled_from([-(2**63), -5, -1, 0, 1, 3, 4, 12, 2**31, 2**62, 2**63 - 1, 2**63,
                              2**64, 2**64 + 5, 2**70])

_FIELD_VALUES = {
    "shape": st.one_of(
        st.lists(_wild_ints, max_size=3).map(tuple),
        st.lists(st.integers(0, 4), min_size=2, max_size=2),                    # a list
        st.lists(st.one_of(st.integers(0, 4), _junk), min_size=1, max_size=3).map(tuple),
        st.just((1,) * 65), _junk, _wild_ints),
    "strides": st.one_of(
        st.none(),
        st.lists(_wild_ints, min_size=2, max_size=2).map(tuple),
        st.lists(st.integers(-16, 16), min_size=0, max_size=3).map(tuple),
        st.lists(st.integers(-16, 16), min_size=2, max_size=2),
        st.lists(st.one_of(st.integers(0, 16), _junk), min_size=2, max_size=2).map(tuple),
        _junk, _wild_ints),
    "typestr": st.one_of(
        st.sampled_from(["<f4", "<f8", "|b1", "<c16", "<i8", "|u1", "=f4", "|f4", ">f4", "<f3",
                         "<x4", "|O8", "|V4", "<M8", "<f16", "f4", "<f", "", "<f4 ", "<U4"]),
        st.text(max_size=5), _junk, st.just(b"<f4")),
    "data": st.one_of(
        st.tuples(st.just(Backing()), st.one_of(st.booleans(), _junk)),
        st.tuples(_wild_ints, st.booleans()),
        st.tuples(st.one_of(_junk, st.floats(width=32, allow_nan=False)), st.booleans()),
        st.just((Backing(),)), st.just((Backing(), False, 1)), st.just([Backing(), False]),
        st.builds(bytearray, st.binary(max_size=32)), st.binary(max_size=32), _junk),
    "version": st.one_of(st.integers(-2, 6), _wild_ints, _junk, st.just("3"), st.just(3.0)),
    "mask": st.one_of(st.none(), st.tuples(st.just(Backing()), st.booleans()), _junk),
    "descr": st.one_of(st.none(), st.just([("", "<f4")]), st.just([("", "<f8")]),
                       st.just([("a", "<f4"), ("b", "<f4")]), st.just([]), st.just("<f4"),
                       st.just([("", "<f4", (2,))]), _junk),
    "stream": st.one_of(st.none(), _wild_ints, _junk, st.just(1.0)),
    "offset": st.one_of(_wild_ints, _junk),
}
_REQUIRED = ("shape", "typestr", "data", "version")


@st.composite
def _broken_interfaces(draw, protocol):
    fields = sorted(_FIELD_VALUES)
    if protocol == "array_interface":
        fields.remove("stream")
    else:
        fields.remove("offset")
    field = draw(st.sampled_from(fields))
    if field in _REQUIRED and draw(st.integers(0, 9)) == 0:
        return field, _REMOVE
    return field, draw(_FIELD_VALUES[field])


# --- DLPack capsules ------------------------------------------------------------------------------

_GOOD_CAPSULE = {"versioned": True, "version": (1, 3), "flags": 0, "ndim": None,
                 "shape": (2, 3), "strides": (3, 1), "dtype": (2, 32, 1), "device": (1, 0),
                 "byte_offset": 0, "data": None, "name": None, "null_shape": False,
                 "null_deleter": False}

# How an error names each broken field of a capsule.
_CAPSULE_FIELD_WORDS = {
    "versioned": r"version|legacy", "version": r"version", "flags": r"flag",
    "ndim": r"ndim|dimension", "shape": r"shape|extent", "strides": r"stride",
    "dtype": r"dtype|type code|bits|lanes|sub-byte", "device": r"device",
    "byte_offset": r"byte_offset|offset", "data": r"data|null|pointer|address",
    "name": r"capsule|named|consumed", "null_shape": r"shape", "null_deleter": r"deleter",
}
_INT64_MAX = 2**63 - 1


def _build_capsule(spec):
    """(capsule, FakeTensor) for a spec; the FakeTensor keeps every array alive."""
    from dlpack_ctypes import DELETER, FakeTensor

    buffer = np.zeros(64, np.float32)
    data = spec["data"]
    fake = FakeTensor(buffer, spec["shape"], spec["strides"], spec["dtype"],
                      versioned=spec["versioned"], version=spec["version"],
                      flags=spec["flags"], byte_offset=spec["byte_offset"],
                      device=spec["device"], data=data)
    tensor = fake.managed.dl_tensor
    if spec["ndim"] is not None:
        ndim = spec["ndim"]
        # Arrays as long as ndim says (capped: a reader must refuse a huge ndim before reading).
        length = max(1, min(ndim, 4096))
        fake.extra_shape = (ctypes.c_int64 * length)(*([1] * length))
        fake.extra_strides = (ctypes.c_int64 * length)(*([1] * length))
        tensor.ndim = ndim
        tensor.shape = fake.extra_shape
        tensor.strides = fake.extra_strides
    if spec["null_shape"]:
        tensor.shape = ctypes.POINTER(ctypes.c_int64)()
    if spec["null_deleter"]:
        fake.managed.deleter = DELETER()
    return fake.capsule(spec["name"]), fake


def _expected_view(spec, fake):
    """What a view of the spec's capsule must say, or None where it must be refused."""
    tensor = fake.managed.dl_tensor
    ndim = tensor.ndim
    if not 0 <= ndim <= 64 or spec["null_shape"]:
        return None
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if any(n < 0 for n in shape):
        return None
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= max(n, 1)
        strides = tuple(reversed(strides))
    code, bits, lanes = spec["dtype"]
    if bits == 0 or lanes == 0:
        return None
    itemsize = max(1, bits * lanes // 8)
    if 0 not in shape:
        volume_bytes = itemsize
        for n in shape:
            volume_bytes *= n
        reach = sum(abs(s) * (n - 1) for s, n in zip(strides, shape, strict=True)) * itemsize
        if volume_bytes > _INT64_MAX or reach > _INT64_MAX:
            return None                                   # sizes that overflow int64
    pointer = (tensor.data or 0) + tensor.byte_offset
    if pointer >= 2**64:
        return None                                       # the pointer wraps around
    if 0 not in shape:
        low = pointer + itemsize * sum(min(0, s * (n - 1)) for s, n in zip(strides, shape,
                                                                           strict=True))
        high = pointer + itemsize * (1 + sum(max(0, s * (n - 1)) for s, n in zip(strides, shape,
                                                                                 strict=True)))
        if low < 0 or high > 2**64:
            return None                                   # elements beyond the address space
    return {"shape": shape, "strides": strides, "ptr": pointer,
            "readonly": bool(spec["versioned"] and spec["flags"] & 1),
            "device": (tensor.device.device_type, tensor.device.device_id),
            "dlpack_dtype": spec["dtype"]}


class CapsuleProducer:
    """A producer whose ``__dlpack__`` hands out one prepared capsule (kept alive here, so that
    a refused capsule is released only after the error was handled: the ctypes destructor of
    tests/dlpack_ctypes.py cannot run while an exception is being raised)."""

    def __init__(self, capsule, device):
        self.capsule = capsule        # owned here until the case drops the producer
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def capsule_case(spec, entry_name):
    """Feed the capsule a spec describes to one entry point; returns the problems found.

    Runs in a worker process.
    """
    from dlpack_ctypes import capsule_name

    capsule, fake = _build_capsule(spec)
    name_before = capsule_name(capsule)
    expected = _expected_view(spec, fake)
    producer = CapsuleProducer(capsule, spec["device"])
    argument = capsule if entry_name == "from_dlpack(capsule)" else producer
    entry = {"from_dlpack(capsule)": StridedMemoryView.from_dlpack,
             "from_dlpack(producer)": StridedMemoryView.from_dlpack,
             "from_any(producer)": StridedMemoryView.from_any,
             "view(producer)": view}[entry_name]
    before = _refcounts(capsule, producer)
    problems = []
    broken = [key for key in spec if spec[key] != _GOOD_CAPSULE[key]]
    try:
        v = entry(argument)
    except CLEAR_ERRORS as exc:
        message = str(exc)
        words = "|".join(_CAPSULE_FIELD_WORDS[key] for key in broken)
        if not broken:
            problems.append(f"refused a well-formed capsule: {type(exc).__name__}: {message}")
        elif not re.search(words, message, re.IGNORECASE):
            problems.append(f"{type(exc).__name__} does not name the broken field "
                            f"{broken}: {message}")
        if capsule_name(capsule) != name_before:
            problems.append(f"a refused capsule was consumed (renamed to "
                            f"{capsule_name(capsule)!r})")
        if fake.deleted:
            problems.append(f"a refused capsule's tensor was deleted ({fake.deleted} times)")
        consumed = False
    except BaseException as exc:  # noqa: BLE001
        return [f"{type(exc).__name__}: {exc}"]
    else:
        consumed = True
        if expected is None:
            problems.append(f"accepted a capsule it must refuse: {v!r}")
        else:
            got = {"shape": v.shape, "strides": v.strides, "ptr": v.ptr, "readonly": v.readonly,
                   "device": (v.device_type, v.device_id), "dlpack_dtype": v.dlpack_dtype}
            wrong = {k: (got[k], expected[k]) for k in expected if got[k] != expected[k]}
            if wrong:
                problems.append(f"the view differs from the capsule: (got, expected) {wrong}")
        repr(v)
        if fake.deleted:
            problems.append("the tensor was deleted while its view lives")
        del v
    gc.collect()
    after = _refcounts(capsule, producer)
    if after != before:
        problems.append(f"reference counts of (capsule, producer) went from {before} to {after}")
    if consumed and not spec["null_deleter"] and fake.deleted != 1:
        problems.append(f"the consumed tensor's deleter ran {fake.deleted} times, not once")
    del producer, argument
    if not consumed and spec["name"] is None:
        del capsule
        gc.collect()
        if fake.deleted != 1:
            problems.append(f"the refused capsule, released by its producer, deleted its tensor "
                            f"{fake.deleted} times, not once")
    return problems


_CAPSULE_FIELD_VALUES = {
    "versioned": st.just(False),
    "version": st.tuples(st.sampled_from([0, 1, 2, 3, 255]),
                         st.sampled_from([0, 3, 4, 99, 2**32 - 1])),
    "flags": st.one_of(st.integers(0, 7), st.sampled_from([8, 2**32, 2**63, 2**64 - 1])),
    "ndim": st.sampled_from([-(2**31), -1, 0, 1, 3, 8, 64, 65, 1000, 2**31 - 1]),
    "shape": st.tuples(*[st.sampled_from([-(2**63), -1, 0, 1, 5, 2**31, 2**62, 2**63 - 1])] * 2),
    "strides": st.one_of(st.none(), st.tuples(
        *[st.sampled_from([-(2**63), -(2**62), -5, -1, 0, 1, 3, 2**62, 2**63 - 1])] * 2)),
    "dtype": st.tuples(st.sampled_from([0, 1, 2, 4, 5, 6, 7, 17, 18, 99, 255]),
                       st.sampled_from([0, 1, 4, 7, 8, 16, 32, 64, 128, 255]),
                       st.sampled_from([0, 1, 2, 4, 65535])),
    "device": st.tuples(st.sampled_from([-1, 0, 1, 2, 3, 13, 99, 2**31 - 1]),
                        st.sampled_from([-1, 0, 3, 2**31 - 1])),
    "byte_offset": st.sampled_from([1, 3, 4, 2**32, 2**63, 2**64 - 1]),
    "data": st.sampled_from([0, 1, 4096, 2**63, 2**64 - 8, 2**64 - 1]),
    # (Not b"dltensor" over a versioned struct: a producer lying about the layout is undefined
    # behaviour no consumer can detect.)
    "name": st.sampled_from([b"used_dltensor_versioned", b"not_a_tensor"]),
    "null_shape": st.just(True),
    "null_deleter": st.just(True),
}

CAPSULE_ENTRIES = ["from_dlpack(capsule)", "from_dlpack(producer)", "from_any(producer)",
                   "view(producer)"]


@st.composite
def _broken_capsules(draw):
    spec = dict(_GOOD_CAPSULE)
    field = draw(st.sampled_from(sorted(_CAPSULE_FIELD_VALUES)))
    spec[field] = draw(_CAPSULE_FIELD_VALUES[field])
    return spec


# --- __dlpack_device__ and __dlpack__ answers ----------------------------------------------------

class Raises:
    """An answer that is an exception: ``Raises(ValueError, "no")`` raises a new one per call
    (a stored instance would keep, through its traceback, the producer that raised it)."""

    def __init__(self, kind, message):
        self.kind = kind
        self.message = message

    def __repr__(self):
        return f"raises {self.kind.__name__}({self.message!r})"


class DeviceAnswer:
    """A host producer (over numpy) whose ``__dlpack_device__`` answers ``answer`` (or raises
    it) and whose ``__dlpack__`` is numpy's."""

    def __init__(self, answer):
        self.array = np.arange(6, dtype=np.float32)    # the memory its capsules describe
        self.answer = answer

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        if isinstance(self.answer, Raises):
            raise self.answer.kind(self.answer.message)
        return self.answer


def _well_formed_device(answer):
    return (isinstance(answer, tuple) and len(answer) == 2
            and all(type(x) is int and 0 <= x < 2**31 for x in answer))


def device_case(answer):
    """view() / from_dlpack / from_any of a producer whose __dlpack_device__ answers ``answer``.

    Runs in a worker process; returns the problems found.
    """
    problems = []
    for entry_name, entry in (("view", view), ("from_dlpack", StridedMemoryView.from_dlpack),
                              ("from_any", StridedMemoryView.from_any)):
        producer = DeviceAnswer(answer)
        before = _refcounts(producer)
        try:
            v = entry(producer)
        except CLEAR_ERRORS as exc:
            # The producer's own TypeError / ValueError may go through as it is.
            own = isinstance(answer, Raises) and type(exc) is answer.kind
            if not (own or "__dlpack_device__" in str(exc) or _well_formed_device(answer)):
                problems.append(f"{entry_name}: {type(exc).__name__} does not name "
                                f"__dlpack_device__: {exc}")
        except BaseException as exc:  # noqa: BLE001
            problems.append(f"{entry_name}: {type(exc).__name__}: {exc}")
        else:
            # An AttributeError may mean "no such method": the device then comes from the capsule.
            absent = isinstance(answer, Raises) and answer.kind is AttributeError
            if not (_well_formed_device(answer) or absent):
                problems.append(f"{entry_name} accepted __dlpack_device__() = {answer!r}")
            elif v.ptr != producer.array.__array_interface__["data"][0]:
                problems.append(f"{entry_name}: wrong pointer")
            del v
        gc.collect()
        if _refcounts(producer) != before:
            problems.append(f"{entry_name}: the producer's reference count went from {before} "
                            f"to {_refcounts(producer)}")
    return problems


_DEVICE_ANSWERS = st.one_of(
    st.tuples(st.sampled_from([1, 2, 13, 2**31, -1]), st.sampled_from([0, 1, -1, 2**40])),
    st.sampled_from(["cpu", (1,), (1, 0, 0), (1, "0"), ("1", 0), (1.0, 0), None, 1,
                     {"device": 1}]),
    st.sampled_from([Raises(RuntimeError, "device lost"), Raises(TypeError, "no"),
                     Raises(ValueError, "no"), Raises(AttributeError, "no"), Raises(KeyError, "k")]),
)


# --- the tests ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool():
    with SubprocessPool(size=2, timeout=60) as workers:
        yield workers


def _run(pool, function, *args):
    (result,) = pool.map(function, [args])
    if isinstance(result, WorkerDied):
        pytest.fail(f"the case crashed its worker process:\n{result}", pytrace=False)
    if isinstance(result, (WorkerTimeout, TaskError)):
        pytest.fail(f"{function.__name__}{args}: {result}", pytrace=False)
    return result


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@FUZZ
@given(data=st.data())
def test_broken_interface_dicts_get_clear_errors_naming_the_field(pool, protocol, data):
    field, value = data.draw(_broken_interfaces(protocol), label="field, value")
    problems = _run(pool, interface_case, protocol, field, value)
    assert not problems, f"{protocol} with {field!r} = {value!r}:\n" + "\n".join(problems)


@pytest.mark.parametrize("entry", CAPSULE_ENTRIES)
@FUZZ
@given(spec=_broken_capsules())
def test_broken_dlpack_capsules_get_clear_errors_and_are_consumed_once(pool, entry, spec):
    problems = _run(pool, capsule_case, spec, entry)
    broken = {k: v for k, v in spec.items() if v != _GOOD_CAPSULE[k]}
    assert not problems, f"{entry} of a capsule with {broken}:\n" + "\n".join(problems)


@settings(FUZZ, max_examples=60)
@given(answer=_DEVICE_ANSWERS)
def test_broken_dlpack_device_answers_get_clear_errors_naming_it(pool, answer):
    problems = _run(pool, device_case, answer)
    assert not problems, f"__dlpack_device__() = {answer!r}:\n" + "\n".join(problems)


def test_a_well_formed_capsule_passes_every_check(pool):
    # The oracle itself: an unbroken capsule is read faithfully and deleted once, by every path.
    for entry in CAPSULE_ENTRIES:
        assert _run(pool, capsule_case, dict(_GOOD_CAPSULE), entry) == []
    for protocol in PROTOCOLS:
        assert _run(pool, interface_case, protocol, "version", 3, True) == []
