"""Lifetimes across DLPack: producers outlive every view and export, deleters run exactly once,
and nothing leaks over many round trips."""

import ctypes
import gc
import os
import sys
import threading
import tracemalloc
import weakref

import numpy as np
import pytest
from dlpack_ctypes import DLManagedTensorVersioned, capi, capsule_pointer, make_capsule

from interop_core import StridedMemoryView


def collect():
    # Exports hold plain references (no cycles), but a collection proves nothing hides in one.
    gc.collect()


def numpy_producer():
    return np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]


def torch_producer():
    torch = pytest.importorskip("torch")
    return torch.arange(24, dtype=torch.float32).reshape(4, 6).t()


def jax_producer():
    jax = pytest.importorskip("jax")
    return jax.numpy.arange(24.0).reshape(4, 6)


class DunderOnly:
    """A producer that hides torch's C exchange API (forces the __dlpack__ path)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


PRODUCERS = {
    "numpy": numpy_producer,
    "torch_exchange_api": torch_producer,
    "torch_dunder": lambda: DunderOnly(torch_producer()),
    "jax": jax_producer,
}


def np_consumer(v):
    return np.from_dlpack(v)


def torch_consumer(v):
    torch = pytest.importorskip("torch")
    return torch.from_dlpack(v)


def view_consumer(v):
    return StridedMemoryView.from_dlpack(v)


def capsule_consumer(v):
    return v.__dlpack__(max_version=(1, 3))


CONSUMERS = {
    "numpy": np_consumer,
    "torch": torch_consumer,
    "view": view_consumer,
    "unconsumed_capsule": capsule_consumer,
}


@pytest.mark.parametrize("producer", PRODUCERS)
def test_producer_lives_while_its_view_lives(producer):
    p = PRODUCERS[producer]()
    ref = weakref.ref(p)
    v = StridedMemoryView.from_dlpack(p)
    del p
    collect()
    assert ref() is not None
    del v
    collect()
    assert ref() is None


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("producer", ["numpy", "torch_exchange_api", "torch_dunder"])
def test_producer_lives_while_an_export_of_its_view_lives(producer, consumer):
    p = PRODUCERS[producer]()
    ref = weakref.ref(p)
    exported = CONSUMERS[consumer](StridedMemoryView.from_dlpack(p))
    del p
    collect()
    assert ref() is not None
    del exported
    collect()
    assert ref() is None


def test_producer_lives_while_view_of_its_consumed_capsule_lives():
    a = numpy_producer()
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 3))
    v = StridedMemoryView.from_dlpack(cap)
    del a, cap
    collect()
    assert ref() is not None
    del v
    collect()
    assert ref() is None


def test_chain_of_views_and_exports_keeps_producer_alive_until_the_last_goes():
    torch = pytest.importorskip("torch")
    a = numpy_producer()
    ref = weakref.ref(a)
    t = torch.from_dlpack(StridedMemoryView.from_dlpack(a))
    v2 = StridedMemoryView.from_dlpack(t)
    b = np.from_dlpack(v2)
    del a, t, v2
    collect()
    assert ref() is not None
    assert b.ctypes.data == ref().ctypes.data
    del b
    collect()
    assert ref() is None


# --- deleter exactly once ---------------------------------------------------------------------

@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_deleter_runs_once_when_the_view_dies(versioned):
    buf = np.arange(8, dtype=np.int32)
    cap, fake = make_capsule(buf, versioned=versioned)
    v = StridedMemoryView.from_dlpack(cap)
    del cap
    collect()
    assert fake.deleted == 0
    del v
    collect()
    assert fake.deleted == 1


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_deleter_runs_once_after_the_last_export_dies(consumer):
    buf = np.arange(8, dtype=np.int32)
    cap, fake = make_capsule(buf)
    exported = CONSUMERS[consumer](StridedMemoryView.from_dlpack(cap))
    del cap
    collect()
    assert fake.deleted == 0
    del exported
    collect()
    assert fake.deleted == 1


def test_deleter_runs_once_for_an_unconsumed_capsule_dropped_by_the_producer():
    buf = np.arange(8, dtype=np.int32)
    cap, fake = make_capsule(buf)
    del cap
    assert fake.deleted == 1


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)   # called without the GIL
_SET_NAME = capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_USED = ctypes.create_string_buffer(b"used_dltensor_versioned")


def test_export_deleter_may_be_called_from_another_thread_without_the_gil():
    a = numpy_producer()
    ref = weakref.ref(a)
    cap = StridedMemoryView.from_dlpack(a).__dlpack__(max_version=(1, 3))
    del a
    # Play a C consumer: take the tensor, rename the capsule, delete from a foreign thread.
    address = capsule_pointer(cap)
    _SET_NAME(cap, _USED)
    del cap
    collect()
    assert ref() is not None
    mt = DLManagedTensorVersioned.from_address(address)
    deleter = _DELETER(ctypes.cast(mt.deleter, ctypes.c_void_p).value)
    thread = threading.Thread(target=deleter, args=(address,))
    thread.start()
    thread.join()
    collect()
    assert ref() is None


# --- no leaks over many round trips -----------------------------------------------------------

def rss_bytes():
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def numpy_round_trip(a):
    np.from_dlpack(StridedMemoryView.from_dlpack(a))


def torch_round_trip(t):
    torch = pytest.importorskip("torch")
    torch.from_dlpack(StridedMemoryView.from_dlpack(t))


def capsule_round_trip(a):
    StridedMemoryView.from_dlpack(StridedMemoryView.from_dlpack(a).__dlpack__(max_version=(1, 3)))


LOOPS = {
    "numpy": (numpy_round_trip, numpy_producer),
    "torch": (torch_round_trip, torch_producer),
    "own_capsule": (capsule_round_trip, numpy_producer),
}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc for RSS")
@pytest.mark.parametrize("loop", LOOPS)
def test_200k_view_export_consume_round_trips_leak_nothing(loop):
    step, make = LOOPS[loop]
    obj = make()
    for _ in range(20_000):                  # warm caches, allocator pools, type caches
        step(obj)
    collect()
    rss_before = rss_bytes()
    for _ in range(200_000):
        step(obj)
    collect()
    rss_after = rss_bytes()
    # tracemalloc slows framework code several times over: a shorter traced pass suffices to
    # see a Python object left behind per iteration.
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    for _ in range(20_000):
        step(obj)
    collect()
    traced_after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # A leak of even one small block per iteration would be megabytes here.
    assert rss_after - rss_before < 4 * 1024 * 1024
    assert traced_after - traced_before < 128 * 1024


def _recycling_sources():
    """framework -> (make(shape), address of element 0, strides in elements), for those here."""
    def numpy_make(shape):
        return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)

    yield "numpy", (numpy_make, lambda a: a.__array_interface__["data"][0],
                    lambda a: tuple(s // a.itemsize for s in a.strides))
    try:
        import torch
    except ImportError:
        return

    def torch_make(shape):
        return torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape)

    yield "torch", (torch_make, lambda t: t.data_ptr(), lambda t: t.stride())


@pytest.mark.parametrize("source", [s for _, s in _recycling_sources()],
                         ids=[name for name, _ in _recycling_sources()])
def test_a_view_made_from_a_dead_views_memory_shows_only_its_own_object(source):
    from interop_core import view

    make, address, strides = source
    # Views are recycled through a freelist: a new view may get the memory of one that just
    # died, and must show nothing of it (cached tuples, dtype, extents beyond inline storage).
    for first_shape, second_shape in (((2, 3), (5,)), ((2, 1, 2, 1, 2, 1, 2, 2), (3, 4)),
                                      ((4,), (1, 2, 1, 2, 1, 2, 1, 2))):
        first_obj = make(first_shape)
        first = view(first_obj)
        # Every cache filled: the shape, strides and dtype objects.
        assert (first.shape, first.strides) == (first_shape, strides(first_obj))
        assert first.dtype.itemsize * len(first.strides_in_bytes) > 0
        del first, first_obj
        second_obj = make(second_shape)
        second = view(second_obj)
        assert second.shape == second_shape
        assert second.strides == strides(second_obj)
        assert second.owner is second_obj
        assert second.ptr == address(second_obj)


# --- what a view releases when it dies ----------------------------------------------------------

def test_a_dead_view_releases_the_objects_it_cached():
    from interop_core import view

    a = np.zeros((2, 3), np.float32)
    first = view(a)
    dtype = first.dtype
    del first
    dtype_refs = sys.getrefcount(dtype)
    for _ in range(1000):
        v = view(a)
        assert v.dtype is dtype
        shape = v.shape
        assert shape == (2, 3) and v.strides == (3, 1) and v.strides_in_bytes == (12, 4)
        assert sys.getrefcount(shape) == 3       # `shape`, the view's cache, the argument
        del v
        assert sys.getrefcount(shape) == 2
    assert sys.getrefcount(dtype) == dtype_refs


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc for RSS")
def test_views_with_more_dimensions_than_inline_storage_free_their_extents():
    from interop_core import view

    a = np.zeros((1, 2, 1, 2, 1, 2, 1, 2), np.float32)      # 8 dimensions: heap extents
    for _ in range(20_000):
        view(a)
    rss_before = rss_bytes()
    for _ in range(200_000):
        view(a)
    # 128 bytes of extents per view left behind would be 25 MiB here.
    assert rss_bytes() - rss_before < 4 * 1024 * 1024


def test_a_view_dying_inside_an_except_block_leaves_the_handled_exception_alone():
    from interop_core import view

    a = np.zeros((1, 2, 1, 2, 1, 2, 1, 2), np.float32)
    try:
        raise KeyError("pending")
    except KeyError:
        v = view(a)
        assert v.shape == (1, 2, 1, 2, 1, 2, 1, 2) and v.dtype == np.float32   # caches filled
        del v
        assert sys.exc_info()[0] is KeyError
        assert str(sys.exc_info()[1]) == "'pending'"


# --- jax: the buffer outlives delete() and donation while a view or export of it lives ----------
#
# jax frees a buffer on `x.delete()` and donates it to a jitted computation (`donate_argnums`)
# whatever Python references to `x` exist; only an external reference on the buffer (what jax's
# own DLPack export takes) keeps the memory and makes jax refuse the donation.  Each case runs
# in a child interpreter (reading freed memory, or a jaxlib check failing, must fail the test,
# not end the run): it makes a view or export of a jax array, deletes or donates the array,
# allocates other arrays over the memory jax would have freed, and reads what the view or
# export shows.  Once the view or export is gone, the donation goes ahead.

_JAX_LIFETIME = r'''
import ctypes, gc, json, sys, warnings
import numpy as np
import jax
import interop_core
from interop_core import StridedMemoryView

warnings.simplefilter("ignore")        # read-only handoffs, donations jax declines
platform, event = sys.argv[1], sys.argv[2]
devices = jax.devices(platform)
N = 65536
expected = np.arange(N, dtype=np.float32)
try:
    import torch
except ImportError:
    torch = None


class OnlyArrayInterface:
    """Hands numpy a view's __array_interface__ and nothing else (numpy keeps this object)."""

    def __init__(self, v):
        self.v = v
        self.__array_interface__ = v.__array_interface__


