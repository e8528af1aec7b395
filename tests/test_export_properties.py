"""``to()`` over random layouts, every dtype size and every installed target, each ``copy=``.

Property: for any strided source (negative, zero and overlapping strides, slices, transposes,
pointers and strides that break alignment, 0-d and zero-size arrays; numpy arrays and
interop-core views of them), ``to(source, target, copy=c)`` either gives the target's object
with numpy's values, shape and dtype, or raises a clear ``TypeError`` / ``ValueError`` /
``BufferError`` that names the limit it hit.  ``copy=False`` never copies (same pointer);
``copy=True`` gives memory of its own (writes to either side do not reach the other) and never
warns that it copied; no call writes the source.

Each case runs in a worker process (tests/_subprocess_pool.py): a target that aborts on a layout
it cannot take (torch on negative strides: ``c10::Error``, SIGABRT) fails the case, with the case
and the worker's stderr in the report, instead of ending the run.  Targets are discovered from
the exporters of every loaded plugin, so a new plugin is covered without editing this file;
numba runs under its CUDA simulator (set in the workers only).
"""

from __future__ import annotations

import importlib.util
import re
import warnings

import numpy as np
import pytest
from _subprocess_pool import SubprocessPool, TaskError, WorkerDied, WorkerTimeout
from _targets import (
    WORKER_ENVIRONMENT,
    installed_targets,
    ml_dtypes,
    numpy_dtype,
    read_result,
    zero_result,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interop_core

# Every element size: 1, 2, 4, 8 and 16 bytes, bool and complex included.
DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "float16", "int32", "uint32", "float32",
          "int64", "uint64", "float64", "complex64", "complex128"]
if ml_dtypes is not None:
    DTYPES += ["bfloat16", "float8_e4m3fn"]
# A stride that is not a whole number of elements gives garbage bit patterns for floats (NaNs a
# copy may canonicalise): skewed strides are drawn for these only.
_EXACT_BITS = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}

# How an error names the limit it hit, by kind of limit.
_LAYOUT_LIMIT = re.compile(r"stride|layout|compact|contiguous|align|itemsize|overlap")
_DTYPE_LIMIT = re.compile(r"dtype|x64|element type|\b(?:u?int|float|complex|bfloat)\d+|\bbool\b")
_DEVICE_LIMIT = re.compile(r"device|host memory|cuda memory")

