"""Memory stays valid behind every view and export, whatever the producer does to free it.

For every producer that can give its memory up (numpy: dropping the array, ``resize``; torch:
dropping the tensor; jax: ``delete()``, donation to a jitted function, dropping the array; the
numba CUDA simulator: dropping the array) and every way of holding its memory through
interop-core (``view()``, ``to()`` into every installed target, the view's ``__dlpack__``
capsule, ``__array_interface__``, the buffer protocol, ``copy_to`` / ``copy_from``,
``launch_args``, ``shards()`` and ``to(shards, "jax")``), the producer frees what it can, other
arrays of the same size are allocated to reuse the memory, and the memory is read through ours.
The read must give the original values, or a clear ``BufferError``: never what the new arrays
hold.

Every case runs in a worker process (tests/_subprocess_pool.py): reading freed memory may
crash, and a crash must fail the case, not end the run.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import warnings

import numpy as np
import pytest
from _subprocess_pool import SubprocessPool, TaskError, WorkerDied, WorkerTimeout
from _targets import WORKER_ENVIRONMENT, installed_targets, read_result

import interop_core

#: Elements of each producer (float32): 256 KiB, above malloc's mmap threshold, as in the
#: reproducer of issue 25.
COUNT = 65536
JUNK = 777.0
HAVE = {name: importlib.util.find_spec(name) is not None for name in ("torch", "jax", "numba")}


# --- producers, and what each can do to free its memory ----------------------------------------

def _make_numpy():
    return np.arange(COUNT, dtype=np.float32)


def _make_torch():
    import torch

    return torch.arange(COUNT, dtype=torch.float32)


def _make_jax():
    import jax

    return jax.device_put(np.arange(COUNT, dtype=np.float32))


def _make_jax_sharded(fill=None):
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    values = (np.arange(COUNT, dtype=np.float32) if fill is None
              else np.full(COUNT, fill, np.float32))
    return jax.device_put(values, NamedSharding(mesh, PartitionSpec("x")))


def _make_numba():
    from numba import cuda

    return cuda.to_device(np.arange(COUNT, dtype=np.float32))


PRODUCERS = {"numpy": _make_numpy, "torch": _make_torch, "jax": _make_jax,
             "jax_sharded": _make_jax_sharded, "numba_simulator": _make_numba}

#: producer -> the ways it can give its memory up (beyond dropping the last reference).
FREES = {
    "numpy": ("drop", "resize"),
    "torch": ("drop",),
    "jax": ("drop", "delete", "donate"),
    "jax_sharded": ("drop", "delete"),
    "numba_simulator": ("drop",),
}


def _address(obj):
    """Address of element 0 of a producer or junk array (each framework's own accessor)."""
    if isinstance(obj, np.ndarray):
        return obj.__array_interface__["data"][0]
    if hasattr(obj, "addressable_shards") and len(obj.addressable_shards) > 1:
        return obj.addressable_shards[0].data.unsafe_buffer_pointer()
    if hasattr(obj, "unsafe_buffer_pointer"):
        return obj.unsafe_buffer_pointer()
    if hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    return obj.__array_interface__["data"][0]       # numba's simulator array


def _junk(producer, freed):
    """Arrays of the producer's kind and size, full of JUNK, made until one lands on the freed
    block (address ``freed``) or 100 were made: whatever was freed is then reused."""
    if producer == "jax_sharded":
        def make():
            return _make_jax_sharded(JUNK)
    elif producer == "jax":
        import jax

        def make():
            return jax.device_put(np.full(COUNT, JUNK, np.float32))
    elif producer == "torch":
        import torch

        def make():
            return torch.full((COUNT,), JUNK)
    else:
        def make():
            return np.full(COUNT, JUNK, np.float32)
    junk = []
    while len(junk) < 100:
        junk.append(make())
        if abs(_address(junk[-1]) - freed) < 4 * COUNT:
            break
    return junk


# --- the ways of holding the memory through interop-core ---------------------------------------
# Each is (hold(producer) -> what we keep, read(what we kept) -> numpy array of the values).

class _DLPackHolder:
    """Hands numpy a capsule made earlier (consumed only at the read)."""

    def __init__(self, capsule):
        self.capsule = capsule        # ours, until numpy consumes it at the read

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


class _ArrayInterfaceOnly:
    """Makes numpy take the view's ``__array_interface__`` (numpy keeps this object alive)."""

    def __init__(self, view):
        self.view = view              # ours; the numpy array made from this object keeps it

    @property
    def __array_interface__(self):
        return self.view.__array_interface__


def _read_view(view):
    return np.array(np.asarray(view))


def _read_launch_args(record):
    (address,) = record.pointers.tolist()
    return np.array((ctypes.c_float * COUNT).from_address(address))


def _read_shards(shards):
    pieces = [np.array(np.asarray(shard.view)) for shard in shards]
    assembled = np.array(np.asarray(interop_core.to(shards, "jax")))
    joined = np.concatenate(pieces)
    if not np.array_equal(joined, assembled):
        raise AssertionError(f"the shards' views and to(shards, 'jax') differ: {joined[:4]} "
                             f"against {assembled[:4]}")
    return assembled


def _copy_to(view):
    out = np.zeros(COUNT, np.float32)
    view.copy_to(out)
    return out


def _copy_from(view):
    out = np.zeros(COUNT, np.float32)
    interop_core.view(out).copy_from(view)
    return out


HOLDERS = {
    "view": (interop_core.view, _read_view),
    "dlpack_capsule": (lambda p: interop_core.view(p).__dlpack__(max_version=(1, 3)),
                       lambda capsule: np.array(np.from_dlpack(_DLPackHolder(capsule)))),
    "dlpack_consumed": (lambda p: np.from_dlpack(interop_core.view(p)), np.array),
    "array_interface": (lambda p: np.asarray(_ArrayInterfaceOnly(interop_core.view(p))),
                        np.array),
    "buffer_protocol": (lambda p: memoryview(interop_core.view(p)),
                        lambda m: np.frombuffer(m, np.float32).copy()),
    "copy_to": (interop_core.view, _copy_to),
    "copy_from": (interop_core.view, _copy_from),
    "launch_args": (lambda p: interop_core.launch_args([p]), _read_launch_args),
    "shards": (interop_core.shards, _read_shards),
}
for _target in installed_targets():
    HOLDERS[f"to_{_target}"] = (
        lambda p, target=_target: interop_core.to(p, target),
        lambda result, target=_target: np.array(read_result(target, result, np.float32)[0]))


_DONATING = []


def _donating_twice():
    """``jax.jit(lambda a: a * 2, donate_argnums=0)``, compiled once per worker."""
    if not _DONATING:
        import jax

        _DONATING.append(jax.jit(lambda a: a * 2, donate_argnums=0))
    return _DONATING[0]


def _free(producer_name, how, box):
    """Free the producer in ``box[0]`` as ``how`` says; returns a note about what happened."""
    producer = box.pop(0)      # the only reference left but ours (numpy's resize counts them)
    if how == "resize":
        try:
            producer.resize(4 * COUNT)        # would move the data to a new block
        except ValueError as exc:
            note = f"resize refused: {exc}"
        else:
            note = "RESIZED"
    elif how == "delete":
        producer.delete()
        note = "deleted"
    elif how == "donate":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                box.append(_donating_twice()(producer))  # the output is kept: it may sit in the donated block
        except Exception as exc:  # noqa: BLE001  (jax may refuse with an error, which is fine)
            note = f"donation refused: {type(exc).__name__}: {exc}"
        else:
            note = "DONATED" if producer.is_deleted() else "donation refused (not deleted)"
    else:
        note = "dropped"
    del producer
    gc.collect()
    return note


def _ours_address(holder_name, ours):
    """Address of the memory ours shows (None: a capsule, which cannot be asked twice)."""
    if holder_name in ("view", "copy_to", "copy_from"):
        return ours.ptr
    if holder_name in ("dlpack_consumed", "array_interface"):
        return ours.__array_interface__["data"][0]
    if holder_name == "buffer_protocol":
        return np.frombuffer(ours, np.uint8).__array_interface__["data"][0]
    if holder_name == "launch_args":
        return ours.pointers.tolist()[0]
    if holder_name.startswith("to_"):
        return read_result(holder_name[3:], ours, np.float32)[1]
    if holder_name == "torch_from_dlpack":
        return ours.data_ptr()
    return None


def _torch_from_dlpack(producer):
    import torch

    return torch.from_dlpack(producer)


#: What the frameworks' own exports do (controls: they show that the harness sees a hold).
CONTROLS = {"torch_from_dlpack": (_torch_from_dlpack,
                                  lambda t: np.array(read_result("torch", t, np.float32)[0]))}
_EVERY_HOLDER = {**HOLDERS, **CONTROLS}


def lifetime_case(producer_name, how, holder_name):
    """Hold, free, reuse, read; returns (verdict, details) with verdict "ok" or "wrong".

    Runs in a worker process.
    """
    from interop_core.plugins import ReadOnlyHandoffWarning

    warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
    hold, read = _EVERY_HOLDER[holder_name]
    box = [PRODUCERS[producer_name]()]
    freed = _address(box[0])
    ours = hold(box[0])
    # Zero-copy or not, by address (a write-then-read check would race with jax's copies of
    # host memory, which may still be running when to() returns).
    shares = how == "resize" and _ours_address(holder_name, ours) in (None, freed)
    note = _free(producer_name, how, box)
    if note == "RESIZED" and shares:
        return "wrong", f"numpy resized an array whose memory {holder_name} shares"
    junk = _junk(producer_name, freed)
    try:
        values = read(ours)
    except BufferError as exc:
        return "ok", f"{note}; the read refused: {exc}"
    del junk
    expected = np.arange(COUNT, dtype=np.float32)
    if note == "DONATED":
        # jax reuses a donated buffer for the output: ours must have kept it from donating.
        return "wrong", f"jax donated the buffer while {holder_name} held it"
    if values.shape == expected.shape and np.array_equal(values, expected):
        return "ok", note
    return "wrong", (f"{note}; reading through {holder_name} gave {values[:6]} (expected "
                     f"{expected[:6]}; {JUNK} is the junk that reused the memory)")


def release_case(producer_name, how, holder_name):
    """Once ours is gone, the producer can free its memory again (nothing leaked a hold).

    Runs in a worker process.  Returns the note of the second free (RESIZED / DONATED are right).
    """
    from interop_core.plugins import ReadOnlyHandoffWarning

    warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
    hold, _ = _EVERY_HOLDER[holder_name]
    box = [PRODUCERS[producer_name]()]
    ours = hold(box[0])
    del ours
    gc.collect()
    return _free(producer_name, how, box)


# --- the cases ----------------------------------------------------------------------------------

def _available(producer):
    framework = {"numpy": None, "torch": "torch", "jax": "jax", "jax_sharded": "jax",
                 "numba_simulator": "numba"}[producer]
    return framework is None or HAVE[framework]


def _cases():
    for producer, frees in FREES.items():
        for how in frees:
            for holder in HOLDERS:
                # A sharded jax array is held through shards(); every other holder refuses it
                # (view() of several devices' memory), checked elsewhere.
                if (producer == "jax_sharded") != (holder == "shards"):
                    continue
                marks = () if _available(producer) else pytest.mark.skip(
                    reason=f"{producer}'s framework is not installed")
                yield pytest.param(producer, how, holder, marks=marks,
                                   id=f"{producer}-{how}-{holder}")


CASES = list(_cases())


@pytest.fixture(scope="module")
def pool():
    with SubprocessPool(size=2, environment=WORKER_ENVIRONMENT, timeout=120) as workers:
        yield workers


@pytest.fixture(scope="module")
def outcomes(pool):
    """Every case run once, two at a time (each test then reads its own outcome)."""
    runnable = [c.values for c in CASES if not c.marks]
    results = pool.map(lifetime_case, runnable)
    return dict(zip(runnable, results, strict=True))


def _outcome(result):
    if isinstance(result, WorkerDied):
        pytest.fail(f"reading through ours crashed the worker (freed memory?):\n{result}",
                    pytrace=False)
    if isinstance(result, (WorkerTimeout, TaskError)):
        pytest.fail(str(result), pytrace=False)
    return result


@pytest.mark.parametrize("producer, how, holder", CASES)
def test_memory_held_by_ours_survives_the_producer_freeing_it(outcomes, producer, how, holder):
    verdict, details = _outcome(outcomes[(producer, how, holder)])
    assert verdict == "ok", f"{producer}, {how}, held by {holder}: {details}"


_RELEASE_CASES = [pytest.param("numpy", "resize", holder, id=f"numpy-resize-{holder}")
                  for holder in HOLDERS if holder != "shards"]
_RELEASE_CASES += [pytest.param("jax", "donate", holder, id=f"jax-donate-{holder}",
                                marks=() if HAVE["jax"] else pytest.mark.skip(
                                    reason="jax is not installed"))
                   for holder in HOLDERS if holder != "shards"]


@pytest.mark.parametrize("producer, how, holder", _RELEASE_CASES)
def test_producer_can_free_its_memory_once_ours_is_gone(pool, producer, how, holder):
    (result,) = pool.map(release_case, [(producer, how, holder)])
    note = _outcome(result)
    assert note in ("RESIZED", "DONATED"), (
        f"after every {holder} object was dropped and collected, {producer} still could not "
        f"{how} its memory ({note}): something still holds it")


def test_jax_donation_is_refused_while_ours_holds_the_buffer(pool):
    # The reproducer: donation goes ahead behind to(x, "torch") and the tensor then
    # shows the jitted function's output.  jax must refuse (its own DLPack export makes it say
    # "Donation requested for buffer with external reference"), and the tensor keep 0, 1, 2, 3.
    if not (HAVE["jax"] and HAVE["torch"]):
        pytest.skip("needs jax and torch")
    (result,) = pool.map(lifetime_case, [("jax", "donate", "to_torch")])
    verdict, details = _outcome(result)
    assert verdict == "ok" and "refused" in details, details


@pytest.mark.parametrize("how", ["delete", "donate"])
def test_control_jaxs_own_dlpack_export_keeps_the_buffer(pool, how):
    # torch.from_dlpack(x) holds jax's buffer through an external reference: x.delete() leaves
    # the memory alone and donation is refused.  What every holder above must match.
    if not (HAVE["jax"] and HAVE["torch"]):
        pytest.skip("needs jax and torch")
    (result,) = pool.map(lifetime_case, [("jax", how, "torch_from_dlpack")])
    verdict, details = _outcome(result)
    assert verdict == "ok", details
    (note,) = pool.map(release_case, [("jax", "donate", "torch_from_dlpack")])
    assert _outcome(note) == "DONATED"