def host(v):
    """The memory a view describes, copied to a numpy array through the core's copy_to."""
    out = np.empty(v.shape, np.float32)
    v.copy_to(out)
    return out


def single():
    return jax.device_put(expected, devices[0])


def sharded():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(devices[:4]), ("x",))
    return jax.device_put(expected, NamedSharding(mesh, PartitionSpec("x")))


def pointer_view(record):
    ptr = np.frombuffer(record.pointers, np.uintp)[0]
    v = record.views[0]
    return StridedMemoryView.from_pointer(int(ptr), (N,), dtype=np.float32,
                                          device=(v.device_type, v.device_id))


def shards_values(found):
    out = np.empty(N, np.float32)
    for shard in found:
        out[shard.index] = host(shard.view)
    return out


cpu = platform == "cpu"
# A consumer stream: any int on the CPU (jax's CPU work is ordered through the host); on a GPU a
# stream of torch's, kept for the whole run.
consumer = 0 if cpu else (torch.cuda.Stream() if torch is not None and torch.cuda.is_available()
                          else None)
def used(v):
    """A view whose memory was used (its address read): from then on it holds the buffer."""
    v.ptr
    return v


def used_shards(found):
    """Shards whose views' memory was used: from then on each view holds its buffer."""
    for shard in found:
        used(shard.view)
    return found