PROFILE = settings(max_examples=150, deadline=None, derandomize=False,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


TARGETS = installed_targets()


# --- the sources (built in the worker from a picklable description) ----------------------------

def _pattern(dtype, count):
    """Values without NaNs, mostly distinct and non-zero, so that misplaced reads show."""
    index = np.arange(count)
    if dtype == np.bool_:
        return index % 3 != 0
    values = (index % 97 + 2).astype(dtype)
    if dtype.kind == "c":
        values = values + 1j * (index % 5 + 1).astype(dtype)
    return values


def build_source(case):
    """(source object, numpy array of its values, the bytearray that holds its memory,
    the source's element-0 address)."""
    dtype = numpy_dtype(case["dtype"])
    itemsize = dtype.itemsize
    form = case["form"]
    shift = case["shift"]       # bytes added before element data: breaks pointer alignment
    if form in ("as_strided", "view_layout"):
        shape = case["shape"]
        byte_strides = tuple(s * itemsize + k for s, k in zip(case["strides"], case["skew"],
                                                               strict=True))
        empty = 0 in shape
        low = 0 if empty else sum(b * (n - 1) for b, n in zip(byte_strides, shape, strict=True)
                                  if b < 0)
        high = 0 if empty else sum(b * (n - 1) for b, n in zip(byte_strides, shape, strict=True)
                                   if b > 0)
        pad = case["pad"] * itemsize
        start = shift + pad - low                                # byte offset of element 0
        memory = bytearray(start + high + itemsize + pad)
        count = (len(memory) - shift) // itemsize
        typed = np.frombuffer(memory, dtype, count, offset=shift)
        typed[:] = _pattern(dtype, count)
        if form == "as_strided":
            first = np.frombuffer(memory, np.uint8, itemsize, offset=start).view(dtype)
            source = np.lib.stride_tricks.as_strided(first, shape, byte_strides,
                                                     writeable=not case["readonly"])
            expected = np.array(source, copy=True)
        else:
            if case["readonly"]:
                typed.flags.writeable = False
            element0 = (start - shift) // itemsize
            layout = interop_core.StridedLayout(shape, case["strides"], itemsize,
                                                slice_offset=element0)
            source = interop_core.view(typed).view(layout=layout)
            first = np.frombuffer(memory, np.uint8, itemsize, offset=start).view(dtype)
            expected = np.array(np.lib.stride_tricks.as_strided(first, shape, byte_strides,
                                                                writeable=False), copy=True)
    else:
        base_shape = case["base_shape"]
        count = int(np.prod(base_shape))
        memory = bytearray(shift + count * itemsize)
        dense = np.frombuffer(memory, dtype, count, offset=shift).reshape(base_shape)
        dense[...] = _pattern(dtype, count).reshape(base_shape)
        if case["readonly"]:
            dense.flags.writeable = False
        key, perm = case["key"] + (Ellipsis,), case["perm"]   # Ellipsis: 0-d, never a scalar
        expected = np.array(dense[key].transpose(perm), copy=True)
        if form == "sliced":
            source = dense[key].transpose(perm)
        else:
            sliced = interop_core.view(dense)[key]
            source = sliced.view(layout=sliced.layout.permuted(perm))
    if isinstance(source, np.ndarray):
        address = source.__array_interface__["data"][0]
    else:
        address = source.ptr
    return source, expected, memory, address


def _same_bits(a, b):
    if a.shape != b.shape:
        return False
    a = np.array(a, order="C").reshape(-1).view(np.uint8)
    b = np.array(b, order="C").reshape(-1).view(np.uint8)
    return bool(np.array_equal(a, b))


def _error_names_its_limit(exc, copy, case):
    message = str(exc).lower()
    if len(message) < 20:
        return False
    kinds = [_DTYPE_LIMIT, _DEVICE_LIMIT]
    # A dense copy fits every target's layout limits, so copy=True may refuse a layout only
    # where the source itself cannot be viewed: byte strides that are not whole elements.
    if copy is not True or any(case.get("skew", ())):
        kinds.append(_LAYOUT_LIMIT)
    return any(kind.search(message) for kind in kinds)


def check_export_case(case, target, copy):
    """Run ``to(source, target, copy=copy)`` and check it; None when right, else what is wrong.

    Runs in a worker process.
    """
    from interop_core.plugins import ReadOnlyHandoffWarning

    source, expected, memory, address = build_source(case)
    original = bytes(memory)
    dtype = expected.dtype
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
        try:
            result = interop_core.to(source, target, copy=copy)
        except (TypeError, ValueError, BufferError) as exc:
            if bytes(memory) != original:
                return f"a refused call wrote the source ({type(exc).__name__}: {exc})"
            if not _error_names_its_limit(exc, copy, case):
                return (f"unclear or unjustified refusal: {type(exc).__name__}: {exc} "
                        f"(copy={copy} must {'not refuse a layout' if copy else 'name its limit'})")
            return None
    copy_warnings = [f"{w.category.__name__}: {w.message}" for w in caught
                     if "copy" in w.category.__name__.lower()]
    if copy is not None and copy_warnings:
        return f"copy={copy} warned that the target copied: {copy_warnings}"
    if bytes(memory) != original:
        return "to() wrote the source's memory"
    try:
        values, pointer, writable = read_result(target, result, dtype)
    except AssertionError as exc:
        return str(exc)
    if values.shape != expected.shape:
        return f"shape changed: {expected.shape} became {values.shape}"
    if not _same_bits(values, expected):
        return f"values differ from numpy's:\n  got {values!r}\n  numpy {expected!r}"
    if copy is False and expected.size and pointer != address:
        return f"copy=False copied: the result is at {pointer:#x}, the source at {address:#x}"
    if copy is True and expected.size:
        if not case["readonly"]:
            memory[:] = bytes(len(memory))
            values_after, _, _ = read_result(target, result, dtype)
            if not _same_bits(values_after, expected):
                return "copy=True shares memory: writing the source changed the result"
            memory[:] = original
        if writable and zero_result(target, result) and bytes(memory) != original:
            return "copy=True shares memory: writing the result changed the source"
    return None


# --- strategies --------------------------------------------------------------------------------

@st.composite
def strided_cases(draw, form):
    dtype = draw(st.sampled_from(DTYPES))
    itemsize = numpy_dtype(dtype).itemsize
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4) | st.just(1), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(-6, 6), min_size=ndim, max_size=ndim)))
    skew = (0,) * ndim
    if form == "as_strided" and dtype in _EXACT_BITS and itemsize > 1 and ndim:
        if draw(st.integers(0, 7)) == 0:
            axis = draw(st.integers(0, ndim - 1))
            skew = tuple(1 if i == axis else 0 for i in range(ndim))
    shift = draw(st.sampled_from([0] * 5 + [1, itemsize // 2 or 1, 8, 16, 32]))
    return {"form": form, "dtype": dtype, "shape": shape, "strides": strides, "skew": skew,
            "pad": draw(st.integers(0, 3)), "shift": shift, "readonly": draw(st.booleans())}


_KEY_ITEM = st.one_of(
    st.builds(slice, st.none() | st.integers(-6, 6), st.none() | st.integers(-6, 6),
              st.none() | st.sampled_from([1, 2, 3, -1, -2, -3])),
    st.integers(-1, 0),
    st.none(),
)


@st.composite
def sliced_cases(draw, form):
    dtype = draw(st.sampled_from(DTYPES))
    itemsize = numpy_dtype(dtype).itemsize
    base_shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    key = tuple(draw(st.lists(_KEY_ITEM, max_size=len(base_shape))))
    result_ndim = np.empty(base_shape, np.uint8)[key].ndim
    perm = tuple(draw(st.permutations(range(result_ndim))))
    shift = draw(st.sampled_from([0] * 5 + [1, itemsize // 2 or 1, 8, 16, 32]))
    return {"form": form, "dtype": dtype, "base_shape": base_shape, "key": key, "perm": perm,
            "shift": shift, "readonly": draw(st.booleans())}


SOURCES = st.one_of(strided_cases("as_strided"), strided_cases("view_layout"),
                    sliced_cases("sliced"), sliced_cases("view_sliced"))


# --- the test ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool():
    with SubprocessPool(size=2, environment=WORKER_ENVIRONMENT, timeout=60) as workers:
        yield workers


def run_case(pool, function, *args):
    (outcome,) = pool.map(function, [args])
    if isinstance(outcome, WorkerDied):
        pytest.fail(f"the case killed its worker process:\n{outcome}", pytrace=False)
    if isinstance(outcome, (WorkerTimeout, TaskError)):
        pytest.fail(f"{function.__name__}{args}: {outcome}", pytrace=False)
    return outcome


@pytest.mark.parametrize("copy", [None, True, False], ids=["copy=None", "copy=True", "copy=False"])
@pytest.mark.parametrize("target", TARGETS)
@PROFILE
@given(case=SOURCES)
def test_to_gives_numpys_values_or_a_clear_error(pool, target, copy, case):
    problem = run_case(pool, check_export_case, case, target, copy)
    assert problem is None, f"to(source, {target!r}, copy={copy}) with {case}: {problem}"


def test_targets_are_discovered_from_the_plugins_exporters():
    # numpy's plugin ships with the core; a new plugin's exporter joins TARGETS on its own.
    assert "numpy" in TARGETS
    for name in ("torch", "jax"):
        if importlib.util.find_spec(name) is not None:     # installed (not imported here)
            assert name in TARGETS


# --- a copy is a copy when to() returns -----------------------------------------------------------

SNAPSHOT_TRIALS = 200


def snapshot_case(target, copy):
    """to() of host memory jax cannot share (4 bytes past a 64-byte boundary), then an
    immediate overwrite of the source: where the result is a copy, it must not see the write.

    Runs in a worker process; returns None when right, else what went wrong.
    """
    from interop_core.plugins import ReadOnlyHandoffWarning

    warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
    count = 65536
    raw = np.zeros(4 * count + 128, np.uint8)
    start = (-raw.__array_interface__["data"][0]) % 64 + 4
    source = raw[start:start + 4 * count].view(np.float32)
    expected = np.arange(count, dtype=np.float32)
    copies = 0
    for trial in range(SNAPSHOT_TRIALS):
        source[...] = expected
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                result = interop_core.to(source, target, copy=copy)
            except (TypeError, ValueError, BufferError):
                return None                        # refused: the property test judges how
        source[...] = -1.0                         # at once: a copy still running would see it
        values, pointer, _ = read_result(target, result, np.float32)
        if pointer == source.__array_interface__["data"][0]:
            continue                               # zero-copy: writes are meant to show
        copies += 1
        if not np.array_equal(values, expected):
            changed = np.flatnonzero(values != expected)
            return (f"trial {trial}: the copy to() returned shows a write made to the source "
                    f"after to() returned ({changed.size} elements, from index {changed[0]}): "
                    f"the copy was still reading the source")
    return None


@pytest.mark.parametrize("copy", [None, True], ids=["copy=None", "copy=True"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_copy_that_to_returns_is_complete_when_it_returns(pool, target, copy):
    problem = run_case(pool, snapshot_case, target, copy)
    assert problem is None, f"to(unaligned float32 array, {target!r}, copy={copy}): {problem}"
