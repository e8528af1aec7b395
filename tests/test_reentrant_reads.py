"""Python code that runs in the middle of a read -- a garbage collection's finalizers, a
metaclass's ``__hash__``, another thread, a plugin's own Python reader -- never finds the
dispatch table naming freed entries, never replaces a plugin's reader with a protocol, and never
lets a ``from_*`` call bypass the plugin that refuses its object.

The cases that once crashed run in a fresh interpreter each (``subprocess``): a regression fails
the case with the signal, not the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from interop_core import StridedMemoryView

# Enough new types to overflow the per-type cache (MAX_CACHED_TYPES, 4096) at least once.
TYPES_PAST_THE_CACHE = 4300


def _run_fresh(code, timeout=120):
    """Run `code` in a fresh interpreter; fail with its output unless it exits 0."""
    script = "import faulthandler; faulthandler.enable()\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, (
        f"exit status {done.returncode}\n--- stdout\n{done.stdout[-2000:]}\n"
        f"--- stderr\n{done.stderr[-3000:]}")
    return done.stdout


# --- the dispatch table while Python code runs ---------------------------------------------------

def test_views_made_by_the_garbage_collector_while_plugins_change_read_the_right_memory():
    _run_fresh("""
        import gc
        import interop_core

        source = bytearray(b"abcd")
        interop_core.view(source)          # a cached decision for bytearray

        def during_collection(phase, info):
            if phase == "start":
                assert bytes(interop_core.view(source)) == b"abcd"

        gc.callbacks.append(during_collection)
        gc.set_threshold(1)

        class Plugin:
            @interop_core.hookimpl
            def interop_core_register(self, registry):
                pass

        for _ in range(20):
            interop_core.register_plugin(Plugin(), name="coming-and-going")
            interop_core.unregister_plugin("coming-and-going")
    """)


def test_finalizers_that_view_while_the_per_type_cache_overflows_read_the_right_memory():
    _run_fresh(f"""
        import gc
        import interop_core

        first, second = bytearray(b"abcd"), memoryview(b"wxyz")

        class Garbage:
            def __del__(self):
                assert bytes(interop_core.view(first)) == b"abcd"
                assert bytes(interop_core.view(second)) == b"wxyz"
                renewed = Garbage()
                renewed.me = renewed       # one finalizer pending at every collection

        interop_core.view(first)
        interop_core.view(second)
        kinds = [type(f"Bytes{{i}}", (bytearray,), {{}}) for i in range({TYPES_PAST_THE_CACHE})]
        garbage = Garbage()
        garbage.me = garbage
        del garbage
        gc.set_threshold(1)
        for kind in kinds:
            assert bytes(interop_core.view(kind(b"ab"))) == b"ab"
    """)


def test_a_metaclass_hash_that_views_while_its_type_is_cached_reads_the_right_memory():
    _run_fresh(f"""
        import interop_core

        first, second = memoryview(b"wxyz"), bytearray(b"abcd")

        class Meta(type):
            def __hash__(cls):
                assert bytes(interop_core.view(first)) == b"wxyz"
                assert bytes(interop_core.view(second)) == b"abcd"
                return type.__hash__(cls)

        for i in range({TYPES_PAST_THE_CACHE}):
            kind = Meta(f"Bytes{{i}}", (bytearray,), {{}})
            assert bytes(interop_core.view(kind(b"ab"))) == b"ab"
    """)


def test_a_type_whose_metaclass_hash_raises_is_viewed_and_leaves_the_table_whole():
    _run_fresh(f"""
        import interop_core

        class Meta(type):
            def __hash__(cls):
                raise RuntimeError("this class cannot be hashed")

        class Unhashable(bytearray, metaclass=Meta):
            pass

        kept = memoryview(b"wxyz")
        interop_core.view(kept)
        odd = Unhashable(b"ab")
        for i in range({TYPES_PAST_THE_CACHE}):
            interop_core.view(type(f"Bytes{{i}}", (bytearray,), {{}})(b"ab"))
            assert bytes(interop_core.view(odd)) == b"ab"
            if i % 64 == 0:
                assert bytes(interop_core.view(kept)) == b"wxyz"
    """)


@pytest.mark.parametrize(("framework", "make"), [("torch", "torch.ones(3)"),
                                              ("jax", "jax.numpy.ones(3)")])
def test_first_views_of_a_plugins_type_from_several_threads_keep_the_plugins_reader(framework,
                                                                                   make):
    pytest.importorskip(framework)
    out = _run_fresh(f"""
        import threading

        import {make.rpartition(".")[0]}  # imported, not viewed yet
        import interop_core
        from interop_core.registry import _registry

        start = threading.Barrier(4)

        def first_view():
            start.wait()
            interop_core.view({make})

        threads = [threading.Thread(target=first_view) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        obj = {make}
        print(_registry.entry_for(type(obj)).plugin, interop_core.view(obj).readonly)
    """)
    plugin, readonly = out.split()
    assert plugin == framework
    assert readonly == str(framework == "jax")    # jax arrays are immutable: views say so


# --- from_* inside a plugin's own Python reader, and beside it on another thread -----------------

class _Box:
    """An object read by a Python reader (which runs the test's code in the middle of a read)."""

    def __init__(self, memory=None):
        self.memory = np.zeros(1) if memory is None else memory

    def __dlpack__(self, stream=None, **kwargs):
        return self.memory.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


class _Refused(_Box):
    """An object whose DLPack export describes memory its plugin refuses to have viewed."""

    def __init__(self):
        super().__init__(np.arange(3.0))


def _refuse(obj, stream):
    raise BufferError(f"the plugin refuses this {type(obj).__name__}")


@pytest.fixture
def box_reader(registered):
    """Register _Refused (refused) and _Box (read by `during[0]`, then described)."""
    during = [lambda: None]

    def read_box(obj, stream):
        during[0]()
        return StridedMemoryView.from_pointer(obj.memory.ctypes.data, (1,), dtype="float64",
                                              owner=obj)

    registered(lambda r: (r.add_type(_Refused, reader=_refuse, equivalent_to=("dlpack",)),
                          r.add_type(_Box, reader=read_box, equivalent_to=("dlpack",))),
               "reentrant-reads-test")
    return during


def test_a_refused_object_read_from_inside_another_types_reader_is_still_refused(box_reader):
    refused = _Refused()
    outcomes = []

    def read_the_refused_one():
        try:
            StridedMemoryView.from_dlpack(refused)
        except BufferError as exc:
            outcomes.append(str(exc))

    box_reader[0] = read_the_refused_one
    StridedMemoryView.from_dlpack(_Box())
    assert outcomes == ["the plugin refuses this _Refused"]


def test_a_refused_object_read_while_another_thread_is_inside_a_reader_is_still_refused(
        box_reader):
    inside, finish = threading.Event(), threading.Event()

    def wait_inside():
        inside.set()
        finish.wait(30)

    box_reader[0] = wait_inside
    reader_thread = threading.Thread(target=lambda: StridedMemoryView.from_dlpack(_Box()))
    reader_thread.start()
    try:
        assert inside.wait(30)
        for ctor in (StridedMemoryView.from_dlpack, StridedMemoryView.from_any):
            with pytest.raises(BufferError, match="the plugin refuses this _Refused"):
                ctor(_Refused())
    finally:
        finish.set()
        reader_thread.join(30)


def test_a_reader_that_reads_its_own_object_through_the_protocol_gets_the_protocol(registered):
    class Wrapped(_Box):
        pass

    def read_through_the_protocol(obj, stream):
        return StridedMemoryView.from_dlpack(obj)

    registered(lambda r: r.add_type(Wrapped, reader=read_through_the_protocol,
                                    equivalent_to=("dlpack",)), "self-reading-test")
    box = Wrapped()
    v = StridedMemoryView.from_dlpack(box)
    assert v.ptr == box.memory.ctypes.data and v.shape == (1,)


def test_where_the_protocol_refuses_too_its_error_names_the_plugins_refusal_as_cause(registered):
    class Broken(_Refused):
        def __dlpack__(self, stream=None, **kwargs):
            raise TypeError("this exporter is broken")

    registered(lambda r: r.add_type(Broken, reader=_refuse, equivalent_to=("dlpack",)),
               "broken-exporter-test")
    with pytest.raises(TypeError, match="this exporter is broken") as info:
        StridedMemoryView.from_dlpack(Broken())
    assert isinstance(info.value.__cause__, BufferError)
    assert "the plugin refuses this Broken" in str(info.value.__cause__)


@pytest.mark.parametrize("negate", ["_neg_view", "conj"])
def test_a_torch_tensor_with_a_bit_set_is_refused_from_inside_another_types_reader(box_reader,
                                                                                   negate):
    torch = pytest.importorskip("torch")
    dtype = torch.complex64 if negate == "conj" else torch.float32
    tensor = getattr(torch.tensor([1, 2, 3], dtype=dtype), negate)()
    outcomes = []

    def read_the_tensor():
        try:
            outcomes.append(np.from_dlpack(StridedMemoryView.from_dlpack(tensor)).tolist())
        except BufferError:
            outcomes.append("refused")

    box_reader[0] = read_the_tensor
    StridedMemoryView.from_dlpack(_Box())
    assert outcomes == ["refused"]


def test_refusals_hold_while_more_python_readers_run_than_the_marks_kept_in_c(box_reader):
    # 64 marks live in C arrays; more concurrent Python reads are marked too (they once made
    # every other from_* take the protocol, bypassing the plugin's refusals).
    readers = 70
    entered, finish = threading.Semaphore(0), threading.Event()

    def wait_inside():
        entered.release()
        finish.wait(60)

    box_reader[0] = wait_inside
    threads = [threading.Thread(target=lambda: StridedMemoryView.from_dlpack(_Box()))
               for _ in range(readers)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(readers):
            assert entered.acquire(timeout=60)
        with pytest.raises(BufferError, match="the plugin refuses this _Refused"):
            StridedMemoryView.from_dlpack(_Refused())
    finally:
        finish.set()
        for thread in threads:
            thread.join(60)
    # Every mark was taken off again: a read of the same object on this thread takes the
    # plugin's reader, not the protocol.
    box_reader[0] = lambda: None
    assert StridedMemoryView.from_dlpack(_Box()).shape == (1,)