# path -> (make the array, make what is kept from it, read what it shows), or a reason to skip
PATHS = {
    "view": (single, lambda x: used(interop_core.view(x)), host),
    "view never used before the event": (single, interop_core.view, host),
    "to numpy": (single, lambda x: interop_core.to(x, "numpy"), np.asarray) if cpu
                else "host memory only",
    "to torch": (single, lambda x: interop_core.to(x, "torch"),
                 lambda t: t.cpu().numpy()) if torch is not None else "torch not installed",
    "to jax": (single, lambda x: interop_core.to(x, "jax"), np.asarray),
    "__dlpack__ of the view": (single, lambda x: np.from_dlpack(interop_core.view(x)),
                               np.asarray) if cpu else
                              (single, lambda x: torch.from_dlpack(interop_core.view(x)),
                               lambda t: t.cpu().numpy()) if torch is not None
                              else "torch not installed",
    "__array_interface__ of the view": (single,
                                        lambda x: np.asarray(OnlyArrayInterface(
                                            interop_core.view(x))), np.asarray) if cpu
                                       else "host memory only",
    "buffer protocol of the view": (single, lambda x: memoryview(interop_core.view(x)),
                                    lambda m: np.frombuffer(m, np.float32)) if cpu
                                   else "host memory only",
    "copy_to of the view": (single, lambda x: used(interop_core.view(x)), host),
    "view(stream=)": (single, lambda x: interop_core.view(x, stream=consumer), host)
                     if consumer is not None else "no CUDA torch for a consumer stream",
    "launch_args": (single, lambda x: interop_core.launch_args([x]),
                    lambda r: host(pointer_view(r))),
    "shards": (sharded, lambda x: used_shards(interop_core.shards(x)), shards_values),
    "shards never used before the event": (sharded, interop_core.shards, shards_values),
    "to(shards, 'jax')": (sharded, lambda x: used_shards(interop_core.shards(x)),
                          lambda s: np.asarray(interop_core.to(s, "jax"))),
}
donate = jax.jit(lambda a: a * 2, donate_argnums=0)


def try_donating(x):
    """Whether jax donated x's buffer (it declines with a warning, or refuses with an error)."""
    try:
        donate(x).block_until_ready()
    except Exception as exc:
        if "external reference" not in str(exc) and "donat" not in str(exc).lower():
            raise
    return x.is_deleted()


results = {}
for name, case in PATHS.items():
    if isinstance(case, str):
        results[name] = {"skip": case}
        continue
    make, keep, read = case
    x = make()
    x.block_until_ready()
    kept = keep(x)
    if event == "delete":
        x.delete()
        donated = None
    else:
        donated = try_donating(x)
    junk = [jax.device_put(np.full(N, 777, np.float32), d) for d in devices for _ in range(10)]
    for j in junk:
        j.block_until_ready()
    try:
        shown = read(kept)
    except BufferError as exc:       # the memory was never used before it was freed
        result = {"refused": str(exc), "deleted": x.is_deleted(), "donated_while_kept": donated}
        shown = None
    else:
        result = {"equal": bool(np.array_equal(shown, expected)), "first": shown[:4].tolist(),
                  "deleted": x.is_deleted(), "donated_while_kept": donated}
    del kept, shown, junk
    gc.collect()
    if event == "donate" and not x.is_deleted():
        result["donated_once_gone"] = try_donating(x)
    results[name] = result
print("RESULTS", json.dumps(results))
'''

_JAX_LIFETIME_RESULTS: dict = {}


def _jax_lifetime(platform, event):
    """What every path showed after the event, from one child interpreter per (platform, event)."""
    import json
    import subprocess

    pytest.importorskip("jax")
    key = (platform, event)
    if key not in _JAX_LIFETIME_RESULTS:
        env = dict(os.environ, JAX_PLATFORMS=platform if platform == "cpu" else "cuda,cpu",
                   XLA_FLAGS="--xla_force_host_platform_device_count=4")
        done = subprocess.run([sys.executable, "-c", _JAX_LIFETIME, platform, event],
                              capture_output=True, text=True, env=env, timeout=600)
        line = [s for s in done.stdout.splitlines() if s.startswith("RESULTS ")]
        _JAX_LIFETIME_RESULTS[key] = (json.loads(line[0][8:]) if done.returncode == 0 and line
                                      else f"exit {done.returncode}: {done.stderr[-3000:]}")
    found = _JAX_LIFETIME_RESULTS[key]
    assert not isinstance(found, str), found
    return found


JAX_PATHS = ["view", "view never used before the event", "to numpy", "to torch", "to jax",
             "__dlpack__ of the view", "__array_interface__ of the view", "buffer protocol of the view",
             "copy_to of the view", "view(stream=)", "launch_args", "shards",
             "shards never used before the event", "to(shards, 'jax')"]


def _check_jax_lifetime(platform, event, path):
    got = _jax_lifetime(platform, event)[path]
    if "skip" in got:
        pytest.skip(got["skip"])
    if path in ("view never used before the event", "shards never used before the event"):
        # The view holds nothing until its memory is first used: jax frees or donates the
        # buffer, and that first use refuses instead of reading freed memory.
        assert "refused" in got, f"after {event}, an unused view showed {got.get('first')}"
        assert "deleted or donated" in got["refused"] and "first used" in got["refused"]
        assert got["deleted"]
        if event == "donate":
            assert got["donated_while_kept"] is True
        return
    assert "refused" not in got, got.get("refused")
    assert got["equal"], f"after {event}, the {path} showed {got['first']}... (freed memory)"
    if event == "delete":
        assert got["deleted"]          # jax deleted the array; the memory stayed
    else:
        assert got["donated_while_kept"] is False, "jax donated a buffer we still show"
        assert got["donated_once_gone"] is True, "the buffer stayed held after the last user"


@pytest.mark.parametrize("path", JAX_PATHS)
@pytest.mark.parametrize("event", ["delete", "donate"])
def test_jax_memory_outlives_delete_and_donation_while_a_view_or_export_lives(event, path):
    _check_jax_lifetime("cpu", event, path)


@pytest.mark.gpu
@pytest.mark.parametrize("path", JAX_PATHS)
@pytest.mark.parametrize("event", ["delete", "donate"])
def test_jax_gpu_memory_outlives_delete_and_donation_while_a_view_or_export_lives(event, path):
    try:
        import jax

        jax.devices("cuda")
    except (ImportError, RuntimeError):
        pytest.skip("jax has no CUDA backend here")
    _check_jax_lifetime("gpu", event, path)


# --- numpy: a view holds the array, and numpy refuses to resize an array something refers to ----

@pytest.mark.parametrize("keep", ["view", "to torch", "__dlpack__ of the view", "launch_args"])
def test_numpy_refuses_to_resize_an_array_while_a_view_or_export_of_it_lives(keep):
    import interop_core

    a = np.arange(16, dtype=np.float32)
    if keep == "view":
        kept = interop_core.view(a)
    elif keep == "to torch":
        pytest.importorskip("torch")
        kept = interop_core.to(a, "torch")
    elif keep == "__dlpack__ of the view":
        kept = np.from_dlpack(interop_core.view(a))
    else:
        kept = interop_core.launch_args([a])
    with pytest.raises(ValueError, match="cannot resize"):
        a.resize(1 << 20)               # would move the memory the view shows
    del kept
    collect()
    a.resize(1 << 20)                   # nothing of ours refers to it any more
    assert a.shape == (1 << 20,)
